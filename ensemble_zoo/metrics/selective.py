"""Selective prediction: the risk-coverage curve and its area (AURC).

A model that may abstain keeps the samples it is most confident about.
At coverage `c` (the fraction kept) the *risk* is the error rate among
the kept samples. AURC (Geifman et al., 2019) is the area under that
curve; lower is better, and a perfect ranking of errors reaches
`e + (1 - e) log(1 - e)` for error rate `e`.
"""

import numpy as np

from ensemble_zoo.metrics.array_checks import as_labels
from ensemble_zoo.metrics.array_checks import as_probabilities
from ensemble_zoo.metrics.ranking import as_scores
from ensemble_zoo.metrics.ranking import threshold_counts


def _correct_and_confidence(probs, labels, confidence):
    probs = as_probabilities(probs)
    labels = as_labels(labels, probs.shape[0], probs.shape[1])
    correct = probs.argmax(axis=1) == labels
    if confidence is None:
        confidence = probs.max(axis=1)
    else:
        confidence = as_scores(confidence, "confidence", samples=probs.shape[0], like="probs")
    return correct, confidence


def risk_coverage_curve(probs, labels, confidence=None):
    """The risk-coverage curve, one point per distinct confidence.

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        confidence: optional `(samples,)` scores, higher = keep first.
            Defaults to the maximum softmax probability. Pass `-u` for an
            uncertainty `u`.

    Returns:
        `(coverage, risk)`: float64 arrays, coverage increasing to 1.
        Samples with tied confidence are kept or rejected together.
    """
    correct, confidence = _correct_and_confidence(probs, labels, confidence)
    errors, kept_correct, _, _ = threshold_counts(confidence, ~correct)
    kept = errors + kept_correct
    return kept / correct.shape[0], errors / kept


def aurc(probs, labels, confidence=None):
    """Area under the risk-coverage curve (lower is better).

    `AURC = sum_k (c_k - c_{k-1}) r_k` over the curve's points (a step
    integral, like average precision). Without ties this is the usual
    `(1/N) sum_{n=1..N} risk(top-n)`; tied confidences form one point, so
    the value does not depend on the sample order.

    Args:
        probs: `(samples, classes)` predictive probabilities.
        labels: `(samples,)` integer labels.
        confidence: optional `(samples,)` scores, higher = more confident.
            Defaults to the maximum softmax probability.

    Example:

    >>> aurc([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4]], [0, 1, 0])
    0.2777777777777778
    """
    coverage, risk = risk_coverage_curve(probs, labels, confidence)
    steps = np.diff(np.concatenate([[0.0], coverage]))
    return float(np.sum(steps * risk))
