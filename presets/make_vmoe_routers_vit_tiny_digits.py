"""Rebuilds the `experts_choice_vit_tiny_digits` and `soft_moe_vit_tiny_digits`
presets (vmoe's Experts Choice and Soft MoE routers).

The recipe of `vmoe_vit_tiny_digits` (`make_vmoe_vit_tiny_digits.py`) with
another router: the trained base preset `vit_tiny_digits` (4 blocks) is
upcycled to 4 experts in blocks 1 and 3 (every expert a copy of its
block's MLP, a fresh router), trained for `--upstream-epochs` (the
"upstream" model), then fine-tuned for `--epochs` with a fresh schedule.
Adam with 5% warm-up then cosine decay, global gradient clipping at 1.0,
+-1 pixel translations, expert dropout 0.1.

Routers, at the V-MoE preset's compute (K = 2 experts per token, 17 tokens
per image, so 34 token-expert applications per image and MoE block):

- Experts Choice: capacity factor 2.0 in training and at inference (each
  of the 4 experts takes its top ceil(2 * 17 / 4) = 9 tokens of every
  image: 36 applications). One factor for both: a larger test factor
  would make every expert take every token, another model than the one
  trained. Router noise 1/E.
- Soft MoE: 8 slots per expert (32 slots per image), no noise (vmoe's
  default).

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_vmoe_routers_vit_tiny_digits.py
"""

import argparse
import os

import keras
from add_digits_image_converter import add_converter  # noqa: E402 (same folder)
from make_lora_ensemble_vit_tiny_digits import train  # noqa: E402
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))

ROUTERS = {
    "experts_choice_vit_tiny_digits": dict(
        router="experts_choice", capacity_factor=2.0, eval_capacity_factor=2.0
    ),
    "soft_moe_vit_tiny_digits": dict(router="soft", num_slots=8),
}
METHODS = {
    "experts_choice_vit_tiny_digits": "v-moe (experts choice)",
    "soft_moe_vit_tiny_digits": "soft moe",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream-epochs", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--only", choices=sorted(ROUTERS), default=None)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    for seed, (name, router) in enumerate(ROUTERS.items()):
        if args.only not in (None, name):
            continue
        keras.utils.set_random_seed(seed)
        model = ez.models.ViTMoEImageClassifier.from_keras_hub(
            base, num_experts=args.experts, moe_layers=[1, 3], dropout_rate=0.1, seed=seed, **router
        )
        train(model, args.upstream_epochs, args.batch_size, args.learning_rate, seed=seed)
        print(name, "upstream", test_metrics(model))
        train(model, args.epochs, args.batch_size, args.learning_rate, seed=seed + 10)
        metrics = test_metrics(model)
        print(name, metrics)
        path = os.path.join(args.output, name)
        settings = ", ".join(f"{k}={v}" for k, v in router.items())
        model.save_to_preset(
            path,
            metadata={
                "dataset": "digits",
                "method": METHODS[name],
                "base_preset": "vit_tiny_digits",
                "description": ez.presets.PRESETS[name]["description"],
                "training": (
                    f"vit_tiny_digits upcycled to {args.experts} experts in "
                    f"blocks 1 and 3 ({settings}), trained "
                    f"{args.upstream_epochs} epochs (upstream), then "
                    f"fine-tuned {args.epochs} epochs: batch {args.batch_size}, "
                    f"Adam lr {args.learning_rate} (5% warm-up, cosine), global "
                    "clipnorm 1.0, +-1 pixel translation, expert dropout 0.1; "
                    f"backend {keras.config.backend()}"
                ),
                "script": "presets/make_vmoe_routers_vit_tiny_digits.py",
                "metrics": metrics,
            },
        )
        # The digits image converter (as every digits preset has it), so
        # that `predict` takes raw images; checked bit for bit there.
        add_converter(path)


if __name__ == "__main__":
    main()
