"""
Title: Pretrained uncertainties: a loss-prediction head for any backbone
Author: ensemble_zoo developers
Date created: 2026/11/22
Last modified: 2026/11/22
Description: Train an uncertainty head on a frozen keras-hub ViT from cached embeddings, use it for uncertainty-aware retrieval, and watch it transfer zero-shot to unseen classes.
"""

"""
## Introduction

Kirchhof et al. ("Pretrained Visual Uncertainties") put a small MLP, the
*loss-prediction head*, on the pooled embedding of a pretrained classifier
and train it to rank samples by the classifier's own cross-entropy. Four
choices make it cheap and safe:

1. the head reads the embedding through a **stop-gradient**, so it can
   never change the backbone or the classifier;
2. it trains to convergence;
3. with backbone and classifier **frozen**, the embeddings of every
   (augmented) epoch are **cached** once and the head trains on the cache,
   many times faster;
4. the loss is a **scale-free pairwise ranking loss**, so the score `u` is
   an ordering, not a calibrated loss.

The score transfers: on classes the head never saw it still predicts
which retrievals fail (R-AUROC), and it grows as inputs are degraded.

This guide uses `ensemble_zoo`'s `LossPredictionImageClassifier`, the
shipped preset `loss_prediction_vit_tiny_digits`, and a small synthetic
task on which the zero-shot transfer really happens. It runs in about a
minute on a CPU.
"""

"""
## Setup
"""

import os
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import numpy as np
import tensorflow as tf
from scipy.stats import spearmanr

from ensemble_zoo.models.loss_prediction import cache_embeddings
from ensemble_zoo.models.loss_prediction import train_head_from_cache

x_train, y_train = ez.datasets.load_arrays("digits", "train")
x_test, y_test = ez.datasets.load_arrays("digits", "test")
jit = keras.config.backend() != "torch"


def per_sample_loss(labels, logits):
    return np.asarray(
        keras.ops.convert_to_numpy(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )
    )


"""
## The pretrained preset

`loss_prediction_vit_tiny_digits` is the base `vit_tiny_digits` ViT with a
512-512 head trained on 60 cached, augmented passes over the digits
training split (`presets/make_loss_prediction_vit_tiny_digits.py`). The
model returns a dict: `"logits"` from the unchanged classifier and one
`"uncertainty"` per image. Like every keras-hub task the preset carries
its preprocessor, so `predict` takes raw images of any size: the digits
on their raw pixel scale (ink counts 0-16, `raw=True`); calling the model
(`model(x)`, `model.embed(x)`) takes images in [0, 1].
"""

model = ez.models.LossPredictionImageClassifier.from_preset("loss_prediction_vit_tiny_digits")
raw_test, _ = ez.datasets.load_arrays("digits", "test", raw=True)
outputs = model.predict(raw_test, batch_size=256, verbose=0)
losses = per_sample_loss(y_test, outputs["logits"])
u = outputs["uncertainty"]
correlation = spearmanr(u, losses).statistic
print(f"Spearman(uncertainty, test loss): {correlation:.3f}")

wrong = outputs["logits"].argmax(-1) != y_test
msp = 1.0 - keras.ops.convert_to_numpy(keras.ops.softmax(outputs["logits"])).max(-1)
print(
    f"AUROC for spotting errors: head {ez.metrics.ood_auroc(u[~wrong], u[wrong]):.3f}, "
    f"1 - max softmax {ez.metrics.ood_auroc(msp[~wrong], msp[wrong]):.3f} "
    f"({wrong.sum()} errors of {len(y_test)})"
)
assert correlation > 0.8

"""
The head ranks the held-out losses almost perfectly. For spotting the
classifier's few errors it is close to, not better than, the classifier's
own max-softmax score: on the training distribution the classifier
already knows its loss. The head's value is that it needs no classifier
at test time and transfers to new classes, which the next sections show.

## Uncertainty-aware retrieval

The paper's downstream use: retrieve the nearest neighbour of each query
in embedding space (cosine, leave-one-out), and withhold the queries the
head is least sure about. R-AUROC measures how well `u` predicts failed
retrievals; Recall@1 should rise as uncertain queries are rejected.
"""

embeddings = keras.ops.convert_to_numpy(model.embed(x_test))
print(f"R-AUROC {ez.metrics.r_auroc(embeddings, y_test, u):.3f}")
for rate, recall in ez.metrics.recall_at_one_with_rejection(embeddings, y_test, u).items():
    print(f"reject {rate:.0%} of queries -> Recall@1 {recall:.4f}")

