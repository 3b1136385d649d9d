"""Ensemble methods for keras-hub causal language models."""

from ensemble_zoo.models.lora_ensemble.causal_lm.decoder_adapters import LoRAEnsembleDecoderBackbone
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
