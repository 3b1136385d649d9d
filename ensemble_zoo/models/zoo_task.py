"""`ZooTask`: the loops, checks, weight loading and export that every
zoo classifier task shares (`EnsembleClassifier`,
`LossPredictionImageClassifier`)."""

import contextlib
import warnings

import keras
import keras_hub
import numpy as np

from ensemble_zoo.models.dict_inputs import backbone_attribute
from ensemble_zoo.models.dict_inputs import check_dict_inputs
from ensemble_zoo.models.dict_inputs import check_raw_texts
from ensemble_zoo.models.dict_inputs import check_token_values
from ensemble_zoo.models.loop_checks import check_loop_arguments
from ensemble_zoo.models.loop_checks import check_raw_image_batch
from ensemble_zoo.models.loop_checks import check_real_dtype
from ensemble_zoo.models.loop_checks import check_samples
from ensemble_zoo.models.loop_checks import is_tf_dataset
from ensemble_zoo.models.loop_checks import named_loop_arguments
from ensemble_zoo.models.quantization_modes import quantize_model
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_finite
from ensemble_zoo.utils.validation import check_raw_images
from ensemble_zoo.utils.validation import static_shape


class ZooTask:
    """The behaviour every zoo classifier task shares, in one place (no
    Keras base: a task lists it, or `EnsembleClassifier`, before its
    keras-hub task class). keras-hub overrides the loops once, in its
    `PipelineModel`; the zoo overrides them once, here.

    **Loops.** `fit`, `evaluate` and `predict` check their call once
    (`_check_loop_call`), before Keras builds or reuses a compiled step,
    and then run keras-hub's loop when the task has a preprocessor (the
    data go through its pipeline, as for every keras-hub task) and Keras'
    own otherwise (arrays, datasets and `keras.utils.PyDataset`s as
    given); see `_loop`. The `*_on_batch` methods check their batch
    (`_batch_inputs`). With a preprocessor, `check_raw_images` rejects
    images already scaled to [0, 1] and `_check_raw_loop_data(x, y)`
    checks what the model can see without preprocessing (labels; the
    images' rank, channels and finite values); without one,
    `_check_loop_data(x, y)` checks shape, dtype, a non-empty batch,
    finite values and labels. Datasets and generators are checked by
    shape in `__call__` only. Checking inside the compiled step is not
    enough: under JAX a step that raised leaves the model unusable (every
    later `predict` fails), and a retraced TensorFlow step sees an unknown
    batch shape and lets a wrong image size reach the backend. The checks
    read `member_input_shape` (one example's shape; `None` for dict
    inputs, whose `_check_inputs` is the task's own) and `num_classes`.

    **Weights.** Presets hold no optimizer state
    (`ensemble_zoo.presets.save_preset` strips it), while a keras-hub task
    compiles itself on construction: `load_weights` and
    `load_task_weights` keep the optimizer's fresh state without Keras'
    "Skipping variable loading for optimizer" warning.

    **Export.** `export` writes every format
    (`ensemble_zoo.export.export_model`); a task defines
    `_serving_output_names`, `_serving_outputs(inputs)` (the dict an
    export serves for what calling the task takes) and
    `_export_input_signature(format)`.

    **Backends.** The step functions come from
    `ensemble_zoo.utils.backend.zoo_step_function` (one compiled step per
    shape under `torch.compile`, the zoo's workarounds around each step);
    under PyTorch every variable is a `torch` parameter
    (`track_torch_parameters`).

    **Quantization.** `quantize` refuses a mode the model's zoo layers
    lack and leaves the preprocessor out
    (`ensemble_zoo.models.quantization_modes.quantize_model`).
    """

    # === Backends ===

    def _track_variables(self):
        backend_utils.track_torch_parameters(self)

    def named_parameters(self, *args, **kwargs):
        return backend_utils.torch_named_parameters(self, super().named_parameters, *args, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        backend_utils.clear_compiled_losses(self)
        return loss

    def make_train_function(self, force=False):
        make = super().make_train_function
        return backend_utils.zoo_step_function(self, "train", force, make, train=True)

    def make_test_function(self, force=False):
        return backend_utils.zoo_step_function(self, "test", force, super().make_test_function)

    def make_predict_function(self, force=False):
        make = super().make_predict_function
        return backend_utils.zoo_step_function(self, "predict", force, make)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        return quantize_model(self, super().quantize, mode, config, filters, **kwargs)

    # === Weights ===

    def load_weights(self, filepath, *args, **kwargs):
        with _optimizer_skip_quiet():
            return super().load_weights(filepath, *args, **kwargs)

    def load_task_weights(self, filepath):
        with _optimizer_skip_quiet():
            return super().load_task_weights(filepath)

    # === Input checks ===

    def _check_inputs(self, inputs, expected=None):
        """Rank, shape and floating dtype of one input tensor, or the keys,
        ranks and dtypes of a dict for a model that takes one (also run in
        `call`, where the tensors may be symbolic)."""
        template = getattr(self, "input", None)
        if expected is None and isinstance(template, dict):
            max_length = backbone_attribute(self, "max_sequence_length")
            check_dict_inputs(type(self).__name__, inputs, template, max_length)
            return
        expected = tuple(self.member_input_shape if expected is None else expected)
        if isinstance(inputs, (dict, list, tuple)):
            raise ValueError(
                f"{type(self).__name__} expects a single tensor of shape "
                f"(batch,) + {expected}; got a {type(inputs).__name__}."
            )
        shape = static_shape(inputs)
        layout = "(batch, " + ", ".join(str(d) for d in expected) + ")"
        if len(shape) != len(expected) + 1 or any(
            e is not None and s is not None and e != s for s, e in zip(shape[1:], expected)
        ):
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape {layout}; got shape {shape}."
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
        images gave NaN predictions and an accuracy of 0.1), or for dict
        inputs ids within the backbone's vocabulary (`check_token_values`)."""
        if isinstance(x, dict):
            if x and all(hasattr(v, "shape") for v in x.values()):
                self._check_inputs(x)
                check_token_values(self, x)
            return
        if isinstance(x, (list, tuple)):
            self._check_inputs(x)  # a single tensor (or dict) is expected
            return
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            return
        check_real_dtype(x)
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
            raise TypeError(f"`y` must hold integer class indices; got dtype {values.dtype}.")
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
        values, or raw texts for a tokenizer; labels)."""
        if getattr(self.preprocessor, "image_converter", None) is not None:
            shape = self.member_input_shape
            check_raw_image_batch(x, None if shape is None else shape[-1])
        elif getattr(self.preprocessor, "tokenizer", None) is not None:
            check_raw_texts(x)
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

    def _loop(self, model_loop, task_loop, x, args, kwargs):
        """Runs a loop after every check of its call: keras-hub's
        `task_loop` (which maps the data through the preprocessor) when the
        task has a preprocessor, else Keras' `model_loop` on the data as
        given (arrays, datasets, `keras.utils.PyDataset`s)."""
        loop = task_loop if self.preprocessor is not None else model_loop
        given = named_loop_arguments(loop, self, x, *args, **kwargs)
        self._check_loop_call(
            x,
            given.get("y"),
            batch_size=given.get("batch_size"),
            epochs=given.get("epochs", 1) if model_loop is keras.Model.fit else None,
            sample_weight=given.get("sample_weight"),
        )
        return loop(self, x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        if len(args) < 8 and "shuffle" not in kwargs and is_tf_dataset(x):
            # Keras' default `shuffle=True` cannot apply to a tf.data
            # dataset (the zoo's datasets shuffle themselves) and warned on
            # every `fit`, the README quickstart's included.
            kwargs["shuffle"] = False
        return self._loop(keras.Model.fit, keras_hub.models.Task.fit, x, args, kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return self._loop(keras.Model.evaluate, keras_hub.models.Task.evaluate, x, args, kwargs)

    def predict(self, x, *args, **kwargs):
        return self._loop(keras.Model.predict, keras_hub.models.Task.predict, x, args, kwargs)

    # keras-hub preprocesses in the *_on_batch methods too (and passes the
    # data through unchanged without a preprocessor).
    def predict_on_batch(self, x):
        return super().predict_on_batch(self._batch_inputs(x))

    def test_on_batch(self, x, y=None, sample_weight=None, *args, **kwargs):
        check_samples(x, y, sample_weight)
        return super().test_on_batch(self._batch_inputs(x, y), y, sample_weight, *args, **kwargs)

    def train_on_batch(self, x, y=None, sample_weight=None, *args, **kwargs):
        check_samples(x, y, sample_weight)
        return super().train_on_batch(self._batch_inputs(x, y), y, sample_weight, *args, **kwargs)

    def _batch_inputs(self, x, y=None):
        """The checks of `_run` for one batch, and integer images (uint8
        pixels) cast to float32 for the image converter: it runs eagerly
        here and would resize them in uint8, rounding to whole pixel
        values, where `predict`'s pipeline resizes in float."""
        check_samples(x, y)
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

    # === Export ===

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
        SavedModel's `serve(images)` returns a dict), for any batch size. The formats each
        backend writes
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
            self,
            filepath,
            format=format,
            input_signature=input_signature,
            include_preprocessing=include_preprocessing,
            verify=verify,
            verbose=verbose,
            **kwargs,
        )


@contextlib.contextmanager
def _optimizer_skip_quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        yield
