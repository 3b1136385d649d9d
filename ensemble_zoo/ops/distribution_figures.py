"""Per-token figures of one next-token distribution, for the decode loop.

lm-polygraph 0.7.0's `FisherRao`, `RenyiNeg` and `SelfCertainty` average
one number per generated token, each a distance or divergence between the
next-token distribution `p_t` over a vocabulary of `V` entries and the
uniform one. `distribution_figures` computes those numbers, at
lm-polygraph's defaults, from log-probabilities in `keras.ops`, so that
the causal-LM decode loop records them at each step for the ensemble's
predictive distribution and for each member, and no second pass is
needed; `ez.metrics.fisher_rao`, `renyi_negentropy` and `self_certainty`
(which the tests compare them with) are the sequence estimators on the
whole distributions, in NumPy:

- `fisher_rao_distance`: `(2 / pi) arccos(sum_v sqrt(q_v) / sqrt(V))`,
  `q = softmax(log p_t / 2)` (temperature 2), in `[0, 1]`;
- `renyi_divergence`: lm-polygraph's `(log sum_v q_v^a - (a - 1) log V) /
  (a - 1)` at order `a = 1/2` and the same `q`, which is `-2 log sum_v
  sqrt(q_v) - log V` (see `ez.metrics.renyi_negentropy` for its sign
  convention), so both share one sum;
- `uniform_divergence`: `KL(U || p_t) = -mean_v log p_t(v) - log V`
  (lm-polygraph drops `-inf` log-probabilities; see
  `distribution_figures`).

All three are higher for a more peaked, more certain distribution
(lm-polygraph's orientation); the sequence estimators flip the sign.

`boosted_probability` is lm-polygraph's `BoostedProbSequence` per token
(the taken token's boosted probability, from the distribution's largest
probabilities), recorded in the same loop.
"""

import math

from keras import ops

from ensemble_zoo.utils import backend as backend_utils

#: The figures, in the order the decode loop records them.
DISTRIBUTION_FIGURES = ("fisher_rao_distance", "renyi_divergence", "uniform_divergence")


def distribution_figures(log_probabilities):
    """lm-polygraph's per-token distances from uniform of next-token
    distributions.

    With `q = softmax(log p / 2)`, `q_v = sqrt(p_v) / S_2` where `S_k =
    sum_v p_v^(1/k)`, so `sum_v sqrt(q_v) = S_4 / sqrt(S_2)`: both
    distances come from two sums of powers of the probabilities, with no
    second softmax over the vocabulary. Every entry of the vocabulary
    counts in `uniform_divergence`: a `-inf` log-probability (a token
    ruled out by a `-inf` logit, which keras-hub's models do not give)
    makes it `inf`, where lm-polygraph's `SelfCertainty` and
    `ez.metrics.self_certainty` drop such entries. (Testing each entry
    for `-inf` made the figures of a position 40% slower under XLA on a
    CPU.) The ensemble's log-probabilities come from a log-sum-exp over
    the members (`token_uncertainty._distances`), finite where float32's
    mean probability underflows.

    Args:
        log_probabilities: float32 tensor `(..., vocabulary)`.

    Returns:
        dict of float32 tensors `(...)`, one per name of
        `DISTRIBUTION_FIGURES` (see the module docstring).

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops.distribution_figures import distribution_figures

    uniform = np.full((1, 8), np.log(1 / 8), "float32")
    figures = distribution_figures(uniform)
    # 0 for the uniform distribution itself
    assert abs(float(figures["fisher_rao_distance"][0])) < 1e-3
    ```
    """
    vocabulary = log_probabilities.shape[-1]
    log_v = math.log(vocabulary)
    sum_2 = ops.sum(ops.exp(0.5 * log_probabilities), axis=-1)  # sum_v p_v^(1/2)
    sum_4 = ops.sum(ops.exp(0.25 * log_probabilities), axis=-1)  # sum_v p_v^(1/4)
    cosine = ops.minimum(sum_4 / ops.sqrt(sum_2 * vocabulary), 1.0)
    return {
        "fisher_rao_distance": (2.0 / math.pi) * ops.arccos(cosine),
        "renyi_divergence": ops.log(sum_2) - 2.0 * ops.log(sum_4) - log_v,
        "uniform_divergence": -ops.sum(log_probabilities, axis=-1) / vocabulary - log_v,
    }


#: BoostedProb's cut (the `boostedprob` package 0.1.3's defaults, as
#: `ez.metrics.boosted_probability`): a jump between consecutive sorted
#: probabilities above `BOOSTED_JUMP` times the larger one and above
#: `BOOSTED_EPSILON`.
BOOSTED_JUMP = 0.3
BOOSTED_EPSILON = 0.005
#: The sorted probabilities the cut is searched among: a jump above
#: `BOOSTED_EPSILON` needs its larger probability above it, which at most
#: 199 entries of a distribution have, so the last cut lies among the
#: first 200 and its jump reads the 201st.
BOOSTED_TOP = 201


def boosted_probability(probabilities, taken):
    """BoostedProb's per-token figure (lm-polygraph's
    `BoostedProbSequence` averages it): the dominant tokens' total
    probability if the taken token is one of them, else its own
    probability; the same number as `ez.metrics.boosted_probability`'s
    per token (see there for the cut), from the `BOOSTED_TOP` largest
    probabilities (`top_k_values`).

    Args:
        probabilities: float32 tensor `(..., vocabulary)`.
        taken: float32 tensor `(...)`, the taken token's probability.

    Returns:
        float32 tensor `(...)`.
    """
    # Two-dimensional: XLA's CPU top-k kernel takes (rows, vocabulary); it
    # sorts an operand of another rank, 25x slower (jax 0.10).
    vocabulary = probabilities.shape[-1]
    rows = ops.reshape(probabilities, (-1, vocabulary))
    top = backend_utils.top_k_values(rows, min(BOOSTED_TOP, vocabulary))
    top = ops.reshape(top, tuple(ops.shape(probabilities)[:-1]) + (-1,))
    jump = top[..., :-1] - top[..., 1:]
    cut = ops.logical_and(jump > BOOSTED_JUMP * top[..., :-1], jump > BOOSTED_EPSILON)
    # The dominant set: the sorted entries up to the last cut, those with
    # a cut at or after them. (No `ops.max` / `ops.min` over an axis:
    # under PyTorch they read a named tuple that `torch.compile` cannot
    # trace in one graph, torch 2.13.)
    cuts_after = ops.flip(ops.cumsum(ops.flip(ops.cast(cut, "int32"), -1), axis=-1), -1)
    kept = cuts_after > 0
    mass = ops.sum(ops.where(kept, top[..., :-1], 0.0), axis=-1)
    # Taken is dominant when it is at least the set's smallest entry.
    below = ops.less_equal(top[..., :-1], ops.expand_dims(taken, -1))
    dominant = ops.any(ops.logical_and(kept, below), axis=-1)
    return ops.where(dominant, mass, taken)
