"""Rebuilds the `l2_attention_vit_tiny_digits` preset.

The LoRA-Ensemble paper's "L2" baseline (Kim et al. 2021, "The Lipschitz
Constant of Self-Attention"): the ViT of `vit_tiny_digits` with L2
self-attention (`ez.models.L2AttentionViTBackbone`), trained as
`vit_tiny_digits` was (seed 0, 150 epochs, AdamW with learning rate 3e-3
cosine to 0 and weight decay 0.05, one-pixel random translations). One
member: a single-model uncertainty baseline.

Converted from the trained `vit_tiny_digits` instead (`--convert`:
`L2AttentionViTBackbone.from_backbone`, its head kept) and fine-tuned for
60 epochs at 1e-3, it stayed at 0.58 test accuracy: the trained query
projections make the distances large, every token attends to itself
alone, and the class token sees no patch.

Run from the repository root (about 2 minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_l2_attention_vit_tiny_digits.py
"""

import argparse
import os

import keras
import keras_hub
from make_vit_tiny_digits import BACKBONE
from make_vit_tiny_digits import NUM_CLASSES
from make_vit_tiny_digits import digits_train
from make_vit_tiny_digits import test_metrics

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "l2_attention_vit_tiny_digits"


def arguments(description):
    """The training options both Lipschitz-attention presets take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument(
        "--convert", action="store_true", help="start from vit_tiny_digits instead of seed 0"
    )
    parser.add_argument("--output", default=HERE)
    return parser


def main():
    args = arguments(__doc__).parse_args()
    train_and_save(NAME, ez.models.L2AttentionViTBackbone, {}, "l2 attention", args)


def train_and_save(name, backbone_cls, method_config, method, args):
    """Trains a `backbone_cls` ViT as `vit_tiny_digits` was (or converts
    that preset's with `--convert`) and saves it as the preset `name`."""
    keras.utils.set_random_seed(0)
    if not args.convert:
        backbone = backbone_cls(**BACKBONE, **method_config)
    else:
        base = ez.models.DeepEnsembleClassifier.from_preset("vit_tiny_digits").members[0]
        backbone = backbone_cls.from_backbone(base.backbone, **method_config)
    model = keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=NUM_CLASSES, preprocessor=None, name="member_0"
    )
    if args.convert:
        model.output_dense.set_weights(base.output_dense.get_weights())
    train, steps_per_epoch = digits_train(args.batch_size, seed=0)
    steps = args.epochs * steps_per_epoch
    model.compile(
        optimizer=keras.optimizers.AdamW(
            keras.optimizers.schedules.CosineDecay(args.learning_rate, decay_steps=steps),
            weight_decay=0.05,
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=keras.config.backend() != "torch",
    )
    model.fit(train, epochs=args.epochs, verbose=2)
    # Like every trained digits preset, it takes raw images (its converter).
    ensemble = ez.models.DeepEnsembleClassifier(
        [model], preprocessor=ez.datasets.image_preprocessor("digits"), name=name
    )
    ensemble.save_to_preset(
        os.path.join(args.output, name),
        metadata={
            "dataset": "digits",
            "training": (
                ("vit_tiny_digits, fine-tuned" if args.convert else "trained from seed 0")
                + f" with {method}, {args.epochs} epochs, batch "
                f"{args.batch_size}, AdamW (lr {args.learning_rate:g} cosine to 0, weight decay "
                "0.05), +-1 pixel random translation, backend " + keras.config.backend()
            ),
            "script": f"presets/make_{name}.py",
            "backbone": {**BACKBONE, **method_config},
            "method": method,
            "base_preset": "vit_tiny_digits",
            "description": ez.presets.PRESETS[name]["description"],
            "metrics": test_metrics(ensemble),
        },
    )
    print(name, ez.presets.preset_metadata(os.path.join(args.output, name))["metrics"])


if __name__ == "__main__":
    main()
