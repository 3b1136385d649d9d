from ensemble_zoo.models.deep_ensemble.deep_ensemble_backbone import DeepEnsembleBackbone
from ensemble_zoo.models.deep_ensemble.deep_ensemble_classifier import (
    DeepEnsembleClassifier,
)
