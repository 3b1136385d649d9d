from ensemble_zoo.models.implicit.subnetwork_ensemble_backbone import (
    SubnetworkEnsembleBackbone,
)
from ensemble_zoo.models.implicit.subnetwork_ensemble_classifier import (
    SubnetworkEnsembleClassifier,
)
from ensemble_zoo.models.implicit.tile_ensemble_backbone import TileEnsembleBackbone
from ensemble_zoo.models.implicit.tile_ensemble_classifier import TileEnsembleClassifier
