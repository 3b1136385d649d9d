"""The single-pass white-box estimators against lm-polygraph 0.7.0's own
estimator classes, run on seeded inputs by
`tests/fixtures/lm_polygraph/make_fixture.py` (ragged sequences, a
ruled-out token, a dominant token and set, a one-token answer). Pure
NumPy: run under one backend."""

import os

import keras
import numpy as np
import pytest

from ensemble_zoo import metrics

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="pure NumPy: one backend suffices"
)

FIXTURE = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "lm_polygraph", "white_box_estimators.npz"
)


@pytest.fixture(scope="module")
def polygraph():
    with np.load(FIXTURE) as data:
        return dict(data)


def inputs(polygraph, *names):
    return [polygraph["input_" + name] for name in names]


def token_level(scores, mask):
    """lm-polygraph's concatenated token-level scores: every counted token
    but each sequence's last, in order (NaN everywhere else)."""
    scored = mask.copy()
    for row in np.flatnonzero(mask.any(axis=1)):
        scored[row, np.flatnonzero(mask[row])[-1]] = False
    assert np.isnan(scores[~scored]).all() and not np.isnan(scores[scored]).any()
    return scores[scored]


def test_distribution_estimators_equal_lm_polygraph(polygraph):
    """FisherRao and RenyiNeg (sign flipped: lm-polygraph's are higher for
    more certain text), SelfCertainty and BoostedProb."""
    log_probs, tokens, mask = inputs(polygraph, "log_probs", "tokens", "mask")
    np.testing.assert_allclose(
        metrics.fisher_rao(log_probs, mask), -polygraph["fisher_rao"], atol=1e-6
    )
    np.testing.assert_allclose(
        metrics.renyi_negentropy(log_probs, mask), -polygraph["renyi_neg"], atol=1e-6
    )
    np.testing.assert_allclose(
        metrics.self_certainty(log_probs, mask), polygraph["self_certainty"], atol=1e-6
    )
    np.testing.assert_allclose(
        metrics.boosted_probability(log_probs, tokens, mask),
        polygraph["boosted_probability"],
        atol=1e-6,
    )
    # Order 1: lm-polygraph's `0 * log 0` makes a sequence with a ruled-out
    # token NaN (row 1); here it counts 0.
    kl = metrics.renyi_negentropy(log_probs, mask, alpha=1)
    reference = polygraph["renyi_neg_alpha_1"]
    finite = ~np.isnan(reference)
    assert not finite[1] and np.isfinite(kl).all()
    np.testing.assert_allclose(kl[finite], -reference[finite], atol=1e-6)


