"""Behaviour shared by the zoo's keras-hub tasks: quiet weight loading,
the input checks of the training and inference loops, and export."""

import contextlib
import inspect
import warnings

import keras
import keras_hub
import numpy as np

from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_finite
from ensemble_zoo.utils.validation import check_raw_images
from ensemble_zoo.utils.validation import static_shape


class PresetWeightsMixin:
    """Loads weights files without optimizer state quietly.

    Presets hold no optimizer state (`ensemble_zoo.presets.save_preset`
    strips it), while a keras-hub task compiles itself on construction:
    Keras then warned "Skipping variable loading for optimizer" on every
    load by keras-hub's own loader. The optimizer keeps its fresh state,
    as intended.
    """

    def load_weights(self, filepath, *args, **kwargs):
        with _optimizer_skip_quiet():
            return super().load_weights(filepath, *args, **kwargs)

    def load_task_weights(self, filepath):
        with _optimizer_skip_quiet():
            return super().load_task_weights(filepath)


@contextlib.contextmanager
def _optimizer_skip_quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        yield


class TaskLoopsMixin:
    """`fit`, `evaluate`, `predict` and the `*_on_batch` methods of a zoo
    task, with one validation path that all of them take before Keras
    builds or reuses a compiled step.

    With a preprocessor, the data go through keras-hub's pipeline (as for
    every keras-hub task), after `check_raw_images` rejected images already
    scaled to [0, 1] and `_check_raw_loop_data(x, y)` checked what the
    model can see without preprocessing (labels; the images' rank,
    channels and finite values). Without one, the model takes
    preprocessed data and runs `keras.Model`'s loops on them as given,
    after `_check_loop_data(x, y)` (shape, dtype, a non-empty batch,
    finite values, labels). The labels `y` are `None` for `predict` or
    when the data carry them; datasets and generators are checked in
    `call` (shapes) only.

    Checking inside `call` is not enough: under JAX a compiled step that
    raised leaves the model unusable (every later `predict` fails), and a
    retraced TensorFlow step sees an unknown batch shape and lets a wrong
    image size reach the backend.

    The checks read `member_input_shape` (one example's shape; `None` for
    dict inputs, which `_check_inputs` overrides check) and `num_classes`.
    """

    # === Input checks ===

    def _check_inputs(self, inputs, expected=None):
        """Rank, shape and floating dtype of one input tensor (also run in
        `call`, where the tensor may be symbolic)."""
        expected = tuple(self.member_input_shape if expected is None else expected)
        if isinstance(inputs, (dict, list, tuple)):
            raise ValueError(
                f"{type(self).__name__} expects a single tensor of shape "
                f"(batch,) + {expected}; got a {type(inputs).__name__}."
            )
        shape = static_shape(inputs)
        layout = "(batch, " + ", ".join(str(d) for d in expected) + ")"
        if len(shape) != len(expected) + 1 or any(
            e is not None and s is not None and e != s
            for s, e in zip(shape[1:], expected)
        ):
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape {layout}; "
                f"got shape {shape}."
            )
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "float" not in dtype:
            raise ValueError(
                f"{type(self).__name__} expects floating-point inputs (images "
                "scaled to [0, 1], as `ensemble_zoo.datasets` returns them); "
                f"got dtype {dtype}."
            )

    def _check_data(self, x):
        """Checks the array inputs of the loops: `_check_inputs`, then, for
        values that exist now, a non-empty batch of finite numbers (NaN
        images gave NaN predictions and an accuracy of 0.1)."""
        if isinstance(x, dict):
            if x and all(hasattr(v, "shape") for v in x.values()):
                self._check_inputs(x)
            return
        if isinstance(x, (list, tuple)):
            self._check_inputs(x)  # a single tensor (or dict) is expected
            return
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            return
        _check_real_dtype(x)
        self._check_inputs(x)
        values = backend_utils.concrete_value(x)
        if values is None:
            return
        if values.shape[0] == 0:
            raise ValueError(f"`x` must be a non-empty batch; got shape {values.shape}.")
        if values.dtype.kind == "f":
            check_finite(values, "x")

    def _check_labels(self, y):
        """Checks array labels: integer class indices `(batch,)` or `(batch,
        1)` in `[0, num_classes)` (the loss's `ignore_class` allowed).
        Out-of-range labels gave a silent number under JAX and a runtime
        error under TensorFlow; fractional labels were truncated."""
        if y is None or isinstance(y, dict) or not hasattr(y, "shape"):
            return
        values = backend_utils.concrete_value(y)
        if values is None:
            return
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        if values.ndim != 1:
            raise ValueError(
                "`y` must hold class indices of shape (batch,) or (batch, 1); "
                f"got shape {values.shape}."
            )
        if values.dtype.kind not in "iuf":
            raise TypeError(
                f"`y` must hold integer class indices; got dtype {values.dtype}."
            )
        if values.dtype.kind == "f":
            check_finite(values, "y")
            if not np.all(values == np.round(values)):
                raise ValueError(
                    "`y` must hold integer class indices; got fractional "
                    f"values such as {values[values != np.round(values)][0].item()!r}."
                )
        ignore = getattr(getattr(self, "loss", None), "ignore_class", None)
        valid = (values >= 0) & (values < self.num_classes)
        if ignore is not None:
            valid |= values == ignore
        if values.size and not valid.all():
            raise ValueError(
                f"`y` must hold class indices in [0, {self.num_classes - 1}]; "
                f"got {values[~valid][0].item()!r} (at index {int(np.argmin(valid))})."
            )

    def _check_loop_data(self, x, y=None):
        """The checks of the loops without a preprocessor."""
        self._check_data(x)
        self._check_labels(y)

    def _check_raw_loop_data(self, x, y=None):
        """The checks of the loops with a preprocessor: what the model can
        check without preprocessing (the raw images' rank, channels and
        values; labels)."""
        if getattr(self.preprocessor, "image_converter", None) is not None:
            shape = self.member_input_shape
            check_raw_image_batch(x, None if shape is None else shape[-1])
        self._check_labels(y)

    def _check_loop_call(self, x, y=None, batch_size=None, epochs=None, sample_weight=None):
        """Every check of a loop call: its arguments, the agreement of `x`,
        `y` and `sample_weight`, then the data on the preprocessor path
        (`_check_raw_loop_data`) or without one (`_check_loop_data`)."""
        check_loop_arguments(x, y, sample_weight, batch_size, epochs)
        if self.preprocessor is not None:
            check_raw_images(self, x)
            self._check_raw_loop_data(x, y)
        else:
            self._check_loop_data(x, y)

    def _run(self, method, x, *args, **kwargs):
        base = keras_hub.models.Task if self.preprocessor is not None else keras.Model
        function = getattr(base, method)
        given = named_loop_arguments(function, self, x, *args, **kwargs)
        self._check_loop_call(
            x, given.get("y"), batch_size=given.get("batch_size"),
            epochs=given.get("epochs", 1) if method == "fit" else None,
            sample_weight=given.get("sample_weight"),
        )
        return function(self, x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        return self._run("fit", x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return self._run("evaluate", x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        return self._run("predict", x, *args, **kwargs)

    # keras-hub preprocesses in the *_on_batch methods too (and passes the
    # data through unchanged without a preprocessor).
    def predict_on_batch(self, x):
        return super().predict_on_batch(self._batch_inputs(x))

    def test_on_batch(self, x, y=None, sample_weight=None, *args, **kwargs):
        _check_samples(x, y, sample_weight)
        return super().test_on_batch(
            self._batch_inputs(x, y), y, sample_weight, *args, **kwargs
        )

    def train_on_batch(self, x, y=None, sample_weight=None, *args, **kwargs):
        _check_samples(x, y, sample_weight)
        return super().train_on_batch(
            self._batch_inputs(x, y), y, sample_weight, *args, **kwargs
        )

    def _batch_inputs(self, x, y=None):
        """The checks of `_run` for one batch, and integer images (uint8
        pixels) cast to float32 for the image converter: it runs eagerly
        here and would resize them in uint8, rounding to whole pixel
        values, where `predict`'s pipeline resizes in float."""
        _check_samples(x, y)
        if self.preprocessor is None:
            self._check_loop_data(x, y)
            return x
        check_raw_images(self, x)
        self._check_raw_loop_data(x, y)
        if getattr(self.preprocessor, "image_converter", None) is None:
            return x
        if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
            return x.astype("float32")
        if hasattr(x, "dtype") and hasattr(x, "shape"):
            dtype = keras.backend.standardize_dtype(x.dtype)
            if dtype.startswith(("int", "uint")):
                return keras.ops.cast(x, "float32")
        return x


def _check_real_dtype(x):
    """A `TypeError` naming `x` for strings, complex numbers and objects
    (Keras' dtype parsing failed on them with "Invalid dtype")."""
    if isinstance(x, np.ndarray):
        kind, name = x.dtype.kind, str(x.dtype)
    else:
        name = str(getattr(x.dtype, "name", x.dtype))
        kind = "c" if "complex" in name else "U" if name in ("string", "object") else "f"
    if kind not in "iubf":
        raise TypeError(f"`x` must hold real numbers; got dtype {name}.")


def named_loop_arguments(function, *args, **kwargs):
    """The arguments of a call of `function` by name (those in its
    `**kwargs` too): keras-hub's loops take `fit(x, y, batch_size,
    sample_weight, ...)`, Keras' `fit(x, y, batch_size, epochs, ...)`."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs).arguments
    except TypeError:
        return {}  # the call itself raises Keras' own error
    named = dict(bound)
    for key, value in bound.items():
        if inspect.signature(function).parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
    return named


def check_loop_arguments(x, y=None, sample_weight=None, batch_size=None, epochs=None):
    """The arguments of a loop call (`fit`, `evaluate`, `predict`, the
    `*_on_batch` methods), for every zoo task: `batch_size` and `epochs`
    (when given), and `x`, `y` and `sample_weight` that agree."""
    _check_batch_size(batch_size)
    if epochs is not None:
        _check_epochs(epochs)
    _check_samples(x, y, sample_weight)


def _check_epochs(epochs):
    """`epochs` of `fit`: a non-negative int (Keras ran no epoch for -1
    and failed comparing a string)."""
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise TypeError(f"`epochs` must be a non-negative int; got {epochs!r}.")


def _check_samples(x, y=None, sample_weight=None):
    """`x` is given, and the arrays of a loop call agree: as many labels
    and sample weights as examples, and sample weights finite and
    non-negative (NaN or negative weights trained silently)."""
    if x is None:
        raise TypeError(
            "`x` must be an array, a tensor or a dataset of inputs; got None."
        )
    counts = {}
    for name, value in (("x", x), ("y", y), ("sample_weight", sample_weight)):
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, list):  # a list of examples (texts, rows)
            counts[name] = len(value)
            if name != "sample_weight":
                continue
        values = backend_utils.concrete_value(value) if hasattr(value, "shape") or isinstance(value, list) else None
        if values is None or values.ndim == 0:
            continue
        counts[name] = values.shape[0]
        if name == "sample_weight":
            if values.dtype.kind not in "iuf":
                raise TypeError(
                    f"`sample_weight` must hold real numbers; got dtype {values.dtype}."
                )
            check_finite(values, "sample_weight")
            if (values < 0).any():
                raise ValueError(
                    "`sample_weight` must be non-negative; got "
                    f"{values[values < 0].ravel()[0].item()!r}."
                )
    if len(set(counts.values())) > 1:
        raise ValueError(
            "`x`, `y` and `sample_weight` must hold the same number of "
            "examples; got " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + "."
        )


def _check_batch_size(batch_size):
    """`batch_size` of the loops: None or a positive int (a string failed
    deep inside TensorFlow's data pipeline)."""
    if batch_size is None:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise TypeError(f"`batch_size` must be a positive int or None; got {batch_size!r}.")


def check_raw_image_batch(x, channels):
    """Raw images for an image converter: a non-empty batch `(batch,
    height, width, channels)` of finite numbers with the model's channel
    count (any height and width: the converter resizes). Arrays whose
    values exist now are checked; datasets and graph tensors are not."""
    from ensemble_zoo.utils.backend import concrete_value

    if not (hasattr(x, "shape") and hasattr(x, "dtype")) and not isinstance(x, list):
        return
    values = concrete_value(x)
    if values is None:
        return
    if values.dtype.kind not in "iuf":
        # bool images would become pixel values 0 and 1 silently.
        raise TypeError(f"`x` must hold numeric images; got dtype {values.dtype}.")
    if values.ndim != 4 or values.shape[0] == 0:
        raise ValueError(
            "`x` must be a non-empty batch of images (batch, height, width, "
            f"{channels}); got shape {values.shape}."
        )
    if channels is not None and values.shape[-1] != channels:
        raise ValueError(
            f"`x` must have {channels} channel(s) (batch, height, width, "
            f"{channels}); got shape {values.shape}."
        )
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        bad = int(values.size - np.isfinite(values).sum())
        raise ValueError(f"`x` holds {bad} NaN or infinite pixel values.")


class ServingExportMixin:
    """`export` in every format (`ensemble_zoo.export.export_model`).

    A task lists it before its keras-hub class and defines
    `_serving_output_names`, `_serving_outputs(inputs)` (the dict an
    export serves for what calling the task takes) and
    `_export_input_signature(format)`.
    """

    def export(
        self,
        filepath,
        format="tf_saved_model",
        verbose=None,
        input_signature=None,
        include_preprocessing=False,
        verify=True,
        **kwargs,
    ):
        """Exports the model with its serving outputs, in any format.

        Every format serves the task's named outputs: for an ensemble
        classifier `probabilities` `(batch, classes)`, `member_logits`
        `(batch, members, classes)`, `total`, `aleatoric` and `epistemic`
        `(batch,)` (nats); for loss prediction `logits`, `probabilities`
        and `uncertainty`. They are named where the format has names (the
        SavedModel's `serve(images)` returns a dict), for any batch size. The formats each backend writes
        (`ensemble_zoo.export.supported_formats()`):

        - `"tf_saved_model"` (a directory): TensorFlow, JAX;
        - `"onnx"` (`.onnx`): TensorFlow (tf2onnx), JAX (jax2onnx),
          PyTorch (`torch.onnx`, dynamo);
        - `"litert"` (`.tflite`): TensorFlow, LiteRT built-in ops only;
        - `"torch"` (`.pt2`, `torch.export`): PyTorch;
        - `"openvino"` (`.xml` + `.bin`, float32 weights): all three.

        Another backend's format is a `ValueError` saying where to export
        it (the weights files are backend-independent). A converter that
        fails, or an artifact whose outputs differ from the model's, raises
        `ensemble_zoo.export.ExportError` naming the method, format and
        reason: with `verify=True` (default) the artifact is run by its own
        runtime (`ensemble_zoo.export.ExportedModel`) after writing.

        The artifact takes what calling the model takes (for the digits
        presets, float32 images in [0, 1]), as keras-hub exports;
        `include_preprocessing=True` puts the preprocessor's image
        converter in the graph so it takes raw images as `predict` does.

        Args:
            filepath: str, the directory or file to write.
            format: one of `ensemble_zoo.export.FORMATS`. Defaults to
                `"tf_saved_model"`.
            verbose: accepted as `keras.Model.export` takes it.
            input_signature: optional list of `keras.InputSpec`; defaults
                to the model's input with a dynamic batch size.
            include_preprocessing: bool, defaults to `False`.
            verify: bool, defaults to `True`.
            **kwargs: the format's converter options (`opset_version`,
                LiteRT converter attributes, `torch.export` arguments).

        Example:

        ```python
        import ensemble_zoo

        model = ensemble_zoo.models.EnsembleClassifier.from_preset(
            "vit_tiny_digits")
        # Raw digits (0-16) in, as `predict` takes them.
        model.export("vit.onnx", format="onnx", include_preprocessing=True)
        served = ensemble_zoo.export.ExportedModel("vit.onnx")
        raw, _ = ensemble_zoo.datasets.load_arrays("digits", "test", raw=True)
        sorted(served(raw[:4]))
        # ['aleatoric', 'epistemic', 'member_logits', 'probabilities', 'total']
        ```
        """
        from ensemble_zoo.export import export_model

        return export_model(
            self, filepath, format=format, input_signature=input_signature,
            include_preprocessing=include_preprocessing, verify=verify,
            verbose=verbose, **kwargs,
        )
