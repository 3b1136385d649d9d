"""Rebuilds the `vmoe_vit_tiny_digits` and `e3_vit_tiny_digits` presets
(V-MoE and E³; the E³ paper, "Sparse MoEs meet Efficient Ensembles").

The paper's pipeline at toy scale, on the bundled digits:

1. Upcycle: the trained base preset `vit_tiny_digits` (4 blocks) becomes a
   V-MoE with 4 experts in the paper's "last-2" blocks (1 and 3), every
   expert a copy of its block's MLP, K = 2; train it (the "upstream"
   V-MoE) for `--upstream-epochs`.
2. Fine-tune from that checkpoint, for `--epochs` each:
   - `vmoe_vit_tiny_digits`: the V-MoE, K = 2;
   - `e3_vit_tiny_digits`: E³ with M = 2 members of K = 1 expert among
     their own 2, built from the same weights (`from_vmoe`, no new
     parameters).

Recipe (notes §6.1, adapted): Adam with 5% warm-up then cosine decay,
global gradient clipping at 1.0, +-1 pixel translations, router noise
1/E, capacity factor 1.5 in training and 8 at inference (nothing is
dropped at test time), expert dropout 0.1, mean of the members'
cross-entropies plus the routers' auxiliary losses.

Run from the repository root (a few minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_vmoe_vit_tiny_digits.py
"""

import argparse
import os

import keras
from make_lora_ensemble_vit_tiny_digits import train  # noqa: E402 (same folder)
from make_vit_tiny_digits import test_metrics  # noqa: E402

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream-epochs", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    moe = dict(moe_layers=[1, 3], capacity_factor=1.5, eval_capacity_factor=8.0, dropout_rate=0.1)
    upstream = ez.models.ViTMoEImageClassifier.from_keras_hub(
        base, num_experts=args.experts, num_selected_experts=2, seed=0, **moe
    )
    train(upstream, args.upstream_epochs, args.batch_size, args.learning_rate, seed=0)
    print("upstream V-MoE", test_metrics(upstream))

    recipe = (
        f"{args.epochs} epochs, batch {args.batch_size}, Adam lr "
        f"{args.learning_rate} (5% warm-up, cosine), global clipnorm 1.0, +-1 "
        "pixel translation, capacity factor 1.5 (train) / 8 (test), expert "
        f"dropout 0.1, router noise 1/E; backend {keras.config.backend()}"
    )
    upstream_text = (
        f"vit_tiny_digits upcycled to {args.experts} experts in blocks 1 and 3 "
        f"(K=2) and trained {args.upstream_epochs} epochs as the upstream V-MoE"
    )
    for name, ensemble_size, k, seed in (
        ("vmoe_vit_tiny_digits", 1, 2, 1),
        ("e3_vit_tiny_digits", 2, 1, 2),
    ):
        keras.utils.set_random_seed(seed)
        model = ez.models.ViTMoEImageClassifier.from_vmoe(
            upstream, ensemble_size=ensemble_size, num_selected_experts=k, seed=seed
        )
        train(model, args.epochs, args.batch_size, args.learning_rate, seed=seed)
        metrics = test_metrics(model)
        print(name, metrics)
        model.save_to_preset(
            os.path.join(args.output, name),
            metadata={
                "dataset": "digits",
                "method": "v-moe" if ensemble_size == 1 else "e3",
                "base_preset": "vit_tiny_digits",
                "description": ez.presets.PRESETS[name]["description"],
                "training": f"{upstream_text}; then fine-tuned as "
                + ("V-MoE K=2" if ensemble_size == 1 else "E3 M=2 K=1 (from_vmoe)")
                + f": {recipe}",
                "script": "presets/make_vmoe_vit_tiny_digits.py",
                "metrics": metrics,
            },
        )


if __name__ == "__main__":
    main()
