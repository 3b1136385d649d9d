"""The attention weights of a decode step (and of a teacher-forced pass),
read where keras-hub computes attention: the decode records them with no
second forward pass.

RAUQ and the attention score (`ez.metrics.rauq`, `attention_score`) need,
at each generated token, the weight that each head of a layer gives to
the step's own position. keras-hub 0.32's decoder attention layers
return no weights while they step a KV cache, but those of Gemma (and
Gemma 2), Gemma 3, Llama (and Llama 3), Mistral, Qwen, Qwen 3, and
`CachedMultiHeadAttention` (GPT-2, OPT) offer a route for an outside
attention kernel (keras-hub's vLLM serving route, `keras_hub.src.vllm`):
inside `vllm_context_scope`, each such layer projects its query, key and
value as its own `call` does (the family's query and key norms, its
RoPE), and hands them to the scope's function with its own softmax
scale, sliding window and logit soft cap; the
scope's per-layer caches are handed over in call order and the updated
ones collected. The scope is keras-hub's, thread-local and entered here
for one step only: nothing on the model is set, and two threads decoding
at once each see their own.

`attention_step` runs one decode step of the members through that route,
with `step_attention` as the kernel: the attention of keras-hub's own
path (softmax of the scaled, soft-capped scores over the positions up
to the step's, within the sliding window the layer hands over), which
also returns each head's weight on the step's own key.
`routed_member_hidden` runs a teacher-forced pass of whole sequences
through it (`score_uncertainty`, and the figures of beam and contrastive
search), laid out as keras-hub's route lays out a serving batch: one
token per row, at its position, with `sequence_attention` attending
within each sequence. `test_causal_lm_families` checks that every family
on the route still decodes keras-hub's greedy tokens and that its
teacher-forced pass records the decode's weights, and
`test_causal_lm_attention` the weights against keras-hub's own softmax in
a standard forward pass.

Two differences from keras-hub's own step, both as keras-hub's route
has them: Qwen's and Qwen 3's layers hand over their sliding window,
which keras-hub's fused path (the one JAX takes) does not apply, so past
that window (32,768 positions by default) the route attends to fewer
positions; and Gemma 3's `cache_update_mask` is not read, so a longer
prompt's own positions are written again at its steps, with the keys
and values of the same tokens (equal up to round-off).

Which layers: RAUQ's, `recorded_layers` (lm-polygraph's
`range(L // 3, ceil(2 L / 3) + 1)` of `L` layers, which holds the
attention score's layer `L // 2`; `recorded_attention`). A family whose
attention layers lack the route records nothing.
"""

import dataclasses
import math

import keras
from keras import ops
from keras_hub.src.vllm.context import get_vllm_context
from keras_hub.src.vllm.context import vllm_context_scope

from ensemble_zoo.models.lora_ensemble.causal_lm.member_forward import member_hidden
from ensemble_zoo.models.lora_ensemble.causal_lm.trunk_step import _layer_caches
from ensemble_zoo.ops.member_tiling import fold_members
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members

#: The members' rows, as the decode engine keeps them.
ROWS = "batch_major"
#: The method through which a keras-hub 0.32 attention layer takes the
#: route (it reads `keras_hub.src.vllm.context.get_vllm_context()`).
ROUTE_METHOD = "_compute_vllm_attention"
#: Scores of positions outside the attention's window.
_MASKED = -1e30


