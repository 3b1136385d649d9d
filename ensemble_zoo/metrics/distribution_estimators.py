"""lm-polygraph 0.7.0's estimators of the next-token distributions of a
generated answer: `FisherRao`, `RenyiNeg`, `SelfCertainty` and
`BoostedProbSequence`, as array functions (conventions: see
`ensemble_zoo.metrics.white_box_estimators`)."""

import numpy as np

from ensemble_zoo.metrics.token_arrays import checked_distributions
from ensemble_zoo.metrics.token_arrays import checked_tokens
from ensemble_zoo.metrics.token_arrays import log_softmax
from ensemble_zoo.metrics.token_arrays import masked_mean
from ensemble_zoo.utils.validation import check_real

#: lm-polygraph's defaults: FisherRao's and RenyiNeg's temperature and
#: RenyiNeg's order.
TEMPERATURE = 2.0
RENYI_ALPHA = 0.5
#: BoostedProb's defaults (the `boostedprob` package 0.1.3 that
#: lm-polygraph calls): a jump between consecutive sorted probabilities
#: larger than `BOOSTED_JUMP` times the larger one and than
#: `BOOSTED_EPSILON` can close the dominant set (the last such jump
#: does).
BOOSTED_JUMP = 0.3
BOOSTED_EPSILON = 0.005


def fisher_rao(log_probs, mask, temperature=TEMPERATURE):
    """lm-polygraph's `FisherRao` (after Darrin et al., "Rainproof",
    arXiv:2212.09171), sign flipped: minus the mean over the tokens of the
    Fisher-Rao distance between the next-token distribution (at
    `temperature`) and the uniform distribution.

    Per token `t`, with `q = softmax(log p_t / temperature)` over a
    vocabulary of `V` entries: `d_t = (2 / pi) arccos(sum_v sqrt(q_v) /
    sqrt(V))`, in `[0, 1]` (0 for a uniform `q`). lm-polygraph returns
    `mean_t d_t`, higher for a more peaked, more certain distribution; this
    returns `-mean_t d_t`, so that higher is more uncertain. Every token
    in `mask` counts (lm-polygraph's: the generated ones, end token
    included). The arccos argument is clipped to 1 against round-off.

    Args:
        log_probs: float array `(batch, length, vocabulary)`, the
            next-token log-probabilities at each token (`-inf` allowed).
        mask: bool array `(batch, length)`, the tokens that count.
        temperature: positive float (lm-polygraph's default 2).

    Returns:
        float64 array `(batch,)`.
    """
    log_probs, mask = checked_distributions(log_probs, mask)
    temperature = check_real(temperature, "temperature", low=0.0, low_open=True)
    log_q = log_softmax(log_probs / temperature)
    vocabulary = log_probs.shape[-1]
    cosine = np.exp(log_q / 2).sum(axis=-1) / np.sqrt(vocabulary)
    distance = 2 / np.pi * np.arccos(np.minimum(cosine, 1.0))
    return -masked_mean(distance, mask)


def renyi_negentropy(log_probs, mask, alpha=RENYI_ALPHA, temperature=TEMPERATURE):
    """lm-polygraph's `RenyiNeg` (after arXiv:2212.09171), sign flipped.

    Per token, with `q = softmax(log p_t / temperature)` over `V` entries,
    lm-polygraph computes `r_t = (log sum_v q_v^alpha - (alpha - 1) log
    V) / (alpha - 1)` (for `alpha == 1`: `sum_v q_v log q_v + log V`, the
    KL divergence from uniform) and returns `mean_t r_t`, higher for a
    more certain distribution. For `alpha != 1` its `r_t` is the Renyi
    divergence of order `alpha` from the uniform distribution minus
    `2 log V` (the sign of the uniform term is flipped in its code); the
    shift is the same for every sequence of one vocabulary, so rankings
    do not change, and it is kept here to equal lm-polygraph. At
    `alpha == 1` lm-polygraph's `log q * q` is NaN for the whole sequence
    wherever some `q_v` is 0 (a `-inf` log-probability); here `0 log 0`
    counts 0, deliberately. Returns `-mean_t r_t`, higher = more
    uncertain.

    Args:
        log_probs: float array `(batch, length, vocabulary)`.
        mask: bool array `(batch, length)`.
        alpha: positive float, the order (lm-polygraph's default 0.5).
        temperature: positive float (default 2).

    Returns:
        float64 array `(batch,)`.
    """
    log_probs, mask = checked_distributions(log_probs, mask)
    alpha = check_real(alpha, "alpha", low=0.0, low_open=True)
    temperature = check_real(temperature, "temperature", low=0.0, low_open=True)
    log_q = log_softmax(log_probs / temperature)
    log_v = np.log(log_probs.shape[-1])
    if alpha == 1:
        q = np.exp(log_q)
        per_token = (q * np.where(q > 0, log_q, 0.0)).sum(axis=-1) + log_v
    else:
        summed = np.log(np.exp(alpha * log_q).sum(axis=-1))
        per_token = (summed - (alpha - 1) * log_v) / (alpha - 1)
    return -masked_mean(per_token, mask)


