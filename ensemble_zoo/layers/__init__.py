"""Member-axis layers shared by every ensemble model."""

from ensemble_zoo.layers.batch_ensemble_dense import BatchEnsembleDense
from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.layers.grouped_layer_normalization import GroupedLayerNormalization
from ensemble_zoo.layers.head_mask import HeadMask
from ensemble_zoo.layers.hydra_attention import HydraAttention
from ensemble_zoo.layers.l2_attention import L2MultiHeadAttention
from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExpertKernel
from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExperts
from ensemble_zoo.layers.loss_prediction_head import LossPredictionHead
from ensemble_zoo.layers.masksembles_mask import MasksemblesMask
from ensemble_zoo.layers.masksembles_mask import masksembles_masks
from ensemble_zoo.layers.member_broadcast import MemberBroadcast
from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.layers.member_tiling import FirstMemberRows
from ensemble_zoo.layers.member_tiling import TileMembers
from ensemble_zoo.layers.member_tiling import UntileMembers
from ensemble_zoo.layers.moe import ExpertsChoiceRouter
from ensemble_zoo.layers.moe import SoftRouter
from ensemble_zoo.layers.moe import SparseMoE
from ensemble_zoo.layers.moe import TopKRouter
from ensemble_zoo.layers.subnetwork_masked_dense import SubnetworkMaskedDense