def test_likelihood_and_attention_estimators_equal_lm_polygraph(polygraph):
    """Token- and sequence-level PMI and CPMI, MaximumTokenProbability,
    RAUQ (its defaults, instruct, the entropy variant), AttentionScore and
    CSL."""
    names = ("log_likelihoods", "lm_log_likelihoods", "entropies", "mask")
    ll, lm_ll, entropies, mask = inputs(polygraph, *names)
    np.testing.assert_allclose(
        token_level(metrics.maximum_token_probability(ll, mask), mask),
        polygraph["maximum_token_probability"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.pointwise_mutual_information(ll, lm_ll, mask), polygraph["mean_pmi"], atol=1e-6
    )
    np.testing.assert_allclose(
        token_level(metrics.pointwise_mutual_information(ll, lm_ll, mask, sequence=False), mask),
        polygraph["pmi"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.conditional_pointwise_mutual_information(ll, lm_ll, entropies, mask),
        polygraph["mean_cpmi"],
        atol=1e-6,
    )
    cpmi = metrics.conditional_pointwise_mutual_information(
        ll, lm_ll, entropies, mask, sequence=False
    )
    np.testing.assert_allclose(token_level(cpmi, mask), polygraph["cpmi"], atol=1e-6)
    (attention,) = inputs(polygraph, "previous_token_attention")
    np.testing.assert_allclose(metrics.rauq(attention, ll, mask), polygraph["rauq"], atol=1e-6)
    np.testing.assert_allclose(
        metrics.rauq(attention, ll, mask, instruct=True), polygraph["rauq_instruct"], atol=1e-6
    )
    vocabulary = polygraph["input_log_probs"].shape[-1]
    np.testing.assert_allclose(
        metrics.rauq(attention, ll, mask, entropies=entropies, vocabulary_size=vocabulary),
        polygraph["rauq_entropy"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.rauq(
            attention, ll, mask, entropies=entropies, vocabulary_size=vocabulary, instruct=True
        ),
        polygraph["rauq_entropy_instruct"],
        atol=1e-6,
    )
    (self_attention,) = inputs(polygraph, "self_attention")
    np.testing.assert_allclose(
        metrics.attention_score(self_attention, mask), polygraph["attention_score"], atol=1e-6
    )
    (prompt_attention,) = inputs(polygraph, "prompt_attention")
    np.testing.assert_allclose(
        metrics.contextualized_sequence_likelihood(ll, prompt_attention, mask),
        polygraph["csl"],
        atol=1e-6,
    )


def test_orientation_and_bad_input(polygraph):
    """A peaked distribution scores lower (more certain) than a flat one
    on every distribution estimator; a sequence with no counted token is
    NaN; bad shapes and values are clear errors naming the argument."""
    vocabulary = 30
    flat = np.full((1, 2, vocabulary), -np.log(vocabulary))
    peaked = np.log(np.full((1, 2, vocabulary), 0.01 / (vocabulary - 1)))
    peaked[..., 0] = np.log(0.99)
    log_probs = np.concatenate([flat, peaked])
    mask = np.array([[True, True], [True, True]])
    tokens = np.zeros((2, 2), int)
    for name, score in {
        "fisher_rao": metrics.fisher_rao(log_probs, mask),
        "renyi_negentropy": metrics.renyi_negentropy(log_probs, mask),
        "self_certainty": metrics.self_certainty(log_probs, mask),
        "boosted_probability": metrics.boosted_probability(log_probs, tokens, mask),
    }.items():
        assert score[0] > score[1], name
    empty = metrics.fisher_rao(log_probs, np.zeros((2, 2), bool))
    assert np.isnan(empty).all()
    with pytest.raises(ValueError, match="`mask` must be a bool array"):
        metrics.fisher_rao(log_probs, mask.astype(int))
    with pytest.raises(ValueError, match="`log_probs` must have shape"):
        metrics.self_certainty(log_probs[0], mask)
    with pytest.raises(ValueError, match=r"`temperature` must lie in \(0, inf\]"):
        metrics.fisher_rao(log_probs, mask, temperature=0)
    with pytest.raises(ValueError, match="`tokens` must be ids"):
        metrics.boosted_probability(log_probs, tokens + vocabulary, mask)
    with pytest.raises(ValueError, match="`previous_token_attention` must have shape"):
        metrics.rauq(np.zeros((2, 3, 2)), np.zeros((2, 2)), mask)
    with pytest.raises(ValueError, match="`vocabulary_size` is required"):
        metrics.rauq(np.zeros((2, 3, 1, 2)), np.zeros((2, 2)), mask, entropies=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="`log_likelihoods` has NaN"):
        metrics.maximum_token_probability(np.full((2, 2), np.nan), mask)


def test_claim_conditioned_probability_equals_lm_polygraph(polygraph):
    """CCP on 4 alternatives per token (one absent) with every pair of NLI
    directions; the class combination against lm-polygraph's rule, and bad
    input."""
    names = ("alternative_log_likelihoods", "forward_nli", "backward_nli", "mask")
    log_p, forward, backward, mask = inputs(polygraph, *names)
    np.testing.assert_allclose(
        metrics.claim_conditioned_probability(log_p, forward, backward, mask),
        polygraph["claim_conditioned_probability"],
        atol=1e-9,
    )
    from ensemble_zoo.metrics.claim_estimators import combined_nli

    pairs = np.array([(f, b) for f in range(3) for b in range(3)])
    # lm-polygraph's `_combine_nli`: entail=0, neutral=1, contra=2.
    expected = [0, 0, 1, 0, 1, 2, 1, 2, 2]
    np.testing.assert_array_equal(combined_nli(pairs[:, 0], pairs[:, 1]), expected)
    with pytest.raises(ValueError, match="`forward_nli` must hold NLI classes"):
        metrics.claim_conditioned_probability(log_p, forward + 3, backward, mask)
    with pytest.raises(ValueError, match="must be log-probabilities"):
        metrics.claim_conditioned_probability(-log_p, forward, backward, mask)
    with pytest.raises(ValueError, match="must have shape"):
        metrics.claim_conditioned_probability(log_p[0], forward, backward, mask)
