"""Bayesian LoRA's samples as members: one forward pass of S posterior
samples of Laplace-LoRA and of BLoB against an S-member LoRA-Ensemble and
against re-running the one-member model S times (how the authors' code
predicts), per batch size, timed in alternation (`timing.interleaved_ms`,
each compiled the backend's way: `timing.compiled_call`).

    KERAS_BACKEND=jax python benchmarks/bayesian_lora.py [--samples 64]

The models are ViTs of `vit_tiny_digits`' shapes: the Laplace-LoRA
samples are drawn around member 0 of `lora_ensemble_vit_tiny_digits` (a
rank-4 LoRA, `ez.training.laplace_lora`), the BLoB samples from a BLoB
LoRA of the same rank built on `vit_tiny_digits`
(`ez.training.blob_samples`; untrained: its time does not depend on the
values); the LoRA-Ensemble has as many members, rank 4. The issue's goal:
S samples take no more than an S-member LoRA-Ensemble.
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
from ensemble_zoo.training.member_stacking import with_members  # noqa: E402


def first_member(source, member_axis):
    value = keras.ops.convert_to_numpy(source)
    return value[:1] if member_axis else value


def models(samples):
    """`{name: model}` of the compared systems, `x_train` drawn from."""
    ensemble = ez.models.EnsembleClassifier.from_preset(
        "lora_ensemble_vit_tiny_digits", preprocessor=None
    )
    lora = with_members(ensemble, 1, first_member)
    x, _ = ez.datasets.load_arrays("digits", "train")
    laplace = ez.training.laplace_lora(lora, x[:64], samples, seed=0)
    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits", preprocessor=None)
    blob = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        vit.members[0], num_members=1, rank=4, a_gain=1.0, seed=0, blob={"kl_weight": 1e-3}
    )
    return {
        "one LoRA": lora,
        f"LoRA-Ensemble {samples}": ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
            vit.members[0], num_members=samples, rank=4, seed=0
        ),
        f"Laplace-LoRA {samples}": laplace,
        f"BLoB {samples}": ez.training.blob_samples(blob, samples, seed=0),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--torch-compile", action="store_true")
    args = parser.parse_args(argv)
    TORCH_COMPILE["enabled"] = args.torch_compile
    calls = {name: compiled_call(model) for name, model in models(args.samples).items()}
    ensemble = f"LoRA-Ensemble {args.samples}"
    groups = {name: [call] for name, call in calls.items() if name != "one LoRA"}
    # The authors' prediction: the one-member model once per sample.
    groups[f"{args.samples} re-runs"] = [calls["one LoRA"]] * args.samples
    x_all, _ = ez.datasets.load_arrays("digits", "test")
    print(f"device: {device_name()}; backend {keras.config.backend()}")
    print(f"{'batch':>6} {'system':<20} {'ms':>9} {'vs ensemble':>12}")
    rows = []
    for batch in args.batches:
        x = np.resize(x_all, (batch,) + x_all.shape[1:])
        ms = interleaved_ms(groups, x, args.repeats)
        for name, value in ms.items():
            ratio = value / ms[ensemble]
            rows.append({"batch": batch, "system": name, "ms": value, "ratio": ratio})
            print(f"{batch:>6} {name:<20} {value:>9.2f} {ratio:>11.2f}x")
    return rows


if __name__ == "__main__":
    main()
