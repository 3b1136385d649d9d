"""Eager or compiled `predict` under PyTorch on a CPU: what the zoo's
default should be, per model kind.

    KERAS_BACKEND=torch python benchmarks/torch_predict_default.py
        [--images 500] [--repeats 3] [--presets NAME ...]

For each trained digits preset (a ViT, and the ensembles built on it by
each method kind), `predict` on `--images` test images (8 x 8 digits,
batch 500) as Keras runs it under PyTorch by default (eager), and after
`compile(jit_compile=True)` (the step under `torch.compile`): the first
call (compilation included) and the median of `--repeats` warm calls,
and the calls after which compiling pays (compilation time over the
warm saving per call; "never" where the compiled call is not faster).
Keras' own default under PyTorch is eager (`jit_compile="auto"` resolves
to `False` there), and the zoo keeps it.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import ensemble_zoo as ez  # noqa: E402

PRESETS = (
    "vit_tiny_digits",
    "lora_ensemble_vit_tiny_digits",
    "hydra_taylor_vit_tiny_digits",
    "batch_ensemble_vit_tiny_digits",
    "vmoe_vit_tiny_digits",
    "deep_ensemble_vit_tiny_digits",
)


def _times(call, repeats):
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    warm = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        warm.append(time.perf_counter() - start)
    return first, statistics.median(warm)


def measure(name, images, repeats):
    x, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    x = x[:images]
    row = {"preset": name}
    for mode, jit in (("eager", False), ("compiled", True)):
        model = ez.models.EnsembleClassifier.from_preset(name)
        model.compile(jit_compile=jit)
        first, warm = _times(lambda m=model: m.predict(x, batch_size=500, verbose=0), repeats)
        row[f"{mode}_first_s"], row[f"{mode}_warm_ms"] = first, 1000 * warm
    saving = row["eager_warm_ms"] - row["compiled_warm_ms"]
    cost = 1000 * (row["compiled_first_s"] - row["eager_first_s"])
    row["break_even_calls"] = cost / saving if saving > 0 else None
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = parser.parse_args(argv)
    print(
        f"{'preset':<32} {'eager first s':>13} {'eager ms':>9} {'compiled first s':>16} "
        f"{'compiled ms':>11} {'pays after':>10}"
    )
    rows = []
    for name in args.presets:
        row = measure(name, args.images, args.repeats)
        even = row["break_even_calls"]
        print(
            f"{name:<32} {row['eager_first_s']:13.2f} {row['eager_warm_ms']:9.1f} "
            f"{row['compiled_first_s']:16.2f} {row['compiled_warm_ms']:11.1f} "
            f"{'never' if even is None else f'{even:.0f} calls':>10}",
            flush=True,
        )
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
