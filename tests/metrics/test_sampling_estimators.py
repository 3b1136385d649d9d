"""The estimators over sampled answers and their similarities against
lm-polygraph 0.7.0's own estimator classes, run on seeded inputs by
`tests/fixtures/lm_polygraph/make_sampling_fixture.py` (NLI matrices with
a two-cluster question and an all-alike one, ragged sampled answers,
repeated sample texts, an empty sample). Pure NumPy: run under one
backend."""

import os

import keras
import numpy as np
import pytest

from ensemble_zoo import metrics

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="pure NumPy: one backend suffices"
)

FIXTURE = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "lm_polygraph", "sampling_estimators.npz"
)


@pytest.fixture(scope="module")
def polygraph():
    with np.load(FIXTURE) as data:
        return {k.removeprefix("input_"): v for k, v in data.items()}


def test_similarity_graph_estimators_equal_lm_polygraph(polygraph):
    """DegMat, Eccentricity and EigValLaplacian with lm-polygraph's two
    affinities (entailment; one minus contradiction), KLE (its defaults
    and another setting), LUQ and EigenScore."""
    p = polygraph
    for affinity, similarity in (("entail", p["entailment"]), ("contra", 1.0 - p["contradiction"])):
        np.testing.assert_allclose(
            metrics.degree_matrix(similarity), p[f"deg_mat_{affinity}"], atol=1e-6
        )
        np.testing.assert_allclose(
            metrics.eccentricity(similarity), p[f"eccentricity_{affinity}"], atol=1e-6
        )
        np.testing.assert_allclose(
            metrics.laplacian_eigenvalue_sum(similarity),
            p[f"eig_val_laplacian_{affinity}"],
            atol=1e-6,
        )
    np.testing.assert_allclose(
        metrics.kernel_language_entropy(p["entailment"], p["contradiction"]),
        p["kernel_language_entropy"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.kernel_language_entropy(
            p["entailment"], p["contradiction"], time=0.7, normalize=False, scale=False, jitter=1e-3
        ),
        p["kernel_language_entropy_raw"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.luq(p["entailment_logits"], p["contradiction_logits"]), p["luq"], atol=1e-6
    )
    np.testing.assert_allclose(metrics.eigenscore(p["embeddings"]), p["eigenscore"], atol=1e-6)
    # Orientation: the all-alike question is the least uncertain.
    for name in ("deg_mat_entail", "eccentricity_entail", "kernel_language_entropy"):
        assert np.argmin(p[name]) == 2, name


def test_relevance_and_sampling_estimators_equal_lm_polygraph(polygraph):
    """TokenSAR, SentenceSAR, SAR, the three CoCoA products, semantic
    density and the Monte-Carlo sequence entropies."""
    p = polygraph
    np.testing.assert_allclose(
        metrics.token_sar(p["log_likelihoods"], p["token_similarity"], p["mask"]),
        p["token_sar"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.sentence_sar(p["sample_log_likelihoods"], p["similarity"]),
        p["sentence_sar"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.sar(
            p["sample_token_log_likelihoods"],
            p["sample_token_similarity"],
            p["sample_mask"],
            p["similarity"],
        ),
        p["sar"],
        atol=1e-6,
    )
    mask = p["mask"]
    log_likelihoods = np.where(mask, p["log_likelihoods"], 0.0)
    uncertainties = {
        "cocoa_msp": -log_likelihoods.sum(1),
        "cocoa_ppl": -log_likelihoods.sum(1) / mask.sum(1),
        "cocoa_mte": np.where(mask, p["entropies"], 0.0).sum(1) / mask.sum(1),
    }
    for name, uncertainty in uncertainties.items():
        np.testing.assert_allclose(
            metrics.cocoa(uncertainty, p["greedy_similarity"]), p[name], atol=1e-6
        )
    np.testing.assert_allclose(
        metrics.semantic_density(
            p["log_likelihoods"],
            mask,
            p["sample_log_likelihoods"],
            p["sample_lengths"],
            p["contradiction_forward"],
            p["neutral_forward"],
            distinct=p["distinct"],
        ),
        p["semantic_density"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.monte_carlo_sequence_entropy(p["sample_log_likelihoods"]),
        p["monte_carlo_sequence_entropy"],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics.monte_carlo_sequence_entropy(p["sample_log_likelihoods"], p["mc_lengths"]),
        p["monte_carlo_normalized_sequence_entropy"],
        atol=1e-6,
    )


def test_bad_input_names_the_argument(polygraph):
    p = polygraph
    with pytest.raises(ValueError, match=r"`similarity` must lie in \[0.0, 1.0\]"):
        metrics.degree_matrix(p["entailment"] * 2)
    with pytest.raises(ValueError, match="`similarity` must be an array"):
        metrics.eccentricity(p["entailment"][:, :, :3])
    with pytest.raises(ValueError, match="An answer is similar to none"):
        metrics.laplacian_eigenvalue_sum(np.zeros((1, 3, 3)))
    with pytest.raises(ValueError, match="must have one shape"):
        metrics.kernel_language_entropy(p["entailment"], p["contradiction"][:2])
    with pytest.raises(ValueError, match="it needs 2 or more"):
        metrics.luq(np.zeros((1, 1, 1)), np.zeros((1, 1, 1)))
    with pytest.raises(ValueError, match="`embeddings` holds NaN"):
        metrics.eigenscore(np.full((1, 2, 3), np.nan))
    with pytest.raises(ValueError, match="`mask` must be a bool array"):
        metrics.token_sar(p["log_likelihoods"], p["token_similarity"], p["mask"].astype(int))
    with pytest.raises(ValueError, match="These arrays must have one shape"):
        metrics.sar(
            p["sample_token_log_likelihoods"],
            p["sample_token_similarity"],
            p["sample_mask"],
            p["similarity"][:, :3, :3],
        )
    with pytest.raises(ValueError, match=r"`temperature` must lie in \(0, inf\]"):
        metrics.sentence_sar(p["sample_log_likelihoods"], p["similarity"], temperature=0)
    with pytest.raises(ValueError, match="`sample_lengths` must be positive"):
        metrics.semantic_density(
            p["log_likelihoods"],
            p["mask"],
            p["sample_log_likelihoods"],
            p["mc_lengths"],
            p["contradiction_forward"],
            p["neutral_forward"],
        )
