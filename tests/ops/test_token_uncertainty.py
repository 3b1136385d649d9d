import keras
import numpy as np
import pytest
from zoo_testing import np_token_figures
from zoo_testing import to_np

import ensemble_zoo as ez

NAMES = (
    "total",
    "aleatoric",
    "epistemic",
    "expected_pairwise_kl",
    "reverse_mutual_information",
    "max_probability",
    "member_entropy",
    "log_prob",
    "member_log_probs",
)


def figures(member_logits, tokens=None):
    return {k: to_np(v) for k, v in ez.ops.token_uncertainty(member_logits, tokens).items()}


def test_figures_equal_the_papers_definitions_and_their_identities(rng):
    logits = (rng.normal(size=(3, 4, 5, 40)) * 3).astype("float32")
    logits[0, :, 1] = logits[0, 0, 1]  # members that agree at one position
    tokens = rng.integers(0, 40, size=(3, 5))
    got = figures(logits, tokens)
    expected = np_token_figures(logits, tokens)
    assert sorted(got) == sorted(NAMES)
    for name in NAMES:
        assert got[name].dtype == np.float32, name
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5, err_msg=name)
    assert got["member_entropy"].shape == (3, 4, 5) and got["total"].shape == (3, 5)
    # EPKL = MI + RMI, total = aleatoric + MI (Malinin & Gales, section 3).
    np.testing.assert_allclose(
        got["expected_pairwise_kl"], got["epistemic"] + got["reverse_mutual_information"], atol=1e-5
    )
    np.testing.assert_allclose(got["total"], got["aleatoric"] + got["epistemic"], atol=1e-5)
    for name in ("epistemic", "expected_pairwise_kl", "reverse_mutual_information"):
        np.testing.assert_allclose(got[name][0, 1], 0.0, atol=1e-6)
        assert got[name][1:].min() > 1e-3


def test_one_member_has_zero_divergences_and_low_precision_is_computed_in_float32(rng):
    logits = rng.normal(size=(2, 1, 3, 30)).astype("float32")
    got = figures(logits)
    for name in ("epistemic", "expected_pairwise_kl", "reverse_mutual_information"):
        assert (got[name] == 0.0).all(), name
    np.testing.assert_allclose(got["total"], got["aleatoric"], atol=1e-6)
    # bfloat16 logits: the figures are float32 and equal the float64
    # reference on the same (rounded) logits.
    rounded = keras.ops.cast(keras.ops.convert_to_tensor(logits * 8), "bfloat16")
    low = figures(rounded)
    assert low["total"].dtype == np.float32
    exact = np_token_figures(to_np(keras.ops.cast(rounded, "float32")))
    np.testing.assert_allclose(low["total"], exact["total"], atol=1e-5)


def test_ruled_out_tokens(rng):
    """`-inf` logits: a token every member rules out changes nothing; one
    only some members rule out makes RMI and EPKL infinite."""
    logits = rng.normal(size=(1, 3, 2, 6)).astype("float32")
    logits[..., 5] = -np.inf
    got = figures(logits)
    finite = figures(logits[..., :5])
    for name in (
        "total",
        "aleatoric",
        "epistemic",
        "expected_pairwise_kl",
        "reverse_mutual_information",
    ):
        np.testing.assert_allclose(got[name], finite[name], atol=1e-6, err_msg=name)
    logits[0, 0, :, 4] = -np.inf
    got = figures(logits)
    assert np.isinf(got["reverse_mutual_information"]).all()
    assert np.isinf(got["expected_pairwise_kl"]).all()
    np.testing.assert_allclose(got["epistemic"], np_token_figures(logits)["epistemic"], atol=1e-5)


