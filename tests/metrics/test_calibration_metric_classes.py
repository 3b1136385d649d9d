import numpy as np
import pytest
from test_classification import random_probs
from zoo_testing import np_softmax

from ensemble_zoo import metrics


@pytest.mark.parametrize(
    "metric_cls,reference",
    [
        (metrics.ExpectedCalibrationError, metrics.expected_calibration_error),
        (metrics.NegativeLogLikelihood, metrics.negative_log_likelihood),
        (metrics.BrierScore, metrics.brier_score),
    ],
)
def test_streaming_equals_array_function_on_member_logits(rng, metric_cls, reference):
    logits = (rng.normal(size=(250, 3, 6)) * 2).astype("float32")
    labels = rng.integers(0, 6, size=250)
    metric = metric_cls()
    for start in range(0, 250, 64):  # uneven last batch
        metric.update_state(labels[start : start + 64], logits[start : start + 64])
    probs = np_softmax(logits.astype(np.float64)).mean(1)
    assert float(metric.result()) == pytest.approx(reference(probs, labels), abs=2e-5)
    metric.reset_state()
    metric.update_state(labels[:, None], probs.astype("float32"))  # probabilities
    assert float(metric.result()) == pytest.approx(reference(probs, labels), abs=2e-5)
    # One-hot labels (they failed with "eq got incompatible shapes").
    metric.reset_state()
    metric.update_state(np.eye(6, dtype="float32")[labels], logits)
    assert float(metric.result()) == pytest.approx(reference(probs, labels), abs=2e-5)
    # A masked class (-inf logits) is valid input.
    masked = logits.copy()
    masked[:, :, 5] = -np.inf
    metric.reset_state()
    metric.update_state(np.minimum(labels, 4), masked)
    masked_probs = np_softmax(np.where(np.isinf(masked), -1e30, masked).astype(np.float64)).mean(1)
    assert float(metric.result()) == pytest.approx(
        reference(masked_probs, np.minimum(labels, 4)), abs=2e-5
    )


def test_sample_weight_equals_repetition(rng):
    p, y = random_probs(rng, n=40, c=4)
    weights = rng.integers(0, 3, size=40)
    for metric_cls, reference in [
        (metrics.ExpectedCalibrationError, metrics.expected_calibration_error),
        (metrics.BrierScore, metrics.brier_score),
    ]:
        metric = metric_cls()
        metric.update_state(y, p.astype("float32"), sample_weight=weights)
        repeated = np.repeat(np.arange(40), weights)
        assert float(metric.result()) == pytest.approx(
            reference(p[repeated], y[repeated]), abs=2e-5
        )


def test_nll_metric_is_finite_at_zero_probability():
    metric = metrics.NegativeLogLikelihood()
    metric.update_state(np.array([1]), np.array([[1.0, 0.0]], dtype="float32"))
    assert float(metric.result()) == pytest.approx(-np.log(metrics.NLL_EPSILON), rel=1e-5)


def test_config_round_trip_and_errors():
    metric = metrics.ExpectedCalibrationError(num_bins=10, name="ece10")
    clone = metrics.ExpectedCalibrationError.from_config(metric.get_config())
    assert clone.num_bins == 10 and clone.name == "ece10"
    with pytest.raises(ValueError, match="num_bins"):
        metrics.ExpectedCalibrationError(num_bins=0)
    with pytest.raises(ValueError, match=r"\(batch, members, classes\)"):
        metrics.BrierScore().update_state(np.zeros(3), np.zeros(3))


def test_scalar_sample_weight_and_2d_logits(rng):
    logits = rng.normal(size=(30, 4)).astype("float32")
    labels = rng.integers(0, 4, size=30)
    probs = np_softmax(logits.astype(np.float64))
    for metric_cls, reference in [
        (metrics.NegativeLogLikelihood, metrics.negative_log_likelihood),
        (metrics.BrierScore, metrics.brier_score),
        (metrics.ExpectedCalibrationError, metrics.expected_calibration_error),
    ]:
        metric = metric_cls(from_logits=True)
        for start in range(0, 30, 10):
            metric.update_state(
                labels[start : start + 10], logits[start : start + 10], sample_weight=2.0
            )
        assert float(metric.result()) == pytest.approx(reference(probs, labels), abs=2e-5)
        assert metric_cls.from_config(metric.get_config()).from_logits
    accuracy = metrics.EnsembleAccuracy()
    accuracy.update_state(labels, probs.astype("float32"), sample_weight=3.0)
    assert float(accuracy.result()) == pytest.approx(metrics.accuracy(probs, labels))
