"""The cached step of a LoRA-Ensemble causal LM over a shared trunk.

With adapters on some decoder blocks only (`from_keras_hub(...,
layers=...)`), every block below the lowest adapted one computes the same
thing for every member. The shared-trunk step runs those blocks once per
prompt row, holding their KV cache once, and tiles the rows into the
members' batch-major rows (`ensemble_zoo.ops.tile_members`) at the lowest
adapted block; the blocks from there up run on every member's rows, as
the whole model does without `layers`. Sharing the lower blocks and
replicating the upper ones is the multi-input multi-output design
(MIMO, Havasi et al. 2020, "Training independent subnetworks for robust
prediction", arXiv 2010.06610) that the LoRA-Ensemble paper's related
work cites.

keras-hub's own `call_with_cache` runs every block on one batch and
stacks the blocks' caches into one array, which cannot hold blocks of
`batch` and of `batch x members` rows, so this step runs the blocks
itself, from what the family's `call_with_cache` does around them:

- the first block's input: `Family.embed` (the token embedding, scaled
  or with positions where the family's is);
- each block's cached call: the cache argument its `call` names
  (`self_attention_cache`, `attention_cache` or `cache`, with its
  `..._update_index`; read from the signature, or
  `Family.cache_argument`), and the family's extra arguments (Gemma 3's
  padding and cache-update masks, `Family.step_arguments`);
- after the last block: the decoder's final norm (`Family.final_norm`)
  and the reversed token embedding, as the ensemble's own forward pass.

`trunk_refusal` checks the decoder's graph against these assumptions,
so that a family without an entry runs without a shared trunk rather than
wrongly. The cache is a dict of per-block caches: `"trunk"`, the shared blocks'
at `batch` rows, and `"members"`, the adapted ones' with a member axis
after the batch (`(batch, members, ...)`), as the decode engine keeps a
whole model's. `test_causal_lm_families` checks every family the step
takes against keras-hub's `call_with_cache` on the members' rows.
"""

import inspect

import keras
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.families import embed_tokens
from ensemble_zoo.ops.member_tiling import fold_members
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members

#: The members' rows: batch-major, as the decode engine keeps them.
ROWS = "batch_major"
#: Names a keras-hub decoder block's `call` gives its KV cache, each with
#: `<name>_update_index` for the step's position.
CACHE_ARGUMENTS = ("self_attention_cache", "attention_cache", "cache")


def _block_input(layer):
    """The layer (or operation) whose output is `layer`'s main input in
    its model's graph (its first positional argument, or its first keyword
    one as Falcon passes `inputs=x`), looking through dropout. Reads
    Keras' graph records (`_inbound_nodes`, `_keras_history`; Keras
    3.15.1): the family tests' shared-trunk check fails if they change."""
    arguments = layer._inbound_nodes[0].arguments
    x = arguments.args[0] if arguments.args else next(iter(arguments.kwargs.values()))
    producer = x._keras_history.operation
    return _block_input(producer) if isinstance(producer, keras.layers.Dropout) else producer


def trunk_refusal(backbone, family):
    """Why the blocks of `backbone` (a `LoRAEnsembleDecoderBackbone`)
    below its lowest adapted one cannot run as a shared trunk, or `None`.

    Besides the family's own refusal (`Family.trunk_refused`), the
    decoder's graph is checked against what the step assumes of it, so
    that a family without an entry runs on every member's rows rather
    than wrongly: each block reads the one before, the first reads the
    token embedding (unless the family's `embed` says otherwise), and the
    output is `Family.final_norm` of the last block, and the blocks name
    their cache argument (`block_cache_arguments`).

    Args:
        backbone: a `LoRAEnsembleDecoderBackbone`.
        family: its `families.Family`.

    Returns:
        `None`, or a sentence saying why not.
    """
    if family.trunk_refused:
        return family.trunk_refused
    decoder = backbone.decoder
    blocks = decoder.transformer_layers
    norm = getattr(decoder, family.final_norm, None)
    if any(_block_input(block) is not below for below, block in zip(blocks, blocks[1:])):
        return "a decoder block reads something other than the block below it"
    if family.embed is embed_tokens and _block_input(blocks[0]) is not decoder.token_embedding:
        return (
            "its first block reads more than the token embedding (a `Family.embed` entry says what)"
        )
    parameters = inspect.signature(blocks[0].call).parameters
    if family.cache_argument is None and not any(n in parameters for n in CACHE_ARGUMENTS):
        return (
            f"its blocks' `call` names none of {list(CACHE_ARGUMENTS)} (a "
            "`Family.cache_argument` entry says which)"
        )
    output = keras.tree.flatten(decoder.output)[0]._keras_history.operation
    if norm is None or output is not norm or _block_input(norm) is not blocks[-1]:
        return f"its output is not `{family.final_norm}` of the last block (`Family.final_norm`)"
    return None


def shared_blocks(backbone, family):
    """How many decoder blocks run as a shared trunk: those below the
    lowest adapted block (`backbone.adapted_blocks`), unless
    `trunk_refusal` says why not; 0 runs every block on the members'
    rows."""
    layers = backbone.adapted_blocks
    if layers is None or not layers[0] or trunk_refusal(backbone, family):
        return 0
    return layers[0]


