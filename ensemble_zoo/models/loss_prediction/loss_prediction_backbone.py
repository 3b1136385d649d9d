"""The backbones of a loss-prediction model: a keras-hub ViT, or the
embedding of a keras-hub classifier of any family."""

import keras
import keras_hub

from ensemble_zoo.models.member_heads import head_features
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossPredictionViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` read by a loss-prediction head.

    The architecture is the ViT's; the class names the method in a
    preset's `config.json`, so `keras_hub.models.ImageClassifier.from_preset`
    finds `LossPredictionImageClassifier`, which gives its ViT this class.

    Args:
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossPredictionModelBackbone(WrappedModelsBackbone):
    """The embedding a loss-prediction head reads in a keras-hub classifier
    of any family: a copy of `model` (config and weights; `model` is not
    changed) run up to its last `Dense` layer, whose input it returns
    (`ensemble_zoo.models.member_heads.head_features`: the family's own
    pooling and hidden head layers included).

    What `LossPredictionImageClassifier.from_keras_hub` builds for a
    classifier other than a ViT; its config holds the plain classifier,
    so the zoo's `from_preset` rebuilds it.

    Args:
        model: a built keras-hub classifier (image or text) whose output
            is its last `Dense` layer's logits.
        dtype: optional dtype policy for every layer.
        adopt_models: bool, keyword-only: hold `model` as it is (what
            `from_config` passes). Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): the pooled embeddings `(batch, dim)`.
    """

    wrapped = ("model",)

    def __init__(self, model, dtype=None, *, adopt_models=False, **kwargs):
        input_spec, _ = member_io_shapes(model)
        model = own_wrapped_model(model, dtype, copy=True, adopt=adopt_models)
        features, head = head_features(model)
        # The copy keeps its logits layer (its architecture); the task's
        # classifier starts from it and the backbone never runs it.
        head.trainable = False
        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        super().__init__(inputs=inputs, outputs=features(inputs), dtype=dtype, **kwargs)
        # === Layers ===
        self.model = model
        self.head = head
