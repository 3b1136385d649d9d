"""Fused Hydra vs. its pruned members run one by one vs. the single model.

    KERAS_BACKEND=jax python benchmarks/hydra.py [--configs tiny vit_s16]
        [--batch-sizes 1 64] [--repeats 5]

For each configuration and batch size it prints the median wall time of
one forward pass of: the single (unpruned) model, the M pruned members
run separately (sum of their times), and the fused Hydra model, plus the
ratios and the analytic multiply-add ratio fused / single. Every model is
compiled the backend's best way (`jit_compile=True` under JAX and
TensorFlow, eager under PyTorch) and timed after warm-up, in one run.

Configurations: `tiny` is the shipped `hydra_circuit_vit_tiny_digits`
preset against `vit_tiny_digits`; `vit_s16` is a ViT-S/16 (224x224, 12
layers, 6 heads of 64, MLP 1536, 1000 classes) with random weights and 3
members that each keep 4 of 6 heads in every layer (the paper's 8 of 12).

Goals: fused / separate <= 0.6 at batch 1 and <= 1.0 at batch 64; fused /
single within 1.15x of the multiply-add ratio.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from timing import compiled_call  # noqa: E402 (same folder)
from timing import median_ms  # noqa: E402

import ensemble_zoo as ez  # noqa: E402
from ensemble_zoo.models.hydra.hydra_cost import hydra_multiply_adds  # noqa: E402


def tiny():
    single = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    fused = ez.models.EnsembleClassifier.from_preset("hydra_circuit_vit_tiny_digits")
    vit = single.members[0].backbone
    return single, fused, vit, fused.backbone.member_num_heads, 8


def vit_s16():
    keras.utils.set_random_seed(0)
    config = dict(
        image_shape=(224, 224, 3),
        patch_size=16,
        num_layers=12,
        num_heads=6,
        hidden_dim=384,
        mlp_dim=1536,
    )
    vit = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**config), num_classes=1000, preprocessor=None
    )
    masks = np.ones((3, 12, 6), bool)
    for m in range(3):
        masks[m, :, [m, (m + 3) % 6]] = False  # 4 of 6 heads, different per member
    fused = ez.models.HydraImageClassifier.from_keras_hub(vit, masks)
    return vit, fused, vit.backbone, fused.backbone.member_num_heads, 1000


CONFIGS = {"tiny": tiny, "vit_s16": vit_s16}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"backend {keras.config.backend()}, median of {args.repeats} runs, ms per forward pass")
    header = (
        f"{'config':<8} {'batch':>5} {'single':>9} {'separate':>9} {'fused':>9} "
        f"{'fused/sep':>9} {'fused/single':>12} {'MAC ratio':>9} {'vs MACs':>7}"
    )
    print(header + "\n" + "-" * len(header))
    for name in args.configs:
        single, fused, vit, heads, classes = CONFIGS[name]()
        members = fused.split_members()
        cost = dict(
            image_shape=tuple(vit.image_shape),
            patch_size=vit.patch_size,
            num_layers=vit.num_layers,
            num_heads=vit.num_heads,
            hidden_dim=vit.hidden_dim,
            mlp_dim=vit.mlp_dim,
            num_classes=classes,
        )
        mac_ratio = hydra_multiply_adds(
            **cost, num_members=fused.num_members, member_num_heads=heads
        ) / hydra_multiply_adds(**cost)
        calls = {
            "single": [compiled_call(single)],
            "separate": [compiled_call(m) for m in members],
            "fused": [compiled_call(fused)],
        }
        for batch in args.batch_sizes:
            x = np.random.default_rng(0).uniform(size=(batch,) + tuple(vit.image_shape))
            x = x.astype("float32")
            ms = {k: median_ms(v, x, args.repeats) for k, v in calls.items()}
            ratio = ms["fused"] / ms["single"]
            print(
                f"{name:<8} {batch:>5} {ms['single']:9.2f} {ms['separate']:9.2f} "
                f"{ms['fused']:9.2f} {ms['fused'] / ms['separate']:9.2f} "
                f"{ratio:12.2f} {mac_ratio:9.2f} {ratio / mac_ratio:7.2f}"
            )


if __name__ == "__main__":
    main()
