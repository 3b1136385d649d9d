"""Single-pass white-box estimators of generated text, as lm-polygraph
0.7.0 computes them: from the next-token distributions, the taken tokens'
log-likelihoods and the attention weights of one decode, no sampling.

Every function here is a plain NumPy function of arrays over a batch of
sequences, with a `mask` `(batch, length)` of the tokens that count, and
returns one float64 score per sequence `(batch,)` (or, for the
token-level ones, `(batch, length)` with NaN at the tokens lm-polygraph
does not score). Every score is oriented **higher = more uncertain**;
where lm-polygraph's is not (`FisherRao`, `RenyiNeg`), the sign is
flipped and said so. A sequence with no counted token scores NaN
(`attention_score`: 0, as lm-polygraph's).

Which tokens count: those in `mask`. lm-polygraph counts the generated
tokens up to and including the end-of-sequence token when the model
emitted one (its greedy statistics keep that position), so pass the
`generated_mask` that `generate(..., return_uncertainty=True)` returns.
"The first token", "the last token" below mean the first and last
counted token of each sequence.

The estimators of the next-token distributions (`fisher_rao`,
`renyi_negentropy`, `self_certainty`, `boosted_probability`) live in
`ensemble_zoo.metrics.distribution_estimators`; this module holds those of
the token likelihoods and the attention weights.

The functions take the distribution of one model: for an ensemble, pass
the log of the members' mean probability (the ensemble's predictive
distribution) or one member's log-probabilities.
"""

import numpy as np

from ensemble_zoo.metrics.token_arrays import all_but_last_counted
from ensemble_zoo.metrics.token_arrays import checked_mask
from ensemble_zoo.metrics.token_arrays import checked_per_token
from ensemble_zoo.metrics.token_arrays import first_counted
from ensemble_zoo.metrics.token_arrays import masked_mean
from ensemble_zoo.utils.validation import check_real

#: CPMI's defaults in lm-polygraph: the entropy threshold and the weight
#: of the unconditional term.
CPMI_TAU = 0.0656
CPMI_LAMBDA = 3.599
#: RAUQ's default `alpha` in lm-polygraph by `(entropy variant, instruct)`.
_RAUQ_ALPHA = {(False, False): 0.2, (True, False): 0.8, (False, True): 0.5, (True, True): 0.9}


def maximum_token_probability(log_likelihoods, mask):
    """lm-polygraph's `MaximumTokenProbability` (token level): `-log
    p(y_t)` at each counted token but the last (lm-polygraph drops the
    last generated token, the end token when there is one).

    Args:
        log_likelihoods: float array `(batch, length)`, the taken tokens'
            log-probabilities (`generate`'s `log_prob`, or a member's).
        mask: bool array `(batch, length)`.

    Returns:
        float64 array `(batch, length)`: NaN outside `mask` and at the
        last counted token.
    """
    log_likelihoods, mask = checked_per_token(mask, log_likelihoods=log_likelihoods)
    return np.where(all_but_last_counted(mask), -log_likelihoods, np.nan)


def pointwise_mutual_information(log_likelihoods, lm_log_likelihoods, mask, sequence=True):
    """lm-polygraph's `MeanPointwiseMutualInformation` (`sequence=True`)
    and `PointwiseMutualInformation` (token level).

    Per token, `s_t = log p(y_t | y_<t, x) - log p(y_t | y_<t)`: the
    log-likelihood given the prompt minus that of the unconditional model
    (the answer scored without its prompt), except at the first token,
    where lm-polygraph subtracts nothing. Sequence level: `-mean_t s_t`
    over every counted token; token level: `-s_t` at every counted token
    but the last, NaN elsewhere.

    lm-polygraph's own statistic `greedy_lm_log_likelihoods` (its
    `GreedyLMProbsCalculator`) reads each token's probability one
    position late, from the distribution after the token rather than
    before it; given aligned `lm_log_likelihoods` as here, the scores are
    those its estimator computes from aligned statistics, not the numbers
    its pipeline reports.

    Args:
        log_likelihoods: float array `(batch, length)`, given the prompt.
        lm_log_likelihoods: float array `(batch, length)`, the same tokens
            without the prompt.
        mask: bool array `(batch, length)`.
        sequence: bool (default `True`).

    Returns:
        float64 array `(batch,)` or `(batch, length)`.
    """
    return conditional_pointwise_mutual_information(
        log_likelihoods, lm_log_likelihoods, None, mask, tau=None, lambd=1.0, sequence=sequence
    )


