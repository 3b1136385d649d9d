import numpy as np
import pytest
from keras import ops

from ensemble_zoo import metrics


def random_probs(rng, n=200, c=5):
    z = rng.normal(size=(n, c)) * 2
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True), rng.integers(0, c, size=n)


def test_accuracy_nll_brier_against_numpy(rng):
    p, y = random_probs(rng)
    assert metrics.accuracy(p, y) == pytest.approx(np.mean(p.argmax(1) == y))
    assert metrics.negative_log_likelihood(p, y) == pytest.approx(
        -np.mean(np.log(p[np.arange(len(y)), y]))
    )
    onehot = np.eye(5)[y]
    assert metrics.brier_score(p, y) == pytest.approx(
        np.mean(np.sum((p - onehot) ** 2, 1))
    )


def ece_loop_reference(p, y, num_bins):
    conf, pred = p.max(1), p.argmax(1)
    total = 0.0
    for k in range(num_bins):
        lo, hi = k / num_bins, (k + 1) / num_bins
        in_bin = (conf >= lo) & ((conf < hi) | ((k == num_bins - 1) & (conf <= hi)))
        if in_bin.any():
            total += in_bin.mean() * abs(
                (pred[in_bin] == y[in_bin]).mean() - conf[in_bin].mean()
            )
    return total


@pytest.mark.parametrize("num_bins", [1, 10, 15])
def test_ece_against_loop_reference(rng, num_bins):
    p, y = random_probs(rng, n=500)
    assert metrics.expected_calibration_error(p, y, num_bins) == pytest.approx(
        ece_loop_reference(p, y, num_bins), abs=1e-12
    )


def test_ece_edges():
    # Confidence exactly 1.0 falls in the last bin; all correct -> ECE 0.
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert metrics.expected_calibration_error(p, [0, 1]) == 0.0
    # All confidences equal 0.5 (one bin), accuracy 1/4 -> ECE 0.25.
    p = np.full((4, 2), 0.5)
    assert metrics.expected_calibration_error(p, [0, 1, 1, 1]) == pytest.approx(
        0.25
    )


def test_nll_is_finite_for_zero_probability():
    p = np.array([[1.0, 0.0]])
    assert metrics.negative_log_likelihood(p, [1]) == pytest.approx(
        -np.log(metrics.NLL_EPSILON)
    )


def test_bad_inputs_are_clear_errors():
    p = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match="NaN"):
        metrics.accuracy(np.array([[np.nan, 1.0]]), [0])
    with pytest.raises(ValueError, match=r"\(samples, classes\)"):
        metrics.accuracy(np.zeros((3, 2, 2)), [0, 1, 0])
    with pytest.raises(ValueError, match="shape \\(3,\\)"):
        metrics.accuracy(p, [0, 1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metrics.accuracy(p, [0, 1, 2])
    with pytest.raises(ValueError, match="logits"):
        metrics.accuracy(np.array([[2.0, -1.0]]), [0])
    with pytest.raises(ValueError, match="num_bins"):
        metrics.expected_calibration_error(p, [0, 1, 0], num_bins=0)


def test_ensemble_accuracy_metric_averages_members(rng):
    logits = rng.normal(size=(64, 3, 4)).astype("float32") * 2
    labels = rng.integers(0, 4, size=(64,))
    z = logits - logits.max(-1, keepdims=True)
    mean = (np.exp(z) / np.exp(z).sum(-1, keepdims=True)).mean(1)
    metric = metrics.EnsembleAccuracy()
    metric.update_state(labels[:32], logits[:32])
    metric.update_state(labels[32:, None], logits[32:])
    assert float(ops.convert_to_numpy(metric.result())) == pytest.approx(
        np.mean(mean.argmax(1) == labels), abs=1e-6
    )
    metric.reset_state()
    metric.update_state(labels, mean.astype("float32"))
    assert float(ops.convert_to_numpy(metric.result())) == pytest.approx(
        np.mean(mean.argmax(1) == labels), abs=1e-6
    )
