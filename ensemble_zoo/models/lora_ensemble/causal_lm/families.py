"""The keras-hub causal LMs a LoRA-Ensemble wraps: found, not listed.

A keras-hub causal LM is a `keras_hub.models.CausalLM` whose backbone
holds its decoder blocks in `transformer_layers` and whose
`_build_cache(token_ids)` / `call_with_cache(token_ids, cache, index)`
seed and step a KV cache. Any family built that way works with no entry
here: `decoder_sites` finds each block's projections by layer type
(`Dense` / `EinsumDense`) and role, read from the names keras-hub gives
them (`ROLE_NAMES`), as keras-hub's own `enable_lora` finds its targets by
name. A family that seeds or steps its cache otherwise, that cannot
hold members, or whose step a shared trunk (`trunk_step`) must be told
(its embedding, final norm or cache argument), has one `Family` entry in
`FAMILIES`, keyed by its keras-hub class name.

Cache layouts (keras-hub 0.32): most families stack the layers in one
`(batch, layers, 2, length, kv_heads, head_dim)` array (the length on
axis 3, `Family`'s default); Gemma 3 keeps a `(key, value)` pair of
`(batch, length, kv_heads, head_dim)` per layer, reads the prompt's
padding mask when it seeds the cache and a `cache_update_mask` (prompt
positions keep their cache) at each step; Qwen 3.5 holds a `(kv, conv,
recurrent)` triple, the last two its linear-attention blocks' states
without a position axis.
"""

import dataclasses
from typing import Callable

import keras
import keras_hub
from keras import ops

from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExperts
from ensemble_zoo.layers.lora_ensemble_experts import expert_kernels
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets as _check_names
from ensemble_zoo.models.member_sites import ATTENTION_ROLES
from ensemble_zoo.models.member_sites import FUSED_ROLE
from ensemble_zoo.models.member_sites import ROLE_NAMES
from ensemble_zoo.models.member_sites import projection_role
from ensemble_zoo.utils.sublayers import sublayers
from ensemble_zoo.utils.validation import check_block_indices

#: Roles a LoRA-Ensemble adapts: `member_sites.ROLE_NAMES` (the
#: attention's query, key, value and output projections, the paper's four,
#: and the MLP's gate, up and down projections), and a mixture-of-experts
#: block's experts (`"experts"`: every stacked expert kernel of the
#: block, `layers.lora_ensemble_experts`).
ATTENTION_TARGETS = ATTENTION_ROLES
MLP_TARGETS = ("mlp_gate", "mlp_up", "mlp_down")
EXPERTS_TARGET = "experts"
#: What a user may name in `targets`; `"query_key_value"` is where
#: `"query"`, `"key"` and `"value"` go in a family that fuses them.
TARGETS = ATTENTION_TARGETS + MLP_TARGETS + (EXPERTS_TARGET,)
FUSED_TARGET = FUSED_ROLE
DEFAULT_TARGETS = ATTENTION_TARGETS


def seed_stacked_cache(causal_lm, token_ids, padding_mask):
    """`(hidden_states, cache)` of a prompt batch through the family's own
    `_build_cache` (the prompt's padding mask is not read)."""
    return causal_lm._build_cache(token_ids)


def no_step_arguments(padding_mask, index):
    """The extra `call_with_cache` arguments of a decode step: none."""
    return {}


def no_block_arguments(padding_mask):
    """The extra `call_with_cache` arguments of a block of the prompts'
    pass (`decode_engine.prefill`): none."""
    return {}


def seed_gemma3_cache(causal_lm, token_ids, padding_mask):
    """Gemma 3's and Gemma 4's `_build_cache` on text: no image
    embeddings."""
    return causal_lm._build_cache(token_ids, None, None, padding_mask, None)


def gemma3_block_arguments(padding_mask):
    """Gemma 3's and Gemma 4's prompts' pass reads the prompts' padding
    mask over the cache's positions (as their `_build_cache` passes it);
    no `cache_update_mask`: every position of the block is written."""
    return {"padding_mask": padding_mask}


def gemma3_step_arguments(padding_mask, index):
    """Gemma 3's and Gemma 4's `cache_update_mask` at `index`: true where the position
    is not part of the prompt (a prompt's own cache entries are kept), as
    `Gemma3CausalLM.generate_step` passes it. `padding_mask` has one row
    per row of the step's batch. (A step through keras-hub's attention
    route, `attention_route`, does not read it.)"""
    not_prompt = ops.logical_not(ops.cast(padding_mask, "bool"))
    return {"cache_update_mask": ops.expand_dims(ops.take(not_prompt, index, axis=1), 1)}


