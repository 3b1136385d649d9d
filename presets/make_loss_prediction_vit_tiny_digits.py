"""Rebuilds the `loss_prediction_vit_tiny_digits` preset ("Pretrained
Visual Uncertainties").

The paper's recipe at toy scale: the trained base preset `vit_tiny_digits`
is frozen (backbone and classifier), the class-token embeddings of
`--epochs` augmented, shuffled passes over the digits training split (+-1
pixel translations, as the base model was trained with) are cached once in
HDF5, and a `LossPredictionHead` (512-512, LeakyReLU 0.01, softplus) is
trained on the cache with the pairwise ranking loss (margin 0.1) against
the frozen classifier's per-sample cross-entropy: AdamW with beta = (0.8,
0.95), weight decay 1e-4, linear warm-up over the first 5% of steps, then
cosine decay.

Run from the repository root (about a minute on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_loss_prediction_vit_tiny_digits.py
"""

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf
from make_vit_tiny_digits import augment  # noqa: E402 (same folder)
from scipy.stats import spearmanr

import ensemble_zoo as ez
from ensemble_zoo.models.loss_prediction import cache_embeddings
from ensemble_zoo.models.loss_prediction import train_head_from_cache

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "loss_prediction_vit_tiny_digits"


def uncertainty_metrics(model):
    """Classification metrics (those of `vit_tiny_digits`: the classifier is
    frozen) and what the uncertainty head adds, on the digits test split."""
    x, y = ez.datasets.load_arrays("digits", "test")
    out = model.predict(x, batch_size=256, verbose=0)
    probs = np.asarray(keras.ops.convert_to_numpy(keras.ops.softmax(out["logits"])))
    losses = -np.log(probs[np.arange(len(y)), y] + 1e-12)
    u = out["uncertainty"]
    wrong = probs.argmax(-1) != y
    embeddings = np.asarray(keras.ops.convert_to_numpy(model.embed(x)))
    metrics = {
        "test_accuracy": round(ez.metrics.accuracy(probs, y), 4),
        "test_nll": round(ez.metrics.negative_log_likelihood(probs, y), 4),
        "test_ece": round(ez.metrics.expected_calibration_error(probs, y), 4),
        "test_spearman_uncertainty_loss": round(float(spearmanr(u, losses).statistic), 4),
        "test_error_auroc": round(ez.metrics.ood_auroc(u[~wrong], u[wrong]), 4),
        "test_error_auroc_msp": round(
            ez.metrics.ood_auroc(1 - probs.max(-1)[~wrong], 1 - probs.max(-1)[wrong]), 4
        ),
        "test_r_auroc": round(ez.metrics.r_auroc(embeddings, y, u), 4),
        "test_recall_at_one": round(ez.metrics.recall_at_one(embeddings, y), 4),
    }
    for split in ("near_ood", "far_ood"):
        x_ood, _ = ez.datasets.load_arrays("digits", split)
        u_ood = model.predict(x_ood, batch_size=256, verbose=0)["uncertainty"]
        metrics[f"{split}_auroc"] = round(ez.metrics.ood_auroc(u, u_ood), 4)
    return metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.LossPredictionImageClassifier.from_keras_hub(
        base, freeze_backbone=True, freeze_classifier=True
    )
    x, y = ez.datasets.load_arrays("digits", "train")
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0, reshuffle_each_iteration=True)
        .map(augment)
        .batch(args.batch_size, drop_remainder=True)  # even batches for the pairs
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cache.h5")
        written = cache_embeddings(model, data, path, epochs=args.epochs)
        steps = written["batches"]
        warmup = max(1, steps // 20)
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=steps - warmup, warmup_target=args.learning_rate, warmup_steps=warmup
        )
        optimizer = keras.optimizers.AdamW(schedule, beta_1=0.8, beta_2=0.95, weight_decay=1e-4)
        train_head_from_cache(model, path, optimizer=optimizer, verbose=2)
    metrics = uncertainty_metrics(model)
    print(NAME, metrics)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "loss_prediction",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"vit_tiny_digits frozen (backbone and classifier); class-token "
                f"embeddings of {args.epochs} augmented passes (+-1 pixel "
                f"translations, {written['rows']} rows) cached in HDF5; head "
                f"512-512 trained on the cache, one step per cached batch of "
                f"{args.batch_size} ({steps} steps), pairwise ranking loss "
                f"(margin 0.1), AdamW lr {args.learning_rate} beta (0.8, 0.95) "
                "wd 1e-4, 5% warm-up then cosine; backend " + keras.config.backend()
            ),
            "script": "presets/make_loss_prediction_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )


if __name__ == "__main__":
    main()
