from ensemble_zoo.models.deep_ensemble.deep_ensemble_backbone import DeepEnsembleBackbone
from ensemble_zoo.models.deep_ensemble.deep_ensemble_classifier import DeepEnsembleClassifier
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(
    Method(
        name="deep_ensemble",
        tasks=(DeepEnsembleClassifier,),
        export=("onnx", "deep_ensemble_vit_tiny_digits"),
    )
)
