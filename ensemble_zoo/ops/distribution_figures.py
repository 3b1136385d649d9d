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
"""

import math

from keras import ops

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
