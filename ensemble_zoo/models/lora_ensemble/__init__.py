from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleCausalLM
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleBertBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleViTBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_classifier import LoRAEnsembleClassifier
from ensemble_zoo.models.lora_ensemble.lora_ensemble_image_classifier import (
    LoRAEnsembleImageClassifier,
)
from ensemble_zoo.models.lora_ensemble.lora_ensemble_model_backbone import LoRAEnsembleModelBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_text_classifier import (
    LoRAEnsembleTextClassifier,
)
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

_ADAPTERS = dict(num_members=2, targets=["query", "value"], lora_alpha=None, a_gain=1.0, seed=0)

register_method(
    Method(
        name="lora_ensemble",
        tasks=(
            LoRAEnsembleImageClassifier,
            LoRAEnsembleTextClassifier,
            LoRAEnsembleClassifier,  # every keras-hub classifier with attention
            LoRAEnsembleCausalLM,  # every causal-LM family
        ),
        harness=(
            HarnessCase(
                LoRAEnsembleImageClassifier,
                dict(_ADAPTERS, num_heads=2, rank=2),
                preset="lora_ensemble_vit_tiny_digits",
                layout="member_major",
            ),
            HarnessCase(LoRAEnsembleTextClassifier, dict(_ADAPTERS, rank=1), layout="member_major"),
        ),
        keras_hub_kwargs=dict(num_members=2, rank=1, seed=0),
        export=("litert", "lora_ensemble_vit_tiny_digits"),
    )
)