def embed_tokens(decoder, token_ids, index):
    """The input of a family's first decoder block at a cached step
    (`trunk_step`): its token embedding, as most families'
    `call_with_cache` computes it."""
    return decoder.token_embedding(token_ids)


def embed_scaled_tokens(decoder, token_ids, index):
    """Gemma's and Gemma 3's: the token embedding times
    `sqrt(hidden_dim)`."""
    x = decoder.token_embedding(token_ids)
    return x * ops.cast(ops.sqrt(decoder.hidden_dim), x.dtype)


def embed_tokens_and_positions(decoder, token_ids, index):
    """GPT-2's: token plus position embedding from `index`."""
    tokens = decoder.token_embedding(token_ids)
    positions = decoder.position_embedding(tokens, start_index=index)
    return decoder.embeddings_add((tokens, positions))


def embed_opt(decoder, token_ids, index):
    """OPT's: its token-and-position embedding from `index`."""
    return decoder.embeddings(token_ids, start_index=index)


def embed_normalized_tokens(decoder, token_ids, index):
    """Bloom's: the token embedding through its embedding layer norm."""
    return decoder.embeddings_layer_norm(decoder.token_embedding(token_ids))


@dataclasses.dataclass(frozen=True)
class Family:
    """How the decode engine seeds and steps one family's cache.

    Args:
        seed_cache: callable `(causal_lm, token_ids, padding_mask) ->
            (hidden_states, cache)` running the family's `_build_cache`.
        step_arguments: callable `(padding_mask, index) -> dict`, the
            family's extra `call_with_cache` arguments at a decode step.
        block_arguments: callable `(padding_mask) -> dict`, its extra
            `call_with_cache` arguments for a block of the prompts' pass
            after the first (`padding_mask` over the cache's positions).
        cache_length_axis: int, the sequence axis of each array of the
            family's cache (3 in the stacked layout, 1 in Gemma 3's).
        refused: `None`, or why a LoRA-Ensemble cannot wrap the family
            (the error names it).
        full_prefill: bool, the prompts' pass runs over every position
            (a family whose cache holds states without a position axis).
        linear_blocks: bool, some decoder blocks are linear attention,
            without the attention projections: the adapters go on the
            other blocks (a block with some of the targets but not all is
            still an error).
        offset_blocks: bool, the family's `call_with_cache` computes a
            block of several positions at an offset as the one pass does,
            so an eager prompts' pass may run in blocks
            (`decode_engine.prefill`).
        embed: callable `(decoder, token_ids, index) -> x`, what the
            family's `call_with_cache` gives its first block (a shared
            trunk's step, `trunk_step`, runs the blocks itself).
        final_norm: str, the decoder's attribute holding the norm after
            its last block.
        cache_argument: `None`, or the name under which the family's
            blocks take their KV cache (with `<name>_update_index`) where
            their `call` signature does not name it
            (`trunk_step.block_cache_arguments`).
        trunk_refused: `None`, or why the family's blocks below the
            adapted ones cannot run as a shared trunk (they then run on
            every member's rows, as without `layers`).
    """

    seed_cache: Callable = seed_stacked_cache
    step_arguments: Callable = no_step_arguments
    block_arguments: Callable = no_block_arguments
    cache_length_axis: int = 3
    refused: str = None
    full_prefill: bool = False
    linear_blocks: bool = False
    offset_blocks: bool = True
    embed: Callable = embed_tokens
    final_norm: str = "layer_norm"
    cache_argument: str = None
    trunk_refused: str = None


STANDARD = Family()


def seed_qwen3_5_cache(causal_lm, token_ids, padding_mask):
    """Qwen 3.5's `_build_cache` on text: its cache is a `(kv, conv,
    recurrent)` triple, the last two the linear-attention blocks' states."""
    return causal_lm._build_cache(token_ids, padding_mask)


#: Qwen 3.5 (and its mixture of experts): the adapters go on its
#: full-attention blocks (the Gated DeltaNet blocks have other
#: projections), and since those linear-attention blocks' recurrent and
#: convolution states have no position axis, the prompts' pass runs over
#: every position as keras-hub's does (a shorter pass would leave other
#: states).
QWEN3_5 = Family(
    seed_qwen3_5_cache,
    full_prefill=True,
    linear_blocks=True,
    trunk_refused="its linear-attention blocks step a `(kv, conv, recurrent)` cache "
    "through `call_and_update_cache`",
)
GEMMA = Family(embed=embed_scaled_tokens)

