"""A keras-hub ViT that reads MIMO's channel-stacked member inputs."""

import keras
import keras_hub

from ensemble_zoo.models.method_backbone import MethodBackbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MIMOViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` whose images are the `M` members'
    inputs stacked on the channel axis (`image_shape[-1] = M * C`).

    The architecture is the ViT's; `num_members` records how its channels
    split. Its class names the method in a preset's `config.json`, so
    `keras_hub.models.ImageClassifier.from_preset` finds
    `MIMOImageClassifier`. Build it through the classifier.

    Args:
        num_members: int, the number of stacked inputs M.
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """

    method_keys = ("num_members",)
