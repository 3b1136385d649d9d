"""int8 quantization of every trained preset against float32.

    KERAS_BACKEND=jax python benchmarks/int8_agreement.py

For each trained preset it loads the model, predicts the 289 raw digits
test images (`predict_uncertainty`), calls `model.quantize("int8")`
(Keras' quantization), predicts again, and prints one Markdown row: the
layers quantized among those that can be (Keras' Dense / EinsumDense and
the zoo's member-axis layers, `Int8KernelsMixin`), the layers with
kernels left in float (and how many), and the share of images whose
argmax of the predictive distribution is float32's. A model that refuses quantization
prints the refusal. The "int8 quantization" table (docs/benchmarks.md) is this
output (JAX, CPU); `tests/presets/test_presets.py` checks its lowest
deterministic row and the refusal.
"""

import warnings

import keras
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin

DENSE = (keras.layers.Dense, keras.layers.EinsumDense)


def quantizable(layer):
    return type(layer) in DENSE or isinstance(layer, Int8KernelsMixin)


def row(name, raw):
    model = ez.models.EnsembleClassifier.from_preset(name)
    probs32 = model.predict_uncertainty(raw, batch_size=256)["probabilities"]
    try:
        with warnings.catch_warnings():
            # Keras warns once per layer without an int8 path.
            warnings.simplefilter("ignore")
            model.quantize("int8")
    except ValueError as error:
        return f"| `{name}` | refused (`ValueError`: {str(error).split(':')[0]}) | | |"
    dense = [layer for layer in model._flatten_layers() if quantizable(layer)]
    quantized = sum(layer.quantization_mode == "int8" for layer in dense)
    left = {}
    for layer in model._flatten_layers():
        own = layer._trainable_variables + layer._non_trainable_variables
        if layer.quantization_mode is None and any(v.name.endswith("kernel") for v in own):
            left[type(layer).__name__] = left.get(type(layer).__name__, 0) + 1
    probs = model.predict_uncertainty(raw, batch_size=256)["probabilities"]
    agreement = np.mean(probs.argmax(-1) == probs32.argmax(-1))
    kept = ", ".join(f"{kind} {count}" for kind, count in sorted(left.items()))
    return f"| `{name}` | {quantized}/{len(dense)} | {kept} | {100 * agreement:.2f}% |"


def main():
    import sys

    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    print(f"backend: {keras.config.backend()}")
    print(
        "| preset | kernel layers quantized | layers with kernels left in float | argmax = float32 |"
    )
    print("|---|---|---|---|")
    for name in sys.argv[1:] or ez.evaluation.trained_presets():
        print(row(name, raw), flush=True)


if __name__ == "__main__":
    main()
