import keras

from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TileEnsembleBackbone(WrappedModelsBackbone):
    """The feature model and head of a `TileEnsembleClassifier`.

    Args:
        feature_model: a built single-input Keras model mapping images to a
            feature grid `(batch, height, width, channels)` or to tokens
            `(batch, [1 +] height * width, channels)` (the classifier's
            layers up to its global pooling).
        head: a built Keras layer or model mapping `(n, channels)` features
            to logits `(n, classes)` (the layers after the pooling); the
            task applies it to every tile.
        dtype: optional dtype policy; with one other than the models',
            copies of them under it are used.
        adopt_models: bool, keyword-only. `True` holds the given models as
            they are, without a copy or a dtype change: what `from_config`
            passes (models it has just built under the config's dtype).
            Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): the feature map of `feature_model`.
    """

    wrapped = ("feature_model", "head")

    def __init__(self, feature_model, head, dtype=None, *, adopt_models=False, **kwargs):
        inputs_of = getattr(feature_model, "inputs", None)
        if not isinstance(feature_model, keras.Model) or not inputs_of or len(inputs_of) != 1:
            raise ValueError(
                "`feature_model` must be a built Keras model with a single "
                f"input; got {feature_model!r}."
            )
        if not isinstance(head, keras.Layer):
            raise ValueError(f"`head` must be a Keras layer or model; got {head!r}.")
        if not head.built:  # a head deserialized from a config
            head.build((None, feature_model.output.shape[-1]))
        feature_model = own_wrapped_model(feature_model, dtype, adopt=adopt_models)
        head = own_wrapped_model(head, dtype, adopt=adopt_models)

        # === Functional Model ===
        inputs = keras.Input(tuple(inputs_of[0].shape[1:]), name="images")
        outputs = feature_model(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.feature_model = feature_model
        self.head = head
