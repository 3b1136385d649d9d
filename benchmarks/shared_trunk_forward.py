"""What a shared trunk saves in the forward pass and the training step of
a LoRA-Ensemble causal LM.

    KERAS_BACKEND=jax python benchmarks/shared_trunk_forward.py
        [--layers 4] [--members 8] [--length 32] [--repeats 3] [--quick]

A keras-hub `GemmaCausalLM` with Gemma-2B's layer shapes
(`llm_decoding.py`'s, 16,384-token vocabulary, random weights) and
`--layers` blocks; `--members` rank-8 members on query, key, value and
output of every block, of the upper half and of the upper quarter of the
blocks (`from_keras_hub(..., layers=...)`: the blocks below run once per
input row, `member_forward`). One batch of one sequence of `--length`
tokens. Columns, each the median of `--repeats` warm calls after a first
one (compilation included in that one, not counted):

- forward ms: `predict_on_batch` (the member logits, compiled as Keras
  compiles `predict` on the backend), and its ratio to the base model's
  `predict_on_batch`;
- train step ms: `train_on_batch` under the default loss (the members'
  mean cross-entropy in blocks, the adapted blocks rematerialised; AdamW
  on the adapters), and its ratio to every block adapted.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez  # noqa: E402 (first: keras and TensorFlow without start-up lines)

# isort: split
import keras  # noqa: E402
import llm_decoding  # noqa: E402 (same folder)
import numpy as np  # noqa: E402

VOCABULARY = 16384


def _median_ms(fn, repeats):
    fn()  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def variants(num_blocks):
    """`(name, layers)`: every block, the upper half, the upper quarter."""
    return [
        ("every block", None),
        ("upper 1/2", range(num_blocks - num_blocks // 2, num_blocks)),
        ("upper 1/4", range(num_blocks - max(num_blocks // 4, 1), num_blocks)),
    ]


def run(layers=4, members=8, length=32, repeats=3, quick=False):
    """The rows (see the module docstring)."""
    llm_decoding._imports()
    vocabulary = 64 if quick else VOCABULARY
    base = llm_decoding.build_base(layers, vocabulary, quick)
    inputs = llm_decoding.prompt_inputs(length, 0, vocabulary)
    targets = inputs["token_ids"]
    base.compile()
    plain = _median_ms(lambda: base.predict_on_batch(inputs), repeats)
    rows = [{"variant": "plain", "shared_blocks": layers, "forward_ms": plain}]
    print(f"{'plain':<12} forward {plain:9.1f} ms", flush=True)
    for name, adapted in variants(layers):
        keras.utils.set_random_seed(0)
        ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(
            base, num_members=members, rank=8, seed=0, layers=adapted
        )
        ensemble.compile(optimizer=keras.optimizers.AdamW(1e-4))
        row = {
            "variant": name,
            "shared_blocks": ensemble.trunk_blocks,
            "forward_ms": _median_ms(lambda: ensemble.predict_on_batch(inputs), repeats),
            "train_step_ms": _median_ms(lambda: ensemble.train_on_batch(inputs, targets), repeats),
        }
        row["forward_ratio"] = row["forward_ms"] / plain
        every_block = row if adapted is None else rows[1]
        row["train_step_ratio"] = row["train_step_ms"] / every_block["train_step_ms"]
        rows.append(row)
        print(
            f"{name:<12} forward {row['forward_ms']:9.1f} ms ({row['forward_ratio']:.2f}x plain)"
            f"  train step {row['train_step_ms']:9.1f} ms ({row['train_step_ratio']:.2f}x every "
            f"block)  shared blocks {row['shared_blocks']}",
            flush=True,
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(
        f"backend {keras.config.backend()}; {args.layers} {'tiny' if args.quick else 'Gemma-2B-shaped'} blocks, "
        f"{args.members} members, {args.length} tokens"
    )
    return run(args.layers, args.members, args.length, args.repeats, args.quick)


if __name__ == "__main__":
    main()
