"""E³ vs. an ensemble of two V-MoE vs. V-MoE vs. the dense ViT, and
`SparseMoE` throughput against a dense MLP.

    KERAS_BACKEND=jax python benchmarks/moe.py [--image-size 224]
        [--patch-size 32] [--layers 8] [--width 512] [--heads 8]
        [--experts 32] [--batch-size 16] [--repeats 3]
        [--eval-capacity-factor 8] [--moe-capacity-factor 1.0]

Models share width and depth: a ViT-S/32-like encoder (the S/32 of the E³
paper, "Sparse MoEs meet Efficient Ensembles": width 512, MLP 2048, 8
blocks, 8 heads) with random weights and 1000 classes; the V-MoE models
upcycle it (`from_keras_hub`) with E experts in the last two odd blocks (5
and 7 of 8), and E³ (K=1, M=2) is `from_vmoe` of the first V-MoE K=1. The
two-model ensemble is two V-MoE K=1 (different routers) run one after the
other; its time is the sum. For each model it prints analytic multiply-adds
per image (`vit_moe_flops`), the expert capacity C and the median wall time
of one forward pass at batch 1 (`5 * --repeats` runs) and `--batch-size`
(`--repeats` runs), every model compiled the backend's best way (XLA under
JAX and TensorFlow, eager under PyTorch) and warmed up twice; within each
repeat the models run in turn, so load changes on a shared machine hit them
alike.

Capacity: the models run at inference with `--eval-capacity-factor`
(default 8, the paper's) and route each image's tokens as one group, so
`C = min(ceil(f K S / (E/M)), S)` with S tokens per image (the router caps C
at the group size). The counter is given `group_size=S`, no rounding and
the factor that reproduces the router's C, so it counts the buffers the
models compute. "GMACs einsum" counts the one-hot dispatch/combine einsums
that our `SparseMoE` runs; "GMACs indices" leaves them out (gather/scatter,
the paper's Table 20 convention). At f = 8 the buffers are 8x oversized, so
E³, whose M=2 copies of the last blocks each get 2x the slots per expert,
costs 0.83x the two-model ensemble in multiply-adds; at f <= 2 about 0.7x.

Exactness: E³ member m must equal a V-MoE built from its partition alone
(router columns and experts `[m E/M, (m+1) E/M)`, the same shared weights);
the max |logit difference| over both members is printed.

`SparseMoE` throughput: one layer (E experts, K=1, `--moe-capacity-factor`,
one routing group per example) against `Dense(F K, gelu) + Dense(D)`, the
same active multiply-adds, on `(batch, S, D)` tokens, compiled, median of
`5 * --repeats` runs; the analytic multiply-add ratio (capacity slots,
einsums and router against the dense MLP) is printed alongside.

Goals: E³ wall time <= 0.75x the two-model ensemble; SparseMoE tokens per
second >= 0.5x the dense MLP's.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from timing import compiled_call  # noqa: E402 (same folder)
from timing import interleaved_ms  # noqa: E402

from ensemble_zoo.layers.moe.sparse_moe import SparseMoE  # noqa: E402
from ensemble_zoo.models.vit_moe import ViTMoEImageClassifier  # noqa: E402
from ensemble_zoo.models.vit_moe import last_n_moe_layers  # noqa: E402
from ensemble_zoo.models.vit_moe import vit_moe_flops  # noqa: E402

NUM_CLASSES = 1000


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def counted_macs(model, config, tokens, dispatcher):
    """`vit_moe_flops` multiply-adds per image of `model` (None: dense ViT),
    with the capacity its routers use at inference."""
    kwargs = dict(
        image_size=config["image_shape"][:2],
        patch_size=config["patch_size"],
        hidden_dim=config["hidden_dim"],
        num_layers=config["num_layers"],
        mlp_dim=config["mlp_dim"],
        num_classes=NUM_CLASSES,
    )
    if model is not None:
        backbone = model.backbone
        router = backbone.moe_blocks[0].moe.router
        capacity = router.capacity(tokens, training=False)
        kwargs.update(
            moe_layers=tuple(backbone.moe_layers),
            num_experts=backbone.num_experts,
            num_selected_experts=backbone.num_selected_experts,
            ensemble_size=backbone.ensemble_size,
            # ceil(f K S / (E/M)) = ceil(C - 0.5) = C: the router's capacity.
            capacity_factor=(capacity - 0.5) * router.experts_per_member / (router.top_k * tokens),
            group_size=tokens,
            capacity_multiple_of=1,
            dispatcher=dispatcher,
        )
    return vit_moe_flops(**kwargs)["total"]


def perturb_experts(model, seed=0):
    """Makes the upcycled (identical) experts differ, so routing matters."""
    rng = np.random.default_rng(seed)
    for block in model.backbone.moe_blocks:
        kernel = block.moe.dense_1.kernel
        value = to_numpy(kernel)
        kernel.assign(value + 0.02 * rng.standard_normal(value.shape).astype("float32"))


def member_as_vmoe(e3, dense, member):
    """A V-MoE with only E³ member `member`'s router columns and experts."""
    backbone = e3.backbone
    per_member = backbone.num_experts // backbone.ensemble_size
    part = ViTMoEImageClassifier.from_keras_hub(
        dense,
        num_experts=per_member,
        num_selected_experts=1,
        moe_layers=backbone.moe_layers,
        eval_capacity_factor=backbone.eval_capacity_factor,
    )
    rows = slice(member * per_member, (member + 1) * per_member)
    for source, target in zip(backbone.moe_blocks, part.backbone.moe_blocks):
        target.moe.router.kernel.assign(to_numpy(source.moe.router.kernel)[:, rows])
        for name in ("dense_1", "dense_2"):
            for variable in ("kernel", "bias"):
                value = to_numpy(getattr(getattr(source.moe, name), variable))
                getattr(getattr(target.moe, name), variable).assign(value[rows])
    return part