def recorded_layers(num_layers):
    """RAUQ's layers of a decoder of `num_layers` blocks: lm-polygraph's
    `range(L // 3, ceil(2 L / 3) + 1)`, without indices past the last
    block. It holds the attention score's layer `L // 2`."""
    return tuple(range(num_layers // 3, min(math.ceil(2 * num_layers / 3) + 1, num_layers)))


@dataclasses.dataclass(frozen=True)
class RecordedAttention:
    """What the decode loop records of a decoder's attention.

    Args:
        layers: tuple of ints, the decoder blocks recorded
            (`recorded_layers`, RAUQ's).
        score_layer: int, the attention score's block, `L // 2` of `L`.
        heads: int, the query heads of each block.
    """

    layers: tuple
    score_layer: int
    heads: int

    def width(self, num_members):
        """The figure columns it takes: members x layers x heads."""
        return num_members * len(self.layers) * self.heads


def recorded_attention(backbone):
    """The `RecordedAttention` of a keras-hub decoder backbone whose
    blocks each hold exactly one attention layer that takes keras-hub's
    attention route (found by its class, `ROUTE_METHOD`), the heads its
    backbone's `num_query_heads` (or `num_heads`); `None` otherwise (no
    attention figures).

    Args:
        backbone: the keras-hub decoder backbone (its blocks in
            `transformer_layers`).

    Returns:
        `RecordedAttention` or `None`.
    """
    heads = getattr(backbone, "num_query_heads", None) or getattr(backbone, "num_heads", None)
    blocks = backbone.transformer_layers
    for block in blocks:
        routed = [
            layer
            for layer in block._flatten_layers(include_self=False)
            if callable(getattr(type(layer), ROUTE_METHOD, None))
        ]
        if len(routed) != 1:
            return None
    if heads is None:
        return None
    return RecordedAttention(recorded_layers(len(blocks)), len(blocks) // 2, int(heads))


def step_attention(index, weights):
    """keras-hub's route kernel for a step of one or more positions from
    `index`: `(cache, query, key, value, scale, head_dim, num_heads,
    kv_heads, sliding_window, soft_cap) -> (cache, output)`.

    `cache` is the layer's `(key, value)`, each `(rows, length, kv_heads,
    head_dim)`; the step's keys and values are written at `index`, and
    each query at position `p` attends to the positions `<= p` (and `>
    p - sliding_window`) with the weights `softmax(soft_cap tanh(scale q
    k / soft_cap))`, in float32 as keras-hub's softmax. Each call
    appends the weight of every head's query on its own position to
    `weights`: `(rows, tokens, num_heads)`.

    Args:
        index: int or int tensor, the position of the step's first token.
        weights: list the kernel appends to, one array per layer called.

    Returns:
        the kernel, a callable.
    """

    def kernel(cache, query, key, value, scale, head_dim, num_heads, kv_heads, **options):
        key_cache, value_cache = cache
        rows = ops.shape(key_cache)[0]
        groups = num_heads // kv_heads
        query = ops.reshape(query, (rows, -1, kv_heads, groups, head_dim))
        tokens = ops.shape(query)[1]
        start = [0, index, 0, 0]
        key = ops.reshape(ops.cast(key, key_cache.dtype), (rows, tokens, kv_heads, head_dim))
        value = ops.reshape(ops.cast(value, value_cache.dtype), (rows, tokens, kv_heads, head_dim))
        key_cache = ops.slice_update(key_cache, start, key)
        value_cache = ops.slice_update(value_cache, start, value)
        position = index + ops.arange(tokens, dtype="int32")[:, None]
        # The keys' positions from the cache's own shape (no `arange` of
        # its length, which `torch.compile` traces as a symbol when
        # dynamic and compiles again for each new length).
        key_position = ops.cumsum(ops.ones_like(key_cache[0, :, 0, 0], "int32")) - 1
        output, own, _ = _attend(
            query, key_cache, value_cache, position, key_position[None, :], None, scale, options
        )
        weights.append(own)
        return (key_cache, value_cache), ops.reshape(output, (rows * tokens, num_heads * head_dim))

    return kernel


def sequence_attention(padding_mask, weights, positions=(), queries=None, rows=None):
    """keras-hub's route kernel for a teacher-forced pass of whole
    sequences laid out one token per row, as keras-hub's route lays out a
    serving batch: row `(b * length + t) * group + g` holds token `t` of
    sequence `b` (`group` copies of it: the members' rows, or one in a
    shared block). No cache: each query at position `t` attends to the
    sequence's keys at positions `<= t` (and `> t - sliding_window`) that
    `padding_mask` holds, as `step_attention` does. Each call appends the
    weight of every head's query on its own position to `weights`:
    `(batch, group, length, num_heads)`.

    The route's positions are one per row, and a shared block's rows (one
    per token) are fewer than the members' blocks' (one per member): after
    layer `i` the kernel hands the route `positions[i + 1]`, the rows'
    positions of the next layer, where given.

    Args:
        padding_mask: bool tensor `(batch, length)`.
        weights: list the kernel appends to, one array per layer called.
        positions: sequence of int tensors, each layer's rows' positions.
        queries: optional float tensor `(batch, length)`, one-hot: a query
            position per sequence, whose weights over every key each call
            also appends to `rows`: `(batch, group, num_heads, length)`.
        rows: the list for those.

    Returns:
        the kernel, a callable.
    """
    batch, length = (int(d) for d in ops.shape(padding_mask))

    def kernel(cache, query, key, value, scale, head_dim, num_heads, kv_heads, **options):
        groups = num_heads // kv_heads

        def sequences(x, heads):  # (rows, heads * head_dim) -> (batch * group, length, ...)
            x = ops.reshape(x, (batch, length, -1) + heads + (head_dim,))
            return ops.reshape(ops.moveaxis(x, 2, 1), (-1, length) + heads + (head_dim,))

        query = sequences(query, (kv_heads, groups))
        group = int(ops.shape(query)[0]) // batch
        key = sequences(ops.cast(key, query.dtype), (kv_heads,))
        value = sequences(ops.cast(value, query.dtype), (kv_heads,))
        position = ops.cumsum(ops.ones((length,), "int32")) - 1
        key_mask = ops.repeat(ops.cast(padding_mask, "bool"), group, axis=0)[:, None, None, None]
        output, own, probabilities = _attend(
            query, key, value, position[:, None], position[None, :], key_mask, scale, options
        )
        weights.append(ops.reshape(own, (batch, group, length, num_heads)))
        if queries is not None:  # probabilities: (batch * group, kv, groups, length, keys)
            pick = ops.repeat(ops.cast(queries, "float32"), group, axis=0)[:, None, None, :, None]
            row = ops.sum(probabilities * pick, axis=3)
            rows.append(ops.reshape(row, (batch, group, num_heads, length)))
        if len(weights) < len(positions):
            get_vllm_context().positions = positions[len(weights)]
        output = ops.reshape(output, (batch, group, length, num_heads * head_dim))
        return None, ops.reshape(ops.moveaxis(output, 1, 2), (-1, num_heads * head_dim))

    return kernel


def _attend(query, key, value, position, key_position, key_mask, scale, options):
    """keras-hub's attention of queries `(rows, tokens, kv_heads, groups,
    head_dim)` at `position` `(tokens, 1)` over keys and values `(rows,
    keys, kv_heads, head_dim)` at `key_position` `(1, keys)` (and, given,
    where `key_mask` holds): softmax in float32 of the scaled, soft-capped
    scores over the keys up to each query's position and within the
    sliding window. Returns the output `(rows, tokens, kv_heads, groups,
    head_dim)`, each head's weight on its own position `(rows, tokens,
    heads)` and the weights `(rows, kv_heads, groups, tokens, keys)`."""
    rows, tokens, kv_heads, groups = (ops.shape(query)[i] for i in range(4))
    scores = ops.einsum("btkgh,bskh->bkgts", query, key)
    scores = ops.cast(scores, "float32") * scale
    if options.get("soft_cap") is not None:
        cap = options["soft_cap"]
        scores = ops.tanh(scores / cap) * cap
    visible = key_position <= position
    if options.get("sliding_window") is not None:
        visible = ops.logical_and(visible, key_position > position - options["sliding_window"])
    if key_mask is not None:
        visible = ops.logical_and(visible, key_mask)
    probabilities = ops.softmax(ops.where(visible, scores, _MASKED), axis=-1)
    output = ops.einsum("bkgts,bskh->btkgh", ops.cast(probabilities, value.dtype), value)
    own = ops.sum(ops.where(key_position == position, probabilities, 0.0), axis=-1)
    own = ops.reshape(ops.moveaxis(own, 3, 1), (rows, tokens, kv_heads * groups))
    return output, own, probabilities


def _blocks(cache, num_members):
    """The member cache (`decode_engine.prefill`'s) as one cache per block
    with the members folded into rows."""
    if isinstance(cache, dict):  # a shared trunk's
        members = [
            keras.tree.map_structure(lambda c: fold_members(c, ROWS), c) for c in cache["members"]
        ]
        return list(cache["trunk"]) + members
    return _layer_caches(keras.tree.map_structure(lambda c: fold_members(c, ROWS), cache))


def _pair(block_cache):
    """One block's cache as `(key, value)`."""
    if isinstance(block_cache, (tuple, list)):
        return tuple(block_cache)
    return block_cache[:, 0], block_cache[:, 1]


def _unpair(pair, like):
    """`pair` in the form of the block cache `like`."""
    return tuple(pair) if isinstance(like, (tuple, list)) else ops.stack(pair, axis=1)


def _restored(blocks, like, num_members):
    """`_blocks`' inverse: the member cache in the form of `like`."""

    def untile(c):
        return untile_members(c, num_members, ROWS)

    if isinstance(like, dict):
        n = len(like["trunk"])
        members = tuple(keras.tree.map_structure(untile, c) for c in blocks[n:])
        return {"trunk": tuple(blocks[:n]), "members": members}
    if isinstance(like, (tuple, list)):
        return tuple(keras.tree.map_structure(untile, c) for c in blocks)
    return untile(ops.stack(blocks, axis=1))


def attention_step(model, step, token_ids, cache, index, padding_mask):
    """`step` (`decode_engine.member_step`) through keras-hub's attention
    route, with each recorded layer's weights.

    Args:
        model: a `LoRAEnsembleCausalLM` whose family takes the route
            (its `_recorded_attention`, `recorded_attention`).
        step: `decode_engine.member_step`.
        token_ids: int `(batch, 1)`, the token at `index`.
        cache: the member cache.
        index: int tensor, the step's position.
        padding_mask: the prompts' mask, as `step` takes it.

    Returns:
        `(member_logits, member_hidden, cache, attention)`: `step`'s
        outputs, and `attention` `(batch, members, layers, heads)`, the
        weight each head of each recorded layer gives to the
        step's own position.
    """
    m = model.num_members
    blocks = _blocks(cache, m)
    weights = []
    positions = ops.reshape(ops.cast(index, "int32"), (1,))
    with vllm_context_scope(step_attention(index, weights), positions, [_pair(b) for b in blocks]):
        member_logits, member_hidden, _ = step(model, token_ids, cache, index, padding_mask)
        updated = list(get_vllm_context().updated_kv_caches)
    if len(weights) != len(blocks):
        raise ValueError(
            f"{len(weights)} of the decoder's {len(blocks)} attention layers took "
            "keras-hub's attention route: the attention weights cannot be recorded."
        )
    record = model._recorded_attention
    heads = record.heads
    if any(ops.shape(w)[-1] != heads for w in weights):
        raise ValueError(
            f"The decoder's attention layers have {[ops.shape(w)[-1] for w in weights]} "
            f"query heads; its backbone says {heads}."
        )
    cache = _restored([_unpair(p, b) for p, b in zip(updated, blocks)], cache, m)
    shared = len(cache["trunk"]) if isinstance(cache, dict) else 0
    recorded = []
    for layer in record.layers:
        w = weights[layer][:, 0]  # (rows, heads); a shared block's: one per prompt
        recorded.append(tile_members(w, m, ROWS) if layer < shared else w)
    return member_logits, member_hidden, cache, untile_members(ops.stack(recorded, 1), m, ROWS)


def routed_member_hidden(model, inputs):
    """`member_forward.member_hidden` of whole sequences through keras-hub's
    attention route (`sequence_attention`), with the recorded layers'
    weights: the teacher-forced pass of `score_uncertainty` and of beam
    and contrastive search's figures.

    The tokens go through the backbone one per row, at their positions
    (`positions` of the route, which the families' RoPE and GPT-2's
    position embedding read), so every layer but attention computes what
    it computes on the sequences; the kernel attends within each sequence.

    Args:
        model: a `LoRAEnsembleCausalLM` whose family takes the route.
        inputs: dict of `token_ids` and `padding_mask` `(batch, length)`.

    Returns:
        `(hidden, attention)`: the members' rows `(batch * members,
        length, hidden_dim)`, as `member_hidden` returns them, and
        `(batch, length, members x layers x heads)`: at each position, the
        weight each head of each recorded layer gives to the position
        itself (members, then layers, then heads).
    """
    m = model.num_members
    hidden, weights, _ = _routed_pass(model, inputs)
    batch, length = (int(d) for d in ops.shape(inputs["padding_mask"]))
    hidden = ops.reshape(hidden, (batch, length, m, -1))
    hidden = ops.reshape(ops.moveaxis(hidden, 2, 1), (batch * m, length, -1))
    recorded = [_member_groups(weights[layer], m) for layer in model._recorded_attention.layers]
    attention = ops.moveaxis(ops.stack(recorded, axis=2), 3, 1)  # (batch, length, m, l, h)
    return hidden, ops.reshape(attention, (batch, length, -1))


def query_attention(model, inputs, query_positions):
    """The weights that one query position of each sequence gives to every
    position, in every layer (keras-hub's attention route, as
    `routed_member_hidden` runs it): what CSL reads from the last token of
    an eliciting prompt.

    Args:
        model: a `LoRAEnsembleCausalLM` whose family takes the route.
        inputs: dict of `token_ids` and `padding_mask` `(batch, length)`.
        query_positions: int array `(batch,)`, each sequence's query
            position.

    Returns:
        float tensor `(batch, members, layers, heads, length)`, 0 after
        the query position and at padding.
    """
    batch, length = (int(d) for d in ops.shape(inputs["padding_mask"]))
    queries = ops.one_hot(ops.convert_to_tensor(query_positions, "int32"), length)
    _, _, rows = _routed_pass(model, inputs, queries)
    rows = [_member_groups(r, model.num_members) for r in rows]  # (batch, m, heads, length)
    return ops.stack(rows, axis=2)


def _member_groups(weights, num_members):
    """A layer's weights with a group axis at 1, a shared block's one group
    repeated for the members."""
    if ops.shape(weights)[1] != num_members:
        return ops.repeat(weights, num_members, axis=1)
    return weights


def _routed_pass(model, inputs, queries=None):
    """`member_hidden` of the sequences laid out one token per row through
    `sequence_attention`: `(hidden rows, weights, rows)`, the kernel's
    lists, one entry per layer."""
    m = model.num_members
    padding_mask = ops.cast(inputs["padding_mask"], "bool")
    batch, length = (int(d) for d in ops.shape(padding_mask))
    flat = {name: ops.reshape(x, (batch * length, 1)) for name, x in inputs.items()}
    token_positions = ops.cumsum(ops.ones((batch, length, 1), "int32"), axis=1) - 1
    shared = ops.reshape(token_positions, (-1,))
    members = ops.reshape(ops.repeat(token_positions, m, axis=2), (-1,))
    trunk = getattr(model, "trunk_blocks", 0)
    blocks = len(model.backbone.transformer_layers)
    positions = [shared if i < trunk else members for i in range(blocks)]
    weights, rows = [], []
    kernel = sequence_attention(padding_mask, weights, positions, queries, rows)
    with vllm_context_scope(kernel, positions[0], None):
        hidden = member_hidden(model, flat, training=False)
    if len(weights) != blocks:
        raise ValueError(
            f"{len(weights)} of the decoder's {blocks} attention layers took keras-hub's "
            "attention route: the attention weights cannot be recorded."
        )
    heads = model._recorded_attention.heads
    if any(ops.shape(w)[-1] != heads for w in weights):
        raise ValueError(
            f"The decoder's attention layers have {[ops.shape(w)[-1] for w in weights]} "
            f"query heads; its backbone says {heads}."
        )
    return hidden, weights, rows
