"""Claim-conditioned probability: a token's probability counting only the
alternatives that mean the same, as lm-polygraph 0.7.0 computes it.

CCP (Fadeeva et al. 2024, "Fact-Checking the Output of Large Language
Models via Token-Level Uncertainty Quantification", arXiv 2403.04696) asks,
at every generated token, which of the model's top alternatives an NLI
model finds to entail the generated word and which to contradict it, and
keeps the probability mass of the first among both. lm-polygraph's
sequence-level `ClaimConditionedProbability` multiplies those ratios over
the tokens.
"""

import numpy as np

from ensemble_zoo.metrics.token_arrays import checked_mask

#: NLI classes, in the order an `nli(first, second)` callable returns its
#: probabilities (`sample_uncertainty(nli=...)`): its argmax is the class.
ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2


def combined_nli(forward, backward):
    """lm-polygraph's `_combine_nli` of `NLI(x, y)` and `NLI(y, x)` class
    arrays: equal classes stay; entailment against contradiction is
    neutral; entailment or contradiction against neutral wins."""
    forward, backward = np.asarray(forward), np.asarray(backward)
    strong = np.where(forward == NEUTRAL, backward, forward)
    clash = {ENTAILMENT, CONTRADICTION}
    opposed = (forward != backward) & np.isin(forward, list(clash)) & np.isin(backward, list(clash))
    return np.where(opposed, NEUTRAL, strong)


def claim_conditioned_probability(alternative_log_likelihoods, forward_nli, backward_nli, mask):
    """lm-polygraph's `ClaimConditionedProbability` (CCP, sequence level).

    At each counted token `t`, with alternatives `a` (column 0 the
    generated token, then the model's other top tokens; lm-polygraph's
    `greedy_tokens_alternatives` are the top 10 by log-probability, the
    generated one first) and their classes `c_a = combined_nli(NLI(w_0,
    w_a), NLI(w_a, w_0))` on the decoded words: `E_t` = the generated
    token and the alternatives classed entailment, `C_t` = those classed
    contradiction (neutral ones are dropped), and `ccp_t = sum_{E_t} p /
    sum_{E_t + C_t} p`. The score is `-prod_t ccp_t`, computed in log space
    (lm-polygraph's sign: higher = more uncertain, from -1 up to 0). A
    sequence with no counted token scores -1 (an empty product), as
    lm-polygraph's.

    Args:
        alternative_log_likelihoods: float array `(batch, length, k)`, the
            log-probabilities of each token's alternatives, column 0 the
            generated token's. `-inf` marks an absent alternative.
        forward_nli: int array `(batch, length, k)`, the NLI class
            (`ENTAILMENT`, `NEUTRAL`, `CONTRADICTION`) of (generated word,
            alternative word); column 0 is not read.
        backward_nli: int array `(batch, length, k)`, of (alternative word,
            generated word).
        mask: bool array `(batch, length)`, the counted tokens (lm-polygraph
            counts the end token too).

    Returns:
        float64 array `(batch,)`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.metrics import claim_conditioned_probability

    # One token: the generated word (p 0.5), a synonym (0.2), a contrary
    # word (0.3): CCP = -(0.5 + 0.2) / 1.0.
    log_p = np.log([[[0.5, 0.2, 0.3]]])
    nli = np.array([[[0, 0, 2]]])  # entailment, entailment, contradiction
    claim_conditioned_probability(log_p, nli, nli, np.ones((1, 1), bool))  # [-0.7]
    ```
    """
    mask = checked_mask(mask)
    log_p = np.asarray(alternative_log_likelihoods, np.float64)
    if log_p.ndim != 3 or log_p.shape[:2] != mask.shape or log_p.shape[2] == 0:
        raise ValueError(
            "`alternative_log_likelihoods` must have shape (batch, length, alternatives) "
            f"matching `mask` {mask.shape}; got {log_p.shape}."
        )
    if np.isnan(log_p).any() or (log_p > 0).any() or np.isneginf(log_p[..., 0][mask]).any():
        raise ValueError(
            "`alternative_log_likelihoods` must be log-probabilities (<= 0, -inf for an "
            "absent alternative, finite for the generated token at counted positions)."
        )
    classes = []
    for name, value in (("forward_nli", forward_nli), ("backward_nli", backward_nli)):
        value = np.asarray(value)
        if value.shape != log_p.shape or not np.isin(value, (0, 1, 2)).all():
            raise ValueError(
                f"`{name}` must hold NLI classes 0 (entailment), 1 (neutral) or 2 "
                f"(contradiction) in the shape of `alternative_log_likelihoods` {log_p.shape}; "
                f"got shape {value.shape}."
            )
        classes.append(value)
    nli = combined_nli(*classes)
    entailed = nli == ENTAILMENT
    entailed[..., 0] = True  # the generated token always counts
    kept = entailed | (nli == CONTRADICTION)
    with np.errstate(divide="ignore", invalid="ignore"):
        entail = np.logaddexp.reduce(np.where(entailed, log_p, -np.inf), axis=-1)
        total = np.logaddexp.reduce(np.where(kept, log_p, -np.inf), axis=-1)
        # Uncounted positions may hold no alternative (-inf - -inf).
        return -np.exp(np.where(mask, entail - total, 0.0).sum(-1))
