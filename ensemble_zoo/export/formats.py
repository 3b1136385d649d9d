"""The export formats, which backend writes each, and the checks of an
`export(filepath, format=...)` call."""

import keras

FORMATS = ("tf_saved_model", "onnx", "litert", "torch", "openvino")

# What each format's file is called (`None`: a directory).
SUFFIXES = {
    "tf_saved_model": None,
    "onnx": ".onnx",
    "litert": ".tflite",
    "torch": ".pt2",
    "openvino": ".xml",
}

# Backends that write each format, and why the others cannot.
BACKENDS = {
    "tf_saved_model": ("tensorflow", "jax"),
    "onnx": ("tensorflow", "jax", "torch"),
    "litert": ("tensorflow", "torch"),
    "torch": ("torch",),
    "openvino": ("tensorflow", "jax", "torch"),
}
WHY_NOT = {
    ("tf_saved_model", "torch"): (
        "the PyTorch backend has no SavedModel path (Keras would need torch_xla)"
    ),
    ("litert", "jax"): (
        "Keras converts to LiteRT from TensorFlow graphs and PyTorch "
        "programs only; a JAX function reaches TensorFlow as an "
        "`XlaCallModule` op, which LiteRT cannot run"
    ),
    ("torch", "tensorflow"): "a `.pt2` program is a PyTorch graph",
    ("torch", "jax"): "a `.pt2` program is a PyTorch graph",
}

# The packages each format needs on each backend: (import name, pip name).
REQUIREMENTS = {
    ("onnx", "tensorflow"): (("tf2onnx", "tf2onnx"), ("onnx", "onnx")),
    ("onnx", "jax"): (("jax2onnx", "jax2onnx"), ("onnx", "onnx")),
    ("onnx", "torch"): (("onnxscript", "onnxscript"), ("onnx", "onnx")),
    ("openvino", "tensorflow"): (("tf2onnx", "tf2onnx"), ("openvino", "openvino")),
    ("openvino", "jax"): (("jax2onnx", "jax2onnx"), ("openvino", "openvino")),
    ("openvino", "torch"): (("openvino", "openvino"),),
    # Not in the `export` extra: it brings transformers and torchao and
    # pins typing_extensions 4.12; `pip install ensemble-zoo[litert-torch]`.
    ("litert", "torch"): (("litert_torch", "litert-torch"),),
}

# Formats whose converter cannot keep a size dynamic on a backend: `export`
# fixes every unknown size of the default signature to 1 (as Keras does).
STATIC_SIZES = {("litert", "torch")}

# The extra that installs a package, where it is not `export`.
EXTRAS = {"litert-torch": "litert-torch"}

# The runtime that loads each format (import name, pip name).
RUNTIMES = {
    "tf_saved_model": ("tensorflow", "tensorflow"),
    "onnx": ("onnxruntime", "onnxruntime"),
    "litert": ("ai_edge_litert", "ai-edge-litert"),
    "torch": ("torch", "torch"),
    "openvino": ("openvino", "openvino"),
}


def supported_formats(backend=None):
    """The formats that `export` writes under a Keras backend.

    Args:
        backend: `"jax"`, `"tensorflow"` or `"torch"`. Defaults to the
            current backend.

    Returns:
        tuple of format names, in `FORMATS` order.

    Example:

    ```python
    import ensemble_zoo

    ensemble_zoo.export.supported_formats("torch")
    # ('onnx', 'litert', 'torch', 'openvino')
    ```
    """
    backend = backend or keras.config.backend()
    return tuple(f for f in FORMATS if backend in BACKENDS[f])


def check_format(format, filepath, method):
    """Validates `format` and `filepath` for the current backend.

    Raises a `ValueError` that names the method (`method`, a class name),
    the format, the backend and the reason, with the way to export
    elsewhere when the backend cannot write the format.
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}; got {format!r}.")
    backend = keras.config.backend()
    if backend not in BACKENDS[format]:
        others = ", ".join(BACKENDS[format])
        raise ValueError(
            f"Cannot export {method} to format={format!r} under the "
            f"{backend} backend: {WHY_NOT[(format, backend)]}. Formats "
            f"written under {backend}: {supported_formats(backend)}. To "
            f"write {format!r}, save the model with "
            "`model.save_to_preset(directory)`, load it with "
            f"`from_preset(directory)` under KERAS_BACKEND={others.split(', ')[0]} "
            f"(any of: {others}) and export there; the weights files are "
            "backend-independent."
        )
    suffix = SUFFIXES[format]
    if suffix is not None and not str(filepath).endswith(suffix):
        raise ValueError(
            f"`filepath` for format={format!r} must end in {suffix!r}; got {str(filepath)!r}."
        )
    for module, pip_name in REQUIREMENTS.get((format, backend), ()):
        require(module, pip_name, f"exporting to format={format!r} under {backend}")


def require(module, pip_name, purpose):
    """Imports `module`, or raises an `ImportError` saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{purpose} needs the `{pip_name}` package: "
            f"`pip install {pip_name}` (or `pip install "
            f"ensemble-zoo[{EXTRAS.get(pip_name, 'export')}]`)."
        ) from error
