"""Classification and calibration metrics on arrays (NumPy, float64).

All functions take predictive probabilities `(samples, classes)` (combine
ensemble members first with `ensemble_zoo.ops.predictive_probabilities`)
and integer labels `(samples,)`, and return Python floats.
"""

import numpy as np

from ensemble_zoo.metrics.array_checks import as_labels
from ensemble_zoo.metrics.array_checks import as_probabilities
from ensemble_zoo.utils.validation import is_integer

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


def _check_num_bins(num_bins):
    if not is_integer(num_bins):
        raise ValueError(f"`num_bins` must be an int; got {num_bins!r}.")
    if num_bins < 1:
        raise ValueError(f"`num_bins` must be >= 1; got {num_bins}.")


def equal_width_bins(confidence, num_bins):
    """Bin index of each confidence: `[k/n, (k+1)/n)`, 1.0 in the last."""
    return np.minimum((confidence * num_bins).astype(np.int64), num_bins - 1)


def equal_mass_bins(confidence, num_bins):
    """Bin index of each confidence for `num_bins` equal-mass bins.

    A sample of rank `r` (0-based, ascending confidence) goes to bin
    `floor(r * num_bins / N)`. Tied confidences share the rank of the first
    of them, so a tie is never split across bins and the result does not
    depend on the order of the samples.
    """
    n = confidence.shape[0]
    sorted_conf = np.sort(confidence)
    first_rank = np.searchsorted(sorted_conf, confidence, side="left")
    return (first_rank * num_bins) // n


def calibration_bins(probs, labels, num_bins=15, binning="equal_width"):
    """Per-bin statistics behind the calibration errors and diagrams.

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        num_bins: int, number of bins. Defaults to `15`.
        binning: `"equal_width"` (bins `[k/n, (k+1)/n)`, confidence 1.0 in
            the last) or `"equal_mass"` (see `equal_mass_bins`).

    Returns:
        dict of `(num_bins,)` float64 arrays: `count`, `confidence` (mean
        top-label confidence) and `accuracy`; empty bins hold count 0 and
        NaN means.
    """
    probs, labels = _checked(probs, labels)
    _check_num_bins(num_bins)
    predicted = probs.argmax(axis=1)
    num_samples, num_classes = probs.shape
    # A flat gather is ~2x faster than probs[arange, predicted].
    flat_index = np.arange(num_samples) * num_classes + predicted
    confidence = probs.ravel()[flat_index]
    correct = (predicted == labels).astype(np.float64)
    if binning == "equal_width":
        bins = equal_width_bins(confidence, num_bins)
    elif binning == "equal_mass":
        bins = equal_mass_bins(confidence, num_bins)
    else:
        raise ValueError(f"`binning` must be 'equal_width' or 'equal_mass'; got {binning!r}.")
    count = np.bincount(bins, minlength=num_bins).astype(np.float64)
    conf_sum = np.bincount(bins, weights=confidence, minlength=num_bins)
    acc_sum = np.bincount(bins, weights=correct, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"count": count, "confidence": conf_sum / count, "accuracy": acc_sum / count}


def _gaps(stats):
    filled = stats["count"] > 0
    gaps = np.abs(stats["accuracy"][filled] - stats["confidence"][filled])
    return gaps, stats["count"][filled]


def expected_calibration_error(probs, labels, num_bins=15):
    """Top-label expected calibration error with equal-width bins (L1).

    The confidence `max_c p_c` of each sample falls into one of `num_bins`
    bins `[k/n, (k+1)/n)`; confidence 1.0 falls into the last bin. ECE is
    `sum_k (n_k / N) |acc_k - conf_k|` over non-empty bins. This is the
    convention of uncertainty-baselines / robustness_metrics and
    torch-uncertainty (15 bins).

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        num_bins: int, number of equal-width bins. Defaults to `15`.

    Example:

    >>> expected_calibration_error([[0.9, 0.1], [0.6, 0.4]], [0, 1])
    0.35
    """
    gaps, counts = _gaps(calibration_bins(probs, labels, num_bins))
    return float(np.sum(gaps * counts) / np.sum(counts))


def adaptive_calibration_error(probs, labels, num_bins=15):
    """Expected calibration error with equal-mass (adaptive) bins (L1).

    Samples are ranked by top-label confidence and split into `num_bins`
    bins of (nearly) equal size: rank `r` of `N` goes to bin
    `floor(r * num_bins / N)`. Tied confidences always share a bin (they
    take the rank of the first of them), so the value does not depend on
    the sample order; with heavy ties some bins are larger than others.
    aECE is `sum_k (n_k / N) |acc_k - conf_k|` over non-empty bins.

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        num_bins: int, number of bins. Defaults to `15`.
    """
    stats = calibration_bins(probs, labels, num_bins, binning="equal_mass")
    gaps, counts = _gaps(stats)
    return float(np.sum(gaps * counts) / np.sum(counts))


def maximum_calibration_error(probs, labels, num_bins=15):
    """Largest `|acc_k - conf_k|` over the non-empty equal-width bins.

    Uses the same bins as `expected_calibration_error`.
    """
    gaps, _ = _gaps(calibration_bins(probs, labels, num_bins))
    return float(np.max(gaps))
