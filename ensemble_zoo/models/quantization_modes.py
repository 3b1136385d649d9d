"""`quantize` on zoo models: a mode some of their layers lack is an error.

Keras' `Model.quantize` turns a layer's `NotImplementedError` into a
warning and leaves that layer in float: `model.quantize("float8")` on a
Hydra model would quantize its few `Dense` layers and silently keep every
`GroupedDense` and `HydraAttention` kernel in float32. The zoo's tasks and
backbones check first and raise, naming the model and the layers.
"""

import re

import keras

from ensemble_zoo.layers.int8_kernels import SUPPORTED_MODES
from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin


def _selected(layer, filters):
    # As Keras' `Model.quantize` applies `filters` (to the layer's name).
    if filters is None:
        return True
    if isinstance(filters, str):
        return bool(re.search(filters, layer.name))
    if isinstance(filters, (list, tuple)):
        return any(re.search(pattern, layer.name) for pattern in filters)
    return bool(filters(layer)) if callable(filters) else True


def check_quantization_mode(model, mode=None, config=None, filters=None):
    """Raises when `model.quantize(mode, config, filters)` would leave zoo
    layers with member-axis kernels in float.

    Raises:
        NotImplementedError: naming the model's class (its method) and the
            layers that have no path for `mode`.
    """
    if isinstance(config, str):
        mode, config = config, None
    if mode is None and config is not None:
        mode = getattr(config, "mode", None)
    if mode is None or mode in SUPPORTED_MODES:
        return
    layers = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, Int8KernelsMixin)
        and layer.quantization_mode is None
        and _selected(layer, filters)
    ]
    if layers:
        kinds = sorted({type(layer).__name__ for layer in layers})
        raise NotImplementedError(
            f"{type(model).__name__} cannot be quantized with mode={mode!r}: "
            f"its {len(layers)} {' / '.join(kinds)} layers (e.g. "
            f"'{layers[0].path}') quantize to "
            f"{' or '.join(map(repr, SUPPORTED_MODES))} only. Use mode="
            f"{SUPPORTED_MODES[0]!r}, or `filters` that leave them out."
        )


class QuantizationModesMixin:
    """`quantize` for the zoo's backbones (the tasks have it from
    `ZooTask`).

    It refuses a mode the model's zoo layers lack, instead of Keras' warning
    per layer (see `check_quantization_mode`), and leaves a task's
    preprocessor out: its layers hold no weights, and Keras' `quantize`
    raises on the preprocessor's `Resizing` until a first `predict` has
    built it (keras-hub 0.32's own `ViTImageClassifier` raises the same
    there).
    """

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        return quantize_model(self, super().quantize, mode, config, filters, **kwargs)


def quantize_model(model, quantize, mode=None, config=None, filters=None, **kwargs):
    """`quantize(mode, ...)` (Keras' `Model.quantize` of `model`) after
    `check_quantization_mode`, with the model's preprocessor left out
    (see `QuantizationModesMixin`)."""
    check_quantization_mode(model, mode, config, filters)
    preprocessor = getattr(model, "preprocessor", None)
    if isinstance(preprocessor, keras.layers.Layer):
        skipped = {id(layer) for layer in preprocessor._flatten_layers()}
        given = filters

        def filters(layer):
            return id(layer) not in skipped and _selected(layer, given)

    return quantize(mode, config=config, filters=filters, **kwargs)
