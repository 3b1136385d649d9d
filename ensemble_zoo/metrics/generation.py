"""How well an uncertainty ranks generated answers: AUROC for wrong
answers, the accuracy-rejection curve and the prediction rejection ratio.

A language model's answer is right or wrong (or has a quality in [0, 1]);
a good uncertainty is higher on the wrong ones. These are the measures
of LM-uncertainty work (Malinin and Gales 2021; lm-polygraph's PRR), exact and
independent of the sample order: answers with tied uncertainty are
rejected together (curve) or in random order in expectation (ratio).

Example:

```python
import numpy as np
import ensemble_zoo as ez

uncertainty = np.array([0.1, 0.9, 0.3, 0.7, 0.2])
correct = np.array([True, False, True, True, False])
ez.metrics.answer_auroc(uncertainty, correct)  # 0.667 (4 of 6 pairs)
ez.metrics.prediction_rejection_ratio(uncertainty, correct)
rejected, accuracy = ez.metrics.accuracy_rejection_curve(uncertainty, correct)
```
"""

import numpy as np

from ensemble_zoo.metrics.ranking import as_scores
from ensemble_zoo.metrics.ranking import binary_auroc
from ensemble_zoo.metrics.ranking import threshold_counts
from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_finite


def _as_uncertainty_and_quality(uncertainty, quality, name, binary):
    uncertainty = as_scores(uncertainty, "uncertainty")
    values = as_numeric_array(quality, name, allow_bool=True)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != uncertainty.shape:
        raise ValueError(
            f"`{name}` must have shape {uncertainty.shape} to match "
            f"`uncertainty`; got shape {values.shape}."
        )
    values = check_finite(values.astype(np.float64), name)
    if binary and not np.isin(values, (0.0, 1.0)).all():
        bad = values[~np.isin(values, (0.0, 1.0))][0]
        raise ValueError(f"`{name}` must be booleans (or 0 / 1), one per answer; got {bad!r}.")
    if not binary and ((values < 0.0) | (values > 1.0)).any():
        raise ValueError(
            f"`{name}` must lie in [0, 1] (1: a right answer); got values in "
            f"[{values.min()!r}, {values.max()!r}]."
        )
    return uncertainty, values


def answer_auroc(uncertainty, correct):
    """AUROC of `uncertainty` for detecting the wrong answers.

    0.5 is chance; 1 means every wrong answer is more uncertain than every
    right one. Equals `sklearn.metrics.roc_auc_score(~correct,
    uncertainty)` (ties count one half).

    Args:
        uncertainty: `(answers,)` scores, higher = less trusted.
        correct: `(answers,)` booleans (or 0 / 1).

    Returns:
        float.
    """
    uncertainty, correct = _as_uncertainty_and_quality(uncertainty, correct, "correct", binary=True)
    return binary_auroc(uncertainty, correct == 0.0, positive_name="wrong")


def accuracy_rejection_curve(uncertainty, correct):
    """Accuracy of the kept answers as the most uncertain are rejected.

    Args:
        uncertainty: `(answers,)` scores, higher = rejected first.
        correct: `(answers,)` booleans (or 0 / 1).

    Returns:
        `(rejection_rate, accuracy)`: float64 arrays, one point per
        distinct uncertainty (tied answers are rejected together),
        rejection rate increasing from 0 (all kept) to below 1 (the most
        certain group kept).
    """
    uncertainty, correct = _as_uncertainty_and_quality(uncertainty, correct, "correct", binary=True)
    # Keep the most certain first: rank by -uncertainty (floats, or int64).
    confidence = -uncertainty if uncertainty.dtype.kind == "f" else -uncertainty.astype(np.float64)
    kept_right, kept_wrong, _, _ = threshold_counts(confidence, correct == 1.0)
    kept = kept_right + kept_wrong
    return (1.0 - kept / correct.shape[0])[::-1], (kept_right / kept)[::-1]


def answer_aurc(uncertainty, correct):
    """Area under the risk-coverage curve of answers (lower is better).

    The selective-prediction measure of `ez.metrics.aurc` with the
    answers' correctness in place of a classifier's: keep the most certain
    answers first; at coverage `c` the risk is the share of wrong answers
    kept; `AURC = sum_k (c_k - c_{k-1}) r_k` over one point per distinct
    uncertainty (tied answers are kept together).

    Args:
        uncertainty: `(answers,)` scores, higher = rejected first.
        correct: `(answers,)` booleans (or 0 / 1).

    Returns:
        float.
    """
    rejected, accuracy = accuracy_rejection_curve(uncertainty, correct)
    coverage, risk = (1.0 - rejected)[::-1], (1.0 - accuracy)[::-1]
    steps = np.diff(np.concatenate([[0.0], coverage]))
    return float(np.sum(steps * risk))


def prediction_rejection_ratio(uncertainty, quality):
    """Prediction rejection ratio (PRR), as LM-uncertainty work computes it.

    Malinin and Gales (2021) define PRR on the rejection curve of errors
    over all `n` answers, rejected answers counted as corrected by an
    oracle; lm-polygraph (Fadeeva et al. 2023), which LM-uncertainty
    papers report, uses the mean quality of the kept answers instead, and
    takes graded qualities. This is that kept-quality form (the two differ
    in value, not in which ranking is better).

    Reject answers from the most uncertain; after keeping the `k` most
    certain, the kept mean quality is `Q_u(k)`. With `A_u = mean_k
    Q_u(k)` (`k = 1..n`), `A_oracle` the same area when answers are
    rejected worst-quality first and `A_random = mean(quality)` (random
    rejection),

        PRR = (A_u - A_random) / (A_oracle - A_random).

    1 is an oracle's ranking, 0 chance, negative worse than chance.
    Answers with tied uncertainty are rejected in random order, in
    expectation (each counts its tie group's mean quality).

    Args:
        uncertainty: `(answers,)` scores, higher = rejected first.
        quality: `(answers,)` in [0, 1]: booleans for right / wrong, or a
            graded quality (e.g. ROUGE).

    Returns:
        float.

    Raises:
        ValueError: when every answer has the same quality (the ratio is
            undefined), or for invalid input.
    """
    uncertainty, quality = _as_uncertainty_and_quality(
        uncertainty, quality, "quality", binary=False
    )
    n = quality.shape[0]
    if np.all(quality == quality[0]):
        raise ValueError(
            "The prediction rejection ratio is undefined when every answer "
            f"has the same quality ({quality[0]!r} for all {n})."
        )
    order = np.argsort(uncertainty, kind="stable")
    sorted_u, sorted_q = uncertainty[order], quality[order]
    # Tie groups: each member counts its group's mean quality.
    starts = np.flatnonzero(np.r_[True, sorted_u[1:] != sorted_u[:-1]])
    group_means = np.add.reduceat(sorted_q, starts) / np.diff(np.r_[starts, n])
    tied_q = np.repeat(group_means, np.diff(np.r_[starts, n]))
    kept = np.arange(1, n + 1)

    def area(q):
        return float(np.mean(np.cumsum(q) / kept))

    random = float(np.mean(quality))
    oracle = area(np.sort(quality)[::-1])
    return (area(tied_q) - random) / (oracle - random)
