"""Where fused Hydra loses against the single ViT: a per-stage profile.

    KERAS_BACKEND=jax python benchmarks/hydra_profile.py [--batch 4]
        [--dtype bfloat16] [--size b16|tiny] [--repeats 20]
        [--attention auto einsum fused]

Hydra 3x8 (3 members, each keeping 8 of ViT-B/16's 12 heads in every
block, one merged MLP) does 2.6x the single model's multiply-adds, yet
at a small batch on a GPU its fused pass costs only a little more than
the single model when the GPU is latency-bound, and more than the
multiply-adds say when it is not. This script splits one forward pass
into the stages both models share and times each stage alone, compiled
the backend's best way (`timing.compiled_call`), in one run:

- `embedding`: patching and position embedding (the same layer in both;
  the fused model broadcasts its output to the members);
- `attention`: one block's first half, `x + attention(LN1(x))`, over
  `(batch, tokens, dim)` for the single model and `(batch, members,
  tokens, dim)` for the fused one (per-member layer norms, every
  member's kept heads in one attention call);
- `mlp`: the block's second half, `x + MLP(LN2(x))` (one MLP shared by the
  members' streams);
- `block`: the whole block (attention then MLP);
- `whole model`: the complete forward pass.

Columns: milliseconds per call (median of `--repeats`), the fused /
single ratio, the multiply-add ratio of that stage (the ratio the time
would have if the stage were compute-bound) and, under JAX, the number of
top-level operations in the compiled program (fusions, matmuls and
custom calls, one kernel launch each on a GPU: a launch-bound stage costs
what its count says, not its multiply-adds). `block x layers` is the
block time times the number of blocks: set against `whole model`, it
shows what the stages alone explain. `--attention` repeats the fused
rows for each of `HydraAttention`'s implementations.

On a CPU the script runs as well (the `tiny` size in seconds), which is
how it is tested; the question it answers is a GPU's.
"""

import argparse
import os
import re

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from timing import compiled_call  # noqa: E402 (same folder)
from timing import median_ms  # noqa: E402

import ensemble_zoo as ez  # noqa: E402

SIZES = {
    "b16": dict(
        image_shape=(224, 224, 3),
        patch_size=16,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        mlp_dim=3072,
    ),
    "tiny": dict(
        image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=6, hidden_dim=48, mlp_dim=96
    ),
}
MEMBERS = 3
CLASSES = 1000


