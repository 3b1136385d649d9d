"""Rebuilds the `masksembles_vit_tiny_digits` preset (Masksembles, Durasov
et al. 2021, a baseline of the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
Uncertainty Modelling for Self-Attention Networks").

Starts from the trained base preset `vit_tiny_digits`: 4 fixed masks
(scale 2, so each member keeps 52 of the 96 hidden units of every MLP
block and 26 of the 48 pooled features, rescaled by 96/52 and 48/26), the
base model's weights and head. Every weight is fine-tuned with the mean of
the member cross-entropies: Adam, 5% warm-up then cosine decay, global
clipping at 1.0, +-1 pixel translations (the BatchEnsemble recipe).

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_masksembles_vit_tiny_digits.py
"""

import argparse
import os

import keras
from make_lora_ensemble_vit_tiny_digits import train  # noqa: E402 (same folder)
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "masksembles_vit_tiny_digits"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.MasksemblesImageClassifier.from_keras_hub(
        base, num_members=args.members, scale=args.scale, seed=0
    )
    print("before fine-tuning", test_metrics(model))
    train(model, args.epochs, args.batch_size, args.learning_rate, seed=0)
    metrics = test_metrics(model)
    print(NAME, metrics)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "masksembles",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"from vit_tiny_digits; {args.members} members, scale "
                f"{args.scale}, masks on every MLP block and the pooled "
                f"features, every weight trained; {args.epochs} epochs, batch "
                f"{args.batch_size}, Adam lr {args.learning_rate} (5% warm-up, "
                "cosine), global clipnorm 1.0, +-1 pixel translation; backend "
                + keras.config.backend()
            ),
            "script": "presets/make_masksembles_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )


if __name__ == "__main__":
    main()
