"""Generated-answer metrics against scikit-learn and brute-force NumPy
references: every order of tied answers is enumerated for the prediction
rejection ratio. Pure NumPy: run under one backend."""

import itertools

import keras
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from ensemble_zoo import metrics

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="pure NumPy: one backend suffices"
)


def reference_prr(uncertainty, quality):
    """Brute force: average the rejection area over every order of tied
    answers (rejecting the most uncertain first)."""
    n = len(quality)

    def area(order):
        q = np.asarray(quality, float)[list(order)]
        return np.mean([q[:k].mean() for k in range(1, n + 1)])

    orders = [
        p
        for p in itertools.permutations(range(n))
        if all(uncertainty[p[i]] <= uncertainty[p[i + 1]] for i in range(n - 1))
    ]
    a_u = np.mean([area(p) for p in orders])
    a_oracle = area(np.argsort(-np.asarray(quality, float), kind="stable"))
    a_random = np.mean(quality)
    return (a_u - a_random) / (a_oracle - a_random)


@pytest.mark.parametrize("rounding", [None, 0])  # 0 digits: ties
def test_answer_metrics_equal_references(rng, rounding):
    uncertainty = rng.normal(size=7) * 2
    if rounding is not None:
        uncertainty = uncertainty.round(rounding)
    correct = rng.random(7) < 0.6
    correct[:2] = [True, False]
    assert metrics.answer_auroc(uncertainty, correct) == pytest.approx(
        roc_auc_score(~correct, uncertainty), abs=1e-12
    )
    assert metrics.prediction_rejection_ratio(uncertainty, correct) == pytest.approx(
        reference_prr(uncertainty, correct), abs=1e-12
    )
    quality = rng.random(7)  # graded quality
    assert metrics.prediction_rejection_ratio(uncertainty, quality) == pytest.approx(
        reference_prr(uncertainty, quality), abs=1e-12
    )
    rejected, accuracy = metrics.accuracy_rejection_curve(uncertainty, correct)
    thresholds = np.unique(uncertainty)  # keep u <= t
    np.testing.assert_allclose(rejected, [np.mean(uncertainty > t) for t in thresholds[::-1]])
    np.testing.assert_allclose(
        accuracy, [correct[uncertainty <= t].mean() for t in thresholds[::-1]]
    )
    # AURC: the classifier's `aurc` on probabilities whose argmax is right
    # exactly where the answer is, confidence = -uncertainty; and by hand.
    probs = np.where(correct[:, None], [[0.9, 0.1]], [[0.1, 0.9]])
    expected = metrics.aurc(probs, np.zeros(7, int), confidence=-uncertainty)
    assert metrics.answer_aurc(uncertainty, correct) == pytest.approx(expected, abs=1e-12)
    by_hand = sum(
        np.mean(uncertainty <= t) * np.mean(~correct[uncertainty <= t])
        - np.mean(uncertainty < t) * np.mean(~correct[uncertainty <= t])
        for t in thresholds
    )
    assert metrics.answer_aurc(uncertainty, correct) == pytest.approx(by_hand, abs=1e-12)


def test_oracle_and_reversed_rankings_and_clear_errors():
    correct = np.array([True, True, False, True, False])
    wrongness = (~correct).astype(float)
    assert metrics.prediction_rejection_ratio(
        wrongness + 0.1 * np.arange(5), correct
    ) == pytest.approx(1.0)
    assert metrics.answer_auroc(wrongness, correct) == 1.0
    assert metrics.answer_auroc(-wrongness, correct) == 0.0
    with pytest.raises(ValueError, match="same quality"):
        metrics.prediction_rejection_ratio([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="wrong"):
        metrics.answer_auroc([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match=r"`correct` must be booleans"):
        metrics.answer_auroc([0.1, 0.2], [0.5, 1.0])
    with pytest.raises(ValueError, match=r"`quality` must lie in \[0, 1\]"):
        metrics.prediction_rejection_ratio([0.1, 0.2], [2.0, 1.0])
    with pytest.raises(ValueError, match="shape"):
        metrics.accuracy_rejection_curve([0.1, 0.2, 0.3], [True, False])
    with pytest.raises(ValueError, match="NaN"):
        metrics.answer_auroc([np.nan, 0.2], [True, False])
