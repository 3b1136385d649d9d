"""keras-hub decoder backbones (Gemma, Llama, Mistral, Qwen) with
LoRA-Ensemble adapters on their attention projections.

Each class is a subclass of the keras-hub backbone whose constructor takes
the base class's arguments plus the method's (`MethodBackbone`): it builds
the keras-hub backbone, freezes it, and gives every attention projection
in `targets` a batch-major `LoRAEnsembleAdapter` (row `b * M + m` is
member `m`'s copy of sample `b`, so that keras-hub's samplers, which index
the batch on axis 0, and its KV cache work unchanged). Build one through
`LoRAEnsembleCausalLM.from_keras_hub`.
"""

import keras
import keras_hub

from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import ATTENTION_PROJECTIONS
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import adapt_projections
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.validation import check_positive_int

#: Projection names (keras-hub's layer names) and, per family, the
#: attribute of the decoder block that holds the attention layer and the
#: attributes of the attention layer that hold each projection.
PROJECTIONS = tuple(ATTENTION_PROJECTIONS)  # the names apply_lora_ensemble uses
GEMMA_SITES = ("attention", ("query_dense", "key_dense", "value_dense", "output_dense"))
LLAMA_SITES = (
    "_self_attention_layer",
    ("_query_dense", "_key_dense", "_value_dense", "_output_dense"),
)
DEFAULT_TARGETS = PROJECTIONS


class _LoRAEnsembleDecoderBackbone(MethodBackbone):
    """Applies batch-major LoRA-Ensemble adapters to a decoder backbone."""

    method_keys = ("num_members", "rank", "targets", "lora_alpha", "a_gain", "seed")
    #: `(block attribute, projection attributes)`, set per family.
    sites = None

    def apply_method(self, num_members, rank, targets, lora_alpha, a_gain, seed):
        num_members = check_positive_int(num_members, "num_members")
        rank = check_positive_int(rank, "rank")
        targets = check_targets([targets] if isinstance(targets, str) else targets)
        freeze_weights(self)
        block_attribute, attributes = self.sites
        sites = [
            (getattr(block, block_attribute), attributes[PROJECTIONS.index(target)])
            for block in self.transformer_layers
            for target in targets
        ]
        adapters = adapt_projections(
            sites, num_members, rank, lora_alpha, a_gain, seed, member_layout="batch_major"
        )
        object.__setattr__(self, "_adapters", adapters)

    @property
    def adapters(self):
        """The `LoRAEnsembleAdapter`s, block by block, in `targets` order."""
        return list(self._adapters)

    @property
    def num_members(self):
        return self.method_config["num_members"]


_ARGS_DOC = """
    Args:
        num_members: int, the number of members M.
        rank: int, the adapters' rank r.
        targets: projections to adapt, among `"query"`, `"key"`, `"value"`
            and `"attention_output"` (all four by default, as the paper).
        lora_alpha: optional float; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of each `A_m`.
        seed: optional int; adapter `i` uses seeds `seed + i * M + m`.
        **kwargs: the keras-hub backbone's arguments.
"""


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleGemmaBackbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.GemmaBackbone):
    __doc__ = (
        "A `keras_hub.models.GemmaBackbone` (Gemma, Gemma 2) with batch-major\n"
        "    LoRA-Ensemble adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = GEMMA_SITES


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleLlamaBackbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.LlamaBackbone):
    __doc__ = (
        "A `keras_hub.models.LlamaBackbone` (Llama 2) with batch-major\n"
        "    LoRA-Ensemble adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = LLAMA_SITES


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleLlama3Backbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.Llama3Backbone):
    __doc__ = (
        "A `keras_hub.models.Llama3Backbone` with batch-major LoRA-Ensemble\n"
        "    adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = LLAMA_SITES


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleMistralBackbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.MistralBackbone):
    __doc__ = (
        "A `keras_hub.models.MistralBackbone` with batch-major LoRA-Ensemble\n"
        "    adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = LLAMA_SITES


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleQwenBackbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.QwenBackbone):
    __doc__ = (
        "A `keras_hub.models.QwenBackbone` (Qwen 2) with batch-major\n"
        "    LoRA-Ensemble adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = LLAMA_SITES
