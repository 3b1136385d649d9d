from ensemble_zoo.models.masksembles.masksembles_image_classifier import (
    MasksemblesImageClassifier,
)
