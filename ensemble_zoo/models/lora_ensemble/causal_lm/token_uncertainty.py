"""Per-token uncertainty of an ensemble of language-model members.

One function serves the compiled decode loop (one position at a time) and
teacher-forced scoring (a chunk of positions): from the members'
log-probabilities over the vocabulary it computes, per position, the token-level figures of
`ensemble_zoo.ops.token_uncertainty` for the two ensembles of Malinin &
Gales ("Uncertainty estimation in autoregressive structured prediction",
arXiv:2002.07650): the product of expectations, whose next-token
distribution is the members' mean (`total`, `aleatoric`, ...), and the
expectation of products, whose next-token distribution weighs each member
by its likelihood of the answer so far (`ep_total`, `ep_aleatoric`, ...);
then the log-probability of the taken token under the ensemble and under
each member, and lm-polygraph's distances of each next-token distribution
from the uniform one (`ensemble_zoo.ops.distribution_figures`: its
`FisherRao`, `RenyiNeg` and `SelfCertainty` per token) and the taken
token's boosted probability (its `BoostedProbSequence` per token), for
the ensemble's predictive distribution and for each member, packed along
one last axis so that the loop carries one array.
"""

from keras import ops

from ensemble_zoo.ops.distribution_figures import DISTRIBUTION_FIGURES
from ensemble_zoo.ops.distribution_figures import boosted_probability
from ensemble_zoo.ops.token_uncertainty import TOKEN_FIGURES
from ensemble_zoo.ops.token_uncertainty import mixture_figures
from ensemble_zoo.ops.token_uncertainty import token_log_probs

#: The expectation-of-products figures (the same measures, members
#: weighted by their likelihood of the prefix).
EP_FIGURES = tuple(
    "ep_" + name
    for name in (
        "total",
        "aleatoric",
        "epistemic",
        "expected_pairwise_kl",
        "reverse_mutual_information",
    )
)
#: The per-token figures, in the order of `token_figures`' last axis
#: (then `MEMBER_FIGURES`, one column per member each).
FIGURES = (
    TOKEN_FIGURES + EP_FIGURES + ("log_prob",) + DISTRIBUTION_FIGURES + ("boosted_probability",)
)
#: The per-member figures after `FIGURES`, `members` columns each: the
#: token's log-probability, the entropy, the `DISTRIBUTION_FIGURES` and
#: the taken token's boosted probability under each member (`log_probs`
#: first: the decode loop reads it back).
MEMBER_FIGURES = ("member_log_probs", "member_entropy") + tuple(
    "member_" + name for name in DISTRIBUTION_FIGURES + ("boosted_probability",)
)


def num_token_figures(num_members):
    """The width of `token_figures`' last axis for `num_members`."""
    return len(FIGURES) + len(MEMBER_FIGURES) * num_members


def token_figures(member_log_probs, tokens, prefix_log_likelihoods):
    """Uncertainty figures of `tokens` under an ensemble of members.

    Args:
        member_log_probs: float32 tensor `(batch, members, ...,
            vocabulary)`, the members' log-probabilities
            (`vocabulary_log_softmax` of their logits, computed once by
            the caller, which also samples or scores from them).
        tokens: int tensor `(batch, ...)`, the token taken at each
            position.
        prefix_log_likelihoods: float tensor `(batch, members, ...)`, each
            member's log-likelihood of the generated tokens before each
            position (0 at the first generated token): the
            expectation-of-products weights are their softmax over members.

    Returns:
        float32 tensor `(batch, ..., num_token_figures(members))`: the
        `FIGURES`, then the `MEMBER_FIGURES`, one column per member each.
    """
    log_p = member_log_probs
    weights = ops.log_softmax(ops.cast(prefix_log_likelihoods, "float32"), axis=1)
    figures, weighted = mixture_figures(log_p, [None, weights], with_distances=True)
    for name in EP_FIGURES:
        figures[name] = weighted[name[len("ep_") :]]
    figures.update(token_log_probs(log_p, tokens))
    # BoostedProb of the ensemble's mean probability, then of each member;
    # the taken token's probability read from the same array, so that it
    # compares exactly with the sorted ones.
    p = ops.exp(log_p)
    p = ops.concatenate([ops.mean(p, axis=1, keepdims=True), p], axis=1)
    index = ops.expand_dims(ops.expand_dims(ops.cast(tokens, "int32"), 1), -1)
    index = ops.broadcast_to(index, tuple(ops.shape(p)[:-1]) + (1,))
    boosted = boosted_probability(p, ops.take_along_axis(p, index, axis=-1)[..., 0])
    figures["boosted_probability"] = boosted[:, 0]
    figures["member_boosted_probability"] = boosted[:, 1:]
    scalars = ops.stack([figures[name] for name in FIGURES], axis=-1)
    per_member = [
        ops.moveaxis(figures[name], 1, -1)  # (batch, ..., members)
        for name in MEMBER_FIGURES
    ]
    return ops.concatenate([scalars] + per_member, axis=-1)
