from ensemble_zoo.models.implicit.subnetwork_ensemble_backbone import SubnetworkEnsembleBackbone
from ensemble_zoo.models.implicit.subnetwork_ensemble_classifier import SubnetworkEnsembleClassifier
from ensemble_zoo.models.implicit.tile_ensemble_backbone import TileEnsembleBackbone
from ensemble_zoo.models.implicit.tile_ensemble_classifier import TileEnsembleClassifier
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(
    Method(name="implicit", tasks=(SubnetworkEnsembleClassifier, TileEnsembleClassifier))
)
