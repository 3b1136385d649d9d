"""Ensemble methods for keras-hub causal language models."""

from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import LoRAEnsembleCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleGemma3CausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleGemmaCausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleLlama3CausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleLlamaCausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleMistralCausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleQwen3CausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
    LoRAEnsembleQwenCausalLM,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleGemma3Backbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleGemmaBackbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleLlama3Backbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleLlamaBackbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleMistralBackbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleQwen3Backbone,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm_backbones import (
    LoRAEnsembleQwenBackbone,
)
