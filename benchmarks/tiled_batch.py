"""Where the member-tiled methods lose time against running members apart.

    KERAS_BACKEND=jax python benchmarks/tiled_batch.py [--quick] [--repeats 5]
        [--members 3] [--lora-members 4]

BatchEnsemble, Masksembles and LoRA-Ensemble run a keras-hub ViT once on
the member-major batch `(members * batch, ...)`; an explicit ensemble runs
the model `members` times on the batch. Both do the same backbone work.
This script times, interleaved in one run (median ms, forward only,
compiled as `run_all.py` compiles), on ViT-B/16 at batch 4 (`--quick`: a
tiny ViT):

- `single x M`: the plain ViT, M passes of batch 4 (the explicit
  ensemble's cost, its baseline);
- `single at M x 4`: the plain ViT, one pass of batch M x 4: the tiled
  batch without any method;
- BatchEnsemble M, Masksembles M (scale 2) and LoRA-Ensemble (rank 8)
  on batch 4, each with its own explicit baseline, in one tiled pass
  (`member_batching="tiled"`) and member by member over the batch
  (`"sequential"`, what `"auto"` picks for JAX on a CPU; see
  `ensemble_zoo.models.member_passes`).

The ratio of `single at M x 4` to `single x M` is the cost of the larger
batch alone; a method's tiled ratio minus it is what the method's own
layers add. On 2 CPU cores under JAX (see docs/methods/baselines.md) the batch is almost
all of it, and the sequential passes remove it.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import timing  # noqa: E402

import ensemble_zoo as ez  # noqa: E402

VIT = {
    "full": dict(
        image_shape=(224, 224, 3),
        patch_size=16,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        mlp_dim=3072,
    ),
    "quick": dict(
        image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64
    ),
}


def single_vit(vit, classes=10):
    keras.utils.set_random_seed(0)
    return keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**vit), num_classes=classes, preprocessor=None
    )


def measure(single, methods, x, repeats):
    """{name: (ms, ratio to its explicit baseline)} for the single model
    tiled and each method, with the explicit baselines timed alongside."""
    plain = timing.compiled_call(single)
    groups, baselines = {}, {}
    for members in sorted({m for m, _ in methods.values()}):
        name = f"single x {members}"
        groups[name] = [plain] * members
        tiled = np.concatenate([x] * members)
        groups[f"single at {members} x {len(x)}"] = [lambda _, tiled=tiled: plain(tiled)]
        baselines[f"single at {members} x {len(x)}"] = name
    for name, (members, model) in methods.items():
        groups[name] = [timing.compiled_call(model)]
        baselines[name] = f"single x {members}"
    times = timing.interleaved_ms(groups, x, repeats)
    return {
        name: (ms, ms / times[baselines[name]] if name in baselines else 1.0)
        for name, ms in times.items()
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--lora-members", type=int, default=4)
    args = parser.parse_args()
    single = single_vit(VIT["quick" if args.quick else "full"])
    m, lm = args.members, args.lora_members
    kwargs = dict(reuse_head=False, num_classes=10)
    builds = {
        f"BatchEnsemble {m}": (
            m,
            lambda **kw: ez.models.BatchEnsembleImageClassifier.from_keras_hub(
                single, num_members=m, seed=0, **kwargs, **kw
            ),
        ),
        f"Masksembles {m}": (
            m,
            lambda **kw: ez.models.MasksemblesImageClassifier.from_keras_hub(
                single, num_members=m, scale=2.0, seed=0, **kwargs, **kw
            ),
        ),
        f"LoRA-Ensemble {lm}": (
            lm,
            lambda **kw: ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
                single, num_members=lm, rank=8, seed=0, **kwargs, **kw
            ),
        ),
    }
    methods = {}
    for name, (members, build) in builds.items():
        for batching in ("tiled", "sequential"):
            methods[f"{name} {batching}"] = (members, build(member_batching=batching))
    x = np.random.default_rng(0).random((4,) + single.backbone.image_shape).astype("float32")
    print(f"backend: {keras.config.backend()}, device: {timing.device_name()}")
    print(f"{'variant':<30} {'fwd ms':>9} {'/ explicit':>10}")
    for name, (ms, ratio) in measure(single, methods, x, args.repeats).items():
        print(f"{name:<30} {ms:9.1f} {ratio:10.2f}")


if __name__ == "__main__":
    main()
