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
