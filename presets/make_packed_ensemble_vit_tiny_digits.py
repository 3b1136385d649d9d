"""Rebuilds the `packed_ensemble_vit_tiny_digits` preset (Packed-Ensembles,
Laurent et al. 2023, the baseline of Table 1 of the Hydra paper, "Ensembling
Pruned Attention Heads for Uncertainty-Aware Efficient Transformers").

The geometry of the base preset `vit_tiny_digits` (4 layers, 6 heads of
8, width 48, MLP 96, patch 2) packed with the Hydra paper's setting `M = 3`,
`alpha = 2`, `gamma = 1`: three members of width 32 with 4 heads and MLP
64. Packed-Ensembles train from scratch, so this uses the base model's own
recipe (`make_vit_tiny_digits.py`: AdamW, lr 3e-3 cosine, weight decay
0.05, +-1 pixel translations) with the mean of the member
cross-entropies.

Run from the repository root (about 10 minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_packed_ensemble_vit_tiny_digits.py
"""

import argparse
import os

import keras
import numpy as np
import tensorflow as tf
from make_vit_tiny_digits import augment  # noqa: E402 (same folder)
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "packed_ensemble_vit_tiny_digits"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=2)
    parser.add_argument("--gamma", type=int, default=1)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    alpha = int(args.alpha) if args.alpha == int(args.alpha) else args.alpha
    model = ez.models.PackedEnsembleImageClassifier.like_keras_hub(
        base, num_members=args.members, alpha=alpha, gamma=args.gamma
    )
    x, y = ez.datasets.load_arrays("digits", "train")
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0, reshuffle_each_iteration=True)
        .map(augment)
        .batch(args.batch_size)
    )
    steps = args.epochs * int(np.ceil(len(x) / args.batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=steps)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05),
        jit_compile=keras.config.backend() != "torch",
    )
    model.fit(data, epochs=args.epochs, verbose=2)
    metrics = test_metrics(model)
    print(NAME, metrics)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "packed_ensemble",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"from scratch, geometry of vit_tiny_digits; M={args.members}, "
                f"alpha={alpha}, gamma={args.gamma}; {args.epochs} epochs, batch "
                f"{args.batch_size}, AdamW (lr 3e-3 cosine to 0, weight decay "
                "0.05), +-1 pixel random translation, seed 0, backend " + keras.config.backend()
            ),
            "script": "presets/make_packed_ensemble_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )


if __name__ == "__main__":
    main()
