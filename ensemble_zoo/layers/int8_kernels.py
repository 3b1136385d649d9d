"""int8 weight quantization of the zoo's member-axis layers.

Keras quantizes `Dense` and `EinsumDense` (`model.quantize("int8")`); the
zoo's own layers with member-axis kernels (`GroupedDense`,
`HydraAttention`, `BatchEnsembleDense`) take the same call through
`Int8KernelsMixin`: each kernel becomes an int8 variable of the same name
and shape with a float `<name>_scale` (AbsMax per output channel, over the
kernel's contracted axes, as Keras' `AbsMaxQuantizer` computes it), the
layer's policy becomes `int8_from_<policy>` (so `get_config`, keras-hub's
`DTypePolicyMap` and `from_preset` rebuild it quantized), and its call
multiplies by the dequantized kernel `int8 / scale` in the compute dtype.

Only the weights are quantized: Keras' `Dense` also quantizes each input
row to int8 and multiplies in integers; the zoo's einsums contract over
member and head axes whose layouts differ per layer, and the dequantized
product keeps them one code path with the float call (agreement with
float32 is in the int8 table of the documentation's benchmarks page). Other modes (`"int4"`,
`"float8"`, GPTQ, AWQ) have no path here and raise.
"""

import keras
import numpy as np
from keras import ops

SUPPORTED_MODES = ("int8",)


def int8_quantize(values, axes):
    """Symmetric AbsMax int8 quantization of `values` over `axes`.

    Args:
        values: NumPy array, a float kernel.
        axes: tuple of ints, the axes the kernel contracts (one scale per
            remaining index, i.e. per output channel and member).

    Returns:
        `(quantized, scale)`: int8 values in `[-127, 127]` and float32
        scales of `values`' shape with `axes` of size 1, such that
        `quantized / scale` approximates `values`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers.int8_kernels import int8_quantize

    kernel = np.array([[0.25, -2.0], [-1.0, 0.5]], "float32")
    q, scale = int8_quantize(kernel, axes=(0,))
    q.tolist()  # [[32, -127], [-127, 32]]
    ```
    """
    # Keras' own AbsMax quantizer (what `Dense.quantize` uses), on the host.
    quantized, scale = keras.quantizers.abs_max_quantize(
        np.asarray(values, dtype="float32"), axis=tuple(axes), to_numpy=True
    )
    return (
        np.asarray(ops.convert_to_numpy(quantized)),
        np.asarray(ops.convert_to_numpy(scale), dtype="float32"),
    )


def unsupported_mode_error(layer, mode):
    """The error of a zoo layer asked for a mode it has no path for."""
    return NotImplementedError(
        f"{type(layer).__name__} '{layer.name}' quantizes to "
        f"{' or '.join(map(repr, SUPPORTED_MODES))} only (its kernels, per "
        f"output channel); got mode={mode!r}."
    )


class Int8KernelsMixin:
    """int8 weight quantization for a layer with member-axis kernels.

    A layer lists its kernels in `int8_kernels` (attribute name -> the
    axes the kernel contracts), creates each in `build` with
    `self.add_kernel(name, shape, ...)` (a float variable, or nothing yet
    when the layer's policy is quantized), calls `self.build_int8_kernels()`
    last in `build`, and reads each kernel in `call` as
    `self.kernel_value(name)`. `quantize("int8")` then replaces the float
    kernels in place, and a layer rebuilt from a quantized config creates
    the same variables in the same order (weights files stay compatible).
    """

    int8_kernels = {}

    def add_kernel(self, name, shape, initializer, regularizer=None):
        """A float kernel variable, or `None` when the layer is quantized
        (`build_int8_kernels` then creates it as int8)."""
        mode = self.quantization_mode
        if mode is None:
            return self.add_weight(
                name=name, shape=shape, initializer=initializer, regularizer=regularizer
            )
        if mode not in SUPPORTED_MODES:
            raise unsupported_mode_error(self, mode)
        pending = self.__dict__.setdefault("_pending_int8_kernels", {})
        pending[name] = tuple(shape)
        return None

    def build_int8_kernels(self):
        """Creates the int8 kernels `add_kernel` deferred (a quantized build)."""
        pending = self.__dict__.pop("_pending_int8_kernels", {})
        for name in self.int8_kernels:
            if name in pending:
                self._add_int8_kernel(name, pending[name])
        if pending:
            self._is_quantized = True

    def _add_int8_kernel(self, name, shape, values=None):
        axes = self.int8_kernels[name]
        scale_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
        kernel = self.add_weight(
            name=name, shape=shape, initializer="zeros", dtype="int8", trainable=False
        )
        scale = self.add_weight(
            name=f"{name}_scale", shape=scale_shape, initializer="ones", trainable=False
        )
        if values is not None:
            quantized, scales = int8_quantize(values, axes)
            kernel.assign(quantized)
            scale.assign(scales)
        setattr(self, name, kernel)
        setattr(self, f"{name}_scale", scale)

    def kernel_value(self, name):
        """Kernel `name` in the compute dtype (dequantized when int8)."""
        kernel = getattr(self, name)
        if self.quantization_mode is None:
            return kernel
        scale = ops.cast(getattr(self, f"{name}_scale"), self.compute_dtype)
        return ops.divide(ops.cast(kernel, self.compute_dtype), scale)

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' wrapper has checked the layer and resolved `config`.
        if mode not in SUPPORTED_MODES:
            raise unsupported_mode_error(self, mode)
        if getattr(config, "weight_quantizer", None) is not None:
            raise NotImplementedError(
                f"{type(self).__name__} '{self.name}' quantizes its kernels "
                "with its own AbsMax quantizer (per output channel); a "
                "`config` with a `weight_quantizer` is not supported."
            )
        for name in self.int8_kernels:
            values = ops.convert_to_numpy(getattr(self, name))
            delattr(self, name)
            self._add_int8_kernel(name, values.shape, values)
        self._is_quantized = True
        if self.dtype_policy.quantization_mode is None:
            self.dtype_policy = keras.dtype_policies.get(f"{mode}_from_{self.dtype_policy.name}")

    def _int8_call(self, *args, **kwargs):
        # `call` reads every kernel through `kernel_value`.
        return self.call(*args, **kwargs)
