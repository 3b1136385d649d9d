"""Every trained preset in every export format of the current backend.

    KERAS_BACKEND=jax python benchmarks/export_table.py [--int8] [--presets NAME ...] [--formats NAME ...]

For each trained digits preset and each format that the backend writes
(`ensemble_zoo.export.supported_formats()`), it exports the model
(`model.export(path, format=...)`), loads the artifact with its own
runtime (`ensemble_zoo.export.ExportedModel`: TensorFlow, ONNX Runtime,
the LiteRT interpreter, `torch.export.load`, OpenVINO) and prints one
Markdown row: the largest |difference| from `predict_uncertainty` over the
289 bundled test images and every output, the artifact's size and the
export's time (verification in the runtime included). A format that
cannot carry the method prints the refusal (`ExportError` or
`ValueError`). With `--int8` it
quantizes each model first (`model.quantize("int8")`) and prints the share
of images whose argmax matches the float32 model's. The export page's
table (docs/export.md) is this script's output on each backend; `tests/test_export.py`
checks one or two presets per format.
"""

import argparse
import os
import tempfile
import time
import warnings

import keras
import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.export.formats import STATIC_SIZES

SUFFIX = {
    "tf_saved_model": "",
    "onnx": ".onnx",
    "litert": ".tflite",
    "torch": ".pt2",
    "openvino": ".xml",
}


def size_of(path):
    if os.path.isdir(path):
        return sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
    size = os.path.getsize(path)
    if path.endswith(".xml"):
        size += os.path.getsize(path[:-4] + ".bin")
    return size


def reference(model, raw, x):
    if hasattr(model, "predict_uncertainty"):
        return model.predict_uncertainty(raw, batch_size=512)
    outputs = ez.export.ServingModel(model)(x)
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def reason(error):
    """The refusal's reason, shortened for a table cell."""
    text = str(error).splitlines()[0]
    text = text.split(": ", 1)[-1] if text.startswith("Cannot export") else text
    return text if len(text) <= 160 else text[:157] + "..."


def rows(name, formats, int8, directory, raw, x):
    model = ez.presets.load_preset(name)
    expected = reference(model, raw, x)
    if int8:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model.quantize("int8")
            except ValueError as error:
                yield [name, "all", f"refused: {error}", "", ""]
                return
    for format in formats:
        path = os.path.join(directory, f"{name}_{format}{SUFFIX[format]}")
        start = time.perf_counter()
        try:
            model.export(path, format=format)  # verified in its runtime
        except (ValueError, ImportError) as error:
            yield [name, format, f"refused: {reason(error)}", "", ""]
            continue
        seconds = time.perf_counter() - start
        got = run(ez.export.ExportedModel(path), x, format)
        if getattr(model, "_stochastic_outputs", False):
            result = "random samples (names and shapes checked)"
        elif int8:
            key = "probabilities"
            agree = np.mean(got[key].argmax(-1) == expected[key].argmax(-1))
            result = f"argmax agreement {agree:.4f}"
        else:
            diff = max(float(np.max(np.abs(got[k] - expected[k]))) for k in expected)
            result = f"{diff:.2e}"
        yield [name, format, result, f"{size_of(path) / 2**20:.2f}", f"{seconds:.1f}"]


def run(artifact, x, format):
    """The artifact on every image: in one batch, or image by image where
    the format fixes the batch size (LiteRT under PyTorch)."""
    if (format, keras.config.backend()) not in STATIC_SIZES:
        return artifact(x)
    outputs = [artifact(x[i : i + 1]) for i in range(len(x))]
    return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--presets", nargs="*")
    parser.add_argument("--formats", nargs="*", help="default: supported_formats()")
    args = parser.parse_args()
    names = args.presets or [n for n in ez.presets.list_presets() if n.endswith("_digits")]
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    x, _ = ez.datasets.load_arrays("digits", "test")
    backend = keras.config.backend()
    formats = args.formats or ez.export.supported_formats()
    print(
        f"backend {backend}; formats {formats}; "
        f"{'int8' if args.int8 else 'float32'}; {len(x)} test images"
    )
    print("| preset | format | max abs diff | MiB | export s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for name in names:
            for row in rows(name, formats, args.int8, directory, raw, x):
                print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
