"""The keras-hub causal-LM families a LoRA-Ensemble wraps, as data.

Each `Family` names the keras-hub task and backbone classes, where each
adaptable projection sits in a decoder block, and how the family's KV
cache is seeded and stepped. One mechanism builds every family's
LoRA-Ensemble backbone (`lora_ensemble_causal_lm_backbones`) and task
(`lora_ensemble_causal_lm`) from this table, so adding a family is one
entry here.

Cache layouts (keras-hub 0.32): Gemma, Llama, Mistral and Qwen stack the
layers in one `(batch, layers, 2, length, kv_heads, head_dim)` array;
Gemma 3 keeps a `(key, value)` pair of `(batch, length, kv_heads,
head_dim)` per layer, reads the prompt's padding mask when it seeds the
cache and a `cache_update_mask` (prompt positions keep their cache) at
each step.
"""

import dataclasses
from typing import Callable

import keras_hub
from keras import ops

from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import ATTENTION_PROJECTIONS

#: Adaptable projections: keras-hub's attention projection names (those
#: `apply_lora_ensemble` uses), then the MLP's gate, up and down
#: projections (optional; "mlp_gate" is the one that goes through the
#: activation).
ATTENTION_TARGETS = tuple(ATTENTION_PROJECTIONS)
MLP_TARGETS = ("mlp_gate", "mlp_up", "mlp_down")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS
DEFAULT_TARGETS = ATTENTION_TARGETS


def _sites(attention, attention_projections, mlp_projections):
    """target -> attribute path: the attention projections under the
    block's `attention` layer, the MLP's on the block itself."""
    sites = {t: (attention, p) for t, p in zip(ATTENTION_TARGETS, attention_projections)}
    sites.update({t: (p,) for t, p in zip(MLP_TARGETS, mlp_projections)})
    return sites


#: Per layout, the attribute path from a decoder block to each target.
GEMMA_SITES = _sites(
    "attention",
    ("query_dense", "key_dense", "value_dense", "output_dense"),
    ("gating_ffw", "gating_ffw_2", "ffw_linear"),
)
LLAMA_SITES = _sites(
    "_self_attention_layer",
    ("_query_dense", "_key_dense", "_value_dense", "_output_dense"),
    ("_feedforward_gate_dense", "_feedforward_intermediate_dense", "_feedforward_output_dense"),
)


def target_site(block, path):
    """`(parent, attribute)` of the projection at `path` from `block`."""
    parent = block
    for attribute in path[:-1]:
        parent = getattr(parent, attribute)
    return parent, path[-1]


def seed_stacked_cache(causal_lm, token_ids, padding_mask):
    """`(hidden_states, cache)` of a prompt batch through the family's own
    `_build_cache` (the prompt's padding mask is not read)."""
    return causal_lm._build_cache(token_ids)


def no_step_arguments(padding_mask, index):
    """The extra `call_with_cache` arguments of a decode step: none."""
    return {}


def seed_gemma3_cache(causal_lm, token_ids, padding_mask):
    """Gemma 3's `_build_cache` on text: no image embeddings."""
    return causal_lm._build_cache(token_ids, None, None, padding_mask, None)


def gemma3_step_arguments(padding_mask, index):
    """Gemma 3's `cache_update_mask` at `index`: true where the position
    is not part of the prompt (a prompt's own cache entries are kept), as
    `Gemma3CausalLM.generate_step` passes it. `padding_mask` has one row
    per row of the step's batch."""
    not_prompt = ops.logical_not(ops.cast(padding_mask, "bool"))
    return {"cache_update_mask": ops.expand_dims(ops.take(not_prompt, index, axis=1), 1)}


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Family:
    """One keras-hub causal-LM family.

    Args:
        name: str, the class-name stem (`"Gemma"` gives
            `LoRAEnsembleGemmaCausalLM` and `LoRAEnsembleGemmaBackbone`).
        causal_lm_cls: the keras-hub `CausalLM` class.
        backbone_cls: the keras-hub backbone class.
        sites: dict target -> attribute path from a decoder block.
        description: str, how the docstrings name the family.
        seed_cache: callable `(causal_lm, token_ids, padding_mask) ->
            (hidden_states, cache)` running the family's `_build_cache`.
        step_arguments: callable `(padding_mask, index) -> dict`, the
            family's extra `call_with_cache` arguments at a decode step.
        cache_length_axis: int, the sequence axis of each array of the
            family's cache (3 in the stacked layout, 1 in Gemma 3's).
    """

    name: str
    causal_lm_cls: type
    backbone_cls: type
    sites: dict
    description: str
    seed_cache: Callable = seed_stacked_cache
    step_arguments: Callable = no_step_arguments
    cache_length_axis: int = 3

    def __repr__(self):
        return f"Family({self.name!r})"


FAMILIES = (
    Family(
        "Gemma",
        keras_hub.models.GemmaCausalLM,
        keras_hub.models.GemmaBackbone,
        GEMMA_SITES,
        "Gemma, Gemma 2",
    ),
    Family(
        "Gemma3",
        keras_hub.models.Gemma3CausalLM,
        keras_hub.models.Gemma3Backbone,
        GEMMA_SITES,
        "Gemma 3, text only: `vision_encoder=None`",
        seed_cache=seed_gemma3_cache,
        step_arguments=gemma3_step_arguments,
        cache_length_axis=1,
    ),
    Family(
        "Llama",
        keras_hub.models.LlamaCausalLM,
        keras_hub.models.LlamaBackbone,
        LLAMA_SITES,
        "Llama 2",
    ),
    Family(
        "Llama3",
        keras_hub.models.Llama3CausalLM,
        keras_hub.models.Llama3Backbone,
        LLAMA_SITES,
        "Llama 3",
    ),
    Family(
        "Mistral",
        keras_hub.models.MistralCausalLM,
        keras_hub.models.MistralBackbone,
        LLAMA_SITES,
        "Mistral",
    ),
    Family(
        "Qwen", keras_hub.models.QwenCausalLM, keras_hub.models.QwenBackbone, LLAMA_SITES, "Qwen 2"
    ),
    Family(
        "Qwen3",
        keras_hub.models.Qwen3CausalLM,
        keras_hub.models.Qwen3Backbone,
        LLAMA_SITES,
        "Qwen 3",
    ),
)
