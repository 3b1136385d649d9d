from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleBertBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleViTBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_image_classifier import (
    LoRAEnsembleImageClassifier,
)
from ensemble_zoo.models.lora_ensemble.lora_ensemble_text_classifier import (
    LoRAEnsembleTextClassifier,
)
