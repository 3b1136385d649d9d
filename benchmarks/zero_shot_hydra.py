"""Zero-shot Hydra against the single CLIP it prunes: one forward pass of
the shipped presets `hydra_clip_zero_shot_tiny_digits` (3 members) and
`clip_zero_shot_tiny_digits`, per batch size, timed in alternation
(`timing.interleaved_ms`, each compiled the backend's way:
`timing.compiled_call`), and how often the ensemble's predicted class
is the single model's. `--single` and `--hydra` take other presets (names
or directories).

    KERAS_BACKEND=jax python benchmarks/zero_shot_hydra.py
"""

import argparse
import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import TORCH_COMPILE  # noqa: E402
from timing import compiled_call  # noqa: E402
from timing import device_name  # noqa: E402
from timing import interleaved_ms  # noqa: E402

import ensemble_zoo as ez  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 256])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--torch-compile", action="store_true")
    parser.add_argument("--single", default="clip_zero_shot_tiny_digits", help="preset or path")
    parser.add_argument(
        "--hydra", default="hydra_clip_zero_shot_tiny_digits", help="preset or path"
    )
    args = parser.parse_args()
    TORCH_COMPILE["enabled"] = args.torch_compile

    load = ez.models.EnsembleClassifier.from_preset
    single = load(args.single, preprocessor=None)
    hydra = load(args.hydra, preprocessor=None)
    calls = {"single": compiled_call(single), "hydra": compiled_call(hydra)}
    x_all, _ = ez.datasets.load_arrays("digits", "test")
    print(f"device: {device_name()}")
    print(f"{'batch':>6} {'single ms':>10} {'hydra ms':>10} {'ratio':>7} {'argmax agree':>13}")
    for batch in args.batches:
        x = np.resize(x_all, (batch,) + x_all.shape[1:])
        ms = interleaved_ms({k: [f] for k, f in calls.items()}, x, args.repeats)
        single_logits = calls["single"](x)[:, 0]
        hydra_probs = np.asarray(
            keras.ops.convert_to_numpy(ez.ops.predictive_probabilities(calls["hydra"](x)))
        )
        agree = float(np.mean(np.argmax(hydra_probs, -1) == np.argmax(single_logits, -1)))
        print(
            f"{batch:>6} {ms['single']:>10.2f} {ms['hydra']:>10.2f} "
            f"{ms['hydra'] / ms['single']:>6.2f}x {agree:>13.3f}"
        )


if __name__ == "__main__":
    main()
