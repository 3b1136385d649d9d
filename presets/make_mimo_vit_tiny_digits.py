"""Rebuilds the `mimo_vit_tiny_digits` preset (MIMO, Havasi et al. 2021,
the baseline of the Hydra paper, the LoRA-Ensemble paper and the E³ paper:
"Ensembling Pruned Attention Heads for Uncertainty-Aware Efficient
Transformers", "LoRA-Ensemble: Efficient Uncertainty Modelling for
Self-Attention Networks" and "Sparse MoEs meet Efficient Ensembles").

Starts from the trained base preset `vit_tiny_digits`, widened as the E³
paper builds MIMO from V-MoE checkpoints (App. B.3): the patch kernel is
replicated over 3 stacked inputs and the head over 3 outputs, both scaled
by 1/3. Fine-tuned on MIMO batches with the Hydra paper's setting (M = 3,
input repetition 0.5, batch repetition 4), every weight trained: Adam, 5%
warm-up then cosine decay, global clipping at 1.0, +-1 pixel
translations.

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_mimo_vit_tiny_digits.py
"""

import argparse
import os

import keras
from make_lora_ensemble_vit_tiny_digits import train  # noqa: E402 (same folder)
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "mimo_vit_tiny_digits"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--input-repetition", type=float, default=0.5)
    parser.add_argument("--batch-repetition", type=int, default=4)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.MIMOImageClassifier.from_keras_hub(
        base,
        num_members=args.members,
        input_repetition=args.input_repetition,
        batch_repetition=args.batch_repetition,
        seed=0,
    )
    train(model, args.epochs, args.batch_size, args.learning_rate, seed=0)
    metrics = test_metrics(model)
    print(NAME, metrics)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "mimo",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"from vit_tiny_digits; {args.members} members, input "
                f"repetition {args.input_repetition}, batch repetition "
                f"{args.batch_repetition}, every weight trained; {args.epochs} "
                f"epochs, batch {args.batch_size} (before repetition), Adam lr "
                f"{args.learning_rate} (5% warm-up, cosine), global clipnorm "
                "1.0, +-1 pixel translation; backend " + keras.config.backend()
            ),
            "script": "presets/make_mimo_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )


if __name__ == "__main__":
    main()
