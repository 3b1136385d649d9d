"""keras-hub decoder backbones (Gemma, Gemma 3, Llama, Llama 3, Mistral,
Qwen, Qwen 3) with LoRA-Ensemble adapters on their projections.

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

#: Targets: keras-hub's attention projection names, then the MLP's gate,
#: up and down projections (optional; "mlp_gate" is the one that goes
#: through the activation).
ATTENTION_TARGETS = tuple(ATTENTION_PROJECTIONS)  # the names apply_lora_ensemble uses
MLP_TARGETS = ("mlp_gate", "mlp_up", "mlp_down")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS
DEFAULT_TARGETS = ATTENTION_TARGETS

#: Per family, the attribute path from a decoder block to each target.
GEMMA_SITES = {
    "query": ("attention", "query_dense"),
    "key": ("attention", "key_dense"),
    "value": ("attention", "value_dense"),
    "attention_output": ("attention", "output_dense"),
    "mlp_gate": ("gating_ffw",),
    "mlp_up": ("gating_ffw_2",),
    "mlp_down": ("ffw_linear",),
}
LLAMA_SITES = {
    "query": ("_self_attention_layer", "_query_dense"),
    "key": ("_self_attention_layer", "_key_dense"),
    "value": ("_self_attention_layer", "_value_dense"),
    "attention_output": ("_self_attention_layer", "_output_dense"),
    "mlp_gate": ("_feedforward_gate_dense",),
    "mlp_up": ("_feedforward_intermediate_dense",),
    "mlp_down": ("_feedforward_output_dense",),
}


def target_site(block, path):
    """`(parent, attribute)` of the projection at `path` from `block`."""
    parent = block
    for attribute in path[:-1]:
        parent = getattr(parent, attribute)
    return parent, path[-1]


def check_ranks(rank, targets):
    """`rank` (an int, or a dict target -> int over exactly `targets`) as a
    dict target -> positive int."""
    if isinstance(rank, dict):
        if sorted(rank) != sorted(targets):
            raise ValueError(
                "A `rank` dict must have one entry per target "
                f"{list(targets)}; got keys {sorted(rank)}."
            )
        return {t: check_positive_int(rank[t], f"rank[{t!r}]") for t in targets}
    rank = check_positive_int(rank, "rank")
    return {t: rank for t in targets}


class _LoRAEnsembleDecoderBackbone(MethodBackbone):
    """Applies batch-major LoRA-Ensemble adapters to a decoder backbone."""

    method_keys = ("num_members", "rank", "targets", "lora_alpha", "a_gain", "seed")
    #: target -> attribute path from a decoder block, set per family.
    sites = None

    def apply_method(self, num_members, rank, targets, lora_alpha, a_gain, seed):
        num_members = check_positive_int(num_members, "num_members")
        targets = check_targets(targets, allowed=TARGETS)
        ranks = check_ranks(rank, targets)
        freeze_weights(self)
        sites = [
            target_site(block, self.sites[target])
            for block in self.transformer_layers
            for target in targets
        ]
        adapters = adapt_projections(
            sites,
            num_members,
            [ranks[t] for _ in self.transformer_layers for t in targets],
            lora_alpha,
            a_gain,
            seed,
            member_layout="batch_major",
        )
        object.__setattr__(self, "_adapters", adapters)

    @property
    def adapters(self):
        """The `LoRAEnsembleAdapter`s, block by block, in `targets` order."""
        return list(self._adapters)

    @property
    def num_members(self):
        return self.method_config["num_members"]

    @property
    def targets(self):
        targets = self.method_config["targets"]
        return (targets,) if isinstance(targets, str) else tuple(targets)


_ARGS_DOC = """
    Args:
        num_members: int, the number of members M.
        rank: int, the adapters' rank r, or a dict target -> rank (an
            imported keras-hub LoRA needs one rank per target).
        targets: projections to adapt, among `"query"`, `"key"`, `"value"`,
            `"attention_output"` (the paper's four, the default) and the
            MLP's `"mlp_gate"`, `"mlp_up"` and `"mlp_down"`.
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


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleGemma3Backbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.Gemma3Backbone):
    __doc__ = (
        "A `keras_hub.models.Gemma3Backbone` (text only: `vision_encoder=None`)\n"
        "    with batch-major LoRA-Ensemble adapters; its inputs hold `batch * M`\n"
        "    rows.\n" + _ARGS_DOC
    )
    sites = GEMMA_SITES


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleQwen3Backbone(_LoRAEnsembleDecoderBackbone, keras_hub.models.Qwen3Backbone):
    __doc__ = (
        "A `keras_hub.models.Qwen3Backbone` with batch-major LoRA-Ensemble\n"
        "    adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
    )
    sites = LLAMA_SITES
