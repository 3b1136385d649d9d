"""Issue 33: the metric and loss classes check the values they can see in
eager use (as scikit-learn does for arrays): NaN predictions, fractional
and out-of-range labels, and a 2-D `y_pred` that is not probabilities were
silently turned into numbers before."""

import numpy as np
import pytest

import ensemble_zoo as ez

LOGITS = np.random.default_rng(0).normal(size=(4, 3, 5)).astype("float32")
PROBS = np.full((4, 5), 0.2, "float32")
LABELS = np.array([0, 1, 4, 2])


def metric_classes():
    return [
        ez.metrics.EnsembleAccuracy(), ez.metrics.NegativeLogLikelihood(),
        ez.metrics.ExpectedCalibrationError(), ez.metrics.BrierScore(),
    ]


@pytest.mark.parametrize(
    "labels, predictions, match",
    [
        (LABELS, np.where(np.arange(60).reshape(4, 3, 5) == 7, np.nan, LOGITS), "NaN"),
        (LABELS + 0.5, LOGITS, "integer class labels; got 0.5"),
        (np.array([0, 1, 5, 2]), LOGITS, r"\[0, 5\).*got 5"),
        (np.array([0, -1, 4, 2]), LOGITS, r"\[0, 5\).*got -1"),
    ],
    ids=["nan", "fractional", "too_large", "negative"],
)
def test_metric_classes_and_the_loss_reject_bad_values(labels, predictions, match):
    for metric in metric_classes():
        with pytest.raises(ValueError, match=match):
            metric.update_state(labels, predictions)
    with pytest.raises(ValueError, match=match):
        ez.losses.EnsembleSparseCategoricalCrossentropy()(labels, predictions)


def test_two_d_logits_are_not_read_as_probabilities():
    logits = LOGITS[:, 0]
    for metric in (ez.metrics.NegativeLogLikelihood(), ez.metrics.BrierScore(),
                   ez.metrics.ExpectedCalibrationError()):
        with pytest.raises(ValueError, match="from_logits=True"):
            metric.update_state(LABELS, logits)
    # Probabilities and from_logits=True are accepted, and exact.
    metric = ez.metrics.NegativeLogLikelihood()
    metric.update_state(LABELS, PROBS)
    assert float(metric.result()) == pytest.approx(np.log(5), rel=1e-6)
    metric = ez.metrics.NegativeLogLikelihood(from_logits=True)
    metric.update_state(LABELS, logits)
    z = logits - logits.max(-1, keepdims=True)
    expected = -np.mean((z - np.log(np.exp(z).sum(-1, keepdims=True)))[np.arange(4), LABELS])
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)


def test_ignore_class_is_allowed_and_empty_ranking_batches_are_refused():
    loss = ez.losses.EnsembleSparseCategoricalCrossentropy(ignore_class=-1)
    value = float(loss(np.array([0, -1, 4, 2]), LOGITS))
    assert np.isfinite(value)
    with pytest.raises(ValueError, match="empty"):
        ez.losses.pairwise_ranking_loss(np.zeros((0,), "float32"), np.zeros((0,), "float32"))