def test_bad_input_is_a_clear_error(rng):
    logits = rng.normal(size=(2, 3, 4, 10)).astype("float32")
    with pytest.raises(ValueError, match=r"\(batch, members, tokens, vocabulary\)"):
        ez.ops.token_uncertainty(logits[0])
    with pytest.raises(ValueError, match="at least one member"):
        ez.ops.token_uncertainty(logits[:, :0])
    with pytest.raises(ValueError, match="floating-point"):
        ez.ops.token_uncertainty(logits.astype("int32"))
    bad = logits.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ez.ops.token_uncertainty(bad)
    with pytest.raises(ValueError, match=r"tokens.*\(2, 4\)"):
        ez.ops.token_uncertainty(logits, np.zeros((2, 3), "int32"))
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        ez.ops.token_uncertainty(logits, np.full((2, 4), 10))
    with pytest.raises(TypeError, match="integer"):
        ez.ops.token_uncertainty(logits, np.zeros((2, 4), "float32"))


def test_weighted_members_give_the_mixtures_figures(rng):
    """Member weights (the expectation-of-products ensemble's, from prefix
    likelihoods): the figures of the mixture `sum_m pi_m p_m`, with EPKL =
    MI + RMI still; uniform weights give the unweighted figures."""
    from ensemble_zoo.ops.token_uncertainty import token_figures_from_log_probs

    logits = (rng.normal(size=(2, 3, 4, 20)) * 2).astype("float32")
    weights = rng.dirichlet(np.ones(3), size=(2, 4)).transpose(0, 2, 1).astype("float32")
    log_p = keras.ops.log_softmax(keras.ops.convert_to_tensor(logits), axis=-1)
    got = {k: to_np(v) for k, v in token_figures_from_log_probs(log_p, np.log(weights)).items()}
    expected = np_token_figures(logits, weights=weights)
    for name in (
        "total",
        "aleatoric",
        "epistemic",
        "expected_pairwise_kl",
        "reverse_mutual_information",
    ):
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(
        got["expected_pairwise_kl"], got["epistemic"] + got["reverse_mutual_information"], atol=1e-5
    )
    uniform = np.log(np.full((2, 3, 4), 1 / 3, "float32"))
    plain = figures(logits)
    weighted = {k: to_np(v) for k, v in token_figures_from_log_probs(log_p, uniform).items()}
    for name in ("total", "epistemic", "reverse_mutual_information"):
        np.testing.assert_allclose(weighted[name], plain[name], atol=1e-6, err_msg=name)


def test_a_gemma_sized_vocabulary_stays_within_1e_5_of_float64(rng):
    """262,144 logits (Gemma 3's vocabulary): float32 figures within 1e-5
    nats of the float64 reference on every backend (PyTorch's own
    `log_softmax` put the total entropy 8e-5 off)."""
    vocabulary = 262144
    shared = rng.normal(size=(1, 1, 3, vocabulary)) * 3
    logits = (shared + rng.normal(size=(1, 4, 3, vocabulary)) * 0.5).astype("float32")
    logits[:, :, 0, 11] += 25  # a confident position
    tokens = np.array([[11, 3, 7]])
    got = figures(logits, tokens)
    expected = np_token_figures(logits, tokens)
    for name in NAMES:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5, err_msg=name)


def test_distances_from_uniform_equal_lm_polygraphs_where_float32_underflows(rng):
    """The decode loop's per-token distances from uniform (`with_distances`)
    equal `ez.metrics.fisher_rao`, `renyi_negentropy` and `self_certainty`
    (lm-polygraph's, in float64) for the ensemble's mean distribution and
    each member, one token per sequence; also where every member puts a
    token below float32's `exp` range, where the log of the mean
    underflows to `-inf` (a log-sum-exp over the members instead)."""
    from ensemble_zoo.ops.token_uncertainty import mixture_figures
    from ensemble_zoo.ops.token_uncertainty import vocabulary_log_softmax

    logits = rng.normal(size=(3, 2, 1, 64)) * 3
    logits[0, :, 0, 7] = -130.0  # both members: log p near -130
    log_p = to_np(vocabulary_log_softmax(logits.astype("float32")))
    got = {k: to_np(v) for k, v in mixture_figures(log_p, [None], with_distances=True)[0].items()}
    exact = log_p.astype("float64")
    log_mean = np.log(np.exp(exact).mean(axis=1))
    mask = np.ones((3, 1), bool)
    for name, figure in (
        ("fisher_rao", "fisher_rao_distance"),
        ("renyi_negentropy", "renyi_divergence"),
        ("self_certainty", "uniform_divergence"),
    ):
        estimator = getattr(ez.metrics, name)
        assert np.isfinite(got[figure]).all(), figure
        np.testing.assert_allclose(-got[figure][:, 0], estimator(log_mean, mask), atol=1e-5)
        for m in range(2):
            np.testing.assert_allclose(
                -got["member_" + figure][:, m, 0], estimator(exact[:, m], mask), atol=1e-5
            )