def models(size, attention):
    """The single keras-hub ViT and Hydra 3 x (2/3 of the heads) built
    from it, every member keeping a different random two thirds."""
    keras.utils.set_random_seed(0)
    single = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**size), num_classes=CLASSES, preprocessor=None
    )
    heads, layers = size["num_heads"], size["num_layers"]
    rng = np.random.default_rng(0)
    masks = np.zeros((MEMBERS, layers, heads), bool)
    for m in range(MEMBERS):
        for layer in range(layers):
            masks[m, layer, rng.choice(heads, 2 * heads // 3, replace=False)] = True
    fused = ez.models.HydraImageClassifier.from_keras_hub(single, masks)
    if attention != "auto":
        config = fused.get_config()
        config["backbone"]["config"]["attention_implementation"] = attention
        rebuilt = ez.models.HydraImageClassifier.from_config(config)
        rebuilt.set_weights(fused.get_weights())
        fused = rebuilt
    return single, fused


def stage_models(single, fused, size, batch):
    """`{stage: (single model, fused model)}`, functional models over one
    block's layers (the first block; every block has the same shapes)."""
    tokens = (size["image_shape"][0] // size["patch_size"]) ** 2 + 1
    dim = size["hidden_dim"]
    block = single.backbone.get_layer("vit_encoder").encoder_layers[0]
    hydra = fused.backbone.encoder_blocks[0]

    def functional(shape, fn):
        # A static batch: the merged MLP reshapes with the traced shape.
        x = keras.Input(shape=shape, batch_size=batch)
        return keras.Model(x, fn(x))

    def single_attention(x):
        y = block.layer_norm_1(x)
        return x + block.mha(y, y)

    def single_mlp(x):
        return x + block.mlp(block.layer_norm_2(x))

    def fused_attention(x):
        return x + hydra._attend(hydra.ln_1(x), None, False)

    def fused_mlp(x):
        return x + hydra._mlp(hydra.ln_2(x), False)

    image = tuple(size["image_shape"])
    one, all_ = (tokens, dim), (MEMBERS, tokens, dim)
    return {
        "embedding": (
            functional(image, single.backbone.get_layer("vit_patching_and_embedding")),
            functional(image, fused.backbone.embedding),
        ),
        "attention": (functional(one, single_attention), functional(all_, fused_attention)),
        "mlp": (functional(one, single_mlp), functional(all_, fused_mlp)),
        "block": (functional(one, block), functional(all_, hydra)),
        "whole model": (single, fused),
    }


def stage_inputs(stage, batch, size, rng):
    tokens = (size["image_shape"][0] // size["patch_size"]) ** 2 + 1
    dim = size["hidden_dim"]
    if stage in ("embedding", "whole model"):
        x = rng.uniform(size=(batch,) + tuple(size["image_shape"]))
        return x.astype("float32"), x.astype("float32")
    x = rng.normal(size=(batch, tokens, dim)).astype("float32")
    return x, np.repeat(x[:, None], MEMBERS, axis=1)


def multiply_adds(stage, size, kept, batch):
    """Multiply-adds of one stage for `heads` heads per stream and
    `streams` streams (1 for the single model)."""
    tokens = (size["image_shape"][0] // size["patch_size"]) ** 2 + 1
    dim, mlp, heads = size["hidden_dim"], size["mlp_dim"], size["num_heads"]
    key = dim // heads
    patch = size["patch_size"] ** 2 * size["image_shape"][2]
    embedding = (tokens - 1) * patch * dim
    attention = sum(4 * tokens * dim * h * key + 2 * tokens * tokens * h * key for h in kept)
    mlp_cost = len(kept) * 2 * tokens * dim * mlp
    per_stage = {
        "embedding": embedding,
        "attention": attention,
        "mlp": mlp_cost,
        "block": attention + mlp_cost,
        "whole model": embedding
        + size["num_layers"] * (attention + mlp_cost)
        + len(kept) * dim * CLASSES,
    }
    return batch * per_stage[stage]


KERNEL = re.compile(r"^\s*\S+ = \S+ (fusion|custom-call|dot|convolution|copy|transpose)\(")


def kernel_count(call, x):
    """Top-level kernels of the compiled program under JAX, else `None`."""
    if not hasattr(call, "compiled"):
        return None
    text = call.compiled(x).as_text()
    entry = text[text.index("ENTRY") :]
    entry = entry[: entry.index("\n}")]
    return sum(bool(KERNEL.match(line)) for line in entry.splitlines())


def profile(size_name, batch, repeats, attention):
    size = SIZES[size_name]
    single, fused = models(size, attention)
    heads = size["num_heads"]
    kept = 2 * heads // 3
    rng = np.random.default_rng(0)
    rows = []
    for stage, (s, f) in stage_models(single, fused, size, batch).items():
        xs, xf = stage_inputs(stage, batch, size, rng)
        cs, cf = compiled_call(s), compiled_call(f)
        ts, tf_ = median_ms([cs], xs, repeats), median_ms([cf], xf, repeats)
        embedding = stage == "embedding"
        macs = multiply_adds(stage, size, [kept] * (1 if embedding else MEMBERS), batch)
        rows.append(
            dict(
                stage=stage,
                single_ms=ts,
                fused_ms=tf_,
                ratio=tf_ / ts,
                mac_ratio=macs / multiply_adds(stage, size, [heads], batch),
                single_kernels=kernel_count(cs, xs),
                fused_kernels=kernel_count(cf, xf),
            )
        )
    block = next(r for r in rows if r["stage"] == "block")
    rows.insert(
        -1,
        dict(
            stage="block x layers",
            single_ms=block["single_ms"] * size["num_layers"],
            fused_ms=block["fused_ms"] * size["num_layers"],
            ratio=block["ratio"],
            mac_ratio=block["mac_ratio"],
            single_kernels=None,
            fused_kernels=None,
        ),
    )
    return rows


def print_rows(rows, attention):
    header = (
        f"{'stage':<15} {'single ms':>9} {'fused ms':>9} {'fused/single':>12} "
        f"{'MAC ratio':>9} {'kernels':>11}"
    )
    print(f"fused attention: {attention}\n{header}\n{'-' * len(header)}")
    for r in rows:
        kernels = (
            f"{r['single_kernels']}/{r['fused_kernels']}" if r["single_kernels"] is not None else ""
        )
        print(
            f"{r['stage']:<15} {r['single_ms']:9.3f} {r['fused_ms']:9.3f} "
            f"{r['ratio']:12.2f} {r['mac_ratio']:9.2f} {kernels:>11}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="b16")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--attention", nargs="+", default=["auto"], choices=["auto", "einsum", "fused"]
    )
    args = parser.parse_args(argv)
    keras.config.set_dtype_policy(args.dtype)
    print(
        f"backend {keras.config.backend()}, {args.dtype}, ViT-{args.size}, batch "
        f"{args.batch}, Hydra {MEMBERS} members x 2/3 of the heads, median of "
        f"{args.repeats}"
    )
    for attention in args.attention:
        print_rows(profile(args.size, args.batch, args.repeats, attention), attention)


if __name__ == "__main__":
    main()
