"""Decoding cost of a LoRA-Ensemble causal LM (issue 32).

    KERAS_BACKEND=jax python benchmarks/llm_decoding.py [--quick]
        [--dtype float32|bfloat16] [--layers 2] [--repeats 3]

A keras-hub `GemmaCausalLM` with Gemma-2B's layer shapes (hidden 2048, 8
query heads and 1 key-value head of width 256, MLP 2 x 16,384) and
`--layers` blocks (18 in Gemma-2B; `--full` takes 18 and Gemma's 256,000
vocabulary, for a GPU), a vocabulary of 16,384 otherwise; random weights.
Batch 1, a prompt of `--prompt` tokens, `--new` generated tokens, greedy.

Rows (ratios against the base model, measured in this run):

- `base`: the keras-hub model's own compiled `generate`;
- `LoRA-Ensemble M`: M members of rank 8 on query, key, value and
  output, one batched decode (`generate(..., return_uncertainty=True)`,
  so the per-token figures are included);
- `M separate models`: M times the base model's row (not run: M
  fine-tuned models of the base's size decode one after another and hold
  M times its weights and cache).

Columns: prefill ms (the prompt through the model, filling the KV
cache: `_build_cache`, compiled), decode ms per generated token (from
calls of the compiled generate function that `generate` runs, for `--new`
and `--new // 2` tokens: their difference over the extra tokens; the
ensemble's includes its per-token figures), tokens per second (batch /
decode time per token) and the memory held while decoding: the weights
plus the KV cache (`(batch, members, layers, 2, length, kv_heads,
head_dim)`), counted from the arrays' shapes (XLA's buffers for
activations come on top).
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
    import numpy
    import ensemble_zoo  # first: keras and TensorFlow without start-up lines

    import keras as keras_module
    import keras_hub as keras_hub_module
    import timing as timing_module

    keras, keras_hub, np, ez, timing = (
        keras_module, keras_hub_module, numpy, ensemble_zoo, timing_module
    )


MIB = 2**20
GEMMA_2B = dict(
    num_query_heads=8, num_key_value_heads=1, hidden_dim=2048,
    intermediate_dim=32768, head_dim=256,
)
QUICK = dict(
    num_query_heads=2, num_key_value_heads=1, hidden_dim=32, intermediate_dim=64,
    head_dim=16,
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


def _compiled_prefill(model):
    """`model._build_cache` compiled as keras-hub compiles `generate`."""
    backend = keras.config.backend()
    if backend == "jax":
        import jax

        state = [v.value for v in model.variables]

        @jax.jit
        def prefill(state, token_ids):
            with keras.StatelessScope(state_mapping=list(zip(model.variables, state))):
                return model._build_cache(token_ids)[1]

        return lambda x: prefill(state, x)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda x: model._build_cache(x)[1], jit_compile=True)
    import torch

    def prefill(x):
        with torch.no_grad():
            return model._build_cache(x)[1]

    return prefill


def _block(x):
    for leaf in keras.tree.flatten(x):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        else:
            keras.ops.convert_to_numpy(keras.ops.ravel(leaf)[:1])
    return x


def _median_ms(fn, repeats):
    fn()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def cache_bytes(model, batch, length, members, dtype_bytes):
    b = model.backbone
    return (
        batch * members * b.num_layers * 2 * length * b.num_key_value_heads * b.head_dim
        * dtype_bytes
    )


def weight_bytes(model):
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights)


def measure(model, prompt, new, vocabulary, repeats, members):
    """Prefill ms, decode ms per token and held bytes of one model.

    Decode time per token is the difference between two generations from
    the same prompt, `new` and `new // 2` tokens, divided by the extra
    tokens: the prompt's pass and the call's fixed costs cancel.
    """
    inputs = prompt_inputs(prompt, new, vocabulary)
    tokens = keras.ops.convert_to_tensor(inputs["token_ids"])
    prefill = _compiled_prefill(model)
    prefill_ms = _median_ms(lambda: _block(prefill(tokens)), repeats)
    # Both through the compiled generate function `generate` runs (the
    # ensemble's computes the per-token figures too), waiting for the
    # token ids only: no copies to the host or NumPy post-processing.
    generate = model.make_generate_function()

    def total_ms(count):
        batch = {
            k: keras.ops.convert_to_tensor(v)
            for k, v in prompt_inputs(prompt, count, vocabulary).items()
        }
        return _median_ms(
            lambda: _block(generate(batch, stop_token_ids=None)["token_ids"]), repeats
        )

    # Timing noise can make the difference of two tiny (--quick) calls
    # negative: a floor of 1 µs keeps the ratios finite.
    decode = max(total_ms(new) - total_ms(new // 2), 1e-3) / (new - new // 2)
    batch, length = inputs["token_ids"].shape
    dtype_bytes = np.dtype(keras.config.dtype_policy().compute_dtype).itemsize
    held = weight_bytes(model) + cache_bytes(model, batch, length, members, dtype_bytes)
    return prefill_ms, decode, held


def _progress(row):
    """One measured row at once (a long GPU run keeps what it measured)."""
    variant, prefill_ms, decode_ms, held_bytes = row
    print(
        f"measured {variant}: prefill {prefill_ms:.2f} ms, decode {decode_ms:.3f} ms/token, "
        f"held {held_bytes / MIB:.1f} MiB",
        file=sys.stderr, flush=True,
    )


def decoding_rows(quick=False, layers=2, vocabulary=None, prompt=32, new=16, repeats=5,
                  members=(1, 4, 8), full=False):
    """The section's rows (see the module docstring)."""
    _imports()
    if full:
        layers, vocabulary = 18, 256_000
    if quick:
        layers, vocabulary, prompt, new, repeats = 2, 64, 8, 4, min(repeats, 2)
        members = (1, 2)
    vocabulary = vocabulary or 16_384
    base = build_base(layers, vocabulary, quick)
    base.compile(sampler="greedy")
    rows = []
    prefill, decode, held = measure(base, prompt, new, vocabulary, repeats, 1)
    rows.append(("base", prefill, decode, held))
    _progress(rows[-1])
    for m in members:
        model = ez.models.LoRAEnsembleCausalLM.from_keras_hub(base, num_members=m, rank=8, seed=0)
        model.compile(sampler="greedy")
        rows.append(
            (f"LoRA-Ensemble {m}",) + measure(model, prompt, new, vocabulary, repeats, m)
        )
        _progress(rows[-1])
        del model
    for m in members:
        if m > 1:
            rows.append((f"{m} separate models", m * prefill, m * decode, m * held))
    out = []
    for variant, prefill_ms, decode_ms, held_bytes in rows:
        out.append({
            "section": "decoding", "variant": variant,
            "prefill_ms": prefill_ms, "prefill_ratio": prefill_ms / rows[0][1],
            "decode_ms_per_token": decode_ms, "decode_ratio": decode_ms / rows[0][2],
            "tokens_per_second": 1000.0 / decode_ms if decode_ms else None,
            "held_mib": held_bytes / MIB, "held_ratio": held_bytes / rows[0][3],
            "layers": layers, "vocabulary": vocabulary, "prompt": prompt, "new": new,
            "quick": quick,
        })
    return out


