"""The old path of `ensemble_zoo.models.lora_ensemble.causal_lm` (the
causal-LM LoRA-Ensemble) and `ensemble_zoo.models.loss_prediction.token_loss_predictor`:
an alias kept for one release. Import from the new paths."""

from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleGemma3CausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleGemmaCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleLlama3CausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleLlamaCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleMistralCausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleQwen3CausalLM
from ensemble_zoo.models.lora_ensemble.causal_lm import LoRAEnsembleQwenCausalLM
from ensemble_zoo.models.loss_prediction.token_loss_predictor import TokenLossPredictor
