"""Every method benchmark in one run, on whatever device the backend sees.

    KERAS_BACKEND=jax python benchmarks/run_all.py [--quick]
        [--dtype float32|bfloat16] [--batch-size 4] [--repeats 5]
        [--only hydra lora moe sparse_moe baselines metrics decoding]
        [--json PATH]
        [--isolation section|run|none] [--memory-limit MIB]
        [--ignore-memory-check]
    KERAS_BACKEND=torch python benchmarks/run_all.py --torch-compile

One table, every ratio measured within this run, on one device (named in
the table's first line). The models are ViT-B/16 sized (224 px, 12 blocks,
12 heads, width 768, MLP 3072, 1000 classes) with random weights, at
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
  0.75x the two V-MoEs. Then the three routers at the dense ViT's active
  multiply-adds (the experts process as many slots as there are tokens):
  top-K V-MoE K=1 at capacity factor 1, Experts Choice at capacity factor
  1, Soft MoE with round(tokens / experts) slots per expert.
- `sparse_moe`: one V-MoE layer of ViT-B/16 (32 experts, K=2, a routing
  group of 8 images = 1576 tokens, capacity factor 1.0) with the one-hot
  and the index dispatcher, against a dense MLP of the same active
  multiply-adds; then (`dispatch`) the same layer with experts of width 8
  at capacity factor 8 (the E³ paper's inference), which leaves the memory
  of routing, dispatch, expert buffers and combine. Goal: index dispatch
  peak memory <= 0.25x one-hot.
- `baselines`: the papers' efficient-ensemble baselines with M = 3 (the
  setting of the Hydra paper, "Ensembling Pruned Attention Heads for
  Uncertainty-Aware Efficient Transformers") against the single ViT and an
  explicit ensemble of 3 (three forward passes or train steps of the single
  model): BatchEnsemble (every projection), Packed-Ensembles (alpha = 2,
  gamma = 1; `--quick`: alpha = 3, whole heads on its 4-head ViT; trained
  from scratch, so built rather than converted), MIMO and Masksembles
  (scale 2), each one pass over all members.
- `metrics`: ECE and OOD AUROC on 10^6 samples (10^4 with `--quick`)
  against scikit-learn-based references; the largest difference is printed.
- `decoding`: a keras-hub Gemma with Gemma-2B's layer shapes (2 layers,
  vocabulary 16,384) generating 16 tokens after a 32-token prompt at batch
  1: the base model, LoRA-Ensembles of 1, 4 and 8 members (with their
  per-token uncertainty) and 4 and 8 separate models; prefill ms, decode
  ms per token, tokens per second and the weights plus KV cache held, in a
  table of its own (`benchmarks/llm_decoding.py`, which also runs alone
  and with `--full` takes all 18 layers and the 256k vocabulary for a
  GPU). Goal on a GPU in bf16 at batch 1 (full size): 8 members decode at
  <= 1.3x the base model's time per token.

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

Memory of the machine (host RAM). Every section runs in a process of its
own (`--isolation section`, the default), so that what a section held is
returned before the next starts; this process imports no backend and only
collects the rows. `--quick` runs all sections in one process (`run`:
each process start costs seconds, more than the tiny sections), `none`
runs them in this process. Once a section's models are built, before
anything is compiled, a line says how much memory its process will need
at its peak, the sum of:

    held      what the process holds once the models are built (measured):
              the runtime (Python, the backend, keras-hub and TensorFlow),
              4 bytes per parameter (the variables stay float32 under
              mixed_bfloat16) and what building left beyond them
    AdamW     8 bytes per trainable parameter of every model whose train
              step is timed (AdamW's two moments), and 4 per trainable
              parameter of the largest of them (the gradients of the step
              that runs)
    activations  the largest single pass: for a train step, what the
              backward pass keeps of the ViT, 13 x width + 3 x MLP width +
              3 x heads x tokens numbers per token and block (the residual,
              normalized inputs, q, k, v, attention logits and
              probabilities, attention output, MLP hidden before and after
              GELU, and XLA's copies: fitted to XLA's memory analysis of the
              ViT-B/16 train step); for a forward pass, one block's
              temporaries; times batch x tokens x the ViTs one pass runs
              (LoRA-Ensemble: 16 members x 1.25 for its adapters' outputs;
              Hydra 3; BatchEnsemble 3 x 1.5 for its scaled projections;
              Masksembles 3; E³ M = 2; Packed-Ensembles alpha) x 4 bytes
              (float32) or 2 (bfloat16 compute)
    compiler  512 MiB for compiling and running the programs

It refuses a section (the others still run, and the exit status is 1)
whose estimate exceeds the memory its process can have, its own resident
memory plus MemAvailable of /proc/meminfo (or what the cgroup's limit
leaves, if less), or `--memory-limit` MiB, and says what would fit (a
smaller `--batch-size`, `--dtype bfloat16`, or none);
`--ignore-memory-check` runs it anyway, with a warning. After the section,
the measured peak resident memory of its process (`os.wait4`'s rusage) is
printed beside the estimate (with `--isolation run` or `none`, the
process's peak so far, earlier sections included); a section process
killed (by the kernel's out-of-memory killer, say) is reported, and the
other sections still run. TensorFlow's start-up lines are kept out of the
output: `TF_CPP_MIN_LOG_LEVEL=3` is set before any import (the section
processes inherit it; it also drops the "failed call to cuInit" error
TensorFlow logs on a machine without a GPU; its errors that matter
raise in Python too), and `ensemble_zoo`, imported first,
imports keras-hub, hence TensorFlow, through
`ensemble_zoo.utils.quiet_import`, which drops the lines TensorFlow writes
while it loads, before the variable takes effect.
"""

