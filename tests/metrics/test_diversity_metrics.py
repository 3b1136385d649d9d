import itertools

import numpy as np
import pytest
from keras import ops

from ensemble_zoo import metrics
from ensemble_zoo.ops import uncertainty_decomposition


def test_disagreement_against_pairwise_loop(rng):
    logits = rng.normal(size=(60, 4, 3))
    votes = logits.argmax(-1)
    expected = np.mean(
        [
            np.mean([votes[n, i] != votes[n, j] for i, j in itertools.combinations(range(4), 2)])
            for n in range(60)
        ]
    )
    assert metrics.disagreement(logits) == pytest.approx(expected)
    per_sample = metrics.disagreement(logits, reduction="none")
    assert per_sample.shape == (60,)
    assert per_sample.max() <= 1.0


def test_disagreement_edges():
    agree = np.tile(np.eye(3)[None, 0], (5, 3, 1))
    assert metrics.disagreement(agree) == 0.0
    assert metrics.disagreement(np.ones((5, 1, 3))) == 0.0  # single member
    # Three members, three different votes: every pair disagrees.
    assert metrics.disagreement(np.eye(3)[None]) == 1.0
    with pytest.raises(ValueError, match="reduction"):
        metrics.disagreement(agree, reduction="sum")


def test_mutual_information_matches_ops(rng):
    logits = rng.normal(size=(30, 5, 4)).astype("float32") * 3
    parts = uncertainty_decomposition(logits)
    expected = ops.convert_to_numpy(parts["epistemic"])
    got = metrics.mutual_information(logits, from_logits=True, reduction="none")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    assert metrics.mutual_information(probs) == pytest.approx(np.mean(expected), abs=1e-5)


def test_entropy_against_formula():
    p = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(metrics.entropy(p, reduction="none"), [np.log(2), 0.0])
    assert metrics.entropy(p) == pytest.approx(np.log(2) / 2)
    with pytest.raises(ValueError, match="NaN"):
        metrics.entropy(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match=r"\(samples, members, classes\)"):
        metrics.mutual_information(p)
