"""lm-polygraph 0.7.0's estimators that weigh sampled answers (or the
tokens of one answer) by their relevance: `TokenSAR`, `SentenceSAR`,
`SAR` (Duan et al., "Shifting Attention to Relevance", arXiv:2307.01379),
`CocoaMSP` / `CocoaPPL` / `CocoaMTE` (Vashurin et al., "Uncertainty
Quantification for LLMs through Minimum Bayes Risk", arXiv:2502.04964),
`SemanticDensity` (Qiu and Miikkulainen, arXiv:2405.13845) and
`MonteCarloSequenceEntropy` / `MonteCarloNormalizedSequenceEntropy`
(Kuhn et al., arXiv:2302.09664), as array functions.

A question's `n` sampled answers come as `(batch, n)` arrays (their
log-likelihoods, lengths) and `(batch, n, n)` similarity matrices; an
answer's tokens as `(batch, length)` arrays with a bool `mask` of the
tokens that count (or `(batch, n, length)` for every sampled answer).
Every function returns a float64 `(batch,)` array, higher for a more
uncertain question, as lm-polygraph's do.
"""

import numpy as np

from ensemble_zoo.metrics.similarity_estimators import checked_matrices
from ensemble_zoo.metrics.token_arrays import check_same_shapes
from ensemble_zoo.metrics.token_arrays import checked_array
from ensemble_zoo.metrics.token_arrays import checked_per_token
from ensemble_zoo.metrics.token_arrays import masked_mean
from ensemble_zoo.utils.validation import check_real

#: SAR's and SentenceSAR's temperature `t` (lm-polygraph's 0.001).
SAR_TEMPERATURE = 0.001


