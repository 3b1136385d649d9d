import numpy as np
import pytest
from test_classification import random_probs

from ensemble_zoo import metrics


def aurc_loop_reference(confidence, correct):
    order = np.argsort(-confidence)
    errors = ~correct[order]
    return np.mean([errors[: k + 1].mean() for k in range(len(order))])


def test_aurc_against_loop_reference(rng):
    p, y = random_probs(rng, n=400)
    expected = aurc_loop_reference(p.max(1), p.argmax(1) == y)
    assert metrics.aurc(p, y) == pytest.approx(expected, abs=1e-12)
    coverage, risk = metrics.risk_coverage_curve(p, y)
    assert coverage[-1] == 1.0
    assert risk[-1] == pytest.approx(1 - metrics.accuracy(p, y))


def test_aurc_custom_confidence_and_oracle_bound(rng):
    p, y = random_probs(rng, n=300)
    correct = p.argmax(1) == y
    # An oracle confidence ranks all correct samples first.
    oracle = correct.astype(float) + rng.uniform(0, 0.5, 300)
    error = 1 - correct.mean()
    # With n samples the oracle area is the discrete sum over the errors.
    n, k = 300, int(correct.sum())
    discrete = sum((m - k) / m for m in range(k + 1, n + 1)) / n
    assert metrics.aurc(p, y, confidence=oracle) == pytest.approx(discrete)
    assert discrete == pytest.approx(error + (1 - error) * np.log(1 - error), abs=0.01)
    assert metrics.aurc(p, y, confidence=oracle) < metrics.aurc(p, y)


def test_aurc_ties_form_one_point():
    # All confidences equal: the curve is one point at coverage 1.
    p = np.full((4, 2), 0.5)
    assert metrics.aurc(p, [0, 1, 0, 1]) == pytest.approx(0.5)
    coverage, risk = metrics.risk_coverage_curve(p, [0, 1, 0, 1])
    np.testing.assert_allclose(coverage, [1.0])
    np.testing.assert_allclose(risk, [0.5])


def test_aurc_errors():
    p = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match=r"`confidence` must have shape \(3,\)"):
        metrics.aurc(p, [0, 1, 0], confidence=[0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        metrics.aurc(p, [0, 1, 0], confidence=[0.1, np.nan, 0.2])