def block_cache_arguments(family, block, cache, index):
    """The cache arguments of one block's cached call.

    Args:
        family: the decoder's `families.Family`.
        block: a decoder block.
        cache: its cache.
        index: the step's position.

    Returns:
        dict: `{name: cache, name + "_update_index": index}`, `name` the
        family's `cache_argument` or the one of `CACHE_ARGUMENTS` that
        `block.call` takes.

    Raises:
        ValueError: the block takes none of them.
    """
    parameters = inspect.signature(block.call).parameters
    for name in (family.cache_argument, *CACHE_ARGUMENTS):
        if name is not None and (name == family.cache_argument or name in parameters):
            return {name: cache, f"{name}_update_index": index}
    raise ValueError(
        f"{type(block).__name__}.call takes none of the cache arguments "
        f"{list(CACHE_ARGUMENTS)}: its blocks cannot run as a shared trunk."
    )


def _layer_caches(cache):
    """A family's cache as one entry per block: Gemma 3's tuple of
    `(key, value)` pairs as it is, the stacked layout's `(rows, layers,
    ...)` array sliced on its layer axis."""
    if isinstance(cache, (tuple, list)):
        return list(cache)
    return [cache[:, i] for i in range(ops.shape(cache)[1])]


def empty_cache(model, batch, length):
    """The shared-trunk cache of `batch` prompts over `length` positions,
    zero: what the prompts' pass (`decode_engine.prefill`) fills.

    The shape of each block's cache is read from the family's own
    `_build_cache` of two tokens (one would warn of a softmax over one
    key) on one row per member, so that every family's layout (Gemma 3's
    per-block pairs) is its own; the position axis is the family's
    `cache_length_axis`, less the stacked layout's layer axis.

    Args:
        model: a `LoRAEnsembleCausalLM` with `trunk_blocks > 0`.
        batch: int, the prompts.
        length: int (a symbol while a compiled pass is recorded), the
            positions the cache holds.

    Returns:
        dict: `"trunk"`, a tuple of the shared blocks' caches (`batch`
        rows), and `"members"`, of the other blocks' (`(batch, members,
        ...)`).
    """
    m = model.num_members
    family = model.family
    _, probe = family.seed_cache(model, ops.zeros((m, 2), "int32"), ops.ones((m, 2), "bool"))
    stacked = not isinstance(probe, (tuple, list))
    axis = family.cache_length_axis - (1 if stacked else 0)

    def zeros(x, rows):
        shape = list(ops.shape(x))
        shape[0:1] = rows
        shape[axis + len(rows) - 1] = length
        return ops.zeros(shape, x.dtype)

    layers = _layer_caches(probe)
    n = model.trunk_blocks
    return {
        "trunk": tuple(
            keras.tree.map_structure(lambda x: zeros(x, [batch]), c) for c in layers[:n]
        ),
        "members": tuple(
            keras.tree.map_structure(lambda x: zeros(x, [batch, m]), c) for c in layers[n:]
        ),
    }


def trunk_step(model, token_ids, cache, index, extra):
    """One cached step of every member over the shared trunk.

    Args:
        model: a `LoRAEnsembleCausalLM` with `trunk_blocks > 0`.
        token_ids: int `(batch, tokens)`, the tokens at `index`.
        cache: the shared-trunk cache (`empty_cache`).
        index: int or int tensor, the position of `token_ids[:, 0]`.
        extra: dict of the family's extra block arguments, one row per
            prompt (`Family.step_arguments` or `Family.block_arguments`).

    Returns:
        `(member_logits, member_hidden, cache)`: `(batch, members, tokens,
        vocabulary)`, `(batch, members, tokens, hidden_dim)` (after the
        final norm) and the updated cache.
    """
    m = model.num_members
    decoder = model.backbone.decoder
    blocks = decoder.transformer_layers
    n = model.trunk_blocks
    x = model.family.embed(decoder, token_ids, index)
    trunk = []
    for block, block_cache in zip(blocks[:n], cache["trunk"], strict=True):
        x, block_cache = block(
            x, **block_cache_arguments(model.family, block, block_cache, index), **extra
        )
        trunk.append(block_cache)
    x = tile_members(x, m, ROWS)
    extra = {k: None if v is None else tile_members(v, m, ROWS) for k, v in extra.items()}
    members = []
    for block, block_cache in zip(blocks[n:], cache["members"], strict=True):
        folded = keras.tree.map_structure(lambda c: fold_members(c, ROWS), block_cache)
        x, folded = block(x, **block_cache_arguments(model.family, block, folded, index), **extra)
        members.append(keras.tree.map_structure(lambda c: untile_members(c, m, ROWS), folded))
    hidden = getattr(decoder, model.family.final_norm)(x)
    logits = decoder.token_embedding(hidden, reverse=True)
    return (
        untile_members(logits, m, ROWS),
        untile_members(hidden, m, ROWS),
        {"trunk": tuple(trunk), "members": tuple(members)},
    )
