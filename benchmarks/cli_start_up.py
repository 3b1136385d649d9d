"""Start-up time of the `ensemble-zoo` command and of `import ensemble_zoo`.

The commands that need no model (`--help`, `--version`, `list`, argument
errors) read the preset tables and metadata files without importing Keras
or a backend, and should answer within `--budget` seconds (default 2 s on
2 CPU cores); `import ensemble_zoo` imports Keras, keras-hub and
TensorFlow and takes what they take. Each command runs `--repeats` times
in a fresh interpreter (the median is printed), under the backend of
`KERAS_BACKEND`.

    python benchmarks/cli_start_up.py [--repeats 5] [--budget 2.0]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "ensemble-zoo --help": ["-m", "ensemble_zoo_cli", "--help"],
    "ensemble-zoo --version": ["-m", "ensemble_zoo_cli", "--version"],
    "ensemble-zoo list": ["-m", "ensemble_zoo_cli", "list"],
    "ensemble-zoo evaluate --preset nope": [
        "-m",
        "ensemble_zoo_cli",
        "evaluate",
        "--preset",
        "nope",
    ],
    "import ensemble_zoo": ["-c", "import ensemble_zoo"],
}

#: The commands held to the budget (the import is reported, not held).
MODEL_FREE = [name for name in COMMANDS if name.startswith("ensemble-zoo")]


def time_command(arguments, repeats):
    """Median wall time (s) of `python arguments` in fresh interpreters."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, *arguments], capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=2.0)
    args = parser.parse_args()
    backend = os.environ.get("KERAS_BACKEND", "jax")
    print(f"backend {backend}, {os.cpu_count()} CPUs, median of {args.repeats}")
    print(f"{'command':40s} {'seconds':>8s}  budget")
    over = []
    for name, arguments in COMMANDS.items():
        seconds = time_command(arguments, args.repeats)
        held = name in MODEL_FREE
        verdict = ("ok" if seconds <= args.budget else "OVER") if held else "-"
        if verdict == "OVER":
            over.append(name)
        print(f"{name:40s} {seconds:8.2f}  {verdict}")
    if over:
        print(f"over the {args.budget:.1f} s budget: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
