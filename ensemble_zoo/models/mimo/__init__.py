from ensemble_zoo.models.method_registry import BenchmarkCase
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method
from ensemble_zoo.models.mimo.mimo_backbone import MIMOViTBackbone
from ensemble_zoo.models.mimo.mimo_batches import MIMOBatches
from ensemble_zoo.models.mimo.mimo_batches import mimo_batch
from ensemble_zoo.models.mimo.mimo_image_classifier import MIMOImageClassifier

register_method(
    Method(
        name="mimo",
        tasks=(MIMOImageClassifier,),
        harness=(
            HarnessCase(
                MIMOImageClassifier,
                dict(image_shape=(8, 8, 2), num_heads=2, num_members=2),
                layout="stacked_channels",
                preset="mimo_vit_tiny_digits",
            ),
        ),
        benchmark=BenchmarkCase(
            "MIMO 3",
            lambda single, size: MIMOImageClassifier.from_keras_hub(
                single, num_members=3, reuse_head=False, num_classes=size["classes"]
            ),
        ),
    )
)