def moe_throughput(args, tokens, width, mlp_dim, batch):
    """Tokens per second of a SparseMoE layer and of the dense MLP with
    the same active multiply-adds, and their analytic MAC ratio."""
    keras.utils.set_random_seed(1)
    moe = SparseMoE(
        num_experts=args.experts, mlp_dim=mlp_dim, top_k=1, capacity_factor=args.moe_capacity_factor
    )
    layers = {
        "SparseMoE": [moe],
        "dense MLP": [keras.layers.Dense(mlp_dim, activation="gelu"), keras.layers.Dense(width)],
    }
    x = np.random.default_rng(1).standard_normal((batch, tokens, width)).astype("float32")
    groups = {
        name: [compiled_call(keras.Sequential([keras.Input((tokens, width))] + stack))]
        for name, stack in layers.items()
    }
    ms = interleaved_ms(groups, x, 5 * args.repeats)
    rates = {name: batch * tokens / (t / 1000.0) for name, t in ms.items()}
    capacity = moe.router.capacity(tokens, training=False)
    slots = args.experts * capacity  # per group (one example)
    # Experts on every slot, dispatch and combine einsums, router.
    moe_macs = (
        slots * 2 * width * mlp_dim + 2 * tokens * slots * width + tokens * width * args.experts
    )
    return rates, capacity, moe_macs / (tokens * 2 * width * mlp_dim)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--patch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-capacity-factor", type=float, default=8.0)
    parser.add_argument("--moe-capacity-factor", type=float, default=1.0)
    args = parser.parse_args()
    config = dict(
        image_shape=(args.image_size, args.image_size, 3),
        patch_size=args.patch_size,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.width,
        mlp_dim=4 * args.width,
    )
    tokens = (args.image_size // args.patch_size) ** 2 + 1
    moe_layers = list(last_n_moe_layers(args.layers, 2))
    e = args.experts
    print(
        f"backend {keras.config.backend()}, {args.image_size}px/{args.patch_size} "
        f"({tokens} tokens), {args.layers} blocks, width {args.width}, MLP "
        f"{4 * args.width}, MoE blocks {moe_layers}, E={e}, eval capacity factor "
        f"{args.eval_capacity_factor:g}, median of {args.repeats} runs (batch 1: "
        f"{5 * args.repeats}), ms per forward pass"
    )

    keras.utils.set_random_seed(0)
    dense = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**config), num_classes=NUM_CLASSES, preprocessor=None
    )
    moe_kwargs = dict(moe_layers=moe_layers, eval_capacity_factor=args.eval_capacity_factor)
    upcycle = ViTMoEImageClassifier.from_keras_hub
    vmoe_a = upcycle(dense, num_experts=e, num_selected_experts=1, seed=0, **moe_kwargs)
    perturb_experts(vmoe_a)
    vmoe_b = upcycle(dense, num_experts=e, num_selected_experts=1, seed=1, **moe_kwargs)
    vmoe_k2 = upcycle(dense, num_experts=e, num_selected_experts=2, seed=2, **moe_kwargs)
    e3 = ViTMoEImageClassifier.from_vmoe(vmoe_a, ensemble_size=2, num_selected_experts=1)

    # Exactness: each E³ member is the V-MoE of its own expert partition.
    x = np.random.default_rng(0).uniform(size=(2,) + config["image_shape"]).astype("float32")
    e3_logits = to_numpy(e3(x, training=False))
    diff = max(
        float(
            np.max(
                np.abs(
                    e3_logits[:, m]
                    - to_numpy(member_as_vmoe(e3, dense, m)(x, training=False))[:, 0]
                )
            )
        )
        for m in range(2)
    )

    models = {
        "dense ViT": (None, [dense]),
        "V-MoE K=1": (vmoe_a, [vmoe_a]),
        "V-MoE K=2": (vmoe_k2, [vmoe_k2]),
        "2 x V-MoE K=1": (vmoe_a, [vmoe_a, vmoe_b]),
        "E³ K=1 M=2": (e3, [e3]),
    }
    calls = {id(m): compiled_call(m) for _, ms in models.values() for m in ms}
    batches = sorted({1, args.batch_size})
    times = {}
    for b in batches:
        xb = np.random.default_rng(b).uniform(size=(b,) + config["image_shape"]).astype("float32")
        repeats = args.repeats if b > 1 else 5 * args.repeats  # batch 1 is cheap
        groups = {name: [calls[id(m)] for m in ms] for name, (_, ms) in models.items()}
        times.update({(name, b): ms for name, ms in interleaved_ms(groups, xb, repeats).items()})
    header = f"{'model':<14} {'GMACs einsum':>12} {'GMACs indices':>13} {'C':>4}" + "".join(
        f" {f'ms b={b}':>10}" for b in batches
    )
    print(header + "\n" + "-" * len(header))
    gmacs = {}
    for name, (model, members) in models.items():
        macs = [
            len(members) * counted_macs(model, config, tokens, d) / 1e9
            for d in ("einsum", "indices")
        ]
        gmacs[name] = macs[0]
        capacity = "-"
        if model is not None:
            capacity = model.backbone.moe_blocks[0].moe.router.capacity(tokens)
        print(
            f"{name:<14} {macs[0]:12.3f} {macs[1]:13.3f} {capacity:>4}"
            + "".join(f" {times[name, b]:10.2f}" for b in batches)
        )

    mac_ratio = gmacs["E³ K=1 M=2"] / gmacs["2 x V-MoE K=1"]
    print(f"E³ / 2 x V-MoE K=1 multiply-adds (einsum): {mac_ratio:.3f}")
    for b in batches:
        ratio = times["E³ K=1 M=2", b] / times["2 x V-MoE K=1", b]
        verdict = "met" if ratio <= 0.75 else "NOT met"
        print(f"E³ / 2 x V-MoE K=1 wall time, batch {b}: {ratio:.3f} (goal <= 0.75: {verdict})")
    print(f"max |E³ member logits - V-MoE on its experts|: {diff:.2e}")

    rates, capacity, moe_mac_ratio = moe_throughput(
        args, tokens, args.width, 4 * args.width, args.batch_size
    )
    ratio = rates["SparseMoE"] / rates["dense MLP"]
    print(
        f"SparseMoE (E={e}, K=1, capacity factor {args.moe_capacity_factor:g}, C={capacity}) "
        f"vs dense MLP ({4 * args.width}), batch {args.batch_size} x {tokens} tokens"
    )
    for name, rate in rates.items():
        print(f"{name:<10} {rate:12.0f} tokens/s")
    verdict = "met" if ratio >= 0.5 else "NOT met"
    print(
        f"SparseMoE / dense MLP throughput: {ratio:.3f} (goal >= 0.5: {verdict}); "
        f"analytic multiply-adds ratio {moe_mac_ratio:.3f}"
    )


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - start:.0f} s")
