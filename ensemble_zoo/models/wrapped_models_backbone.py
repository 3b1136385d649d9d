"""keras-hub backbones holding the whole Keras models an ensemble wraps."""

import keras
import keras_hub
from keras import ops

from ensemble_zoo.utils.model_copies import serialize_wrapped_model
from ensemble_zoo.utils.subclassed_task import PresetWeightsMixin
from ensemble_zoo.utils.subclassed_task import SubclassedModelType
from ensemble_zoo.utils.subclassed_task import init_subclassed


def wrapped_models(value, backbone, name, backbone_cls):
    """The wrapped model(s) of a model-wrapping ensemble: the `name`
    argument, or those of `backbone` (a classifier rebuilt from its
    config); exactly one must be given."""
    if (value is None) == (backbone is None):
        raise ValueError(
            f"Pass exactly one of `{name}` and `backbone` (a "
            f"{backbone_cls.__name__}); got "
            f"{'both' if value is not None else 'neither'}."
        )
    if backbone is None:
        return value
    if not isinstance(backbone, backbone_cls):
        raise TypeError(
            f"`backbone` must be a {backbone_cls.__name__}; got "
            f"{type(backbone).__name__}."
        )
    return getattr(backbone, name)


def member_io_shapes(member, index):
    """`(input_shape, num_classes)` of a wrapped single-input classifier
    (`index` names it in errors: `members[index]`)."""
    inputs = getattr(member, "inputs", None)
    if not inputs or len(inputs) != 1:
        raise ValueError(
            f"`members[{index}]` must be a built Keras model with a single "
            "input (e.g. a keras_hub ViTImageClassifier or a functional "
            f"model); got {type(member).__name__}."
        )
    input_shape = tuple(inputs[0].shape[1:])
    output = member(keras.KerasTensor((None,) + input_shape))
    if isinstance(output, (dict, list, tuple)) or len(output.shape) != 2:
        raise ValueError(
            f"`members[{index}]` must map (batch, ...) inputs to logits of "
            f"shape (batch, classes); its output is {output!r}."
        )
    return input_shape, int(output.shape[-1])


class WrappedModelsBackbone(
    PresetWeightsMixin, keras_hub.models.Backbone, metaclass=SubclassedModelType
):
    """Base of the backbones of the zoo's model-wrapping ensembles.

    Deep ensembles, MC dropout, subnetwork and tile ensembles wrap whole
    Keras models (typically keras-hub classifiers). Their keras-hub
    backbone holds those models under the attribute names in `wrapped`:
    the architecture the ensemble is made of, so `config.json` and
    `model.weights.h5` of a preset describe them and keras-hub finds the
    ensemble's task class from the backbone's class. The task keeps only
    the method (sampling, masks, tiling).

    A subclassed Keras model (see `ensemble_zoo.utils.subclassed_task`).
    A subclass sets `wrapped` (constructor argument and attribute names;
    each a Keras model or a list of them) and may implement `call`.
    """

    wrapped = ()

    def __init__(self, dtype=None, **kwargs):
        missing = [key for key in self.wrapped if key not in kwargs]
        if missing:
            raise TypeError(f"{type(self).__name__} needs the argument(s) {missing}.")
        models = {key: kwargs.pop(key) for key in self.wrapped}
        init_subclassed(self, dtype=dtype, **kwargs)
        for key, value in models.items():
            setattr(self, key, list(value) if isinstance(value, (list, tuple)) else value)
        self.built = True

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in self.wrapped:
            value = getattr(self, key)
            config[key] = (
                [serialize_wrapped_model(m) for m in value]
                if isinstance(value, list) else serialize_wrapped_model(value)
            )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls.wrapped:
            value = config[key]
            config[key] = (
                [keras.saving.deserialize_keras_object(m) for m in value]
                if isinstance(value, list) else keras.saving.deserialize_keras_object(value)
            )
        return cls(**config)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class DeepEnsembleBackbone(WrappedModelsBackbone):
    """The members of a `DeepEnsembleClassifier`, run one after another.

    Args:
        members: list of built single-input Keras classifiers.

    Returns (call): member logits `(batch, members, classes)`.
    """

    wrapped = ("members",)

    def call(self, inputs, training=None):
        return ops.stack([m(inputs, training=training) for m in self.members], axis=1)


class _OneModelBackbone(WrappedModelsBackbone):
    wrapped = ("model",)

    def call(self, inputs, training=None):
        return self.model(inputs, training=training)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MCDropoutBackbone(_OneModelBackbone):
    """The network of an `MCDropoutClassifier` (its dropout layers set
    by the classifier).

    Args:
        model: a built single-input Keras classifier.
    """


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SubnetworkEnsembleBackbone(_OneModelBackbone):
    """The network of a `SubnetworkEnsembleClassifier`, its masked dense
    layers included.

    Args:
        model: a built single-input Keras classifier.
    """


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TileEnsembleBackbone(WrappedModelsBackbone):
    """The feature model and head of a `TileEnsembleClassifier`.

    Args:
        feature_model: the classifier's layers up to its global pooling.
        head: the layer after the pooling.

    Returns (call): the feature map of `feature_model`.
    """

    wrapped = ("feature_model", "head")

    def call(self, inputs, training=None):
        return self.feature_model(inputs, training=training)
