from ensemble_zoo.models.hydra.hydra_backbone import HydraBackbone
from ensemble_zoo.models.hydra.hydra_classifier import HydraClassifier
from ensemble_zoo.models.hydra.hydra_clip_zero_shot_classifier import HydraCLIPZeroShotBackbone
from ensemble_zoo.models.hydra.hydra_clip_zero_shot_classifier import HydraCLIPZeroShotClassifier
from ensemble_zoo.models.hydra.hydra_encoder_block import HydraEncoderBlock
from ensemble_zoo.models.hydra.hydra_image_classifier import HydraImageClassifier
from ensemble_zoo.models.hydra.hydra_model_backbone import HydraModelBackbone
from ensemble_zoo.models.hydra.hydra_text_backbone import HydraTextBackbone
from ensemble_zoo.models.hydra.hydra_text_classifier import HydraTextClassifier
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(
    Method(
        name="hydra",
        tasks=(
            HydraImageClassifier,
            HydraTextClassifier,
            HydraClassifier,  # every keras-hub classifier with multi-head attention
            HydraCLIPZeroShotClassifier,
        ),
        harness=(
            HarnessCase(
                HydraImageClassifier,
                dict(num_heads=2, num_members=3, member_num_heads=[[2, 1, 1], [1, 2, 2]]),
                preset="hydra_circuit_vit_tiny_digits",
                layout="member_axis",
            ),
            HarnessCase(
                HydraTextClassifier,
                dict(num_members=2, member_num_heads=[[2, 1]]),
                layout="member_axis",
            ),
        ),
        export=("tf_saved_model", "hydra_circuit_vit_tiny_digits"),
    )
)
