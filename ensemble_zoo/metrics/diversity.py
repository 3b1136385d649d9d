"""Per-sample uncertainty scores and ensemble diversity on arrays.

NumPy counterparts of `ensemble_zoo.ops` for evaluation: `entropy` of
predictive probabilities, the ensemble `mutual_information` (epistemic
part of the entropy) and the pairwise `disagreement` of member
predictions. `reduction="mean"` (default) returns a float,
`reduction="none"` the per-sample values, used as OOD scores.
"""

import numpy as np

from ensemble_zoo.metrics.array_checks import as_member_probabilities
from ensemble_zoo.metrics.array_checks import as_probabilities
from ensemble_zoo.utils.validation import check_choice

_LOG_EPSILON = 1e-300


def _reduce(values, reduction):
    if check_choice(reduction, "reduction", ("mean", "none")) == "mean":
        return float(np.mean(values))
    return values


def _entropy(probs):
    return -np.sum(probs * np.log(np.maximum(probs, _LOG_EPSILON)), axis=-1)


def entropy(probs, reduction="mean"):
    """Shannon entropy (nats) of predictive probabilities `(samples, C)`.

    `0 log 0` is taken as 0.
    """
    return _reduce(_entropy(as_probabilities(probs)), reduction)


def mutual_information(member_probs, from_logits=False, reduction="mean"):
    """Mutual information between the prediction and the member (nats).

    `MI = H(mean_m p_m) - mean_m H(p_m)`, the epistemic part of the
    predictive entropy. Clipped at 0 against round-off; a single member
    gives 0.

    Args:
        member_probs: `(samples, members, classes)` member probabilities,
            or logits with `from_logits=True`.
        from_logits: bool. Defaults to `False`.
        reduction: `"mean"` or `"none"`.
    """
    probs = as_member_probabilities(member_probs, from_logits)
    total = _entropy(probs.mean(axis=1))
    aleatoric = _entropy(probs).mean(axis=1)
    return _reduce(np.maximum(total - aleatoric, 0.0), reduction)


def disagreement(member_outputs, reduction="mean"):
    """Fraction of member pairs whose top-1 predictions differ.

    Per sample, `1 - sum_c C(n_c, 2) / C(M, 2)` where `n_c` members predict
    class `c` (the Hydra paper's DI). With a single member there are no
    pairs and the value is 0.

    Args:
        member_outputs: `(samples, members, classes)` member logits or
            probabilities (only the argmax is used).
        reduction: `"mean"` or `"none"`.
    """
    check_choice(reduction, "reduction", ("mean", "none"))
    # Logits or probabilities: only finiteness matters for the argmax.
    member_outputs = as_member_probabilities(
        member_outputs, from_logits=True, name="member_outputs"
    )
    samples, members, classes = member_outputs.shape
    if members < 2:
        return _reduce(np.zeros(samples), reduction)
    votes = member_outputs.argmax(axis=-1)
    counts = np.zeros((samples, classes))
    np.add.at(counts, (np.arange(samples)[:, None], votes), 1.0)
    agreeing_pairs = np.sum(counts * (counts - 1.0), axis=1) / 2.0
    values = 1.0 - agreeing_pairs / (members * (members - 1) / 2.0)
    return _reduce(values, reduction)
