"""Every method benchmark in one run, on whatever device the backend sees.

    KERAS_BACKEND=jax python benchmarks/run_all.py [--quick]
        [--dtype float32|bfloat16] [--batch-size 4] [--repeats 5]
        [--only hydra lora moe sparse_moe baselines metrics] [--json PATH]
    KERAS_BACKEND=torch python benchmarks/run_all.py --torch-compile

One table, every ratio measured within this run, on one device (named in
the first line). The models are ViT-B/16 sized (224 px, 12 blocks, 12
heads, width 768, MLP 3072, 1000 classes) with random weights, at
`--batch-size` images (the papers' inference setting is batch 4);
`--quick` uses a tiny ViT (16 px, 2 blocks, width 32) and two repeats, a
smoke run of seconds that the test suite executes. `--dtype bfloat16`
builds every model under the `mixed_bfloat16` policy (float32 weights,
bfloat16 compute; routing, softmaxes of the member combination and losses
stay float32).

Sections (each row's ratio is against the first row of its section):

- `hydra`: the single ViT; Hydra 3x8 (3 members, each keeping 8 of the 12
  heads of every block, random masks) run as its 3 pruned members one after
  another; and fused. Goals on a GPU in bf16: fused <= 1.15x single, <=
  0.45x separate.
- `lora`: the single ViT; the explicit ensemble of 16 (its time is 16
  forward passes or train steps of the single model, its peak memory the
  single model's, as the members run one after another); LoRA-Ensemble
  (16 members, rank 8, one pass over the tiled batch). Goals: inference
  <= 0.33x, train step <= 0.5x the explicit ensemble.
- `moe`: the dense ViT; V-MoE K=1 (32 experts in the last two odd blocks,
  inference capacity factor 8); two V-MoE K=1 one after another; E³ (K=1,
  M=2) with the one-hot (einsum) and the index dispatcher. Goal: E³ <=
  0.75x the two V-MoEs.
- `sparse_moe`: one V-MoE layer of ViT-B/16 (32 experts, K=2, a routing
  group of 8 images = 1576 tokens, capacity factor 1.0) with the one-hot
  and the index dispatcher, against a dense MLP of the same active
  multiply-adds; then (`dispatch`) the same layer with experts of width 8
  at capacity factor 8 (the E³ paper's inference), which leaves the memory
  of routing, dispatch, expert buffers and combine. Goal: index dispatch
  peak memory <= 0.25x one-hot.
- `baselines`: the papers' efficient-ensemble baselines with M = 3 (paper
  001's setting) against the single ViT and an explicit ensemble of 3
  (three forward passes or train steps of the single model): BatchEnsemble
  (every projection), Packed-Ensembles (alpha = 2, gamma = 1; `--quick`:
  alpha = 3, whole heads on its 4-head ViT; trained from scratch, so built
  rather than converted), MIMO and Masksembles (scale 2),
  each one pass over all members.
- `metrics`: ECE and OOD AUROC on 10^6 samples (10^4 with `--quick`)
  against scikit-learn-based references; the largest difference is printed.

Columns: forward ms (median of `--repeats` compiled calls: XLA under JAX
and TensorFlow, eager under PyTorch unless `--torch-compile`, which
compiles every forward and train step with `torch.compile` and prints,
after each section, how many graphs dynamo compiled and how many graph
breaks it met: one graph per model and step function is the goal), its
ratio, peak forward memory (MiB
beyond weights and inputs; see `timing.peak_memory_mb`: JAX reports it on
every device, PyTorch and TensorFlow only on GPUs), one optimizer step
(`train_on_batch`, AdamW) in ms and its ratio, and the peak memory of a
forward and backward pass.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

import ensemble_zoo as ez  # noqa: E402
import timing  # noqa: E402 (same folder)
from timing import compiled_call  # noqa: E402
from timing import device_name  # noqa: E402
from timing import interleaved_ms  # noqa: E402
from timing import peak_memory_mb  # noqa: E402
from timing import train_step  # noqa: E402

SIZES = {
    "full": dict(
        vit=dict(
            image_shape=(224, 224, 3), patch_size=16, num_layers=12,
            num_heads=12, hidden_dim=768, mlp_dim=3072,
        ),
        classes=1000, kept_heads=8, experts=32, lora_members=16, rank=8,
        packed_alpha=2, metric_samples=1_000_000,
    ),
    "quick": dict(
        vit=dict(
            image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=4,
            hidden_dim=32, mlp_dim=64,
        ),
        classes=10, kept_heads=3, experts=4, lora_members=4, rank=2,
        packed_alpha=3, metric_samples=10_000,
    ),
}


def jit_compile():
    return keras.config.backend() != "torch" or timing.TORCH_COMPILE["enabled"]


def single_vit(size, seed=0):
    keras.utils.set_random_seed(seed)
    return keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**size["vit"]),
        num_classes=size["classes"],
        preprocessor=None,
    )


def compile_for_training(model):
    loss = None
    if not isinstance(model, ez.models.EnsembleClassifier):
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-5), loss=loss, jit_compile=jit_compile()
    )
    return model


class Section:
    """Rows of one method: each variant is a list of models run one after
    another (their times add up, their peak memory is the largest)."""

    def __init__(self, name, variants, scale=None, train=(), train_memory=None):
        self.name = name
        self.variants = variants
        self.scale = scale or {}  # variant -> how many times its models run
        self.train = train  # variants whose train step is timed
        # Variants whose forward + backward memory is measured.
        self.train_memory = train if train_memory is None else train_memory

    def run(self, x, y, repeats):
        calls = {
            v: [compiled_call(m) for m in models] for v, models in self.variants.items()
        }
        forward = interleaved_ms(calls, x, repeats)
        steps = {
            v: [train_step(compile_for_training(m)) for m in self.variants[v]]
            for v in self.train
        }
        trained = interleaved_ms(steps, x, repeats, y) if steps else {}
        rows = []
        for v, models in self.variants.items():
            k = self.scale.get(v, 1)
            memory = [peak_memory_mb(m, x, call=c) for m, c in zip(models, calls[v])]
            train_memory = (
                [peak_memory_mb(m, x, train=True) for m in models]
                if v in self.train_memory else []
            )
            rows.append(
                {
                    "section": self.name,
                    "variant": v,
                    "forward_ms": k * forward[v],
                    "forward_peak_mib": _largest(memory),
                    "train_ms": k * trained[v] if v in trained else None,
                    "train_peak_mib": _largest(train_memory),
                }
            )
        base = rows[0]
        for row in rows:
            row["forward_ratio"] = row["forward_ms"] / base["forward_ms"]
            row["train_ratio"] = (
                row["train_ms"] / base["train_ms"]
                if row["train_ms"] is not None and base["train_ms"] is not None
                else None
            )
        return rows


def _largest(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def hydra_section(size):
    single = single_vit(size)
    heads, layers = size["vit"]["num_heads"], size["vit"]["num_layers"]
    rng = np.random.default_rng(0)
    masks = np.zeros((3, layers, heads), bool)
    for m in range(3):
        for layer in range(layers):
            masks[m, layer, rng.choice(heads, size["kept_heads"], replace=False)] = True
    fused = ez.models.HydraImageClassifier.from_keras_hub(single, masks)
    return Section(
        "hydra",
        {"single": [single], "3 members separately": fused.split_members(), "fused": [fused]},
        train=("single", "fused"),
    )


def lora_section(size):
    single = single_vit(size)
    members = size["lora_members"]
    lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        single, num_members=members, rank=size["rank"], reuse_head=False,
        num_classes=size["classes"], seed=0,
    )
    explicit = f"explicit ensemble of {members}"
    return Section(
        "lora",
        {"single": [single], explicit: [single], f"LoRA-Ensemble {members}": [lora]},
        scale={explicit: members},
        train=("single", explicit, f"LoRA-Ensemble {members}"),
    )


def baselines_section(size):
    single = single_vit(size)
    kwargs = dict(num_members=3, reuse_head=False, num_classes=size["classes"])
    variants = {
        "single": [single],
        "explicit ensemble of 3": [single],
        "BatchEnsemble 3": [
            ez.models.BatchEnsembleImageClassifier.from_keras_hub(single, seed=0, **kwargs)
        ],
        f"Packed-Ensembles 3 (alpha {size['packed_alpha']})": [
            ez.models.PackedEnsembleImageClassifier.like_keras_hub(
                single, num_members=3, alpha=size["packed_alpha"], gamma=1
            )
        ],
        "MIMO 3": [ez.models.MIMOImageClassifier.from_keras_hub(single, **kwargs)],
        "Masksembles 3": [
            ez.models.MasksemblesImageClassifier.from_keras_hub(single, scale=2.0, seed=0, **kwargs)
        ],
    }
    return Section(
        "baselines", variants, scale={"explicit ensemble of 3": 3}, train=tuple(variants)
    )


def moe_section(size):
    dense = single_vit(size)
    layers = size["vit"]["num_layers"]
    kwargs = dict(
        num_experts=size["experts"], num_selected_experts=1,
        moe_layers=list(ez.models.vit_moe.last_n_moe_layers(layers, min(2, layers // 2))),
        eval_capacity_factor=8.0,
    )
    upcycle = ez.models.ViTMoEImageClassifier.from_keras_hub
    vmoe_a = upcycle(dense, seed=0, expert_noise=0.1, **kwargs)
    vmoe_b = upcycle(dense, seed=1, expert_noise=0.1, **kwargs)
    e3 = {
        d: ez.models.ViTMoEImageClassifier.from_vmoe(
            vmoe_a, ensemble_size=2, num_selected_experts=1, dispatcher=d
        )
        for d in ("einsum", "indices")
    }
    return Section(
        "moe",
        {
            "dense ViT": [dense],
            "V-MoE K=1": [vmoe_a],
            "2 x V-MoE K=1": [vmoe_a, vmoe_b],
            "E³ K=1 M=2 (one-hot)": [e3["einsum"]],
            "E³ K=1 M=2 (indices)": [e3["indices"]],
        },
        train=("dense ViT", "V-MoE K=1", "E³ K=1 M=2 (one-hot)", "E³ K=1 M=2 (indices)"),
    )


def sparse_moe_sections(size):
    """The V-MoE layer against a dense MLP, and its dispatch path alone."""
    vit = size["vit"]
    tokens = (vit["image_shape"][0] // vit["patch_size"]) ** 2 + 1
    width, mlp_dim, images, top_k = vit["hidden_dim"], vit["mlp_dim"], 8, 2

    def sequential(*layers):
        return keras.Sequential([keras.Input((tokens, width))] + list(layers))

    def moe(dispatcher, mlp_dim, capacity_factor):
        return sequential(
            ez.layers.SparseMoE(
                num_experts=size["experts"], mlp_dim=mlp_dim, top_k=top_k,
                group_size=images * tokens, capacity_factor=capacity_factor,
                seed=0, dispatcher=dispatcher,
            )
        )

    keras.utils.set_random_seed(1)
    layer = Section(
        "sparse_moe",
        {
            # A dense MLP with the active multiply-adds of K experts.
            "dense MLP (K x width)": [
                sequential(
                    keras.layers.Dense(top_k * mlp_dim, activation="gelu"),
                    keras.layers.Dense(width),
                )
            ],
            "SparseMoE (one-hot)": [moe("einsum", mlp_dim, 1.0)],
            "SparseMoE (indices)": [moe("indices", mlp_dim, 1.0)],
        },
        train_memory=("dense MLP (K x width)", "SparseMoE (one-hot)", "SparseMoE (indices)"),
    )
    # Experts of width 8 leave the memory of routing, dispatch, expert
    # buffers and combine; capacity factor 8 is the E³ paper's inference.
    dispatch = Section(
        "dispatch",
        {"one-hot, C x8": [moe("einsum", 8, 8.0)], "indices, C x8": [moe("indices", 8, 8.0)]},
        train_memory=("one-hot, C x8", "indices, C x8"),
    )
    return (layer, dispatch), (images, tokens, width)


def metrics_rows(size, repeats):
    from sklearn.metrics import roc_auc_score

    n, classes = size["metric_samples"], 10
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n, classes)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = rng.integers(0, classes, size=n)
    id_scores, ood_scores = rng.normal(size=n // 2), rng.normal(0.5, size=n // 2)

    def reference_ece():
        confidence, correct = probs.max(-1), probs.argmax(-1) == labels
        bins = np.minimum((confidence * 15).astype(int), 14)
        gaps = [
            abs(correct[bins == b].mean() - confidence[bins == b].mean()) * np.mean(bins == b)
            for b in range(15) if np.any(bins == b)
        ]
        return float(np.sum(gaps))

    def reference_auroc():
        y = np.r_[np.zeros(n // 2), np.ones(n // 2)]
        return float(roc_auc_score(y, np.r_[id_scores, ood_scores]))

    pairs = {
        "ECE (15 bins)": (
            lambda: ez.metrics.expected_calibration_error(probs, labels), reference_ece
        ),
        "OOD AUROC": (lambda: ez.metrics.ood_auroc(id_scores, ood_scores), reference_auroc),
    }
    rows = []
    for name, (ours, reference) in pairs.items():
        ms = interleaved_ms({"ours": [lambda _: ours()], "ref": [lambda _: reference()]}, None, repeats)
        diff = abs(float(ours()) - reference())
        for variant, key in (("scikit-learn / NumPy", "ref"), ("ensemble_zoo", "ours")):
            rows.append(
                {
                    "section": "metrics", "variant": f"{name}: {variant}",
                    "forward_ms": ms[key], "forward_ratio": ms[key] / ms["ref"],
                    "forward_peak_mib": None, "train_ms": None, "train_ratio": None,
                    "train_peak_mib": None, "max_abs_difference": diff,
                }
            )
    return rows


def _cell(value, fmt):
    width = int(fmt.split(".")[0])
    return f"{'-':>{width}}" if value is None else format(value, fmt)


def print_table(rows):
    header = (
        f"{'section':<10} {'variant':<34} {'fwd ms':>9} {'ratio':>6} {'fwd MiB':>9} "
        f"{'train ms':>9} {'ratio':>6} {'train MiB':>9}"
    )
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['section']:<10} {r['variant']:<34} {_cell(r['forward_ms'], '9.2f')} "
            f"{_cell(r['forward_ratio'], '6.2f')} {_cell(r['forward_peak_mib'], '9.1f')} "
            f"{_cell(r['train_ms'], '9.2f')} {_cell(r['train_ratio'], '6.2f')} "
            f"{_cell(r['train_peak_mib'], '9.1f')}"
        )


SECTIONS = ("hydra", "lora", "moe", "sparse_moe", "baselines", "metrics")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument(
        "--torch-compile", action="store_true",
        help="PyTorch: torch.compile every forward and train step",
    )
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be >= 1")
    if args.torch_compile and keras.config.backend() != "torch":
        parser.error("--torch-compile needs KERAS_BACKEND=torch")
    timing.TORCH_COMPILE["enabled"] = args.torch_compile
    size = SIZES["quick" if args.quick else "full"]
    repeats = args.repeats or (2 if args.quick else 5)
    if args.dtype == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    device = device_name()
    print(
        f"device: {device}; backend {keras.config.backend()}; dtype {args.dtype}; "
        f"{'quick (tiny ViT)' if args.quick else 'ViT-B/16'}; batch {args.batch_size}; "
        f"median of {repeats}{'; torch.compile' if args.torch_compile else ''}"
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(args.batch_size,) + size["vit"]["image_shape"]).astype("float32")
    y = (np.arange(args.batch_size) % size["classes"]).astype("int32")
    builders = {
        "hydra": hydra_section, "lora": lora_section, "moe": moe_section,
        "baselines": baselines_section,
    }
    rows = []
    compiles = {}
    for name in args.only:
        start = time.perf_counter()
        before = len(rows)
        if args.torch_compile:
            graphs, breaks = timing.torch_compile_counts()
        if name in builders:
            rows += builders[name](size).run(x, y, repeats)
        elif name == "sparse_moe":
            sections, (images, tokens, width) = sparse_moe_sections(size)
            tokens_in = rng.normal(size=(images, tokens, width)).astype("float32")
            for section in sections:
                rows += section.run(tokens_in, None, repeats)
        else:
            rows += metrics_rows(size, repeats)
        note = ""
        if args.torch_compile:
            graphs_now, breaks_now = timing.torch_compile_counts()
            compiles[name] = {"graphs": graphs_now - graphs, "graph_breaks": breaks_now - breaks}
            note = (
                f"; torch.compile: {compiles[name]['graphs']} graphs for "
                f"{len(rows) - before} rows, {compiles[name]['graph_breaks']} graph breaks"
            )
        print(f"[{name}: {time.perf_counter() - start:.0f} s{note}]", flush=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "device": device, "backend": keras.config.backend(),
                    "dtype": args.dtype, "quick": args.quick,
                    "batch_size": args.batch_size, "repeats": repeats,
                    "torch_compile": compiles if args.torch_compile else None,
                    "rows": rows,
                },
                f, indent=1,
            )
    return rows


if __name__ == "__main__":
    main()
