"""Classification and calibration metrics on arrays (NumPy, float64).

All functions take predictive probabilities `(samples, classes)` (combine
ensemble members first with `ensemble_zoo.ops.predictive_probabilities`)
and integer labels `(samples,)`, and return Python floats.
"""

import numpy as np

from ensemble_zoo.metrics.array_checks import as_labels
from ensemble_zoo.metrics.array_checks import as_probabilities

#: Probabilities are clipped to at least this value inside the logarithm of
#: the NLL, so a confident mistake (probability exactly 0 for the true
#: class) costs -log(1e-12) ~ 27.6 nats instead of infinity.
NLL_EPSILON = 1e-12


def _checked(probs, labels):
    probs = as_probabilities(probs)
    labels = as_labels(labels, probs.shape[0], probs.shape[1])
    return probs, labels


def accuracy(probs, labels):
    """Top-1 accuracy: the fraction of samples whose argmax is the label."""
    probs, labels = _checked(probs, labels)
    return float(np.mean(np.argmax(probs, axis=1) == labels))


def negative_log_likelihood(probs, labels):
    """Mean negative log-likelihood of the labels (nats).

    Probabilities are clipped to `NLL_EPSILON` (1e-12) before the log, so
    the result stays finite when the true class has probability 0.
    """
    probs, labels = _checked(probs, labels)
    p_true = probs[np.arange(labels.shape[0]), labels]
    return float(-np.mean(np.log(np.maximum(p_true, NLL_EPSILON))))


def brier_score(probs, labels):
    """Brier score: squared error to the one-hot label, summed over classes
    and averaged over samples (range [0, 2])."""
    probs, labels = _checked(probs, labels)
    one_hot = np.zeros_like(probs)
    one_hot[np.arange(labels.shape[0]), labels] = 1.0
    return float(np.mean(np.sum((probs - one_hot) ** 2, axis=1)))


def expected_calibration_error(probs, labels, num_bins=15):
    """Top-label expected calibration error with equal-width bins (L1).

    The confidence `max_c p_c` of each sample falls into one of `num_bins`
    bins `[k/n, (k+1)/n)`; confidence 1.0 falls into the last bin. ECE is
    `sum_k (n_k / N) |acc_k - conf_k|` over non-empty bins. This is the
    convention of uncertainty-baselines / robustness_metrics (15 bins);
    torchmetrics differs by putting confidence 1.0 in an extra bin.

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        num_bins: int, number of equal-width bins. Defaults to `15`.
    """
    probs, labels = _checked(probs, labels)
    if isinstance(num_bins, bool) or not isinstance(num_bins, int):
        raise ValueError(f"`num_bins` must be an int; got {num_bins!r}.")
    if num_bins < 1:
        raise ValueError(f"`num_bins` must be >= 1; got {num_bins}.")
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    bins = np.minimum((confidence * num_bins).astype(np.int64), num_bins - 1)
    counts = np.bincount(bins, minlength=num_bins)
    conf_sums = np.bincount(bins, weights=confidence, minlength=num_bins)
    acc_sums = np.bincount(bins, weights=correct, minlength=num_bins)
    return float(np.sum(np.abs(acc_sums - conf_sums)) / labels.shape[0])
