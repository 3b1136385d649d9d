"""Per-token uncertainty of an ensemble of language-model members.

One function serves the compiled decode loop (one position at a time) and
teacher-forced scoring (a chunk of positions): from member logits over
the vocabulary it computes, per position, the token-level figures of
`ensemble_zoo.ops.token_uncertainty` and the log-probability of a given
token under the ensemble and under each member, packed along one last
axis so that the loop carries one array.
"""

from keras import ops

from ensemble_zoo.ops.token_uncertainty import TOKEN_FIGURES
from ensemble_zoo.ops.token_uncertainty import ensemble_log_probs
from ensemble_zoo.ops.token_uncertainty import token_figures_from_log_probs
from ensemble_zoo.ops.token_uncertainty import token_log_probs

#: The per-token figures, in the order of `token_figures`' last axis
#: (then one log-probability per member, then one entropy per member).
FIGURES = TOKEN_FIGURES + ("log_prob",)


def token_figures(member_logits, tokens):
    """Uncertainty figures of `tokens` under an ensemble of members.

    Args:
        member_logits: float tensor `(batch, members, ..., vocabulary)`.
        tokens: int tensor `(batch, ...)`, the token taken at each
            position.

    Returns:
        float32 tensor `(batch, ..., len(FIGURES) + 2 * members)`: the
        `FIGURES` (`ensemble_zoo.ops.token_uncertainty`'s figures, then
        the token's log-probability under the ensemble), the token's
        log-probability under each member, then each member's entropy.
    """
    log_p = ops.log_softmax(ops.cast(member_logits, "float32"), axis=-1)
    figures = token_figures_from_log_probs(log_p)
    figures.update(token_log_probs(log_p, tokens))
    scalars = ops.stack([figures[name] for name in FIGURES], axis=-1)
    per_member = [
        ops.moveaxis(figures[name], 1, -1)  # (batch, ..., members)
        for name in ("member_log_probs", "member_entropy")
    ]
    return ops.concatenate([scalars] + per_member, axis=-1)


def ensemble_log_probabilities(member_logits):
    """`log mean_m softmax(z_m)` over the member axis 1 (float32)."""
    return ensemble_log_probs(ops.log_softmax(ops.cast(member_logits, "float32"), axis=-1))
