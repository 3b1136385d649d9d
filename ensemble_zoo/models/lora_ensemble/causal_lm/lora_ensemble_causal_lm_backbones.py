"""keras-hub decoder backbones (Gemma, Gemma 3, Llama, Llama 3, Mistral,
Qwen, Qwen 3) with LoRA-Ensemble adapters on their projections.

One class per family of `families.FAMILIES`, each made by
`_backbone_class`: a subclass of the keras-hub backbone whose constructor takes
the base class's arguments plus the method's (`MethodBackbone`): it builds
the keras-hub backbone, freezes it, and gives every attention projection
in `targets` a batch-major `LoRAEnsembleAdapter` (row `b * M + m` is
member `m`'s copy of sample `b`, so that keras-hub's samplers, which index
the batch on axis 0, and its KV cache work unchanged). Build one through
`LoRAEnsembleCausalLM.from_keras_hub`.
"""

import keras

from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import adapt_projections
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.causal_lm.families import FAMILIES
from ensemble_zoo.models.lora_ensemble.causal_lm.families import TARGETS
from ensemble_zoo.models.lora_ensemble.causal_lm.families import target_site
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.validation import check_positive_int


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
    #: the `families.Family`, set per family.
    family = None

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


def _backbone_class(family):
    """The registered LoRA-Ensemble backbone class of `family`."""
    cls = type(
        f"LoRAEnsemble{family.name}Backbone",
        (_LoRAEnsembleDecoderBackbone, family.backbone_cls),
        {
            "sites": family.sites,
            "family": family,
            "__doc__": (
                f"A `keras_hub.models.{family.backbone_cls.__name__}` "
                f"({family.description})\n    with batch-major LoRA-Ensemble "
                "adapters; its inputs hold `batch * M` rows.\n" + _ARGS_DOC
            ),
            "__module__": __name__,
        },
    )
    return keras.saving.register_keras_serializable(package="ensemble_zoo")(cls)


#: family name -> its LoRA-Ensemble backbone class.
BACKBONES = {family.name: _backbone_class(family) for family in FAMILIES}
LoRAEnsembleGemmaBackbone = BACKBONES["Gemma"]
LoRAEnsembleGemma3Backbone = BACKBONES["Gemma3"]
LoRAEnsembleLlamaBackbone = BACKBONES["Llama"]
LoRAEnsembleLlama3Backbone = BACKBONES["Llama3"]
LoRAEnsembleMistralBackbone = BACKBONES["Mistral"]
LoRAEnsembleQwenBackbone = BACKBONES["Qwen"]
LoRAEnsembleQwen3Backbone = BACKBONES["Qwen3"]
