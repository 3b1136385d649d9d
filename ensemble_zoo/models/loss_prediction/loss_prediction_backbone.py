"""The keras-hub ViT of a loss-prediction model."""

import keras
import keras_hub

from ensemble_zoo.models.method_backbone import MethodBackbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossPredictionViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` read by a loss-prediction head.

    The architecture is the ViT's; the class names the method in a
    preset's `config.json`, so `keras_hub.models.ImageClassifier.from_preset`
    finds `LossPredictionImageClassifier`, which gives its ViT this class.

    Args:
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """
