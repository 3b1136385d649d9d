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
    assert metrics.brier_score(p, y) == pytest.approx(np.mean(np.sum((p - onehot) ** 2, 1)))


def ece_loop_reference(p, y, num_bins):
    conf, pred = p.max(1), p.argmax(1)
    total = 0.0
    for k in range(num_bins):
        lo, hi = k / num_bins, (k + 1) / num_bins
        in_bin = (conf >= lo) & ((conf < hi) | ((k == num_bins - 1) & (conf <= hi)))
        if in_bin.any():
            total += in_bin.mean() * abs((pred[in_bin] == y[in_bin]).mean() - conf[in_bin].mean())
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
    assert metrics.expected_calibration_error(p, [0, 1, 1, 1]) == pytest.approx(0.25)


def test_nll_is_finite_for_zero_probability():
    p = np.array([[1.0, 0.0]])
    assert metrics.negative_log_likelihood(p, [1]) == pytest.approx(-np.log(metrics.NLL_EPSILON))


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


def aece_loop_reference(p, y, num_bins):
    """Equal-mass bins from a sorted loop (inputs without tied confidences)."""
    conf, correct = p.max(1), p.argmax(1) == y
    order = np.argsort(conf)
    n = len(y)
    total = 0.0
    for k in range(num_bins):
        members = [order[r] for r in range(n) if (r * num_bins) // n == k]
        if members:
            total += len(members) / n * abs(correct[members].mean() - conf[members].mean())
    return total


@pytest.mark.parametrize("n,num_bins", [(500, 15), (101, 10), (7, 15)])
def test_adaptive_ece_against_loop_reference(rng, n, num_bins):
    p, y = random_probs(rng, n=n)
    assert metrics.adaptive_calibration_error(p, y, num_bins) == pytest.approx(
        aece_loop_reference(p, y, num_bins), abs=1e-12
    )
    # Equal mass: bin sizes differ by at most one.
    stats = metrics.calibration_bins(p, y, num_bins, binning="equal_mass")
    filled = stats["count"][stats["count"] > 0]
    assert filled.max() - filled.min() <= 1


def test_adaptive_ece_keeps_ties_together_and_ignores_order():
    # All confidences equal: one bin, so aECE == ECE == |acc - conf|.
    p = np.full((8, 2), 0.5)
    y = np.array([0, 0, 0, 1, 1, 1, 1, 1])  # argmax is 0 -> accuracy 3/8
    assert metrics.adaptive_calibration_error(p, y) == pytest.approx(0.125)
    assert metrics.expected_calibration_error(p, y) == pytest.approx(0.125)
    rng = np.random.default_rng(1)
    q = np.repeat(random_probs(rng, n=20)[0], 3, axis=0)
    labels = rng.integers(0, 5, size=60)
    perm = rng.permutation(60)
    assert metrics.adaptive_calibration_error(q, labels) == pytest.approx(
        metrics.adaptive_calibration_error(q[perm], labels[perm]), abs=1e-15
    )


def test_mce_is_the_largest_bin_gap(rng):
    p, y = random_probs(rng, n=300)
    stats = metrics.calibration_bins(p, y, 15)
    conf, correct = p.max(1), p.argmax(1) == y
    gaps = []
    for k in range(15):
        in_bin = (conf >= k / 15) & (conf < (k + 1) / 15)
        if in_bin.any():
            gaps.append(abs(correct[in_bin].mean() - conf[in_bin].mean()))
    assert metrics.maximum_calibration_error(p, y) == pytest.approx(max(gaps))
    assert np.nansum(stats["count"]) == 300


def test_single_class_present(rng):
    p, _ = random_probs(rng, n=50, c=3)
    y = np.zeros(50, dtype=int)
    onehot = np.eye(3)[y]
    assert metrics.brier_score(p, y) == pytest.approx(np.mean(np.sum((p - onehot) ** 2, 1)))
    assert metrics.expected_calibration_error(p, y) == pytest.approx(
        ece_loop_reference(p, y, 15), abs=1e-12
    )
    assert metrics.adaptive_calibration_error(p, y) >= 0.0


def test_calibration_bins_rejects_unknown_binning():
    with pytest.raises(ValueError, match="binning"):
        metrics.calibration_bins(np.full((2, 2), 0.5), [0, 1], binning="log")
