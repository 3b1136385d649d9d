import numpy as np
import pytest
from keras import ops

from ensemble_zoo.losses import LossRankingLoss
from ensemble_zoo.losses import pairwise_ranking_loss
from ensemble_zoo.losses import squared_error_loss


def reference(targets, predicted, margin=0.1):
    total = []
    for i in range(0, len(targets), 2):
        sign = 1.0 if targets[i] > targets[i + 1] else -1.0
        total.append(max(0.0, -sign * (predicted[i] - predicted[i + 1]) + margin))
    return np.mean(total)


def value(x):
    return float(ops.convert_to_numpy(x))


def test_matches_a_loop_over_consecutive_pairs():
    rng = np.random.default_rng(0)
    targets, predicted = rng.random(16).astype("float32"), rng.random(16).astype("float32")
    assert value(pairwise_ranking_loss(targets, predicted)) == pytest.approx(
        reference(targets, predicted), abs=1e-6
    )
    assert value(LossRankingLoss(margin=0.3)(targets, predicted)) == pytest.approx(
        reference(targets, predicted, 0.3), abs=1e-6
    )


def test_invariant_to_positive_scaling_and_zero_when_ordered_with_margin():
    rng = np.random.default_rng(1)
    targets, predicted = rng.random(10).astype("float32"), rng.random(10).astype("float32")
    base = value(pairwise_ranking_loss(targets, predicted))
    for scale in (1e-3, 7.0, 1e4):
        assert value(pairwise_ranking_loss(targets * scale, predicted)) == pytest.approx(
            base, abs=1e-6
        )
    ordered = np.where(targets[0::2] > targets[1::2], 1.0, -1.0)
    pred = np.stack([0.2 * ordered, np.zeros(5)], axis=1).reshape(-1).astype("float32")
    assert value(pairwise_ranking_loss(targets, pred)) == 0.0
    # The paper's printed sign (Eq. 3) would reward the reverse order; ours
    # penalizes it: a pair with l1 > l2 but u1 < u2 costs u2 - u1 + margin.
    assert value(
        pairwise_ranking_loss(np.array([2.0, 1.0]), np.array([0.0, 0.5]))
    ) == pytest.approx(0.6)


def test_odd_batches_and_shape_mismatches_are_clear_errors():
    with pytest.raises(ValueError, match="even batch size"):
        pairwise_ranking_loss(np.ones(5, "float32"), np.ones(5, "float32"))
    with pytest.raises(ValueError, match=r"shape \(batch,\)"):
        pairwise_ranking_loss(np.ones(4, "float32"), np.ones((4, 1), "float32"))


def test_squared_error_variant():
    targets, predicted = np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.0, 1.0])
    assert value(squared_error_loss(targets, predicted)) == pytest.approx((0.25 + 0 + 4) / 3)
