"""Teacher-forced figures of a LoRA-Ensemble causal LM: the per-token
figures of given sequences from one pass of the backbone, then the
vocabulary projection and the figures a chunk of positions at a time
(`LoRAEnsembleCausalLM.score_uncertainty`, and the figures of beam and
contrastive search, whose loops keras-hub runs).

Memory. The members' logits of one position take `members x vocabulary`
values (4 members of Gemma 3's 262,144-token vocabulary: 4 MB in
float32), and computing the figures keeps about a dozen tensors of that
size alive at once. So the chunk is sized from the members and the
vocabulary (`positions_per_chunk`: `FIGURE_BUDGET` values per sequence of
the batch), the chunks run in one `keras.ops.fori_loop`, and
`score_uncertainty` records no gradients under PyTorch, where an autograd
graph would keep every chunk's tensors until the end (about 70 MB per
scored token on Gemma 3 270M: 542 tokens ran out of 24 GB).

Speed. `decode_compilation.scoring_function` compiles the whole scoring
for the backend, as the decode is compiled.
"""

from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.attention_route import routed_member_hidden
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import split_members
from ensemble_zoo.models.lora_ensemble.causal_lm.member_forward import member_hidden
from ensemble_zoo.ops.token_uncertainty import token_log_probs
from ensemble_zoo.ops.token_uncertainty import vocabulary_log_softmax

#: Values of the members' log-probabilities that one chunk holds per
#: sequence of the batch (64 MiB in float32): with the dozen tensors of
#: that size the figures keep alive, about 1 GB per sequence whatever the
#: vocabulary (16 positions of 4 Gemma 3 members; every position of a
#: tiny test model).
FIGURE_BUDGET = 2**24


def positions_per_chunk(num_members, vocabulary_size, budget=FIGURE_BUDGET):
    """The positions of one chunk: the most whose `members x positions x
    vocabulary` log-probabilities fit in `budget` values (at least 1)."""
    return max(1, budget // (num_members * vocabulary_size))


def chunked_figures(
    model, token_ids, padding_mask, chunk_size=None, prompt_mask=None, attention=False
):
    """Teacher-forced figures `(batch, length, figures)` (position 0:
    zeros), and with `attention`, where the family takes keras-hub's
    attention route (`model._recorded_attention`), the attention weights
    after them, as the decode loop records them: at position `t`, the
    weight each head of the recorded layers gives from position `t - 1` to
    itself (`attention_route.routed_member_hidden`). That pass holds each
    layer's `(rows, heads, length, length)` weights while it runs, where
    keras-hub's own attention may use a fused kernel: it is asked for, not
    the default of `score_uncertainty`.

    The backbone runs once over the sequence; the vocabulary projection
    and the figures run `chunk_size` positions at a time
    (`positions_per_chunk` by default) in one `keras.ops.fori_loop`, so the
    member logits `(batch, members, tokens, vocabulary)` are never held
    whole; the last chunk is padded (its padded positions are dropped).
    The members' prefix log-likelihoods (the expectation-of-products
    weights) sum the tokens at positions `>= 1` inside `padding_mask` and
    outside `prompt_mask`, carried from chunk to chunk.
    """
    num_members = model.num_members
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    if not attention or model._recorded_attention is None:
        hidden, attention = member_hidden(model, inputs, training=False), None
    else:
        hidden, attention = routed_member_hidden(model, inputs)  # (rows, length, hidden)
    steps = int(token_ids.shape[1]) - 1
    if chunk_size is None:
        chunk_size = positions_per_chunk(num_members, model.backbone.vocabulary_size)
    chunk = min(chunk_size, steps)
    count = -(-steps // chunk)
    counted = ops.cast(padding_mask, "float32")
    if prompt_mask is not None:
        counted = counted * (1.0 - ops.cast(prompt_mask, "float32"))

    def figures_of_chunk(prefix, chunk_inputs):
        part, tokens, counted = chunk_inputs
        member_logits = split_members(
            model.backbone.token_embedding(part, reverse=True), num_members
        )
        log_p = vocabulary_log_softmax(member_logits)
        taken = token_log_probs(log_p, tokens)["member_log_probs"]
        taken = taken * ops.expand_dims(counted, 1)
        before = ops.expand_dims(prefix, -1) + ops.cumsum(taken, axis=-1) - taken
        figures = model._figures(log_p, tokens, split_members(part, num_members), before)
        return prefix + ops.sum(taken, axis=-1), figures

    batch = ops.shape(token_ids)[0]
    prefix = ops.zeros((batch, num_members), "float32")
    chunk_inputs = (hidden[:, :steps], token_ids[:, 1:], counted[:, 1:])
    if count == 1:
        figures = figures_of_chunk(prefix, chunk_inputs)[1]
    else:
        chunk_inputs = [_chunks(x, chunk, count) for x in chunk_inputs]

        def body(i, state):
            prefix, figures = state
            prefix, part = figures_of_chunk(prefix, [ops.take(x, i, axis=0) for x in chunk_inputs])
            return prefix, ops.slice_update(figures, [0, i * chunk, 0], part)

        figures = ops.zeros((batch, count * chunk, model._num_figures), "float32")
        figures = ops.fori_loop(0, count, body, (prefix, figures))[1][:, :steps]
    if attention is not None:
        figures = ops.concatenate([figures, ops.cast(attention[:, :steps], figures.dtype)], -1)
    return ops.pad(figures, ((0, 0), (1, 0), (0, 0)))


def _chunks(x, chunk, count):
    """`(rows, positions, ...)` -> `(count, rows, chunk, ...)`, the last
    chunk padded with zeros."""
    padding = [(0, 0)] * len(x.shape)
    padding[1] = (0, count * chunk - int(x.shape[1]))
    x = ops.pad(x, padding)
    x = ops.reshape(x, (-1, count, chunk) + tuple(x.shape[2:]))
    return ops.moveaxis(x, 1, 0)
