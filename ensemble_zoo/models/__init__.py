"""Ensemble models. Every classifier returns `(batch, members, classes)`."""

from ensemble_zoo.models.batch_ensemble import BatchEnsembleImageClassifier
from ensemble_zoo.models.batch_ensemble import BatchEnsembleTextClassifier
from ensemble_zoo.models.batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.deep_ensemble import DeepEnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.hydra import HydraBackbone
from ensemble_zoo.models.hydra import HydraImageClassifier
from ensemble_zoo.models.hydra import HydraTextBackbone
from ensemble_zoo.models.hydra import HydraTextClassifier
from ensemble_zoo.models.lora_ensemble import LoRAEnsembleImageClassifier
from ensemble_zoo.models.lora_ensemble import LoRAEnsembleTextClassifier
from ensemble_zoo.models.lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.baselines import MCDropoutClassifier
from ensemble_zoo.models.implicit import TileEnsembleClassifier
from ensemble_zoo.models.implicit import SubnetworkEnsembleClassifier
from ensemble_zoo.models.loss_prediction import LossPredictionImageClassifier
from ensemble_zoo.models.masksembles import MasksemblesImageClassifier
from ensemble_zoo.models.mimo import MIMOImageClassifier
from ensemble_zoo.models.packed_ensemble import PackedEnsembleBackbone
from ensemble_zoo.models.packed_ensemble import PackedEnsembleImageClassifier
from ensemble_zoo.models.vit_moe import ViTMoEBackbone
from ensemble_zoo.models.vit_moe import ViTMoEImageClassifier
