from ensemble_zoo.models.implicit.tile_ensemble_classifier import TileEnsembleClassifier
from ensemble_zoo.models.implicit.subnetwork_ensemble_classifier import (
    SubnetworkEnsembleClassifier,
)