def self_certainty(log_probs, mask):
    """lm-polygraph's `SelfCertainty` (Kang et al., "Scalable Best-of-N
    Selection for Large Language Models via Self-Certainty",
    arXiv:2502.18581): minus the mean over the tokens of `KL(U || p_t)`,
    the divergence of the uniform distribution from the next-token one.

    Per token, over the finite log-probabilities only (lm-polygraph drops
    the `-inf` entries, so a vocabulary of `V` finite entries):
    `KL_t = -mean_v log p_t(v) - log V`. Returns `-mean_t KL_t` (higher =
    more uncertain, as lm-polygraph's).

    Args:
        log_probs: float array `(batch, length, vocabulary)`.
        mask: bool array `(batch, length)`.

    Returns:
        float64 array `(batch,)`.
    """
    log_probs, mask = checked_distributions(log_probs, mask)
    finite = np.isfinite(log_probs)
    count = finite.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_token = -np.where(finite, log_probs, 0.0).sum(axis=-1) / count - np.log(count)
    return -masked_mean(per_token, mask)


def boosted_probability(log_probs, tokens, mask):
    """lm-polygraph's `BoostedProbSequence` (BoostedProb, EMNLP 2025,
    aclanthology 2025.emnlp-main.166): minus the mean over the tokens of
    the taken token's boosted probability.

    Per token, the probabilities sorted in decreasing order `s_0 >= s_1
    >= ...`; the dominant tokens are `s_0 .. s_c`, where `c` is the
    **last** `k` with `s_k - s_{k+1} > 0.3 s_k` and `> 0.005`, and there
    are none if no such `k` exists (the `boostedprob` package's
    `difference_jump` cut, `cut_point_mode="last"`; it searches the 1,024
    most probable tokens, and since `s_c > 0.005` the cut lies within the
    first 200). The boosted probability is the dominant tokens' total
    probability if the taken token is one of them, else its own
    probability. Every token in `mask` counts, end token included.

    Args:
        log_probs: float array `(batch, length, vocabulary)`.
        tokens: int array `(batch, length)`, the taken token at each
            position.
        mask: bool array `(batch, length)`.

    Returns:
        float64 array `(batch,)`.
    """
    log_probs, mask = checked_distributions(log_probs, mask)
    tokens = checked_tokens(tokens, mask, log_probs.shape[-1])
    p = np.exp(log_probs)
    top = -np.sort(-p, axis=-1)[..., : min(1024, p.shape[-1])]
    jump = top[..., :-1] - top[..., 1:]
    cut = (jump > BOOSTED_JUMP * top[..., :-1]) & (jump > BOOSTED_EPSILON)
    has_cut = cut.any(axis=-1)
    last = cut.shape[-1] - 1 - np.argmax(cut[..., ::-1], axis=-1)
    threshold = np.take_along_axis(top, last[..., None], axis=-1)[..., 0]
    mass = np.where(np.arange(top.shape[-1]) <= last[..., None], top, 0.0).sum(axis=-1)
    taken = np.take_along_axis(p, tokens[..., None], axis=-1)[..., 0]
    dominant = has_cut & (taken >= threshold)
    return -masked_mean(np.where(dominant, mass, taken), mask)