def conditional_pointwise_mutual_information(
    log_likelihoods,
    lm_log_likelihoods,
    entropies,
    mask,
    tau=CPMI_TAU,
    lambd=CPMI_LAMBDA,
    sequence=True,
):
    """lm-polygraph's `MeanConditionalPointwiseMutualInformation`
    (`sequence=True`) and `ConditionalPointwiseMutualInformation` (token
    level), after van der Poel et al., "Mutual Information Alleviates
    Hallucinations in Abstractive Summarization" (arXiv:2210.13210).

    Per token, `s_t = log p(y_t | y_<t, x) - lambd * log p(y_t | y_<t)`
    where the next-token entropy `H_t >= tau` and `t` is not the first
    token, else `s_t = log p(y_t | y_<t, x)`. Sequence level: `-mean_t
    s_t`; token level: `-s_t` at every counted token but the last.

    Args:
        log_likelihoods: float array `(batch, length)`, given the prompt.
        lm_log_likelihoods: float array `(batch, length)`, without it.
        entropies: float array `(batch, length)`, the entropy of the
            next-token distribution given the prompt (`generate`'s
            `total`, or a member's `member_entropy`). `None` with `tau=None`
            subtracts at every token but the first (pointwise mutual
            information).
        mask: bool array `(batch, length)`.
        tau: float, the entropy threshold (default 0.0656), or `None`.
        lambd: float, the weight of the unconditional term (default
            3.599).
        sequence: bool (default `True`).

    Returns:
        float64 array `(batch,)` or `(batch, length)`.
    """
    arrays = {"log_likelihoods": log_likelihoods, "lm_log_likelihoods": lm_log_likelihoods}
    if tau is not None:
        arrays["entropies"] = entropies
    checked = checked_per_token(mask, **arrays)
    log_likelihoods, lm_log_likelihoods, mask = checked[0], checked[1], checked[-1]
    subtract = mask & ~first_counted(mask)
    if tau is not None:
        subtract &= checked[2] >= float(tau)
    scores = log_likelihoods - np.where(subtract, float(lambd) * lm_log_likelihoods, 0.0)
    if sequence:
        return -masked_mean(scores, mask)
    return np.where(all_but_last_counted(mask), -scores, np.nan)


