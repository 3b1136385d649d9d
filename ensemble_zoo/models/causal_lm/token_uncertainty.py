"""Per-token uncertainty of an ensemble of language-model members.

One function serves the compiled decode loop (one position at a time) and
teacher-forced scoring (a chunk of positions): from member logits over
the vocabulary it computes, per position, the decomposition of the
ensemble's predictive entropy (`ensemble_zoo.ops.uncertainty_decomposition`
on the member axis) and the log-probability of a given token under the
ensemble and under each member.
"""

from keras import ops

from ensemble_zoo.ops.uncertainty import uncertainty_decomposition_on_axis

#: The per-token figures, in the order of `token_figures`' last axis
#: (then one member log-probability per member).
FIGURES = ("total", "aleatoric", "epistemic", "log_prob")


def token_figures(member_logits, tokens):
    """Uncertainty figures of `tokens` under an ensemble of members.

    Args:
        member_logits: float tensor `(batch, members, ..., vocabulary)`.
        tokens: int tensor `(batch, ...)`, the token taken at each
            position.

    Returns:
        float32 tensor `(batch, ..., 4 + members)`: total, aleatoric and
        epistemic uncertainty (nats) of the ensemble's predictive
        distribution (the mean of the members' softmaxes), the token's
        log-probability under it, then the token's log-probability under
        each member.
    """
    log_p = ops.log_softmax(ops.cast(member_logits, "float32"), axis=-1)
    parts = uncertainty_decomposition_on_axis(log_p)
    log_mean = _log_mean(log_p)
    index = ops.expand_dims(ops.cast(tokens, "int32"), -1)
    log_prob = ops.take_along_axis(log_mean, index, axis=-1)[..., 0]
    member_index = ops.expand_dims(index, 1)
    member_index = ops.broadcast_to(
        member_index, tuple(ops.shape(log_p)[:-1]) + (1,)
    )
    member = ops.take_along_axis(log_p, member_index, axis=-1)[..., 0]
    member = ops.moveaxis(member, 1, -1)  # (batch, ..., members)
    scalars = ops.stack(
        [parts["total"], parts["aleatoric"], parts["epistemic"], log_prob], axis=-1
    )
    return ops.concatenate([scalars, member], axis=-1)


def ensemble_log_probabilities(member_logits):
    """`log mean_m softmax(z_m)` over the member axis 1 (float32)."""
    return _log_mean(ops.log_softmax(ops.cast(member_logits, "float32"), axis=-1))


def _log_mean(log_p):
    """`log mean_m p_m` from member log-probabilities (members on axis 1)."""
    num_members = ops.shape(log_p)[1]
    return ops.logsumexp(log_p, axis=1) - ops.log(ops.cast(num_members, log_p.dtype))
