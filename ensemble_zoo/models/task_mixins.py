"""Behaviour shared by the zoo's keras-hub tasks: quiet weight loading and
the input checks of the training and inference loops."""

import contextlib
import warnings

import keras
import keras_hub
import numpy as np

from ensemble_zoo.utils.validation import check_raw_images


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
    """`fit`, `evaluate`, `predict` and the `*_on_batch` methods of a zoo task.

    With a preprocessor, the data go through keras-hub's pipeline (as for
    every keras-hub task), after `check_raw_images` rejected images already
    scaled to [0, 1]. Without one, the model takes preprocessed data and
    runs `keras.Model`'s loops on them as given, after the
    `_check_loop_data(x, y)` hook (the labels `y` are `None` for `predict`
    or when the data carry them). Both checks run before Keras builds or
    reuses a compiled step, in every one of these methods.
    """

    def _check_loop_data(self, x, y=None):
        """Checks array data before Keras builds a compiled step; models
        override it (the default accepts everything)."""

    def _check_raw_loop_data(self, x, y=None):
        """Checks the raw array data a preprocessor will take, before
        Keras builds a compiled step (what the model can check without
        preprocessing them: labels, the images' rank, channels and
        values); models override it (the default accepts everything)."""

    def _run(self, method, x, *args, labels=False, **kwargs):
        y = (args[0] if args else kwargs.get("y")) if labels else None
        position = 1 if labels else 0  # fit(x, y, batch_size), predict(x, batch_size)
        _check_batch_size(
            kwargs.get("batch_size", args[position] if len(args) > position else None)
        )
        if self.preprocessor is not None:
            check_raw_images(self, x)
            self._check_raw_loop_data(x, y)
            return getattr(keras_hub.models.Task, method)(self, x, *args, **kwargs)
        self._check_loop_data(x, y)
        return getattr(keras.Model, method)(self, x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        return self._run("fit", x, *args, labels=True, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return self._run("evaluate", x, *args, labels=True, **kwargs)

    def predict(self, x, *args, **kwargs):
        return self._run("predict", x, *args, **kwargs)

    # keras-hub preprocesses in the *_on_batch methods too (and passes the
    # data through unchanged without a preprocessor).
    def predict_on_batch(self, x):
        return super().predict_on_batch(self._batch_inputs(x))

    def test_on_batch(self, x, y=None, *args, **kwargs):
        return super().test_on_batch(self._batch_inputs(x, y), y, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        return super().train_on_batch(self._batch_inputs(x, y), y, *args, **kwargs)

    def _batch_inputs(self, x, y=None):
        """The checks of `_run` for one batch, and integer images (uint8
        pixels) cast to float32 for the image converter: it runs eagerly
        here and would resize them in uint8, rounding to whole pixel
        values, where `predict`'s pipeline resizes in float."""
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

    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return
    values = concrete_value(x)
    if values is None:
        return
    if values.dtype.kind not in "iubf":
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
