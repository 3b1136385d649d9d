"""V-MoE sparse mixtures of experts and E³ ensembles of experts (the E³
paper, "Sparse MoEs meet Efficient Ensembles")."""

from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method
from ensemble_zoo.models.vit_moe.expert_parallel import check_expert_parallel
from ensemble_zoo.models.vit_moe.expert_parallel import expert_parallel_distribution
from ensemble_zoo.models.vit_moe.expert_parallel import expert_parallel_layout_map
from ensemble_zoo.models.vit_moe.moe_configs import soft_moe_config
from ensemble_zoo.models.vit_moe.moe_configs import vit_moe_config
from ensemble_zoo.models.vit_moe.moe_cost import last_n_moe_layers
from ensemble_zoo.models.vit_moe.moe_cost import vit_moe_flops
from ensemble_zoo.models.vit_moe.vit_moe_backbone import ViTMoEBackbone
from ensemble_zoo.models.vit_moe.vit_moe_encoder_block import ViTMoEEncoderBlock
from ensemble_zoo.models.vit_moe.vit_moe_image_classifier import ViTMoEImageClassifier

register_method(
    Method(
        name="vit_moe",
        tasks=(ViTMoEImageClassifier,),
        harness=(
            HarnessCase(
                ViTMoEImageClassifier,
                dict(
                    num_heads=2,
                    num_experts=4,
                    num_selected_experts=1,
                    moe_layers=[1],
                    ensemble_size=2,
                    seed=0,
                ),
                preset="e3_vit_tiny_digits",
                layout="member_axis",
            ),
        ),
    )
)
