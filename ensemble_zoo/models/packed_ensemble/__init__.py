from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import PackedEnsembleBackbone
from ensemble_zoo.models.packed_ensemble.packed_ensemble_image_classifier import (
    PackedEnsembleImageClassifier,
)
