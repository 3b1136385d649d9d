"""Exact, sorting-based binary ranking curves (ROC, precision-recall).

One sort of the scores gives the true- and false-positive counts at every
distinct threshold; AUROC, average precision and FPR-at-TPR are read off
those counts. Tied scores form one operating point, exactly as in
scikit-learn's `roc_curve` / `precision_recall_curve`, so the results
equal `roc_auc_score` and `average_precision_score` (a tie counts half in
the AUROC). Nothing is approximated with fixed thresholds, unlike
`keras.metrics.AUC`.
"""

import numpy as np

from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_finite


def as_scores(scores, name, samples=None, like=None):
    """Returns `scores` as a non-empty, finite vector (int64 for integer
    and bool scores, so large integers stay distinct; float64 otherwise),
    or raises. Shape `(samples, 1)` is accepted as `(samples,)`; with
    `samples` given, the vector must have that length (`like`: the name
    of the argument it must match, for the error)."""
    scores = as_numeric_array(scores, name, allow_bool=True)
    if scores.dtype.kind in "iub":
        scores = scores.astype(np.int64)
    else:
        scores = scores.astype(np.float64)
    if scores.ndim == 2 and scores.shape[1] == 1:
        scores = scores[:, 0]
    if scores.ndim != 1:
        raise ValueError(
            f"`{name}` must be a vector of per-sample scores, shape "
            f"(samples,); got shape {scores.shape}."
        )
    if scores.shape[0] == 0:
        raise ValueError(f"`{name}` is empty; the metric needs at least one sample of each kind.")
    scores = check_finite(scores, name)
    if samples is not None and scores.shape[0] != samples:
        to_match = "" if like is None else f" to match `{like}`"
        raise ValueError(
            f"`{name}` must have shape ({samples},){to_match}; got shape {scores.shape}."
        )
    return scores


def threshold_counts(scores, positive):
    """True/false-positive counts at every distinct threshold.

    Samples are ranked by decreasing score; each group of tied scores is
    one threshold. Returns `(tp, fp, num_positive, num_negative)` where
    `tp[k]`, `fp[k]` count the positives and negatives scoring at least the
    k-th highest distinct score (float64 arrays, ending at the totals).
    """
    positive = np.asarray(positive, dtype=bool)
    order = np.argsort(scores)[::-1]  # descending; no negation overflow
    sorted_scores = scores[order]
    tp = np.cumsum(positive[order], dtype=np.float64)
    last = np.flatnonzero(sorted_scores[1:] != sorted_scores[:-1])
    ends = np.append(last, scores.shape[0] - 1)
    tp = tp[ends]
    fp = (ends + 1.0) - tp
    return tp, fp, tp[-1], fp[-1]


def auroc_from_counts(tp, fp, num_positive, num_negative):
    """Area under the ROC curve (trapezoids; ties count one half)."""
    tp = np.concatenate([[0.0], tp])
    fp = np.concatenate([[0.0], fp])
    area = np.sum(np.diff(fp) * (tp[1:] + tp[:-1])) / 2.0
    return float(area / (num_positive * num_negative))


def average_precision_from_counts(tp, fp, num_positive):
    """Average precision `sum_k (R_k - R_{k-1}) P_k`, as scikit-learn."""
    precision = tp / (tp + fp)
    recall_steps = np.diff(np.concatenate([[0.0], tp])) / num_positive
    return float(np.sum(recall_steps * precision))


def fpr_at_tpr_from_counts(tp, fp, num_positive, num_negative, tpr):
    """False-positive rate at the first threshold whose TPR >= `tpr`."""
    index = int(np.searchsorted(tp / num_positive, tpr, side="left"))
    index = min(index, tp.shape[0] - 1)
    return float(fp[index] / num_negative)


def binary_auroc(scores, positive, positive_name="positive"):
    """AUROC of `scores` for detecting the `positive` samples."""
    scores = as_scores(scores, "scores")
    positive = np.asarray(positive, dtype=bool)
    tp, fp, num_positive, num_negative = threshold_counts(scores, positive)
    if num_positive == 0 or num_negative == 0:
        raise ValueError(
            f"AUROC is undefined when every sample is {positive_name} or "
            f"none is ({int(num_positive)} of {scores.shape[0]} are)."
        )
    return auroc_from_counts(tp, fp, num_positive, num_negative)
