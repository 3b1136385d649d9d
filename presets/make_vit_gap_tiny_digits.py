"""Rebuilds the `vit_gap_tiny_digits` and `tile_vit_tiny_digits` presets.

`vit_gap_tiny_digits` is `vit_tiny_digits`' recipe (same backbone, seed 0,
150 epochs, AdamW, cosine schedule, +-1 pixel translations) with keras-hub's
`pooling="gap"` head: the tokens are averaged before the classifier, which
is what tile ensembles need (Kirsch, "(Implicit) Ensembles of Ensembles:
Epistemic Uncertainty Collapse in Large Models", §4.1, extraction B).
`tile_vit_tiny_digits` reads it as 2 x 2 spatial tiles of the 4 x 4 patch
grid, four members, with no training.

Run from the repository root (about 2 minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_vit_gap_tiny_digits.py
"""

import argparse
import os

import keras
from make_vit_tiny_digits import BACKBONE  # noqa: E402 (same folder)
from make_vit_tiny_digits import test_metrics  # noqa: E402
from make_vit_tiny_digits import train_member  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--grid-size", type=int, default=2)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()

    vit = train_member(0, args.epochs, args.batch_size, pooling="gap")
    base = ez.models.DeepEnsembleClassifier([vit])
    recipe = {
        "dataset": "digits",
        "training": (
            f"{args.epochs} epochs, batch {args.batch_size}, AdamW "
            "(lr 3e-3 cosine to 0, weight decay 0.05), +-1 pixel random "
            "translation, seed 0, pooling 'gap', backend " + keras.config.backend()
        ),
        "script": "presets/make_vit_gap_tiny_digits.py",
        "backbone": BACKBONE,
    }
    base.save_to_preset(
        os.path.join(args.output, "vit_gap_tiny_digits"),
        metadata={
            **recipe,
            "method": "single model",
            "description": ez.presets.PRESETS["vit_gap_tiny_digits"]["description"],
            "metrics": test_metrics(base),
        },
    )
    tiles = ez.models.TileEnsembleClassifier.from_keras_hub(vit, grid_size=args.grid_size)
    tiles.save_to_preset(
        os.path.join(args.output, "tile_vit_tiny_digits"),
        metadata={
            **recipe,
            "method": "tile ensemble",
            "base_preset": "vit_gap_tiny_digits",
            "training": (
                f"none: {args.grid_size} x {args.grid_size} tiles of "
                "vit_gap_tiny_digits (" + recipe["training"] + ")"
            ),
            "description": ez.presets.PRESETS["tile_vit_tiny_digits"]["description"],
            "metrics": test_metrics(tiles),
        },
    )
    for name in ("vit_gap_tiny_digits", "tile_vit_tiny_digits"):
        print(name, ez.presets.preset_metadata(os.path.join(args.output, name))["metrics"])


if __name__ == "__main__":
    main()