def print_decoding_table(rows):
    if not rows:
        return
    r0 = rows[0]
    shapes = "tiny layers (--quick)" if r0["quick"] else "Gemma-2B layer shapes"
    print(
        f"\ndecoding: {shapes}, {r0['layers']} layers, vocabulary "
        f"{r0['vocabulary']:,}, batch 1, prompt {r0['prompt']}, {r0['new']} new tokens"
    )
    header = (
        f"{'variant':<24} {'prefill ms':>10} {'ratio':>6} {'decode ms/token':>15} "
        f"{'ratio':>6} {'tokens/s':>9} {'held MiB':>9} {'ratio':>6}"
    )
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['variant']:<24} {r['prefill_ms']:>10.2f} {r['prefill_ratio']:>6.2f} "
            f"{r['decode_ms_per_token']:>15.2f} {r['decode_ratio']:>6.2f} "
            f"{r['tokens_per_second'] or 0:>9.1f} {r['held_mib']:>9.1f} {r['held_ratio']:>6.2f}"
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
        "--members", type=int, nargs="+", default=[1, 4, 8],
        help="ensemble sizes to measure (default: 1 4 8)",
    )
    args = parser.parse_args(argv)
    if any(m < 1 for m in args.members):
        parser.error(f"--members must be positive integers; got {args.members}")
    _imports()
    if args.dtype == "bfloat16":
        # Weights and compute in bfloat16, as keras-hub's Gemma presets
        # ship: decoding reads the weights at every step, so float32
        # weights under "mixed_bfloat16" would double what is read.
        keras.config.set_dtype_policy("bfloat16")
    rows = decoding_rows(
        quick=args.quick, layers=args.layers, prompt=args.prompt, new=args.new,
        repeats=args.repeats, full=args.full, members=tuple(args.members),
    )
    print(f"device: {timing.device_name()}; backend {keras.config.backend()}; dtype {args.dtype}")
    print_decoding_table(rows)
    return rows


if __name__ == "__main__":
    main()
