"""
Title: Implicit ensembles: ensembles of ensembles, mask and tile extraction, MC dropout
Author: ensemble_zoo developers
Date created: 2026/11/22
Last modified: 2026/11/22
Description: See epistemic uncertainty collapse in ensembles of ensembles and wide models, and recover it from one trained network.
"""

"""
## Introduction

Kirsch ("(Implicit) Ensembles of Ensembles: Epistemic Uncertainty Collapse
in Large Models") points out that ensembles can under-report epistemic
uncertainty:

- grouping the members of an ensemble into sub-ensembles, the mutual
  information (MI) *between* the sub-ensembles shrinks as they grow, even
  though the flat ensemble is unchanged;
- wider networks behave like ensembles of ensembles of neurons, so MI
  across ensembles of wider models shrinks too;
- diverse sub-networks *extracted* from one trained network (by learned
  masks, or by reading spatial tiles of an average-pooled model as
  members) recover some of it.

This guide shows each step on the bundled digits data, with
`ensemble_zoo`'s metrics and models. It runs in a few minutes on a CPU.
The full experiment, averaged over seeds, is
`benchmarks/implicit_ensembles.py`.
"""

"""
## Setup
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras

x_train, y_train = ez.datasets.load_arrays("digits", "train")
x_test, y_test = ez.datasets.load_arrays("digits", "test")
x_far, _ = ez.datasets.load_arrays("digits", "far_ood")
jit = keras.config.backend() != "torch"


def mlp(width, seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(64 * width, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    x = keras.layers.Dense(32 * width, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    return keras.Model(inputs, keras.layers.Dense(8)(x))


def train(model, epochs=15):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit)
    model.fit(x_train, y_train, epochs=epochs, batch_size=64, verbose=0)
    return model


"""
## Ensembles of ensembles

Train 12 narrow MLPs as one `DeepEnsembleClassifier` and regroup their
outputs into K groups of M. `ensemble_of_ensembles_mutual_information`
returns the MI between the group averages, the mean MI within groups and
the flat ensemble's MI; the chain rule makes the last the sum of the first
two.
"""

pool = train(ez.models.DeepEnsembleClassifier([mlp(1, s) for s in range(12)]))
far_logits = pool.predict(x_far, verbose=0)
for size in (1, 2, 3, 6):
    mi = ez.metrics.ensemble_of_ensembles_mutual_information(
        far_logits, num_groups=12 // size, from_logits=True
    )
    print(
        f"groups of {size:>2}: between {mi['between']:.4f} + within "
        f"{mi['within']:.4f} = total {mi['total']:.4f}"
    )

"""
The total is the same for every grouping; the between-group MI falls
roughly as 1/M. An ensemble of large ensembles looks certain.

## Wider models

The same collapse appears when each member is wider: MI of a 5-member
ensemble on far-OOD inputs, at width x1 and x16, with similar accuracy.
"""

ensembles = {}
for width in (1, 16):
    ensembles[width] = train(
        ez.models.DeepEnsembleClassifier([mlp(width, 100 + s) for s in range(5)])
    )
    outputs = ensembles[width].predict_uncertainty(x_test)
    far = ensembles[width].predict_uncertainty(x_far)
    print(
        f"width x{width:<2}: test accuracy {ez.metrics.accuracy(outputs['probabilities'], y_test):.4f}, "
        f"far-OOD MI {far['epistemic'].mean():.4f}"
    )

"""
## Extracting masked sub-networks from one wide model

`SubnetworkEnsembleClassifier` freezes one trained network and learns, per
member, sigmoid masks over the rows and columns of every `Dense` kernel.
The loss is the members' cross-entropy minus 2.0 times the mutual
information between masks and member index, which pushes members to use
different sub-networks. All members run in one pass.
"""

wide = ensembles[16].members[0]
masks = ez.models.SubnetworkEnsembleClassifier.from_model(wide, num_members=10, seed=0)
masks.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=jit)
masks.fit(x_train, y_train, epochs=10, batch_size=64, verbose=0)
outputs = masks.predict_uncertainty(x_test)
print(
    f"10 masked members of one x16 MLP: test accuracy "
    f"{ez.metrics.accuracy(outputs['probabilities'], y_test):.4f}, far-OOD MI "
    f"{masks.predict_uncertainty(x_far)['epistemic'].mean():.4f} (the wide model alone: 0)"
)
print(
    f"mask diversity I[mask; member] = {float(keras.ops.convert_to_numpy(masks.mask_mutual_information())):.3f} nats"
)

"""
## Tiles of an average-pooled model

A model that averages its last feature map and applies a linear head
equals the mean of the head applied to each part of the map. Pooling to
s x s tiles instead gives s² members, with no training. One tile is the
original model.
"""

keras.utils.set_random_seed(0)
inputs = keras.Input((8, 8, 1))
x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
cnn = train(
    ez.models.DeepEnsembleClassifier([keras.Model(inputs, keras.layers.Dense(8)(x))]), 20
).members[0]
for s in (1, 2, 4):
    tiles = ez.models.TileEnsembleClassifier.from_model(cnn, grid_size=s)
    logits = tiles.predict(x_far, verbose=0)
    probs = tiles.predict_uncertainty(x_test)["probabilities"]
    print(
        f"{s}x{s} tiles: test accuracy {ez.metrics.accuracy(probs, y_test):.4f}, far-OOD MI "
        f"{ez.metrics.mutual_information(logits, from_logits=True):.4f}, weighted MI "
        f"{ez.metrics.weighted_mutual_information(logits):.4f}"
    )

"""
Averaging the tiles' probabilities is not the same as averaging their
logits (which is the original model), and on 8x8 digits each tile sees a
fraction of the stroke, so the tile ensemble is less accurate here; the
paper uses 7x7 maps of ImageNet models. The tiles' MI on far-OOD inputs
grows with the number of tiles.

The weighted MI weights each tile by `softmax` over tiles of its logits'
log-sum-exp, so tiles with more evidence count more (App. B.1 of the
paper, read as the notes recommend).

## MC dropout

`MCDropoutClassifier` runs M dropout samples of one model in one batched
pass. With a seed, the samples are reproducible.
"""

mc = ez.models.MCDropoutClassifier.from_model(
    ensembles[1].members[0], num_members=10, rate=0.1, seed=0
)
outputs = mc.predict_uncertainty(x_test)
print(
    f"MC dropout (10 samples): test accuracy {ez.metrics.accuracy(outputs['probabilities'], y_test):.4f}, "
    f"far-OOD MI {mc.predict_uncertainty(x_far)['epistemic'].mean():.4f}"
)

"""
## Export

Every extracted ensemble is a zoo classifier and exports with its
uncertainty outputs, in every format its backend writes.
"""

masks.export("masked_subnetworks.onnx", format="onnx")
served = ez.export.ExportedModel("masked_subnetworks.onnx")  # ONNX Runtime
print("served member logits:", served(x_test[:4])["member_logits"].shape)
