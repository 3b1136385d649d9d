import numpy as np
import pytest
from zoo_testing import np_softmax
from zoo_testing import to_np

from ensemble_zoo.ops import entropy
from ensemble_zoo.ops import entropy_from_logits
from ensemble_zoo.ops import mutual_information
from ensemble_zoo.ops import predictive_probabilities
from ensemble_zoo.ops import uncertainty_decomposition


def np_entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)


def np_reference(logits):
    """Independent float64 NumPy reference of the decomposition."""
    p = np_softmax(logits.astype(np.float64))
    mean = p.mean(axis=1)
    total = np_entropy(mean)
    aleatoric = np_entropy(p).mean(axis=1)
    return mean, total, aleatoric, total - aleatoric


def test_predictive_probabilities_is_mean_of_softmaxes(rng):
    logits = rng.normal(size=(16, 5, 7)).astype("float32") * 3
    mean, *_ = np_reference(logits)
    got = to_np(predictive_probabilities(logits))
    np.testing.assert_allclose(got, mean, atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-6)


def test_decomposition_matches_numpy_reference(rng):
    logits = rng.normal(size=(32, 4, 10)).astype("float32") * 2
    _, total, aleatoric, epistemic = np_reference(logits)
    parts = {k: to_np(v) for k, v in uncertainty_decomposition(logits).items()}
    np.testing.assert_allclose(parts["total"], total, atol=1e-5)
    np.testing.assert_allclose(parts["aleatoric"], aleatoric, atol=1e-5)
    np.testing.assert_allclose(parts["epistemic"], epistemic, atol=1e-5)
    np.testing.assert_allclose(parts["total"], parts["aleatoric"] + parts["epistemic"], atol=1e-6)
    assert (parts["epistemic"] >= 0).all()
    assert parts["epistemic"].max() > 0.05  # random members disagree


def test_masked_classes_as_minus_infinity(rng):
    """`-inf` logits are how a masked class is written: probability 0,
    the other classes' figures as without that class (they were refused)."""
    logits = rng.normal(size=(6, 3, 5)).astype("float32")
    masked = logits.copy()
    masked[:, :, 4] = -np.inf
    masked[0, 1, 2] = -np.inf  # one member masks one more class
    reference = np.where(np.isinf(masked), -1e30, masked)  # exp underflows to 0
    mean, total, aleatoric, epistemic = np_reference(reference)
    probs = to_np(predictive_probabilities(masked))
    np.testing.assert_allclose(probs, mean, atol=1e-6)
    assert (probs[:, 4] == 0).all()
    parts = {k: to_np(v) for k, v in uncertainty_decomposition(masked).items()}
    np.testing.assert_allclose(parts["total"], total, atol=1e-5)
    np.testing.assert_allclose(parts["epistemic"], epistemic, atol=1e-5)
    np.testing.assert_allclose(
        to_np(entropy_from_logits(masked[:, 0])),
        np_entropy(np_softmax(reference[:, 0].astype(np.float64))),
        atol=1e-5,
    )
    all_masked = masked.copy()
    all_masked[2, 0] = -np.inf
    with pytest.raises(ValueError, match="all -inf"):
        predictive_probabilities(all_masked)


def test_epistemic_is_zero_when_members_agree(rng):
    one = rng.normal(size=(8, 1, 6)).astype("float32") * 4
    logits = np.repeat(one, 5, axis=1)
    parts = {k: to_np(v) for k, v in uncertainty_decomposition(logits).items()}
    np.testing.assert_allclose(parts["epistemic"], 0.0, atol=1e-6)
    np.testing.assert_allclose(
        parts["total"], np_entropy(np_softmax(one[:, 0].astype("f8"))), atol=1e-5
    )


def test_single_member_has_no_epistemic_uncertainty(rng):
    logits = rng.normal(size=(8, 1, 3)).astype("float32")
    np.testing.assert_array_equal(to_np(mutual_information(logits)), 0.0)


def test_from_probabilities_matches_from_logits(rng):
    logits = rng.normal(size=(8, 3, 4)).astype("float32")
    probs = np_softmax(logits).astype("float32")
    a = uncertainty_decomposition(logits)
    b = uncertainty_decomposition(probs, from_logits=False)
    for key in a:
        np.testing.assert_allclose(to_np(a[key]), to_np(b[key]), atol=1e-5)


def test_extreme_logits_stay_finite():
    logits = np.array([[[1000.0, -1000.0], [-1000.0, 1000.0]]], "float32")
    parts = {k: to_np(v) for k, v in uncertainty_decomposition(logits).items()}
    np.testing.assert_allclose(parts["total"], np.log(2.0), atol=1e-6)
    np.testing.assert_allclose(parts["aleatoric"], 0.0, atol=1e-6)
    np.testing.assert_allclose(parts["epistemic"], np.log(2.0), atol=1e-6)


def test_entropy_helpers():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]], "float32")
    np.testing.assert_allclose(to_np(entropy(p)), np_entropy(p), atol=1e-6)
    logits = np.log(np.array([[0.2, 0.3, 0.5]], "float32"))
    np.testing.assert_allclose(
        to_np(entropy_from_logits(logits)), np_entropy(np.array([[0.2, 0.3, 0.5]])), atol=1e-6
    )


@pytest.mark.parametrize("shape", [(4, 10), (2, 3, 4, 5), (10,)])
def test_wrong_rank_is_a_clear_error(shape):
    with pytest.raises(ValueError, match=r"\(batch, members, classes\)"):
        predictive_probabilities(np.zeros(shape, "float32"))
    with pytest.raises(ValueError, match=r"\(batch, members, classes\)"):
        uncertainty_decomposition(np.zeros(shape, "float32"))


def test_integer_logits_are_a_clear_error():
    with pytest.raises(ValueError, match="floating-point"):
        uncertainty_decomposition(np.zeros((2, 3, 4), "int32"))