def rauq(
    previous_token_attention,
    log_likelihoods,
    mask,
    alpha=None,
    layers=None,
    entropies=None,
    vocabulary_size=None,
    instruct=False,
):
    """lm-polygraph's `RAUQ` (Vazhentsev et al., "Uncertainty-Aware
    Attention Heads: Efficient Unsupervised Uncertainty Quantification for
    LLMs", arXiv:2505.20045): recurrent attention-based confidence.

    For the counted tokens `y_0 .. y_{n-1}` and, at token `j >= 1`, the
    weight `a_j^{l,h}` that head `h` of layer `l` gives to the previous
    token (in a decode: at the step that takes `y_{j-1}` as input and
    generates `y_j`, the query's weight on its own, newest key; that is
    lm-polygraph's `attention_all[l * H + h, j, j - 1]`; `mask` must be
    one contiguous run per sequence, as `generated_mask` is, since the
    weight is read at the counted token's own position):

    - per layer, the head `h*` with the largest mean `a_j^{l,h}` over
      `j = 1 .. n-1`;
    - the confidence `c_0 = p_0`, `c_j = alpha p_j + (1 - alpha) a_j^{l,h*}
      c_{j-1}`, with `p_j = exp(log p(y_j))`, or with `entropies` given
      (lm-polygraph's `use_entropy`) `p_j = log V - H_j + 1e-10` (not a
      probability: it can exceed 1);
    - `u_l = 1 - mean_j log c_j`, and RAUQ `= max_l u_l` over `layers`.

    Args:
        previous_token_attention: float array `(batch, layers, heads,
            length)`, `a` at each token (read at tokens `j >= 1`).
        log_likelihoods: float array `(batch, length)`.
        mask: bool array `(batch, length)`.
        alpha: float in `[0, 1]`, or `None` for lm-polygraph's defaults:
            0.2, 0.8 with `entropies`, 0.5 and 0.9 with `instruct`.
        layers: iterable of layer indices, or `None` for lm-polygraph's
            `range(L // 3, ceil(2 L / 3) + 1)` of `L` layers (wider than
            the middle third; indices past the last layer, which
            lm-polygraph would fail on for `L <= 2`, are dropped).
        entropies: optional float array `(batch, length)`, the next-token
            entropies (the entropy variant).
        vocabulary_size: int, `V`, required with `entropies`.
        instruct: bool, lm-polygraph's defaults for instruction-tuned
            models.

    Returns:
        float64 array `(batch,)`.
    """
    attention = np.asarray(previous_token_attention, np.float64)
    log_likelihoods, mask = checked_per_token(mask, log_likelihoods=log_likelihoods)
    if (
        attention.ndim != 4
        or attention.shape[0] != mask.shape[0]
        or attention.shape[3] != (mask.shape[1])
    ):
        raise ValueError(
            "`previous_token_attention` must have shape (batch, layers, heads, length) "
            f"matching `mask` {mask.shape}; got {attention.shape}."
        )
    num_layers = attention.shape[1]
    if alpha is None:
        alpha = _RAUQ_ALPHA[(entropies is not None, bool(instruct))]
    alpha = check_real(alpha, "alpha", low=0.0, high=1.0)
    if layers is None:
        layers = range(num_layers // 3, int(np.ceil(num_layers / 3 * 2)) + 1)
        layers = [layer for layer in layers if layer < num_layers]
    layers = list(layers)
    if not layers or any(not 0 <= int(layer) < num_layers for layer in layers):
        raise ValueError(
            f"`layers` must be indices of the {num_layers} layers of "
            f"`previous_token_attention`; got {layers}."
        )
    if entropies is not None:
        if vocabulary_size is None:
            raise ValueError("`vocabulary_size` is required with `entropies`.")
        (entropies,) = checked_per_token(mask, entropies=entropies)[:1]
        log_p = np.log(np.log(vocabulary_size) - entropies + 1e-10)
    else:
        log_p = log_likelihoods
    scores = np.full(mask.shape[0], np.nan)
    for row in range(mask.shape[0]):
        positions = np.flatnonzero(mask[row])
        if positions.size == 0:
            continue
        p = np.exp(log_p[row, positions])
        a = attention[row][:, :, positions[1:]]  # (layers, heads, n - 1)
        per_layer = []
        for layer in layers:
            head = int(np.argmax(a[layer].mean(axis=-1))) if positions.size > 1 else 0
            confidence = [p[0]]
            for j in range(1, positions.size):
                step = alpha * p[j] + (1 - alpha) * a[layer, head, j - 1] * confidence[-1]
                confidence.append(step)
            per_layer.append(1 - np.mean(np.log(confidence)))
        scores[row] = np.max(per_layer)  # NaN propagates, as in lm-polygraph
    return scores


def attention_score(self_attention, mask):
    """lm-polygraph's `AttentionScore` (Sriramanan et al., "LLM-Check:
    Investigating Detection of Hallucinations in Large Language Models",
    NeurIPS 2024): `-(1 / H) sum_h sum_q log(A_h[q, q] + 1e-12)` at one
    layer, the log of each position's attention to itself summed over the
    positions in `mask` and averaged over the heads.

    lm-polygraph's default (`gen_only=False`) sums over every position of
    the forward pass, prompt included, at layer `L // 2`; with
    `gen_only=True` over the generated tokens but the last. Pass that set
    of positions as `mask`.

    Args:
        self_attention: float array `(batch, heads, length)`, the
            weight each position gives to itself, at the chosen layer.
        mask: bool array `(batch, length)`, the positions that count.

    Returns:
        float64 array `(batch,)` (0 for no position, as lm-polygraph's).
    """
    attention = np.asarray(self_attention, np.float64)
    mask = checked_mask(mask)
    if attention.ndim != 3 or attention.shape[::2] != mask.shape:
        raise ValueError(
            "`self_attention` must have shape (batch, heads, length) matching `mask` "
            f"{mask.shape}; got {attention.shape}."
        )
    logs = np.where(mask[:, None], np.log(attention + 1e-12), 0.0)
    return -logs.sum(axis=(1, 2)) / attention.shape[1]


def contextualized_sequence_likelihood(log_likelihoods, prompt_attention, mask):
    """lm-polygraph's `CSL` (Lin et al., "Contextualized Sequence
    Likelihood", EMNLP 2024): `-sum_t w_t log p(y_t)`, the token
    log-likelihoods weighted by attention.

    The weights: `w = mean over every layer and head` of the attention
    that the last token of an eliciting prompt (lm-polygraph's asks
    whether the answer is right, with the question and the answer in it)
    gives to each answer token, normalised to sum to one over the counted
    tokens (end token included).

    Args:
        log_likelihoods: float array `(batch, length)`.
        prompt_attention: float array `(batch, layers x heads, length)`.
        mask: bool array `(batch, length)`.

    Returns:
        float64 array `(batch,)`.
    """
    log_likelihoods, mask = checked_per_token(mask, log_likelihoods=log_likelihoods)
    attention = np.asarray(prompt_attention, np.float64)
    if attention.ndim != 3 or attention.shape[::2] != mask.shape:
        raise ValueError(
            "`prompt_attention` must have shape (batch, layers x heads, length) matching "
            f"`mask` {mask.shape}; got {attention.shape}."
        )
    weights = np.where(mask, attention.mean(axis=1), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = weights / weights.sum(axis=1, keepdims=True)
        scores = -np.where(mask, log_likelihoods * weights, 0.0).sum(axis=1)
    return np.where(mask.any(axis=1), scores, np.nan)