import argparse
import gc
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

# Before anything imports TensorFlow (keras-hub does, under every backend);
# section processes inherit both.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import resource
except ImportError:  # not on Windows: no rusage, no peak memory measured
    resource = None

# NumPy, the backend and the zoo are imported by `_import_backend`, in
# the processes that run sections only: the collecting process stays small
# and starts in a fraction of a second.
np = keras = keras_hub = ez = timing = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_decoding  # noqa: E402  (imports its backend on first use only)

MIB, GIB = 2**20, 2**30


def _import_backend():
    global np, keras, keras_hub, ez, timing
    if timing is not None:
        return
    import ensemble_zoo  # first: Keras and TensorFlow without their start-up lines

    # isort: split
    import keras as keras_module
    import keras_hub as keras_hub_module
    import numpy
    import timing as timing_module  # same folder

    # First: imports keras and keras-hub (hence TensorFlow) without
    # TensorFlow's C++ start-up lines.

    np, keras, keras_hub, ez, timing = (
        numpy,
        keras_module,
        keras_hub_module,
        ensemble_zoo,
        timing_module,
    )


# --- memory --------------------------------------------------------------


def _read(path):
    with open(path, encoding="ascii") as f:
        return f.read()


def available_memory():
    """Bytes the machine can still give a process: MemAvailable of
    /proc/meminfo, capped by the cgroup's limit less its usage (page cache
    it may reclaim excluded); `None` where neither can be read."""
    try:
        meminfo = dict(
            (line.split(":")[0], int(line.split()[1]) * 1024)
            for line in _read("/proc/meminfo").splitlines()
            if line.strip()
        )
        available = meminfo["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return None
    for limit, usage, stat, cache in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        (
            "memory/memory.limit_in_bytes",
            "memory/memory.usage_in_bytes",
            "memory/memory.stat",
            "total_inactive_file",
        ),
    ):
        try:
            limit = _read("/sys/fs/cgroup/" + limit).strip()
            usage = int(_read("/sys/fs/cgroup/" + usage))
        except (OSError, ValueError):
            continue
        try:
            stats = dict(line.split() for line in _read("/sys/fs/cgroup/" + stat).splitlines())
            usage -= int(stats.get(cache, 0))
        except (OSError, ValueError):
            pass
        if limit.isdigit() and int(limit) < 2**60:
            available = min(available, max(int(limit) - usage, 0))
        break
    return available


def resident_memory():
    """This process's resident memory now, in bytes."""
    try:
        return int(_read("/proc/self/statm").split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return peak_resident_memory()


def _maxrss_bytes(usage):
    # Linux reports KiB, macOS bytes.
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def peak_resident_memory():
    """This process's peak resident memory so far, in bytes (0 unknown)."""
    if resource is None:
        return 0
    return _maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF))


def fmt_bytes(n):
    if n is None:
        return "unknown"
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.{0 if abs(n) >= 10 * MIB else 1}f} MiB"


