"""Rebuilds the `mc_dropout_vit_tiny_digits` and `subnetwork_vit_tiny_digits`
presets, both from the trained base preset `vit_tiny_digits`.

- `mc_dropout_vit_tiny_digits`: MC dropout (Gal & Ghahramani 2016) with 8
  samples at the rates the base was trained with (0.1 on the embeddings,
  blocks and MLPs); no training. Its dropout layers are seeded, so a fresh
  load predicts the same samples on the same backend; other backends draw
  other masks.
- `subnetwork_vit_tiny_digits`: implicit ensemble extraction A of Kirsch's
  "(Implicit) Ensembles of Ensembles: Epistemic Uncertainty Collapse in
  Large Models" (§4.1, App. A.4): the base's weights frozen, 10 members
  (the paper's) each learning sigmoid row and column masks on both Dense
  layers of every transformer MLP, with the paper's diversity weight 2.0;
  masks trained with Adam (lr 0.05) for 10 epochs, batch 64.

Run from the repository root (about a minute on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_implicit_vit_tiny_digits.py
"""

import argparse
import os

import keras
from make_vit_tiny_digits import test_metrics  # noqa: E402 (same folder)

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))


def base_vit():
    return ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dropout-samples", type=int, default=8)
    parser.add_argument("--masked-members", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    common = {"dataset": "digits", "base_preset": "vit_tiny_digits"}

    def mc_dropout():
        return ez.models.MCDropoutClassifier.from_model(
            base_vit(), num_members=args.dropout_samples, seed=0
        )

    # The dropout seed state is saved with the weights: the metrics come
    # from a twin that starts from the same state as a fresh load.
    mc_dropout().save_to_preset(
        os.path.join(args.output, "mc_dropout_vit_tiny_digits"),
        metadata={
            **common,
            "method": "mc dropout",
            "training": (
                f"none: {args.dropout_samples} dropout samples of "
                "vit_tiny_digits at its training rates, seed 0"
            ),
            "script": "presets/make_implicit_vit_tiny_digits.py",
            "description": ez.presets.PRESETS["mc_dropout_vit_tiny_digits"]["description"],
            "metrics": test_metrics(mc_dropout()),
        },
    )

    keras.utils.set_random_seed(0)
    masks = ez.models.SubnetworkEnsembleClassifier.from_model(
        base_vit(), num_members=args.masked_members, seed=0
    )
    masks.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        jit_compile=keras.config.backend() != "torch",
    )
    x, y = ez.datasets.load_arrays("digits", "train")
    masks.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    masks.save_to_preset(
        os.path.join(args.output, "subnetwork_vit_tiny_digits"),
        metadata={
            **common,
            "method": "masked sub-networks",
            "training": (
                f"vit_tiny_digits frozen; {args.masked_members} members' row "
                f"and column masks on every MLP Dense, diversity weight "
                f"{masks.diversity_weight}; Adam lr {args.learning_rate}, "
                f"{args.epochs} epochs, batch {args.batch_size}, seed 0; "
                f"backend {keras.config.backend()}"
            ),
            "script": "presets/make_implicit_vit_tiny_digits.py",
            "description": ez.presets.PRESETS["subnetwork_vit_tiny_digits"]["description"],
            "metrics": test_metrics(masks),
        },
    )
    for name in ("mc_dropout_vit_tiny_digits", "subnetwork_vit_tiny_digits"):
        print(name, ez.presets.preset_metadata(os.path.join(args.output, name))["metrics"])


if __name__ == "__main__":
    main()