"""
## Training your own head, from a cache

Start from any keras-hub `ViTImageClassifier` (here the base preset's
member) with backbone and classifier frozen. `cache_embeddings` runs the
frozen backbone once over as many augmented, shuffled passes as training
will use and appends the pooled embeddings and labels to a chunked HDF5
file, so the cache can exceed memory. `train_head_from_cache` then takes
one optimizer step per cached batch, in the recorded order, re-applying the
frozen classifier to get the loss targets. That is exactly what training
on the fly would do with the same batches, without running the backbone.

The ranking loss pairs consecutive samples of a batch, so batches must be
even (`drop_remainder=True`). The recipe is the paper's: AdamW with
beta = (0.8, 0.95) and weight decay 1e-4, warm-up, then cosine decay.
"""

vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
keras.utils.set_random_seed(0)
mine = ez.models.LossPredictionImageClassifier.from_keras_hub(
    vit, head_hidden_units=(128, 128), freeze_backbone=True, freeze_classifier=True
)


def shift(image, label):  # +-1 pixel translations, as the base model saw
    padded = tf.pad(image, [[1, 1], [1, 1], [0, 0]])
    return tf.image.random_crop(padded, (8, 8, 1)), label


passes = (
    tf.data.Dataset.from_tensor_slices((x_train, y_train))
    .shuffle(len(x_train), seed=0)
    .map(shift)
    .batch(64, drop_remainder=True)
)
cache = os.path.join(tempfile.mkdtemp(), "digits_embeddings.h5")
start = time.perf_counter()
written = cache_embeddings(mine, passes, cache, epochs=20)
caching = time.perf_counter() - start
steps = written["batches"]
schedule = keras.optimizers.schedules.CosineDecay(
    0.0, decay_steps=steps - steps // 20, warmup_target=1e-3, warmup_steps=steps // 20
)
optimizer = keras.optimizers.AdamW(schedule, beta_1=0.8, beta_2=0.95, weight_decay=1e-4)
start = time.perf_counter()
train_head_from_cache(mine, cache, optimizer=optimizer, jit_compile=jit)
training = time.perf_counter() - start
print(
    f"cached {written['rows']} embeddings in {caching:.1f} s; "
    f"{steps} head steps from the cache in {training:.1f} s"
)
mine_u = mine.predict(x_test, verbose=0)["uncertainty"]
print(f"Spearman(uncertainty, test loss): {spearmanr(mine_u, losses).statistic:.3f}")

"""
The head can also train on the fly with `fit` (slower: the backbone runs
every step). With `freeze_backbone=False` the classifier and backbone
fine-tune together with the head; because of the stop-gradient their
gradient is exactly that of the cross-entropy alone (a test checks this on
every backend). `stop_gradient=False` gives the older "vanilla" loss
prediction, whose head gradient reaches the backbone; it is there for
ablations only.

## Zero-shot transfer to unseen classes

The paper trains the head on ImageNet-21k and evaluates it, frozen, on
other datasets. Two conditions make this work at toy scale (the
implementation notes record the failures): the ambiguity must survive in
the frozen embedding, and the classifier must have seen many classes.
Digits has 8 training classes, and a digits head trained on 5 classes
gets only about 0.6 R-AUROC on the other 5.

So we build a task with those properties. Each class has a random
64-dimensional prototype; a sample is `(1 - a) * prototype + 0.5 *
noise`, and a random fraction `o` of its coordinates is zeroed. The fade
`a` (like low contrast or blur) and the occlusion `o` (like a crop that
cuts away the object) remove evidence, so low-`a`, low-`o` samples are
easy and the rest ambiguous. A small MLP is trained on 200 seen classes;
10 more classes are held out for zero-shot evaluation.
"""

DIM, SEEN, UNSEEN = 64, 200, 10
rng = np.random.default_rng(0)
prototypes = rng.normal(size=(SEEN + UNSEEN, DIM)).astype("float32")


def sample(classes, n, rng, fade=None, occlusion=None, noise=0.5):
    """Random fades in [0, 1] and occlusions in [0, 0.5] unless given."""
    labels = rng.choice(classes, n)
    a = rng.uniform(0, 1, n) if fade is None else np.full(n, fade)
    o = rng.uniform(0, 0.5, n) if occlusion is None else np.full(n, occlusion)
    x = (1 - a)[:, None] * prototypes[labels] + noise * rng.normal(size=(n, DIM))
    x = x * (rng.uniform(size=(n, DIM)) >= o[:, None])
    return x.astype("float32"), labels, a