#: keras-hub causal-LM class name -> its entry, for the families that
#: need one.
FAMILIES = {
    "BloomCausalLM": Family(embed=embed_normalized_tokens),
    "FalconCausalLM": Family(final_norm="final_layernorm"),
    "GemmaCausalLM": GEMMA,
    "Gemma3CausalLM": Family(
        seed_gemma3_cache,
        gemma3_step_arguments,
        gemma3_block_arguments,
        cache_length_axis=1,
        embed=embed_scaled_tokens,
    ),
    "Gemma3nCausalLM": Family(
        refused="its text decoder keeps AltUp streams and per-layer inputs "
        "beside the KV cache, which the decode engine does not tile yet"
    ),
    # Gemma 4 seeds its (stacked) cache and steps it as Gemma 3 does; its
    # backbone's `position_ids` input: `causal_lm_inputs.with_position_ids`.
    "Gemma4CausalLM": Family(
        seed_gemma3_cache,
        gemma3_step_arguments,
        gemma3_block_arguments,
        trunk_refused="its blocks take per-layer inputs and may share another block's "
        "keys and values",
    ),
    "GPT2CausalLM": Family(embed=embed_tokens_and_positions),
    # GPT-NeoX's attention rotates the queries from position 0 whatever
    # the cache index (keras-hub 0.32, `GPTNeoXAttention.call`): a block at
    # an offset would differ from keras-hub's one pass, so its prompts'
    # pass is one pass (its decode steps share keras-hub's behaviour).
    "GPTNeoXCausalLM": Family(offset_blocks=False),
    "OPTCausalLM": Family(embed=embed_opt),
    "Qwen3_5CausalLM": QWEN3_5,
    "Qwen3_5MoeCausalLM": QWEN3_5,
    # SmolLM3's blocks read their cache from `**kwargs`.
    "SmolLM3CausalLM": Family(final_norm="norm", cache_argument="self_attention_cache"),
    "RWKV7CausalLM": Family(
        refused="it is a recurrent model (no KV cache, no `cache_update_index`); "
        "its state has no position to step"
    ),
}


def causal_lm_class(backbone):
    """The keras-hub `CausalLM` class whose `backbone_cls` is exactly
    `type(backbone)` (keras-hub's own rule for a preset's task); where
    several are (Gemma 4's assistant model), the one named after the
    backbone (`Gemma4Backbone` -> `Gemma4CausalLM`)."""
    candidates = [
        cls
        for cls in vars(keras_hub.models).values()
        if isinstance(cls, type)
        and issubclass(cls, keras_hub.models.CausalLM)
        and getattr(cls, "backbone_cls", None) is type(backbone)
    ]
    named = type(backbone).__name__.replace("Backbone", "CausalLM")
    for cls in sorted(set(candidates), key=lambda c: (c.__name__ != named, c.__name__)):
        return cls
    raise TypeError(
        f"`backbone` must be the backbone of a keras-hub causal LM; no "
        f"`keras_hub.models` CausalLM takes a {type(backbone).__name__}."
    )


def family(causal_lm_cls):
    """The `Family` of a keras-hub causal-LM class; a `ValueError` says why
    when the family is refused."""
    entry = FAMILIES.get(causal_lm_cls.__name__, STANDARD)
    if entry.refused:
        raise ValueError(f"LoRA-Ensemble cannot wrap a {causal_lm_cls.__name__}: {entry.refused}.")
    return entry


def check_targets(targets):
    """`targets` as a tuple of distinct names among `TARGETS`."""
    return _check_names(targets, allowed=TARGETS)


def _projections(block):
    """role -> `[(parent, attribute)]` of every `Dense` / `EinsumDense`
    under `block` (or a `LoRAEnsembleAdapter` on one) whose attribute or
    layer name keras-hub uses for that role, and under `"experts"` every
    mixture-of-experts block (a layer holding an expert bank,
    `expert_kernels`, or a `LoRAEnsembleExperts` on one). Expert banks
    (attributes naming an expert, and a shared expert) are not searched for
    projections: their MLPs are not one projection."""
    found = {role: [] for role in (*ROLE_NAMES, EXPERTS_TARGET)}
    seen = set()

    def walk(layer):
        for attribute, sublayer in sublayers(layer):
            if id(sublayer) in seen:
                continue
            seen.add(id(sublayer))
            if isinstance(sublayer, LoRAEnsembleExperts) or expert_kernels(sublayer)[0]:
                found[EXPERTS_TARGET].append((layer, attribute))
                continue
            if isinstance(sublayer, LoRAEnsembleAdapter):
                projection = sublayer.base_layer
            elif isinstance(sublayer, (keras.layers.Dense, keras.layers.EinsumDense)):
                projection = sublayer
            else:
                projection = None
            if projection is not None:
                role = projection_role(layer, attribute, projection)
                if role is not None:
                    found[role].append((layer, attribute))
            elif "expert" not in attribute.lower():
                walk(sublayer)

    walk(block)
    return found