def vit_activations(size, copies):
    """`activation(variant, train, batch, nbytes)`: the bytes of the
    largest tensors one pass of the ViT-sized `variant` holds at once
    (see the module docstring); `copies[variant]` ViTs run in that pass."""
    vit = size["vit"]
    tokens = (vit["image_shape"][0] // vit["patch_size"]) ** 2 + 1
    d, mlp, heads, layers = vit["hidden_dim"], vit["mlp_dim"], vit["num_heads"], vit["num_layers"]

    def activation(variant, train, batch, nbytes):
        if train:  # kept for the backward pass, every block
            numbers = layers * (13 * d + 3 * mlp + 3 * heads * tokens)
        else:  # one block's temporaries at a time
            numbers = 5 * d + 2 * mlp + 2 * heads * tokens
        return copies.get(variant, 1) * batch * tokens * numbers * nbytes

    return activation


def sparse_moe_activations(tokens, width, top_k, num_experts, layers):
    """`activation(...)` of the sparse_moe sections' single layers:
    `layers[variant] = (mlp_dim, capacity_factor, dispatcher)` (dispatcher
    `None`: the dense MLP of K x mlp_dim); forward passes only."""

    def activation(variant, train, batch, nbytes):
        mlp, capacity_factor, dispatcher = layers[variant]
        if dispatcher is None:
            return tokens * (top_k * mlp + 2 * width) * nbytes
        capacity = min(math.ceil(capacity_factor * top_k * tokens / num_experts), tokens)
        slots = num_experts * capacity
        numbers = slots * (2 * width + mlp) + 2 * tokens * (num_experts + width)
        # The one-hot dispatcher's dispatch and combine tensors and mask.
        numbers += 3 * tokens * slots if dispatcher == "einsum" else 3 * tokens * top_k
        return numbers * nbytes

    return activation


#: What compiling and running the section's programs take beyond the
#: parts below (XLA's compiler, executables, allocator slack), measured on
#: the ViT-B/16 sections on CPU (0.3 to 0.9 GiB).
COMPILER_BYTES = 512 * MIB


def estimate_memory(sections, batch, dtype, runtime, built, extra=None):
    """The estimated peak resident memory of running `sections` (their
    models built) in a process that held `runtime` bytes before building
    them and holds `built` bytes now: a dict of the parts (bytes), their
    `total`, and `per_image`, the activations' bytes per image of the
    batch (0 where they do not grow with it)."""
    nbytes = 2 if dtype == "bfloat16" else 4
    models, trained = {}, {}
    activations, per_image, largest = 0, 0, None
    for section in sections:
        for variant, variant_models in section.variants.items():
            train = variant in section.train
            for m in variant_models:
                models[id(m)] = m
                if train:
                    trained[id(m)] = m
            if section.activation is None:
                continue
            bytes_ = section.activation(variant, train, batch, nbytes)
            if bytes_ > activations:
                activations = bytes_
                largest = f"{'train step' if train else 'forward'} of {variant}"
                one = section.activation(variant, train, 1, nbytes)
                grows = section.activation(variant, train, 2, nbytes) > one
                per_image = one if grows else 0
    params = {k: int(m.count_params()) for k, m in models.items()}
    trainable = {
        k: sum(int(np.prod(v.shape)) for v in m.trainable_weights) for k, m in trained.items()
    }
    weights = 4 * sum(params.values())
    parts = {
        "runtime": runtime,
        "weights": weights,
        # Measured: what building the models left beyond their weights.
        "building": max(built - runtime - weights, 0),
        # AdamW's two moments of every trained model's trainable weights
        # (LoRA-Ensemble's base weights are frozen), the gradients of the
        # largest (one step runs at a time).
        "adamw": 8 * sum(trainable.values()) + 4 * max(trainable.values(), default=0),
        "activations": activations,
        "compiler": COMPILER_BYTES if models else 0,
    }
    if extra:
        parts["activations"], largest, per_image = extra[0], extra[1], 0
    return dict(
        parts,
        total=sum(parts.values()),
        parameters=sum(params.values()),
        trained_models=len(trained),
        trainable_parameters=sum(trainable.values()),
        largest_pass=largest,
        per_image=per_image,
    )


def memory_budget(limit_mib):
    """(bytes this process may grow to, where the number comes from)."""
    available = available_memory()
    held = resident_memory()
    budget, source = None, None
    if available is not None:
        budget = held + available
        source = f"this process's {fmt_bytes(held)} + {fmt_bytes(available)} free to take"
    if limit_mib is not None and (budget is None or limit_mib * MIB < budget):
        budget, source = limit_mib * MIB, "--memory-limit"
    return budget, source


# --- sections ------------------------------------------------------------

SIZES = {
    "full": dict(
        vit=dict(
            image_shape=(224, 224, 3),
            patch_size=16,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            mlp_dim=3072,
        ),
        classes=1000,
        kept_heads=8,
        experts=32,
        lora_members=16,
        rank=8,
        packed_alpha=2,
        metric_samples=1_000_000,
    ),
    "quick": dict(
        vit=dict(
            image_shape=(16, 16, 3),
            patch_size=4,
            num_layers=2,
            num_heads=4,
            hidden_dim=32,
            mlp_dim=64,
        ),
        classes=10,
        kept_heads=3,
        experts=4,
        lora_members=4,
        rank=2,
        packed_alpha=3,
        metric_samples=10_000,
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
    model.compile(optimizer=keras.optimizers.AdamW(1e-5), loss=loss, jit_compile=jit_compile())
    return model


class Section:
    """Rows of one method: each variant is a list of models run one after
    another (their times add up, their peak memory is the largest)."""

    def __init__(self, name, variants, scale=None, train=(), train_memory=None, activation=None):
        self.name = name
        self.variants = variants
        # (variant, train, batch, bytes per number) -> bytes of its largest
        # pass, for the memory estimate (`vit_activations`).
        self.activation = activation
        self.scale = scale or {}  # variant -> how many times its models run
        self.train = train  # variants whose train step is timed
        # Variants whose forward + backward memory is measured.
        self.train_memory = train if train_memory is None else train_memory

    def run(self, x, y, repeats):
        calls = {
            v: [timing.compiled_call(m) for m in models] for v, models in self.variants.items()
        }
        forward = timing.interleaved_ms(calls, x, repeats)
        steps = {
            v: [timing.train_step(compile_for_training(m)) for m in self.variants[v]]
            for v in self.train
        }
        trained = timing.interleaved_ms(steps, x, repeats, y) if steps else {}
        rows = []
        for v, models in self.variants.items():
            k = self.scale.get(v, 1)
            memory = [timing.peak_memory_mb(m, x, call=c) for m, c in zip(models, calls[v])]
            train_memory = (
                [timing.peak_memory_mb(m, x, train=True) for m in models]
                if v in self.train_memory
                else []
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
        activation=vit_activations(size, {"fused": 3}),
    )


def lora_section(size):
    single = single_vit(size)
    members = size["lora_members"]
    lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        single,
        num_members=members,
        rank=size["rank"],
        reuse_head=False,
        num_classes=size["classes"],
        seed=0,
    )
    explicit = f"explicit ensemble of {members}"
    return Section(
        "lora",
        {"single": [single], explicit: [single], f"LoRA-Ensemble {members}": [lora]},
        scale={explicit: members},
        train=("single", explicit, f"LoRA-Ensemble {members}"),
        # Every member's rows, and the adapters' outputs on q, k, v and
        # the attention output (8 x width more per token and block).
        activation=vit_activations(size, {f"LoRA-Ensemble {members}": 1.25 * members}),
    )


def baselines_section(size):
    """The single ViT, an explicit ensemble of 3 and every method that
    registers a benchmark case (`ensemble_zoo.models.method_registry`)."""
    single = single_vit(size)
    variants = {"single": [single], "explicit ensemble of 3": [single]}
    copies = {}
    for method in ez.models.method_registry.registered_methods().values():
        case = method.benchmark
        if case is None:
            continue
        label = case.label.format(**size)
        variants[label] = [case.build(single, size)]
        copies[label] = (
            case.activation_copies(size)
            if callable(case.activation_copies)
            else case.activation_copies
        )
    return Section(
        "baselines",
        variants,
        scale={"explicit ensemble of 3": 3},
        train=tuple(variants),
        activation=vit_activations(size, copies),
    )


def moe_section(size):
    dense = single_vit(size)
    layers = size["vit"]["num_layers"]
    kwargs = dict(
        num_experts=size["experts"],
        num_selected_experts=1,
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
    # The routers at equal active multiply-adds: as many expert slots as
    # tokens per image (one routing group per image).
    tokens = (size["vit"]["image_shape"][0] // size["vit"]["patch_size"]) ** 2 + 1
    equal = dict(kwargs, capacity_factor=1.0, eval_capacity_factor=1.0)
    routers = {
        "top-K K=1, C x1": upcycle(dense, seed=2, expert_noise=0.1, **equal),
        "Experts Choice, C x1": upcycle(
            dense, seed=3, expert_noise=0.1, router="experts_choice", **equal
        ),
        "Soft MoE, tokens/E slots": upcycle(
            dense,
            seed=4,
            expert_noise=0.1,
            router="soft",
            num_slots=max(1, round(tokens / size["experts"])),
            **dict(kwargs, eval_capacity_factor=None),
        ),
    }
    return Section(
        "moe",
        {
            "dense ViT": [dense],
            "V-MoE K=1": [vmoe_a],
            "2 x V-MoE K=1": [vmoe_a, vmoe_b],
            "E³ K=1 M=2 (one-hot)": [e3["einsum"]],
            "E³ K=1 M=2 (indices)": [e3["indices"]],
            **{name: [model] for name, model in routers.items()},
        },
        train=("dense ViT", "V-MoE K=1", "E³ K=1 M=2 (one-hot)", "E³ K=1 M=2 (indices)", *routers),
        activation=vit_activations(size, {"E³ K=1 M=2 (one-hot)": 2, "E³ K=1 M=2 (indices)": 2}),
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
                num_experts=size["experts"],
                mlp_dim=mlp_dim,
                top_k=top_k,
                group_size=images * tokens,
                capacity_factor=capacity_factor,
                seed=0,
                dispatcher=dispatcher,
            )
        )

    activation = sparse_moe_activations(
        images * tokens,
        width,
        top_k,
        size["experts"],
        {
            "dense MLP (K x width)": (mlp_dim, None, None),
            "SparseMoE (one-hot)": (mlp_dim, 1.0, "einsum"),
            "SparseMoE (indices)": (mlp_dim, 1.0, "indices"),
            "one-hot, C x8": (8, 8.0, "einsum"),
            "indices, C x8": (8, 8.0, "indices"),
        },
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
        activation=activation,
    )
    # Experts of width 8 leave the memory of routing, dispatch, expert
    # buffers and combine; capacity factor 8 is the E³ paper's inference.
    dispatch = Section(
        "dispatch",
        {"one-hot, C x8": [moe("einsum", 8, 8.0)], "indices, C x8": [moe("indices", 8, 8.0)]},
        train_memory=("one-hot, C x8", "indices, C x8"),
        activation=activation,
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
            for b in range(15)
            if np.any(bins == b)
        ]
        return float(np.sum(gaps))

    def reference_auroc():
        y = np.r_[np.zeros(n // 2), np.ones(n // 2)]
        return float(roc_auc_score(y, np.r_[id_scores, ood_scores]))

    pairs = {
        "ECE (15 bins)": (
            lambda: ez.metrics.expected_calibration_error(probs, labels),
            reference_ece,
        ),
        "OOD AUROC": (lambda: ez.metrics.ood_auroc(id_scores, ood_scores), reference_auroc),
    }
    rows = []
    for name, (ours, reference) in pairs.items():
        ms = timing.interleaved_ms(
            {"ours": [lambda _: ours()], "ref": [lambda _: reference()]}, None, repeats
        )
        diff = abs(float(ours()) - reference())
        for variant, key in (("scikit-learn / NumPy", "ref"), ("ensemble_zoo", "ours")):
            rows.append(
                {
                    "section": "metrics",
                    "variant": f"{name}: {variant}",
                    "forward_ms": ms[key],
                    "forward_ratio": ms[key] / ms["ref"],
                    "forward_peak_mib": None,
                    "train_ms": None,
                    "train_ratio": None,
                    "train_peak_mib": None,
                    "max_abs_difference": diff,
                }
            )
    return rows


def metrics_bytes(size):
    """The metrics section's arrays: logits, probabilities and their
    temporaries (float64, 10 classes) and the per-sample vectors."""
    return size["metric_samples"] * (10 * 8 * 4 + 8 * 8)


def _cell(value, fmt):
    width = int(fmt.split(".")[0])
    return f"{'-':>{width}}" if value is None else format(value, fmt)


def print_table(rows):
    """The methods' table, then the decoding section's own (its columns
    differ: `llm_decoding.print_decoding_table`)."""
    decoding = [r for r in rows if r["section"] == "decoding"]
    rows = [r for r in rows if r["section"] != "decoding"]
    _print_methods_table(rows)
    llm_decoding.print_decoding_table(decoding)


def _print_methods_table(rows):
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


SECTIONS = ("hydra", "lora", "moe", "sparse_moe", "baselines", "metrics", "decoding")


def decoding_bytes(quick):
    """The decoding section's largest state: the base model and one
    ensemble's copy of it (Gemma-2B's layer shapes, 2 layers, vocabulary
    16,384: about 253M parameters each, float32) and their KV caches."""
    return 2 * 4 * 1_000 if quick else 2 * 4 * 253_000_000


def _memory_line(name, estimate, args, budget, source):
    held = [
        f"{fmt_bytes(estimate['runtime'])} runtime",
        f"{fmt_bytes(estimate['weights'])} weights of {estimate['parameters']:,} parameters",
    ]
    if estimate["building"]:
        held.append(f"{fmt_bytes(estimate['building'])} more")
    parts = [
        f"{fmt_bytes(sum(estimate[k] for k in ('runtime', 'weights', 'building')))}"
        f" held once the models are built ({' + '.join(held)})"
        if estimate["parameters"]
        else f"{fmt_bytes(estimate['runtime'])} runtime"
    ]
    if estimate["adamw"]:
        parts.append(
            f"{fmt_bytes(estimate['adamw'])} gradients and AdamW state"
            f" ({estimate['trainable_parameters']:,} trained in {estimate['trained_models']}"
            " models)"
        )
    if estimate["activations"]:
        what = estimate["largest_pass"]
        if estimate["per_image"] or "forward" in what:
            what += f", batch {args.batch_size}, {args.dtype}"
        parts.append(f"{fmt_bytes(estimate['activations'])} activations ({what})")
    if estimate["compiler"]:
        parts.append(f"{fmt_bytes(estimate['compiler'])} compiler")
    available = (
        "memory available unknown"
        if budget is None
        else (f"{fmt_bytes(budget)} available ({source})")
    )
    return f"[{name}: needs ~{fmt_bytes(estimate['total'])} = {' + '.join(parts)}; {available}]"


def _advice(estimate, args, budget):
    """What would make the section fit in `budget` bytes."""
    fixed = estimate["total"] - estimate["activations"]
    if fixed > budget:
        return (
            f"even without its activations it needs ~{fmt_bytes(fixed)}:"
            " run it on a machine with more memory, or the other sections with --only"
        )
    advice = []
    if estimate["per_image"]:
        batch = int((budget - fixed) // estimate["per_image"])
        if 1 <= batch < args.batch_size:
            advice.append(
                f"--batch-size {batch} would fit"
                f" (~{fmt_bytes(fixed + batch * estimate['per_image'])})"
            )
    if args.dtype == "float32" and fixed + estimate["activations"] / 2 <= budget:
        advice.append(
            f"--dtype bfloat16 would fit (~{fmt_bytes(fixed + estimate['activations'] / 2)})"
        )
    return "; ".join(advice) or "run it on a machine with more memory"


def _check_memory(name, estimate, args):
    """Prints what the section needs and whether it fits; returns False to
    refuse it."""
    budget, source = memory_budget(args.memory_limit)
    print(_memory_line(name, estimate, args, budget, source), flush=True)
    need = estimate["total"]
    if budget is None or need <= 0.9 * budget:
        return True
    if need <= budget:
        print(
            f"[{name}: warning: needs ~{fmt_bytes(need)}, close to the {fmt_bytes(budget)}"
            " available; if another process grows meanwhile, this one may be killed]",
            flush=True,
        )
        return True
    if args.ignore_memory_check:
        print(
            f"[{name}: warning: needs ~{fmt_bytes(need)} but only {fmt_bytes(budget)} is"
            " available; running it anyway (--ignore-memory-check)]",
            flush=True,
        )
        return True
    print(
        f"[{name}: refused: needs ~{fmt_bytes(need)} but only {fmt_bytes(budget)} is"
        f" available, so it would be killed for lack of memory; {_advice(estimate, args, budget)};"
        " --ignore-memory-check runs it anyway]",
        flush=True,
    )
    return False


def run_sections(names, args, isolated, on_record=None):
    """Runs the sections `names` in this process; returns (device, records),
    a record per section: its rows, memory estimate and status."""
    _import_backend()
    timing.TORCH_COMPILE["enabled"] = args.torch_compile
    if args.dtype == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    size = SIZES["quick" if args.quick else "full"]
    repeats = _repeats(args)
    device = timing.device_name()
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(args.batch_size,) + size["vit"]["image_shape"]).astype("float32")
    y = (np.arange(args.batch_size) % size["classes"]).astype("int32")
    builders = {
        "hydra": hydra_section,
        "lora": lora_section,
        "moe": moe_section,
        "baselines": baselines_section,
    }
    records = []
    for name in names:
        start = time.perf_counter()
        runtime = resident_memory()
        inputs = x, y
        if name in builders:
            sections = [builders[name](size)]
            extra = None
        elif name == "sparse_moe":
            sections, (images, tokens, width) = sparse_moe_sections(size)
            inputs = rng.normal(size=(images, tokens, width)).astype("float32"), None
            extra = None
        elif name == "decoding":
            sections = []
            extra = (decoding_bytes(args.quick), "the decoders' weights and KV caches")
        else:
            sections = []
            extra = (metrics_bytes(size), "the metrics' arrays")
        _collect(args)
        estimate = estimate_memory(
            sections, args.batch_size, args.dtype, runtime, resident_memory(), extra
        )
        # Saved before it runs: a section killed for lack of memory keeps
        # its estimate.
        record = {"section": name, "estimate": estimate, "rows": [], "status": "running"}
        records.append(record)
        if on_record:
            on_record(device, records)
        if not _check_memory(name, estimate, args):
            record["status"] = "refused"
            del sections
            _collect(args)
            if on_record:
                on_record(device, records)
            continue
        if args.torch_compile:
            graphs, breaks = timing.torch_compile_counts()
        if sections:
            for section in sections:
                record["rows"] += section.run(*inputs, repeats)
        elif name == "decoding":
            record["rows"] += llm_decoding.decoding_rows(quick=args.quick, repeats=repeats)
        else:
            record["rows"] += metrics_rows(size, repeats)
        del sections
        _collect(args)
        record["status"] = "ok"
        record["seconds"] = time.perf_counter() - start
        if args.torch_compile:
            graphs_now, breaks_now = timing.torch_compile_counts()
            record["torch_compile"] = {
                "graphs": graphs_now - graphs,
                "graph_breaks": breaks_now - breaks,
            }
        record["peak_rss"] = peak_resident_memory()
        if not isolated:
            print(_end_line(name, record, shared=True), flush=True)
        if on_record:
            on_record(device, records)
    return device, records


def _collect(args):
    """Frees the models of a finished section (reference cycles), for the
    next section or the resident memory measured; skipped for the tiny
    models of `--quick`, where it would take longer than their sections."""
    if not args.quick:
        gc.collect()


def _end_line(name, record, shared):
    note = ""
    if record.get("torch_compile"):
        c = record["torch_compile"]
        note = (
            f"; torch.compile: {c['graphs']} graphs for {len(record['rows'])} rows,"
            f" {c['graph_breaks']} graph breaks"
        )
    measured = (
        f"peak RSS so far {fmt_bytes(record['peak_rss'])} (one process runs all sections)"
        if shared
        else f"peak RSS {fmt_bytes(record['peak_rss'])} measured"
    )
    return (
        f"[{name}: {record['seconds']:.0f} s; {measured},"
        f" {fmt_bytes(record['estimate']['total'])} estimated{note}]"
    )


def _repeats(args):
    return args.repeats or (2 if args.quick else 5)


def _child_argv(args, names, output, isolated):
    argv = [
        "--dtype",
        args.dtype,
        "--batch-size",
        str(args.batch_size),
        "--repeats",
        str(_repeats(args)),
        "--only",
        *names,
        "--child-output",
        output,
    ]
    if args.quick:
        argv.append("--quick")
    if args.torch_compile:
        argv.append("--torch-compile")
    if args.ignore_memory_check:
        argv.append("--ignore-memory-check")
    if args.memory_limit is not None:
        argv += ["--memory-limit", str(args.memory_limit)]
    if isolated:
        argv.append("--child-isolated")
    return argv


def _spawn(names, args, isolated):
    """Runs the sections `names` in a new process; returns (device,
    records) with the process's measured peak resident memory."""
    fd, output = tempfile.mkstemp(prefix="run_all_", suffix=".json")
    os.close(fd)
    command = [sys.executable, os.path.abspath(__file__)] + _child_argv(
        args, names, output, isolated
    )
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.perf_counter()
    process = subprocess.Popen(command)
    try:
        if hasattr(os, "wait4"):
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            peak = _maxrss_bytes(usage)
        else:
            process.wait()
            peak = None
    except BaseException:
        process.kill()
        process.wait()
        raise
    seconds = time.perf_counter() - start
    try:
        with open(output, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError):
        report = {"device": None, "records": []}
    finally:
        for path in (output, output + ".part"):
            if os.path.exists(path):
                os.remove(path)
    records = [r for r in report["records"] if r["status"] != "running"]
    started = {r["section"]: r for r in report["records"] if r["status"] == "running"}
    done = {r["section"] for r in records}
    for record in records:
        if isolated and record["status"] == "ok":
            record["peak_rss"] = peak
            print(_end_line(record["section"], record, shared=False), flush=True)
    code = process.returncode
    if code < 0:
        why = f"killed by {signal.Signals(-code).name}"
        if -code == signal.SIGKILL:
            why += " (most likely by the kernel's out-of-memory killer)"
    else:
        why = f"failed (exit status {code})"
    for name in names:
        if name in done:
            continue
        estimate = started.get(name, {}).get("estimate")
        expected = f" (estimated {fmt_bytes(estimate['total'])})" if estimate else ""
        print(
            f"[{name}: {why} after {seconds:.0f} s; its process's peak RSS"
            f" {fmt_bytes(peak)}{expected}]",
            flush=True,
        )
        records.append(
            {"section": name, "status": "failed", "why": why, "rows": [], "peak_rss": peak}
            | ({"estimate": estimate} if estimate else {})
        )
        why = "not started: its process had ended"  # the sections after it
    return report["device"], records


def _child_main(args):
    def save(device, records):
        with open(args.child_output + ".part", "w", encoding="utf-8") as f:
            json.dump({"device": device, "records": records}, f)
        os.replace(args.child_output + ".part", args.child_output)

    run_sections(args.only, args, args.child_isolated, on_record=save)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="PyTorch: torch.compile every forward and train step",
    )
    parser.add_argument(
        "--isolation",
        choices=("section", "run", "none"),
        default=None,
        help="section: a process per section (default); run: one process for all"
        " (default with --quick); none: this process",
    )
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=None,
        metavar="MIB",
        help="refuse sections estimated to need more (default: what the machine has available)",
    )
    parser.add_argument(
        "--ignore-memory-check",
        action="store_true",
        help="run sections that would not fit, with a warning",
    )
    parser.add_argument("--child-output", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-isolated", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be >= 1")
    # The backend keras runs on where it is imported already (in-process
    # callers), the one the section processes will get otherwise.
    keras_module = sys.modules.get("keras")
    backend = keras_module.config.backend() if keras_module else os.environ["KERAS_BACKEND"]
    if args.torch_compile and backend != "torch":
        parser.error("--torch-compile needs KERAS_BACKEND=torch")
    if args.child_output:
        return _child_main(args)
    isolation = args.isolation or ("run" if args.quick else "section")
    repeats = _repeats(args)
    config = (
        f"backend {backend}; dtype {args.dtype}; "
        f"{'quick (tiny ViT)' if args.quick else 'ViT-B/16'}; batch {args.batch_size}; "
        f"median of {repeats}{'; torch.compile' if args.torch_compile else ''}"
    )
    where = {
        "section": "a process per section",
        "run": "one process for all sections",
        "none": "in this process",
    }[isolation]
    available = available_memory()
    print(f"run_all: {config}; {where}; {fmt_bytes(available)} memory available", flush=True)
    device, records = None, []
    if isolation == "none":
        device, records = run_sections(args.only, args, isolated=False)
    else:
        groups = [[name] for name in args.only] if isolation == "section" else [args.only]
        for names in groups:
            group_device, group_records = _spawn(names, args, isolation == "section")
            device = device or group_device
            records += group_records
    rows = [row for record in records for row in record["rows"]]
    print(f"device: {device or 'unknown'}; {config}")
    print_table(rows)
    memory = {
        r["section"]: {
            "status": r["status"],
            "why": r.get("why"),
            "estimated_peak_mib": r["estimate"]["total"] / MIB if "estimate" in r else None,
            "estimate_mib": {
                k: r["estimate"][k] / MIB
                for k in ("runtime", "weights", "building", "adamw", "activations", "compiler")
            }
            if "estimate" in r
            else None,
            "parameters": r["estimate"]["parameters"] if "estimate" in r else None,
            "measured_peak_rss_mib": r["peak_rss"] / MIB if r.get("peak_rss") else None,
            "measured_in": "section process" if isolation == "section" else "shared process",
            "seconds": r.get("seconds"),
        }
        for r in records
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "device": device,
                    "backend": backend,
                    "dtype": args.dtype,
                    "quick": args.quick,
                    "batch_size": args.batch_size,
                    "repeats": repeats,
                    "torch_compile": (
                        {r["section"]: r.get("torch_compile") for r in records}
                        if args.torch_compile
                        else None
                    ),
                    "isolation": isolation,
                    "memory": memory,
                    "rows": rows,
                },
                f,
                indent=1,
            )
    missing = [r for r in records if r["status"] != "ok"]
    if missing:
        print(
            "not run: " + ", ".join(f"{r['section']} ({r['status']})" for r in missing), flush=True
        )
        raise SystemExit(1)
    return rows


if __name__ == "__main__":
    main()
