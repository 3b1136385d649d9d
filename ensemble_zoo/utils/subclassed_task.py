"""keras-hub tasks and backbones written as subclassed Keras models.

Every keras-hub `Task` and `Backbone` is a functional model, and Keras
makes a class functional by rewriting its class hierarchy: building any
functional keras-hub model replaces `keras.Model` with
`keras.src.models.functional.Functional` in the bases of keras-hub's
`PipelineModel` (the root of every `Task`) and of `Backbone`, for the rest
of the process; `PipelineModel.__init__` switches it back. A subclassed
model under those bases would change its methods (`layers`, `inputs`,
`get_config`, the weights-file layout) whenever a keras-hub model is built
elsewhere, and the switch back in its constructor would break the
functional keras-hub models already alive (a deep ensemble's members).

The zoo's classifiers and backbones are subclassed models (member-axis
logic in `call`). `SubclassedModelType` keeps them so: their method
resolution order never contains `Functional` (nor its base `Function`),
whatever keras-hub's bases hold at the moment, and `init_subclassed`
runs `keras.Model.__init__` plus the few lines of keras-hub's
constructors, without `PipelineModel`'s switch.
"""

import contextlib
import warnings

import keras
import keras_hub
import numpy as np

from ensemble_zoo.utils.validation import check_raw_images


def _functional_classes():
    from keras.src.models.functional import Functional
    from keras.src.ops.function import Function

    return (Functional, Function)


class SubclassedModelType(type):
    """Metaclass: the class's MRO leaves out Keras' functional classes.

    Python recomputes a class's MRO whenever a base's `__bases__` changes,
    through this `mro`, so the exclusion holds across keras-hub's switches.
    """

    def mro(cls):
        excluded = _functional_classes()
        return [c for c in super().mro() if c not in excluded]


def init_subclassed(model, *args, **kwargs):
    """Initializes a subclassed keras-hub `Task` or `Backbone` as their
    constructors would (`_initialized`, the layer-id set they keep), via
    `keras.Model.__init__` (no functional switch, no default compile)."""
    keras.Model.__init__(model, *args, **kwargs)
    model._functional_layer_ids = set()
    model._initialized = True


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

    def _run(self, method, x, *args, labels=False, **kwargs):
        if self.preprocessor is not None:
            check_raw_images(self, x)
            return getattr(keras_hub.models.Task, method)(self, x, *args, **kwargs)
        y = (args[0] if args else kwargs.get("y")) if labels else None
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
        if getattr(self.preprocessor, "image_converter", None) is None:
            return x
        if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
            return x.astype("float32")
        if hasattr(x, "dtype") and hasattr(x, "shape"):
            dtype = keras.backend.standardize_dtype(x.dtype)
            if dtype.startswith(("int", "uint")):
                return keras.ops.cast(x, "float32")
        return x