def block_sites(block, targets, required=True):
    """`[(role, (parent, attribute))]`: where each of `targets` sits in one
    decoder block, in `targets` order (`"query"`, `"key"` and `"value"`
    share one `"query_key_value"` site in a family that fuses them).

    A block without a mixture of experts (Qwen-MoE's dense blocks) leaves
    `"experts"` out.

    Raises:
        ValueError: the block has no projection, or more than one, for a
            target (with `required=False` a missing one is left out).
    """
    found = _projections(block)
    sites = []
    for target in targets:
        role = target
        if target in ("query", "key", "value") and not found[target] and found[FUSED_TARGET]:
            role = FUSED_TARGET
        if any(role == r for r, _ in sites) or (
            not found[role] and (not required or role == EXPERTS_TARGET)
        ):
            continue  # a block with a dense MLP has no experts
        if len(found[role]) != 1:
            where = [f"{type(p).__name__}.{a}" for p, a in found[role]]
            raise ValueError(
                f"{type(block).__name__} has {len(found[role])} projections for "
                f"target {target!r} {where}; LoRA-Ensemble needs exactly one per "
                "block (a mixture-of-experts MLP has none: adapt its experts, "
                f"target {EXPERTS_TARGET!r})."
            )
        sites.append((role, found[role][0]))
    return sites


def check_layers(layers, num_blocks):
    """The decoder blocks to adapt, checked (`utils.validation.
    check_block_indices` of `layers`): `None`, or a sorted tuple of
    distinct indices in `[0, num_blocks)`."""
    return check_block_indices(layers, num_blocks, "layers", "decoder block")


def decoder_sites(backbone, targets, layers=None):
    """Where each target sits in the decoder blocks of `backbone`.

    Args:
        backbone: a keras-hub decoder backbone (`transformer_layers`).
        targets: names among `TARGETS` (`check_targets`).
        layers: `None` (every block) or the indices of the blocks to
            adapt (`check_layers`).

    Returns:
        `(sites, roles)`: `(parent, attribute)` of each adapted
        projection, block by block and within a block in `targets` order
        (`block_sites`), and the role of each.

    Raises:
        ValueError: `backbone` has no decoder blocks, or a block has no
            projection, or more than one, for a target.
    """
    blocks = getattr(backbone, "transformer_layers", None)
    if not blocks:
        raise ValueError(
            f"`backbone` ({type(backbone).__name__}) has no `transformer_layers`: "
            "LoRA-Ensemble adapts the decoder blocks of a keras-hub causal LM."
        )
    linear_blocks = FAMILIES.get(causal_lm_class(backbone).__name__, STANDARD).linear_blocks
    projections = [t for t in targets if t != EXPERTS_TARGET]
    pairs = []
    adapted = check_layers(layers, len(blocks))
    for index, block in enumerate(blocks):
        if adapted is not None and index not in adapted:
            continue
        if linear_blocks and not block_sites(block, projections, required=False):
            # A linear-attention block: only its experts, if any, to adapt.
            pairs += block_sites(block, [t for t in targets if t == EXPERTS_TARGET])
            continue
        pairs += block_sites(block, targets)
    chosen = "" if adapted is None else f" among `layers` {list(adapted)}"
    if not pairs:
        raise ValueError(f"No block{chosen} of `backbone` has the projections {list(targets)}.")
    if EXPERTS_TARGET in targets and all(role != EXPERTS_TARGET for role, _ in pairs):
        raise ValueError(
            f"`targets` names {EXPERTS_TARGET!r}, but no block{chosen} of `backbone` "
            f"({type(backbone).__name__}) is a mixture of experts: no sublayer holds an "
            "expert bank (an int `num_experts` and kernels (num_experts, d_in, d_out))."
        )
    return [site for _, site in pairs], [role for role, _ in pairs]
