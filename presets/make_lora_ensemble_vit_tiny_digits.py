"""Rebuilds the `lora_ensemble_vit_tiny_digits` preset (LoRA-Ensemble; the
LoRA-Ensemble paper, "LoRA-Ensemble: Efficient Uncertainty Modelling for
Self-Attention Networks").

Starts from the trained base preset `vit_tiny_digits` (4 layers x 6
heads), frozen, and trains 8 members of rank 4 on every attention
projection (query, key, value, output), Xavier-uniform gain 10 for `A`,
`B = 0`, and a fresh classifier head per member: the paper's fine-tuning
setting (App. L), with its tiny-scale recipe from the notes: Adam, linear
warm-up over the first 5% of steps then cosine decay, global gradient
clipping at 1.0, the mean of the member cross-entropies, +-1 pixel
translations.

Run from the repository root (about a minute on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_lora_ensemble_vit_tiny_digits.py
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
NAME = "lora_ensemble_vit_tiny_digits"


def train(model, epochs, batch_size, learning_rate, seed):
    x, y = ez.datasets.load_arrays("digits", "train")
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
        .map(augment)
        .batch(batch_size)
    )
    steps = epochs * int(np.ceil(len(x) / batch_size))
    warmup = max(1, steps // 20)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=steps - warmup, warmup_target=learning_rate, warmup_steps=warmup
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, global_clipnorm=1.0),
        jit_compile=keras.config.backend() != "torch",
    )
    model.fit(data, epochs=epochs, verbose=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--a-gain", type=float, default=10.0)
    parser.add_argument(
        "--reuse-head",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="start every member's head from the base model's (default: fresh heads)",
    )
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        base,
        num_members=args.members,
        rank=args.rank,
        a_gain=args.a_gain,
        reuse_head=args.reuse_head,
        num_classes=base.num_classes,
        seed=0,
    )
    train(model, args.epochs, args.batch_size, args.learning_rate, seed=0)
    metrics = test_metrics(model)
    print(NAME, metrics)
    model.save_to_preset(
        os.path.join(args.output, NAME),
        metadata={
            "dataset": "digits",
            "method": "lora_ensemble",
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[NAME]["description"],
            "training": (
                f"vit_tiny_digits frozen; {args.members} members, rank "
                f"{args.rank} on query/key/value/output, A Xavier-uniform gain "
                f"{args.a_gain}, "
                + ("heads copied from the base" if args.reuse_head else "fresh per-member heads")
                + f"; {args.epochs} epochs, "
                f"batch {args.batch_size}, Adam lr {args.learning_rate} (5% "
                "warm-up, cosine), global clipnorm 1.0, +-1 pixel translation; "
                "backend " + keras.config.backend()
            ),
            "script": "presets/make_lora_ensemble_vit_tiny_digits.py",
            "metrics": metrics,
        },
    )


if __name__ == "__main__":
    main()
