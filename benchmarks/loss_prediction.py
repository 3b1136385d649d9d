"""Loss-prediction head training: from an embedding cache vs on the fly.

The speed-up of "Pretrained Visual Uncertainties" (§3.3.3): with the
backbone and classifier frozen, the head only needs pooled embeddings, so
they are cached once and the head trains without running the backbone.
This script builds a randomly initialized keras-hub ViT of ViT-S/16 size
(224x224 images, 12 layers, width 384, 6 heads, MLP 1536; 1000 classes)
with the paper's 512-512 head and trains two identical heads on the same
batches:

- on the fly: `model.fit` on the images (the frozen backbone runs every
  step, in inference mode);
- from the cache: `cache_embeddings` (the one-off pass, timed separately)
  then `train_head_from_cache`.

Per-step times are medians over the steps after the first (which
compiles), taken from a callback that waits for each step's loss. The
ratio compares the same number of steps. The last column checks that both
heads end with the same weights.

    KERAS_BACKEND=jax python benchmarks/loss_prediction.py
"""

import argparse
import os
import tempfile
import time

import keras
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.models.loss_prediction import cache_embeddings
from ensemble_zoo.models.loss_prediction import train_head_from_cache


class StepTimer(keras.callbacks.Callback):
    """Wall time of every training step (waits for the step's loss)."""

    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])  # synchronize with the device
        self.times.append(time.perf_counter() - self._start)

    def steady_ms(self):
        return 1000.0 * float(np.median(self.times[1:] or self.times))


def build(args):
    import keras_hub

    keras.utils.set_random_seed(0)  # the same backbone, classifier and head
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3),
        patch_size=args.patch_size,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.width,
        mlp_dim=4 * args.width,
    )
    model = ez.models.LossPredictionImageClassifier(
        backbone,
        args.classes,
        head_hidden_units=(512, 512),
        freeze_backbone=True,
        freeze_classifier=True,
    )
    return model


def dataset(args):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    n = args.steps * args.batch_size
    images = rng.normal(size=(n, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, args.classes, n)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(args.batch_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--patch-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--classes", type=int, default=1000)
    args = parser.parse_args()
    if args.batch_size % 2:
        raise ValueError("--batch-size must be even (the ranking loss pairs samples).")
    jit = keras.config.backend() != "torch"
    data = dataset(args)

    on_the_fly = build(args)
    on_the_fly.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=jit)
    fly_timer = StepTimer()
    start = time.perf_counter()
    on_the_fly.fit(data, epochs=1, shuffle=False, verbose=0, callbacks=[fly_timer])
    fly_total = time.perf_counter() - start

    cached = build(args)
    path = os.path.join(tempfile.mkdtemp(), "embeddings.h5")
    start = time.perf_counter()
    cache_embeddings(cached, data, path)
    caching = time.perf_counter() - start
    cache_timer = StepTimer()
    start = time.perf_counter()
    train_head_from_cache(
        cached,
        path,
        optimizer=keras.optimizers.AdamW(1e-3),
        jit_compile=jit,
        callbacks=[cache_timer],
    )
    cache_total = time.perf_counter() - start

    diff = max(
        float(np.abs(keras.ops.convert_to_numpy(a) - keras.ops.convert_to_numpy(b)).max())
        for a, b in zip(on_the_fly.uncertainty_head.weights, cached.uncertainty_head.weights)
    )
    print(
        f"ViT {args.image_size}px/{args.patch_size}, {args.layers} layers, width "
        f"{args.width}; head 512-512; {args.steps} steps of batch {args.batch_size}; "
        f"backend {keras.config.backend()}"
    )
    print(f"{'':24}{'ms/step':>12}{'total s':>12}")
    print(f"{'on the fly':24}{fly_timer.steady_ms():12.2f}{fly_total:12.2f}")
    print(f"{'from the cache':24}{cache_timer.steady_ms():12.2f}{cache_total:12.2f}")
    print(f"{'caching pass (one-off)':24}{'':12}{caching:12.2f}")
    print(f"speed-up per step: {fly_timer.steady_ms() / cache_timer.steady_ms():.1f}x")
    print(f"speed-up, totals: {fly_total / cache_total:.1f}x")
    print(f"max |head weight difference|: {diff:.2e}")


if __name__ == "__main__":
    main()
