from ensemble_zoo.models.masksembles.masksembles_backbone import MasksemblesViTBackbone
from ensemble_zoo.models.masksembles.masksembles_backbone import apply_masksembles
from ensemble_zoo.models.masksembles.masksembles_image_classifier import (
    MasksemblesImageClassifier,
)
