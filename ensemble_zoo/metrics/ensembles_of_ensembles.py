"""Ensembles of ensembles: epistemic uncertainty between and within groups.

Kirsch ("(Implicit) Ensembles of Ensembles: Epistemic Uncertainty Collapse in
Large Models") groups the N members of an ensemble into K sub-ensembles of M
members each. The sub-ensembles' average predictions are themselves an
ensemble, whose mutual information I[Y; K] (the "between" MI) shrinks as M
grows ("epistemic uncertainty collapse"), while the flat ensemble's MI
I[Y; K, M] stays the same. The chain rule splits it exactly:

    I[Y; K, M] = I[Y; K] + I[Y; M | K]
    total      = between + mean over groups of the within-group MI

Groups are contiguous: group k holds members `k*M ... (k+1)*M - 1`. Group
sizes that divide each other give nested partitions, for which the between
MI is non-increasing in the group size (I[Y; K_coarse] <= I[Y; K_fine]
because the coarse index is a function of the fine one).
"""

import numpy as np

from ensemble_zoo.metrics.array_checks import as_member_probabilities
from ensemble_zoo.metrics.diversity import _entropy
from ensemble_zoo.metrics.diversity import _reduce
from ensemble_zoo.utils.validation import is_integer


def _mutual_information(probs):
    """Unclipped MI of `(samples, members, classes)` probabilities."""
    return _entropy(probs.mean(axis=1)) - _entropy(probs).mean(axis=1)


def ensemble_of_ensembles_mutual_information(
    member_probs, num_groups, from_logits=False, reduction="mean"
):
    """Between-group, within-group and whole-ensemble mutual information.

    Args:
        member_probs: `(samples, members, classes)` member probabilities
            (or logits with `from_logits=True`) of any ensemble.
        num_groups: int K, dividing the number of members; each group has
            `members // K` members.
        from_logits: bool. Defaults to `False`.
        reduction: `"mean"` (floats) or `"none"` (per-sample arrays).

    Returns:
        dict with `"between"` (MI of the K group averages, I[Y; K]),
        `"within"` (the mean over groups of each group's MI, I[Y; M | K])
        and `"total"` (the flat ensemble's MI); `total == between + within`
        up to float64 round-off (values are not clipped at 0, so that the
        identity holds exactly).

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    logits = np.random.default_rng(0).normal(size=(100, 12, 5))
    mi = ez.metrics.ensemble_of_ensembles_mutual_information(
        logits, num_groups=3, from_logits=True
    )
    mi["total"] - (mi["between"] + mi["within"])  # ~1e-16
    ```
    """
    probs = as_member_probabilities(member_probs, from_logits)
    _reduce(np.zeros(1), reduction)  # checks `reduction` before the work
    samples, members, classes = probs.shape
    if not is_integer(num_groups) or num_groups < 1 or members % num_groups:
        raise ValueError(
            f"`num_groups` must be a positive integer dividing the number of "
            f"members ({members}); got {num_groups!r}."
        )
    grouped = probs.reshape(samples, num_groups, members // num_groups, classes)
    group_means = grouped.mean(axis=2)
    between = _mutual_information(group_means)
    within = np.mean([_mutual_information(grouped[:, k]) for k in range(num_groups)], axis=0)
    total = _mutual_information(probs)
    return {
        "between": _reduce(between, reduction),
        "within": _reduce(within, reduction),
        "total": _reduce(total, reduction),
    }


def weighted_mutual_information(member_logits, reduction="mean"):
    """Mutual information with members weighted by their logit energy.

    For tile ensembles (Ensembles of Ensembles, App. B.1): member `j` of
    sample `x` gets the weight `w_j(x) = softmax_j(logsumexp_c z_jc(x))`, and
    `MI_w = H(sum_j w_j p_j) - sum_j w_j H(p_j)`. The paper's formula ("the
    logit sum for the i-th input and j-th member") is ambiguous; we read its
    sum as running over classes, per input, as the notes recommend. With this
    reading the weighted mixture is `softmax_c(logsumexp_j z_jc)`, log-sum-exp
    pooling of the tile logits, so tiles with more evidence dominate. Equal
    energies give the plain MI.

    Args:
        member_logits: `(samples, members, classes)` logits.
        reduction: `"mean"` or `"none"`.
    """
    probs = as_member_probabilities(member_logits, True, name="member_logits")
    logits = np.asarray(member_logits, dtype=np.float64)
    energy = logits.max(axis=-1) + np.log(
        np.exp(logits - logits.max(axis=-1, keepdims=True)).sum(axis=-1)
    )
    weights = np.exp(energy - energy.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    mixture = np.einsum("sm,smc->sc", weights, probs)
    expected = np.einsum("sm,sm->s", weights, _entropy(probs))
    return _reduce(np.maximum(_entropy(mixture) - expected, 0.0), reduction)
