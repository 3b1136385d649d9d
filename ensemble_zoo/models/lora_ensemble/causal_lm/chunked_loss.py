"""The members' token cross-entropy of a causal-LM ensemble in blocks of
positions: what `fit` minimises, without the member logits.

The member logits of a long sequence are `members x length x vocabulary`
values: 4.3 GB in float32 for 4 members of Gemma 3 (262,144 tokens) over
1,024 positions, with as much again for their gradient, where keras-hub's
own `fit` of the base model holds a quarter of it. Under `compile()`'s
default loss the training forward stops at the members' final hidden
states, and `chunked_token_cross_entropy` projects them onto the
vocabulary a block of positions at a time, each block under
`keras.remat`, so that its logits are recomputed in the backward pass
instead of kept: the loss's working set is one block's logits, whatever
the length.
"""

import keras
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.teacher_forcing import positions_per_chunk


def chunked_token_cross_entropy(token_embedding, hidden, labels, sample_weight, chunk_size=None):
    """The mean over members of the token cross-entropy, weighted and
    reduced as Keras reduces `member_token_cross_entropy` (the sum of the
    weighted losses over `batch x tokens`), from the members' final hidden
    states.

    Args:
        token_embedding: the backbone's reversible token embedding
            (`token_embedding(h, reverse=True)` gives the logits, with
            the family's logit soft-cap if any).
        hidden: `(batch, members, tokens, hidden_dim)` final hidden
            states.
        labels: `(batch, tokens)` next-token ids.
        sample_weight: `(batch, tokens)` weights (the preprocessor's
            padding mask), or `None`.
        chunk_size: positions per block; `None`: as many as keep `members
            x positions x vocabulary` within one sequence's budget
            (`teacher_forcing.positions_per_chunk`).

    Returns:
        A float32 scalar.
    """
    members, length = hidden.shape[1], hidden.shape[2]
    labels = ops.cast(labels, "int32")
    weights = (
        ops.ones(ops.shape(labels), "float32")
        if sample_weight is None
        else ops.cast(sample_weight, "float32")
    )

    def block_loss(h, y, w):
        logits = ops.cast(token_embedding(h, reverse=True), "float32")
        y = ops.repeat(ops.expand_dims(y, 1), members, axis=1)
        ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        return ops.sum(ops.mean(ce, axis=1) * w)

    count = ops.cast(ops.shape(labels)[0], "float32") * ops.cast(ops.shape(labels)[1], "float32")
    if length is None:  # an unknown length: one block
        return block_loss(hidden, labels, weights) / count
    if chunk_size is None:
        chunk_size = positions_per_chunk(members, token_embedding.input_dim)
    chunk_size = min(chunk_size, length)
    steps = -(-length // chunk_size)
    pad = steps * chunk_size - length  # the last block padded, with zero weight
    hidden = ops.pad(hidden, [[0, 0], [0, 0], [0, pad], [0, 0]])
    labels = ops.pad(labels, [[0, 0], [0, pad]])
    weights = ops.pad(weights, [[0, 0], [0, pad]])
    # The embedding's weights reach each block as arguments (read through
    # a `keras.StatelessScope`), not as captured variables: TensorFlow
    # cannot differentiate a `tf.recompute_grad` that reads a variable
    # inside a `tf.while_loop` ("... is in list of internal_captures but
    # not in internal_capture_to_output", TensorFlow 2.21).
    variables = token_embedding.weights

    def body(step, total):
        positions = step * chunk_size + ops.arange(chunk_size)
        y = ops.take(labels, positions, axis=1)
        w = ops.take(weights, positions, axis=1)

        def block(h, *values):
            with keras.StatelessScope(list(zip(variables, values))):
                return block_loss(h, y, w)

        values = [ops.stop_gradient(v.value) for v in variables]
        return total + keras.remat(block)(ops.take(hidden, positions, axis=2), *values)

    # One loop, not `steps` unrolled blocks: XLA runs an unrolled graph's
    # blocks in any order and holds their logits at once.
    total = ops.fori_loop(0, steps, body, ops.zeros((), "float32"))
    return total / count
