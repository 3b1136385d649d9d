"""Out-of-distribution detection metrics, OOD as the positive class.

Every function takes two score vectors, one for in-distribution (ID) and
one for OOD samples, where a **higher score means "more likely OOD"**:
pass an uncertainty such as `1 - max_softmax_probability`, the predictive
entropy or the mutual information (negate a confidence). This follows
torch-uncertainty (the Hydra paper's metrics): AUROC, AUPR with OOD as the
positive class, and FPR95 = the fraction of ID samples flagged as OOD at
the threshold that detects 95 % of the OOD samples.

All three are exact (one sort; ties handled like scikit-learn).
"""

import numbers

import numpy as np

from ensemble_zoo.metrics.ranking import as_scores
from ensemble_zoo.metrics.ranking import auroc_from_counts
from ensemble_zoo.metrics.ranking import average_precision_from_counts
from ensemble_zoo.metrics.ranking import fpr_at_tpr_from_counts
from ensemble_zoo.metrics.ranking import threshold_counts


def _ood_counts(id_scores, ood_scores):
    id_scores = as_scores(id_scores, "id_scores")
    ood_scores = as_scores(ood_scores, "ood_scores")
    scores = np.concatenate([id_scores, ood_scores])
    is_ood = np.zeros(scores.shape[0], dtype=bool)
    is_ood[id_scores.shape[0] :] = True
    return threshold_counts(scores, is_ood)


def ood_auroc(id_scores, ood_scores):
    """Area under the ROC curve for separating OOD (positive) from ID.

    Equals scikit-learn's `roc_auc_score(is_ood, scores)`: the probability
    that a random OOD sample scores higher than a random ID sample, ties
    counting one half.

    Args:
        id_scores: `(n_id,)` scores of in-distribution samples.
        ood_scores: `(n_ood,)` scores of OOD samples; higher = more OOD.

    Returns:
        float in [0, 1]; 0.5 is chance.

    Example:

    >>> ood_auroc([0.1, 0.2, 0.4], [0.3, 0.9])
    0.8333333333333334
    """
    return auroc_from_counts(*_ood_counts(id_scores, ood_scores))


def ood_aupr(id_scores, ood_scores):
    """Area under the precision-recall curve, OOD as the positive class.

    Computed as average precision `sum_k (R_k - R_{k-1}) P_k` over the
    distinct thresholds, which equals scikit-learn's
    `average_precision_score(is_ood, scores)` (not the trapezoidal area).
    Its chance level is the OOD fraction `n_ood / (n_id + n_ood)`.

    Args:
        id_scores: `(n_id,)` scores of in-distribution samples.
        ood_scores: `(n_ood,)` scores of OOD samples; higher = more OOD.

    Returns:
        float in [0, 1].
    """
    tp, fp, num_positive, _ = _ood_counts(id_scores, ood_scores)
    return average_precision_from_counts(tp, fp, num_positive)


def fpr_at_95_tpr(id_scores, ood_scores, tpr=0.95):
    """False-positive rate at 95 % true-positive rate (FPR95), OOD positive.

    Thresholds run from the highest score down; at the first threshold
    that flags at least `tpr` of the OOD samples, this returns the fraction
    of ID samples flagged too (lower is better). Equivalent to
    `fpr[np.searchsorted(tpr_curve, 0.95)]` on scikit-learn's
    `roc_curve(..., drop_intermediate=False)`.

    Args:
        id_scores: `(n_id,)` scores of in-distribution samples.
        ood_scores: `(n_ood,)` scores of OOD samples; higher = more OOD.
        tpr: float in (0, 1], the detection rate. Defaults to `0.95`.

    Returns:
        float in [0, 1].
    """
    if isinstance(tpr, bool) or not isinstance(tpr, numbers.Real):
        raise ValueError(f"`tpr` must be a float in (0, 1]; got {tpr!r}.")
    if not 0.0 < tpr <= 1.0:
        raise ValueError(f"`tpr` must lie in (0, 1]; got {tpr}.")
    tp, fp, num_positive, num_negative = _ood_counts(id_scores, ood_scores)
    return fpr_at_tpr_from_counts(tp, fp, num_positive, num_negative, tpr)
