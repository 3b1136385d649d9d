import numpy as np
import pytest
from scipy.special import softmax

import ensemble_zoo as ez
from ensemble_zoo.metrics import ensemble_of_ensembles_mutual_information as eoe
from ensemble_zoo.metrics import weighted_mutual_information


def entropy(p):
    return -np.sum(p * np.log(p), axis=-1)


def loop_mi(probs):
    """MI of (samples, members, classes) with explicit loops."""
    out = []
    for sample in probs:
        mean = sum(sample) / len(sample)
        out.append(entropy(mean) - sum(entropy(p) for p in sample) / len(sample))
    return np.array(out)


@pytest.mark.parametrize("num_groups", [1, 2, 3, 4, 6, 12])
def test_decomposition_identity_and_loop_reference(num_groups):
    logits = np.random.default_rng(num_groups).normal(scale=2.0, size=(50, 12, 7))
    probs = softmax(logits, axis=-1)
    mi = eoe(probs, num_groups, reduction="none")
    np.testing.assert_allclose(mi["total"], mi["between"] + mi["within"], atol=1e-6)
    size = 12 // num_groups
    groups = [probs[:, k * size : (k + 1) * size] for k in range(num_groups)]
    between = loop_mi(np.stack([g.mean(axis=1) for g in groups], axis=1))
    within = np.mean([loop_mi(g) for g in groups], axis=0)
    np.testing.assert_allclose(mi["between"], between, atol=1e-10)
    np.testing.assert_allclose(mi["within"], within, atol=1e-10)
    np.testing.assert_allclose(mi["total"], loop_mi(probs), atol=1e-10)
    from_logits = eoe(logits, num_groups, from_logits=True)
    assert from_logits["between"] == pytest.approx(float(np.mean(between)), abs=1e-10)


def test_identical_members_have_zero_mutual_information():
    probs = np.repeat(softmax(np.random.default_rng(0).normal(size=(20, 1, 4)), -1), 8, axis=1)
    mi = eoe(probs, 4)
    assert mi == pytest.approx({"between": 0.0, "within": 0.0, "total": 0.0}, abs=1e-12)
    assert weighted_mutual_information(np.log(probs)) == pytest.approx(0.0, abs=1e-12)


def test_between_mi_is_non_increasing_in_nested_group_sizes():
    logits = np.random.default_rng(1).normal(scale=3.0, size=(200, 32, 10))
    between = [
        eoe(logits, 32 // size, from_logits=True)["between"] for size in (1, 2, 4, 8, 16, 32)
    ]
    assert all(a >= b - 1e-12 for a, b in zip(between, between[1:])), between
    assert between[-1] == pytest.approx(0.0, abs=1e-12)  # one group
    assert between[0] > 0.5


def test_weighted_mi_matches_its_definition_and_logsumexp_pooling():
    logits = np.random.default_rng(2).normal(scale=2.0, size=(30, 9, 5))
    probs = softmax(logits, axis=-1)
    energy = np.log(np.exp(logits).sum(-1))
    weights = softmax(energy, axis=1)
    mixture = (weights[..., None] * probs).sum(1)
    # The weighted mixture is softmax of the tiles' logsumexp-pooled logits.
    np.testing.assert_allclose(mixture, softmax(np.log(np.exp(logits).sum(1)), -1), atol=1e-12)
    expected = entropy(mixture) - (weights * entropy(probs)).sum(1)
    np.testing.assert_allclose(
        weighted_mutual_information(logits, reduction="none"), expected, atol=1e-12
    )
    # Equal energies: the plain MI.
    centred = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert weighted_mutual_information(centred) == pytest.approx(
        ez.metrics.mutual_information(centred, from_logits=True), abs=1e-12
    )


def test_bad_group_counts_are_clear_errors():
    probs = softmax(np.zeros((3, 6, 2)), -1)
    for bad in (0, 4, 2.0, True):
        with pytest.raises(ValueError, match="num_groups"):
            eoe(probs, bad)