def test_boosted_probability_from_the_top_201_equals_lm_polygraphs(rng):
    """The decode loop's BoostedProb figure, from `ops.top_k` of the 201
    largest probabilities, equals `ez.metrics.boosted_probability`
    (lm-polygraph's, over the 1,024 largest, in float64) per token: taken
    tokens inside and outside the dominant set, rows with no cut, and a
    vocabulary larger than the search."""
    from ensemble_zoo.ops.distribution_figures import boosted_probability

    logits = rng.normal(size=(8, 1, 1500)) * np.array([4, 4, 4, 4, 0.1, 6, 6, 2])[:, None, None]
    logits[0, 0, :3] += 12.0  # three dominant tokens
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    p = np.exp(log_p)
    order = np.argsort(-p, axis=-1)[:, 0]
    tokens = np.stack([order[0, 1], order[1, 0], order[2, 700], order[3, 2]] + [order[4, 0]])
    tokens = np.concatenate([tokens, order[5:, 0]])[:, None]
    taken = np.take_along_axis(p, tokens[..., None], -1)[..., 0]
    got = to_np(boosted_probability(p.astype("float32"), taken.astype("float32")))
    mask = np.ones((8, 1), bool)
    for row in range(8):
        expected = -ez.metrics.boosted_probability(
            log_p[row : row + 1], tokens[row : row + 1], mask[:1]
        )
        np.testing.assert_allclose(got[row], expected, atol=1e-6, err_msg=row)
    assert got[0, 0] > taken[0, 0] + 0.1  # the dominant set's mass


def test_the_decode_loops_boosted_probability_counts_the_smallest_dominant_token(rng):
    """Through `token_figures` (what the decode loop records), the
    ensemble's third most probable token, in most rows the smallest of
    its dominant tokens, gets the dominant set's mass, as
    `ez.metrics.boosted_probability` of the members' mean (a taken
    probability computed apart from the sorted ones could round below
    it)."""
    from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import FIGURES
    from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import token_figures
    from ensemble_zoo.ops.token_uncertainty import vocabulary_log_softmax

    logits = rng.normal(size=(16, 3, 1, 300)) * 2
    logits[..., :3] += 9.0 + rng.normal(size=(16, 3, 1, 3))  # three dominant tokens
    log_p = to_np(vocabulary_log_softmax(logits.astype("float32")))
    mean = np.exp(log_p.astype("float64")).mean(axis=1)
    tokens = np.argsort(-mean, axis=-1)[..., 2]  # the third largest
    got = to_np(token_figures(log_p, tokens.astype("int32"), np.zeros((16, 3, 1), "float32")))
    got = got[..., FIGURES.index("boosted_probability")]
    expected = -np.array(
        [
            ez.metrics.boosted_probability(
                np.log(mean[i : i + 1]), tokens[i : i + 1], np.ones((1, 1), bool)
            )
            for i in range(16)
        ]
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)
    taken = np.take_along_axis(mean, tokens[..., None], -1)[..., 0]
    assert np.sum(got > taken + 0.05) >= 12  # most rows: the dominant set's mass