keras.utils.set_random_seed(0)
inputs = keras.Input((DIM,))
hidden = keras.layers.Dense(128, activation="relu")(inputs)
backbone = keras.Model(inputs, keras.layers.Dense(32, activation="relu")(hidden))
classifier = keras.Sequential([backbone, keras.layers.Dense(SEEN)])
classifier.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=jit,
)
x_seen, y_seen, _ = sample(np.arange(SEEN), 40_000, rng)
classifier.fit(x_seen, y_seen, batch_size=256, epochs=10, verbose=0)

"""
The backbone returns pooled `(batch, 32)` embeddings, so the loss
predictor uses `pooling=None`; we copy the trained classifier in and train
the head from a cache of five fresh augmented passes.
"""

toy = ez.models.LossPredictionImageClassifier(
    backbone,
    SEEN,
    pooling=None,
    head_hidden_units=(64, 64),
    freeze_backbone=True,
    freeze_classifier=True,
)
toy.classifier.set_weights(classifier.layers[-1].get_weights())
x_head, y_head, _ = sample(np.arange(SEEN), 40_000, rng)
toy_cache = os.path.join(tempfile.mkdtemp(), "toy_embeddings.h5")
written = cache_embeddings(
    toy,
    tf.data.Dataset.from_tensor_slices((x_head, y_head)).batch(256, drop_remainder=True),
    toy_cache,
    epochs=5,
)
steps = written["batches"]
schedule = keras.optimizers.schedules.CosineDecay(
    0.0, decay_steps=steps - steps // 20, warmup_target=2e-3, warmup_steps=steps // 20
)
train_head_from_cache(
    toy,
    toy_cache,
    jit_compile=jit,
    optimizer=keras.optimizers.AdamW(schedule, beta_1=0.8, beta_2=0.95, weight_decay=1e-4),
)

unseen = np.arange(SEEN, SEEN + UNSEEN)
x_new, y_new, fade_new = sample(unseen, 2000, rng)
u_new = toy.predict(x_new, batch_size=1000, verbose=0)["uncertainty"]
e_new = keras.ops.convert_to_numpy(toy.embed(x_new))
zero_shot = ez.metrics.r_auroc(e_new, y_new, u_new)
print(
    f"unseen classes: R-AUROC {zero_shot:.3f}, "
    f"Recall@1 {ez.metrics.recall_at_one(e_new, y_new):.3f}, "
    f"Spearman(u, fade) {spearmanr(u_new, fade_new).statistic:.3f}"
)
assert zero_shot > 0.7

"""
The head never saw these classes, yet it tells which retrievals among
them will fail (0.5 would be chance).

## Uncertainty rises as inputs degrade

We now degrade unseen-class samples step by step, staying inside the
range the head was trained on (the notes record that probes outside it,
e.g. crops larger than any seen in training, can lower `u`), and print the
median uncertainty at each level.
"""


def median_u(**degradation):
    x, _, _ = sample(unseen, 1000, np.random.default_rng(1), **degradation)
    return float(np.median(toy.predict(x, batch_size=1000, verbose=0)["uncertainty"]))


fades = [median_u(fade=a, occlusion=0.0) for a in (0.0, 0.25, 0.5, 0.75)]
occlusions = [median_u(fade=0.0, occlusion=o) for o in (0.0, 0.15, 0.3, 0.45)]
noises = [median_u(fade=0.0, occlusion=0.0, noise=s) for s in (0.5, 0.75, 1.0, 1.5)]
print("fade a      0 / .25 / .5 / .75 :", np.round(fades, 3))
print("occlusion o 0 / .15 / .3 / .45 :", np.round(occlusions, 3))
print("noise std  .5 / .75 / 1. / 1.5 :", np.round(noises, 3))
assert np.all(np.diff(fades) > 0) and np.all(np.diff(occlusions) > 0)

"""
Fading and occluding raise the uncertainty monotonically on classes the
head has never seen: it has learnt what an ambiguous input looks like,
not which classes are hard.

Additive noise is the counter-example, and worth knowing: stronger noise
*lowers* `u` here. Noise pushes the ReLU embedding away from the origin,
while the cue the head learnt is a weak, small embedding; the classifier-
trained embedding keeps no record of "noise energy". (Adding noise levels
to the training augmentation does not change this in our runs.) Check
that a degradation you care about moves `u` before relying on it.

## Export

The model exports in every format its backend writes; the artifact returns
the logits, the probabilities and the uncertainty.
"""

path = os.path.join(tempfile.mkdtemp(), "loss_prediction.onnx")
model.export(path, format="onnx")
served = ez.export.ExportedModel(path)(x_test[:4])  # ONNX Runtime
print("served uncertainty:", np.round(served["uncertainty"], 4))

print(f"accuracy of the (unchanged) classifier: {np.mean(~wrong):.4f}")
