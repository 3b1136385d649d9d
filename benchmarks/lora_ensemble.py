"""LoRA-Ensemble vs. an explicit ensemble of separate models vs. one model.

    KERAS_BACKEND=jax python benchmarks/lora_ensemble.py [--configs vit_s16]
        [--members 16] [--rank 8] [--batch-sizes 1 8] [--train-batch 2]
        [--repeats 3]

For a ViT-S/16-sized model with random weights (224x224, 12 layers, 6
heads, width 384, MLP 1536, 100 classes) it prints, in one run:

- inference: median wall time of one forward pass of the single model, of
  the explicit ensemble (its M members run one after another; they share
  the single model's architecture, so this is M times one compiled
  forward pass of the single model), and of the M-member LoRA-Ensemble
  (one pass over the tiled batch);
- train step: the same for one optimizer step (`train_on_batch`, Adam):
  full fine-tuning of each explicit member versus adapters and heads only;
- parameter memory (float32 weights, trainable and frozen).

Every model is compiled the backend's best way (XLA under JAX and
TensorFlow, eager under PyTorch). The `tiny` configuration (8x8 images,
4 layers) is a quick smoke run.

Goals: inference <= 0.33x the explicit ensemble, train step <= 0.5x,
parameters <= 1.15x the single model.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from timing import compiled_call  # noqa: E402 (same folder)
from timing import median_ms  # noqa: E402
from timing import train_step  # noqa: E402

import ensemble_zoo as ez  # noqa: E402

CONFIGS = {
    "vit_s16": dict(
        image_shape=(224, 224, 3),
        patch_size=16,
        num_layers=12,
        num_heads=6,
        hidden_dim=384,
        mlp_dim=1536,
    ),
    "tiny": dict(
        image_shape=(8, 8, 1), patch_size=2, num_layers=4, num_heads=6, hidden_dim=48, mlp_dim=96
    ),
}
NUM_CLASSES = 100


def jit_compile():
    return keras.config.backend() != "torch"


def single_model(config):
    keras.utils.set_random_seed(0)
    return keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**config), num_classes=NUM_CLASSES, preprocessor=None
    )


def parameter_megabytes(model):
    return sum(int(np.prod(w.shape)) * 4 for w in model.weights) / 2**20


def train_step_ms(model, x, y, repeats):
    return median_ms([train_step(model)], x, repeats, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["vit_s16"], choices=list(CONFIGS))
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--train-batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    m = args.members
    print(
        f"backend {keras.config.backend()}, {m} members, rank {args.rank}, "
        f"median of {args.repeats} runs, ms"
    )
    header = (
        f"{'config':<8} {'measure':<16} {'single':>9} {'explicit':>10} "
        f"{'lora':>9} {'lora/explicit':>13} {'lora/single':>11}"
    )
    print(header + "\n" + "-" * len(header))
    for name in args.configs:
        config = CONFIGS[name]
        single = single_model(config)
        lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
            single, num_members=m, rank=args.rank, reuse_head=False, num_classes=NUM_CLASSES, seed=0
        )
        rows = []
        single_call, lora_call = compiled_call(single), compiled_call(lora)
        rng = np.random.default_rng(0)
        for batch in args.batch_sizes:
            x = rng.uniform(size=(batch,) + config["image_shape"]).astype("float32")
            one = median_ms([single_call], x, args.repeats)
            rows.append((f"infer b={batch}", one, m * one, median_ms([lora_call], x, args.repeats)))
        x = rng.uniform(size=(args.train_batch,) + config["image_shape"]).astype("float32")
        y = np.arange(args.train_batch) % NUM_CLASSES
        single.compile(
            optimizer=keras.optimizers.Adam(1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit_compile(),
        )
        lora.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit_compile())
        one = train_step_ms(single, x, y, args.repeats)
        rows.append(
            (f"train b={args.train_batch}", one, m * one, train_step_ms(lora, x, y, args.repeats))
        )
        one_mb = parameter_megabytes(single)
        rows.append(("params MB", one_mb, m * one_mb, parameter_megabytes(lora)))
        for measure, one, explicit, ours in rows:
            print(
                f"{name:<8} {measure:<16} {one:9.2f} {explicit:10.2f} {ours:9.2f} "
                f"{ours / explicit:13.3f} {ours / one:11.2f}"
            )
        trainable = sum(int(np.prod(w.shape)) for w in lora.trainable_weights)
        print(f"{name:<8} trainable parameters: LoRA-Ensemble {trainable:,}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - start:.0f} s")
