from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import batch_ensemble_layers
from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BatchEnsembleBertBackbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BatchEnsembleViTBackbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_classifier import BatchEnsembleClassifier
from ensemble_zoo.models.batch_ensemble.batch_ensemble_image_classifier import (
    BatchEnsembleImageClassifier,
)
from ensemble_zoo.models.batch_ensemble.batch_ensemble_model_backbone import (
    BatchEnsembleModelBackbone,
)
from ensemble_zoo.models.batch_ensemble.batch_ensemble_text_classifier import (
    BatchEnsembleTextClassifier,
)
from ensemble_zoo.models.method_registry import BenchmarkCase
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

_FAST_WEIGHTS = dict(
    num_members=2, fast_weight_initializer="normal", fast_weight_stddev=0.5, seed=0
)

register_method(
    Method(
        name="batch_ensemble",
        tasks=(
            BatchEnsembleImageClassifier,
            BatchEnsembleTextClassifier,
            BatchEnsembleClassifier,  # every keras-hub transformer classifier
        ),
        harness=(
            HarnessCase(
                BatchEnsembleImageClassifier,
                dict(_FAST_WEIGHTS, num_heads=2),
                preset="batch_ensemble_vit_tiny_digits",
                layout="member_major",
            ),
            HarnessCase(BatchEnsembleTextClassifier, _FAST_WEIGHTS, layout="member_major"),
        ),
        keras_hub_kwargs=dict(num_members=2, seed=0),
        benchmark=BenchmarkCase(
            "BatchEnsemble 3",
            lambda single, size: BatchEnsembleImageClassifier.from_keras_hub(
                single, num_members=3, reuse_head=False, num_classes=size["classes"], seed=0
            ),
            # 3 members; every projection's input and output is also kept
            # scaled per member (half as much again).
            activation_copies=4.5,
        ),
    )
)
