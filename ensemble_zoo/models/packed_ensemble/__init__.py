from ensemble_zoo.models.method_registry import BenchmarkCase
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method
from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import PackedEnsembleBackbone
from ensemble_zoo.models.packed_ensemble.packed_ensemble_image_classifier import (
    PackedEnsembleImageClassifier,
)

register_method(
    Method(
        name="packed_ensemble",
        tasks=(PackedEnsembleImageClassifier,),
        harness=(
            HarnessCase(
                PackedEnsembleImageClassifier,
                dict(num_heads=2, num_members=2, alpha=2),
                preset="packed_ensemble_vit_tiny_digits",
                layout="member_axis",
            ),
        ),
        export=("openvino", "packed_ensemble_vit_tiny_digits"),
        benchmark=BenchmarkCase(
            "Packed-Ensembles 3 (alpha {packed_alpha})",
            lambda single, size: PackedEnsembleImageClassifier.like_keras_hub(
                single, num_members=3, alpha=size["packed_alpha"], gamma=1
            ),
            activation_copies=lambda size: size["packed_alpha"],
        ),
    )
)