def _token_relevance_entropy(log_likelihoods, token_similarity, mask):
    """TokenSAR per answer: `sum_t -log p_t R_t / sum_t R_t`, `R_t = 1 -`
    the similarity of the answer without token `t` to the answer."""
    relevance = np.where(mask, 1.0 - token_similarity, 0.0)
    weighted = np.where(mask, -log_likelihoods * relevance, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return weighted / relevance.sum(axis=-1)


def token_sar(log_likelihoods, token_similarity, mask):
    """lm-polygraph's `TokenSAR`: the answer's token negative
    log-likelihoods weighted by each token's relevance, `sum_t -log p_t
    R_t / sum_t R_t` with `R_t = 1 - s_t` and `s_t` the similarity (a
    sentence-similarity model's) of the answer without token `t` to the
    whole answer. NaN where no counted token is relevant (lm-polygraph
    divides by zero there too).

    Args:
        log_likelihoods: float array `(batch, length)`, `log p(y_t |
            y_<t, x)` of the answer's tokens (lm-polygraph's
            `greedy_log_likelihoods`).
        token_similarity: float array `(batch, length)`.
        mask: bool array `(batch, length)`, the tokens that count.

    Returns:
        float64 array `(batch,)`.
    """
    log_likelihoods, token_similarity, mask = checked_per_token(
        mask, log_likelihoods=log_likelihoods, token_similarity=token_similarity
    )
    return _token_relevance_entropy(log_likelihoods, token_similarity, mask)


def _relevance_entropy(probabilities, similarity, temperature):
    """SentenceSAR's `mean_i -log(sum_{j != i} p_j S_ij / t + p_i)`."""
    off_diagonal = 1.0 - np.eye(similarity.shape[1])
    relevance = (probabilities[:, None, :] * similarity * off_diagonal).sum(axis=2) / temperature
    return -np.log(relevance + probabilities).mean(axis=1)


def sentence_sar(sample_log_likelihoods, similarity, temperature=SAR_TEMPERATURE):
    """lm-polygraph's `SentenceSAR`: `mean_i -log(p_i + sum_{j != i} p_j
    S_ij / t)`, `p_i` the probability of sampled answer `i` (the exponential
    of its log-likelihood) and `S_ij` the similarity of answers `i` and `j`
    (lm-polygraph's `sample_sentence_similarity`: a cross-encoder's).
    lm-polygraph weighs `S_ij` by `p_j` (its probabilities broadcast over
    the rows), as the paper's relevance-weighted sum over the other
    answers.

    Args:
        sample_log_likelihoods: float array `(batch, n)`.
        similarity: float array `(batch, n, n)` in `[0, 1]`.
        temperature: positive float, `t` (0.001).

    Returns:
        float64 array `(batch,)`.
    """
    log_likelihoods = checked_array(sample_log_likelihoods, "sample_log_likelihoods", 2)
    similarity = checked_matrices(similarity, "similarity", 0.0, 1.0)
    check_same_shapes(sample_log_likelihoods=log_likelihoods, similarity_rows=similarity[..., 0])
    temperature = check_real(temperature, "temperature", low=0.0, low_open=True)
    return _relevance_entropy(np.exp(log_likelihoods), similarity, temperature)


def sar(
    sample_token_log_likelihoods,
    sample_token_similarity,
    sample_mask,
    similarity,
    temperature=SAR_TEMPERATURE,
):
    """lm-polygraph's `SAR`: `sentence_sar` over the sampled answers with
    each answer's probability replaced by `exp(-token_sar)` of its own
    tokens.

    Args:
        sample_token_log_likelihoods: float array `(batch, n, length)`.
        sample_token_similarity: float array `(batch, n, length)`, the
            similarity of each answer without each token to the answer.
        sample_mask: bool array `(batch, n, length)`, the tokens that
            count.
        similarity: float array `(batch, n, n)` in `[0, 1]`.
        temperature: positive float (0.001).

    Returns:
        float64 array `(batch,)`.
    """
    log_likelihoods = checked_array(sample_token_log_likelihoods, "sample_token_log_likelihoods", 3)
    token_similarity = checked_array(sample_token_similarity, "sample_token_similarity", 3)
    mask = checked_array(sample_mask, "sample_mask", 3, "bool")
    check_same_shapes(
        sample_token_log_likelihoods=log_likelihoods,
        sample_token_similarity=token_similarity,
        sample_mask=mask,
    )
    similarity = checked_matrices(similarity, "similarity", 0.0, 1.0)
    check_same_shapes(answers=log_likelihoods[..., 0], similarity_rows=similarity[..., 0])
    temperature = check_real(temperature, "temperature", low=0.0, low_open=True)
    probabilities = np.exp(-_token_relevance_entropy(log_likelihoods, token_similarity, mask))
    return _relevance_entropy(probabilities, similarity, temperature)


def _mean_dissimilarity(similarity, answers):
    similarity = checked_array(similarity, "similarity", 2)
    if similarity.shape[0] != answers:
        raise ValueError(
            f"`similarity` must have one row per answer ({answers}); got {similarity.shape}."
        )
    return (1.0 - similarity).mean(axis=1)


def cocoa(sequence_uncertainty, similarity):
    """lm-polygraph's `CocoaMSP`, `CocoaPPL` and `CocoaMTE`: an answer's
    uncertainty times its mean dissimilarity `mean_j (1 - s_j)` to the
    sampled answers (`s_j` the similarity of the greedy answer to sampled
    answer `j`, lm-polygraph's `greedy_sentence_similarity`; every sample
    counts).

    The three are this product with lm-polygraph's own
    `sequence_uncertainty`: `CocoaMSP` with the answer's negative
    log-likelihood (its sum over tokens), `CocoaPPL` with the mean
    negative token log-likelihood, `CocoaMTE` with the mean token entropy
    (`ensemble_zoo.metrics.sequence_uncertainty` gives each).

    Args:
        sequence_uncertainty: float array `(batch,)`.
        similarity: float array `(batch, n)`.

    Returns:
        float64 array `(batch,)`.
    """
    uncertainty = checked_array(sequence_uncertainty, "sequence_uncertainty", 1)
    return uncertainty * _mean_dissimilarity(similarity, uncertainty.shape[0])


def semantic_density(
    greedy_log_likelihoods,
    greedy_mask,
    sample_log_likelihoods,
    sample_lengths,
    contradiction,
    neutral,
    distinct=None,
):
    """lm-polygraph's `SemanticDensity`, negated as lm-polygraph returns
    it: minus the kernel density of the greedy answer among the distinct
    sampled answers, `sum_j q_j k_j / sum_j q_j` with `q_j = p_j^(1 /
    length_j)` each answer's length-normalised probability and `k_j =
    max(0, 1 - c_j - n_j / 2)` (`c_j`, `n_j`: the NLI model's
    contradiction and neutral probabilities between the greedy answer and
    sample `j`); the greedy answer itself joins both sums with kernel 1.

    lm-polygraph counts each distinct sample text once (its first
    occurrence: `distinct`), and reads the greedy answer's token
    log-likelihoods (`greedy_log_likelihoods`; it declares
    `greedy_log_probs` but reads this).

    Args:
        greedy_log_likelihoods: float array `(batch, length)`.
        greedy_mask: bool array `(batch, length)`, its counted tokens.
        sample_log_likelihoods: float array `(batch, n)`, each sample's
            log-probability.
        sample_lengths: int array `(batch, n)`, each sample's token count
            (positive).
        contradiction: float array `(batch, n)` in `[0, 1]`.
        neutral: float array `(batch, n)` in `[0, 1]`.
        distinct: optional bool array `(batch, n)`, the samples that
            count (`None`: all).

    Returns:
        float64 array `(batch,)`.
    """
    greedy, greedy_mask = checked_per_token(
        greedy_mask, greedy_log_likelihoods=greedy_log_likelihoods
    )
    log_p = checked_array(sample_log_likelihoods, "sample_log_likelihoods", 2)
    lengths = checked_array(sample_lengths, "sample_lengths", 2)
    contradiction = checked_array(contradiction, "contradiction", 2)
    neutral = checked_array(neutral, "neutral", 2)
    distinct = np.ones(log_p.shape, bool) if distinct is None else distinct
    distinct = checked_array(distinct, "distinct", 2, "bool")
    check_same_shapes(
        sample_log_likelihoods=log_p,
        sample_lengths=lengths,
        contradiction=contradiction,
        neutral=neutral,
        distinct=distinct,
    )
    if (lengths <= 0).any():
        raise ValueError("`sample_lengths` must be positive.")
    count = greedy_mask.sum(axis=1)
    if (count == 0).any() or greedy.shape[0] != log_p.shape[0]:
        raise ValueError(
            "Every question needs a greedy answer of one or more tokens, one row per question."
        )
    weights = np.where(distinct, np.exp(log_p) ** (1.0 / lengths), 0.0)
    distance = contradiction + neutral / 2
    kernel = np.where(distance <= 1, 1.0 - distance, 0.0)
    greedy_weight = np.exp(np.where(greedy_mask, greedy, 0.0).sum(axis=1)) ** (1.0 / count)
    density = ((weights * kernel).sum(axis=1) + greedy_weight) / (
        weights.sum(axis=1) + greedy_weight
    )
    return -density


def monte_carlo_sequence_entropy(sample_log_likelihoods, sample_lengths=None):
    """lm-polygraph's `MonteCarloSequenceEntropy`: `-mean_j log p(s_j | x)`
    over the sampled answers; with `sample_lengths`, its
    `MonteCarloNormalizedSequenceEntropy`: `-mean_j log p(s_j | x) /
    length_j` over the answers of one or more tokens.

    Args:
        sample_log_likelihoods: float array `(batch, n)`.
        sample_lengths: optional int array `(batch, n)`.

    Returns:
        float64 array `(batch,)` (NaN for a question whose answers are all
        empty, normalised).
    """
    log_p = checked_array(sample_log_likelihoods, "sample_log_likelihoods", 2)
    if sample_lengths is None:
        return -log_p.mean(axis=1)
    lengths = checked_array(sample_lengths, "sample_lengths", 2)
    check_same_shapes(sample_log_likelihoods=log_p, sample_lengths=lengths)
    counted = lengths > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return -masked_mean(log_p / np.where(counted, lengths, 1.0), counted)
