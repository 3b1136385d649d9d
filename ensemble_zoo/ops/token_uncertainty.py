"""Token-level uncertainty of an ensemble of language models.

At each position of a sequence, every member `m` gives a next-token
distribution `p_m` over the vocabulary; the ensemble predicts their mean
`p̄ = mean_m p_m`. The figures below are the token-level measures of
Malinin & Gales, "Uncertainty estimation in autoregressive structured
prediction" (ICLR 2021, arXiv:2002.07650), section 3, in nats:

- `total = H[p̄]`, the entropy of the predictive distribution;
- `aleatoric = mean_m H[p_m]`, the expected member entropy (their "data
  uncertainty");
- `epistemic = mean_m KL(p_m || p̄)`, the mutual information between the
  next token and the member. It equals `total - aleatoric`, but that
  difference of two entropies loses float32 precision over a 256k-token
  vocabulary, so it is summed here directly, term by term;
- `expected_pairwise_kl = mean_m mean_m' KL(p_m || p_m')`, the paper's
  EPKL, with `m` and `m'` drawn independently (so pairs `m == m'` count,
  with divergence 0): this is the definition under which their identity
  `EPKL = MI + RMI` holds exactly. Computed as
  `mean_m sum_v p_m (log p_m - mean_m' log p_m')`;
- `reverse_mutual_information = mean_m KL(p̄ || p_m)`, the paper's RMI;
- `max_probability = max_v p̄`, the ensemble's most probable token;
- `member_entropy`, each member's entropy `H[p_m]`.

With one member `epistemic`, `expected_pairwise_kl` and
`reverse_mutual_information` are exactly 0. Every figure is computed in
float32 whatever the dtype of the logits (a log-softmax in bfloat16 is off
by tenths of a nat over a large vocabulary), and rounding below zero is
clipped at 0 for the three divergences. A member that gives a token
probability 0 (a `-inf` logit) where another does not makes
`reverse_mutual_information` and `expected_pairwise_kl` infinite, as the
divergences are.

The causal-LM decode loop calls the unchecked `token_figures_from_log_probs`
at each generated position; `token_uncertainty` is the same computation on
arrays, for member logits from any model.
"""

import math

import keras
from keras import ops

from ensemble_zoo.ops.distribution_figures import DISTRIBUTION_FIGURES
from ensemble_zoo.ops.distribution_figures import distribution_figures
from ensemble_zoo.ops.uncertainty import _xlogy
from ensemble_zoo.ops.uncertainty import checked_member_tensor
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import as_tensor
from ensemble_zoo.utils.validation import check_logits

#: The per-position figures of one distribution per member, in the order
#: the decode loop records them.
TOKEN_FIGURES = (
    "total",
    "aleatoric",
    "epistemic",
    "expected_pairwise_kl",
    "reverse_mutual_information",
    "max_probability",
)

_LAYOUT = "(batch, members, tokens, vocabulary)"


def token_uncertainty(member_logits, tokens=None):
    """Token-level uncertainty figures of an ensemble of language models.

    Args:
        member_logits: float tensor `(batch, members, tokens, vocabulary)`,
            each member's next-token logits at each position (`-inf` marks
            a token a member rules out).
        tokens: optional int tensor `(batch, tokens)`, the token taken at
            each position (the generated or the reference one). With it the
            result also holds `log_prob`, the token's log-probability under
            the ensemble, and `member_log_probs`, under each member.

    Returns:
        dict of float32 tensors `(batch, tokens)`: `total`, `aleatoric`,
        `epistemic`, `expected_pairwise_kl`, `reverse_mutual_information`
        (nats; see the module docstring for the formulas) and
        `max_probability`; `member_entropy` is `(batch, members, tokens)`.
        Higher means more uncertain for every figure but `max_probability`
        and `log_prob`.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    member_logits = np.random.normal(size=(2, 4, 5, 100)).astype("float32")
    figures = ez.ops.token_uncertainty(member_logits)
    figures["expected_pairwise_kl"].shape  # (2, 5)
    # EPKL = mutual information + reverse mutual information
    ```
    """
    x, shape, values = checked_member_tensor(member_logits, _LAYOUT, {1: "member", 3: "vocabulary"})
    if values is not None:
        check_logits(values, "member_logits")
    log_p = vocabulary_log_softmax(x)
    figures = token_figures_from_log_probs(log_p)
    if tokens is None:
        return figures
    tokens = _checked_tokens(tokens, shape)
    figures.update(token_log_probs(log_p, tokens))
    return figures


def vocabulary_log_softmax(logits):
    """`log_softmax` over the last axis, in float32 whatever the input's
    dtype, accurate over a large vocabulary.

    Computed as `z - max(z) - log(sum(exp(z - max(z))))` with Keras' sum,
    which every backend reduces pairwise: over 262,144 logits it stays
    within 2e-6 of float64 on JAX, TensorFlow and PyTorch, where
    `torch.log_softmax` (torch 2.13, CPU, float32) is 1.4e-5 off and the
    figures summed from it up to 8e-5.
    """
    z = ops.cast(logits, "float32")
    shifted = z - ops.stop_gradient(ops.amax(z, axis=-1, keepdims=True))
    return shifted - ops.log(ops.sum(ops.exp(shifted), axis=-1, keepdims=True))


def token_figures_from_log_probs(log_p, log_weights=None):
    """`token_uncertainty`'s figures from member log-probabilities
    `(batch, members, ..., vocabulary)` (float32, members on axis 1),
    unchecked: the form compiled code calls. Returns a dict of
    `(batch, ...)` tensors, and `member_entropy` `(batch, members, ...)`.

    `log_weights`: optional `(batch, members, ...)`, the log of member
    weights `pi_m` that sum to one over the members (default: uniform,
    `1 / M`). The figures are then those of the mixture `sum_m pi_m p_m`:
    total `H[p_w]`, aleatoric `sum_m pi_m H[p_m]`, epistemic
    `sum_m pi_m KL(p_m || p_w)`, EPKL `sum_m sum_m' pi_m pi_m' KL(p_m ||
    p_m')` and RMI `sum_m pi_m KL(p_w || p_m)` (still EPKL = MI + RMI).
    With the weights `P_m(y_<t) / sum_k P_k(y_<t)` of the members'
    likelihoods of the prefix these are Malinin & Gales' token-level
    figures of the expectation-of-products ensemble."""
    return mixture_figures(log_p, [log_weights])[0]


def mixture_figures(log_p, weightings, with_distances=False):
    """`token_figures_from_log_probs(log_p, w)` for each `w` of
    `weightings` (`None`: uniform), sharing the per-member work (the
    probabilities and the member entropies) between them. With
    `with_distances`, the first dict also holds the
    `ensemble_zoo.ops.distribution_figures` of the uniform mixture
    (`fisher_rao_distance`, ...; from a log-sum-exp over the members, see
    `_distances`) and of each member (`member_fisher_rao_distance`, ...
    `(batch, members, ...)`).

    Speed. The members are a static axis of a few entries, so they are
    unrolled: each member's log-probabilities are a `(rows, vocabulary)`
    matrix, the sums over members are sums of such matrices, and every
    reduction runs over the last axis of a matrix. XLA on a CPU reduced
    the 4-D `(batch, members, positions, vocabulary)` tensor over its
    member axis about 3 times slower (JAX 0.10, 4 members of a
    262,144-token vocabulary: 0.51 s for the figures of 16 positions
    against 0.17 s unrolled; eager PyTorch 0.68 s against 0.24 s). The
    per-member terms of each divergence are summed over the members at
    each token, then over the vocabulary: the same terms, summed in
    another order.
    """
    shape = tuple(log_p.shape)
    num_members, vocabulary = int(shape[1]), shape[-1]
    leading = (-1,) + tuple(shape[2:-1])  # (batch, ...)
    members = [ops.reshape(log_p[:, m], (-1, vocabulary)) for m in range(num_members)]
    probabilities = [ops.exp(x) for x in members]
    member_entropy = [-ops.sum(_xlogy(p, x), axis=-1) for p, x in zip(probabilities, members)]

    def unflatten(x):
        return ops.reshape(x, leading)

    out = []
    for log_weights in weightings:
        if log_weights is None:
            weights = [1.0 / num_members] * num_members
            # log of the members' mean probability, from the
            # probabilities: -inf only where every member's probability is
            # 0 in float32, where every term below is 0 as well.
            log_mean = ops.log(_weighted_sum(weights, probabilities))
        else:
            log_w = [ops.reshape(log_weights[:, m], (-1, 1)) for m in range(num_members)]
            weights = [ops.exp(x) for x in log_w]
            log_mean = _logsumexp([x + w for x, w in zip(members, log_w)])
        p_mean = ops.exp(log_mean)
        mean_log_p = _weighted_sum(weights, members)
        # KL(p_m || p_w) and the EPKL term, summed term by term: over the
        # members at each token, then over the vocabulary (one reduction
        # per figure rather than one per member).
        mutual = _weighted_sum(
            weights, [_xlogy(p, x - log_mean) for p, x in zip(probabilities, members)]
        )
        pairwise = _weighted_sum(
            weights, [_xlogy(p, x - mean_log_p) for p, x in zip(probabilities, members)]
        )
        row_weights = [w if isinstance(w, float) else w[:, 0] for w in weights]

        def over_vocabulary(x):
            return unflatten(ops.sum(x, axis=-1))

        out.append(
            {
                "total": -over_vocabulary(_xlogy(p_mean, log_mean)),
                "aleatoric": unflatten(_weighted_sum(row_weights, member_entropy)),
                "epistemic": ops.maximum(over_vocabulary(mutual), 0.0),
                "expected_pairwise_kl": ops.maximum(over_vocabulary(pairwise), 0.0),
                "reverse_mutual_information": ops.maximum(
                    over_vocabulary(_xlogy(p_mean, log_mean - mean_log_p)), 0.0
                ),
                # Keras' torch `max` breaks dynamo.
                "max_probability": unflatten(ops.amax(p_mean, axis=-1)),
                "member_entropy": ops.stack([unflatten(h) for h in member_entropy], axis=1),
            }
        )
        if with_distances and len(out) == 1:
            out[0].update(_distances(members, unflatten))
    return out


def _distances(members, unflatten):
    """The distances from uniform of the uniform mixture and of each
    member (rows flattened), unflattened.

    The mixture's log-probabilities are `logsumexp_m log p_m - log M`
    here, not the log of the mean probability that the other figures
    use: that is `-inf` in float32 where every member's log-probability
    is below about -103 (harmless where it is multiplied by the
    probability 0, not in `uniform_divergence`, a mean of
    log-probabilities over the vocabulary)."""
    ensemble = distribution_figures(_logsumexp(members) - math.log(len(members)))
    per_member = [distribution_figures(x) for x in members]
    out = {}
    for name in DISTRIBUTION_FIGURES:
        out[name] = unflatten(ensemble[name])
        out["member_" + name] = ops.stack([unflatten(d[name]) for d in per_member], axis=1)
    return out


def _weighted_sum(weights, values):
    total = weights[0] * values[0]
    for w, x in zip(weights[1:], values[1:]):
        total = total + w * x
    return total


def _logsumexp(values):
    """`log sum_i exp(values[i])`, elementwise over a list of tensors of
    one shape (`-inf` where every entry is `-inf`)."""
    top = values[0]
    for x in values[1:]:
        top = ops.maximum(top, x)
    top = ops.stop_gradient(ops.where(ops.isinf(top), ops.zeros_like(top), top))
    total = ops.exp(values[0] - top)
    for x in values[1:]:
        total = total + ops.exp(x - top)
    return top + ops.log(total)


def token_log_probs(log_p, tokens):
    """The log-probability of `tokens` `(batch, ...)` under the ensemble
    (`log_prob`, `(batch, ...)`) and under each member (`member_log_probs`,
    `(batch, members, ...)`), from member log-probabilities
    `(batch, members, ..., vocabulary)`; unchecked."""
    index = ops.expand_dims(ops.cast(tokens, "int32"), -1)
    member_index = ops.broadcast_to(ops.expand_dims(index, 1), tuple(ops.shape(log_p)[:-1]) + (1,))
    member_log_probs = ops.take_along_axis(log_p, member_index, axis=-1)[..., 0]
    # log mean_m p_m(token), from the members' M values only.
    return {"log_prob": ensemble_log_probs(member_log_probs), "member_log_probs": member_log_probs}


def ensemble_log_probs(log_p):
    """`log mean_m p_m` from member log-probabilities (members on axis 1,
    static; unrolled as in `mixture_figures`)."""
    num_members = int(log_p.shape[1])
    return _logsumexp([log_p[:, m] for m in range(num_members)]) - math.log(num_members)


def _checked_tokens(tokens, shape):
    tokens = as_tensor(tokens, "tokens")
    dtype = keras.backend.standardize_dtype(tokens.dtype)
    if "int" not in dtype:
        raise TypeError(f"`tokens` must hold integer token ids; got dtype {dtype}.")
    if tuple(tokens.shape) != (shape[0], shape[2]):
        raise ValueError(
            f"`tokens` must have shape (batch, tokens) = {(shape[0], shape[2])} to "
            f"match `member_logits` {tuple(shape)}; got {tuple(tokens.shape)}."
        )
    values = backend_utils.concrete_value(tokens)
    if values is not None and values.size and (values.min() < 0 or values.max() >= shape[3]):
        raise ValueError(
            f"`tokens` must be ids in [0, {shape[3]}) (the vocabulary of "
            f"`member_logits`); got values in [{values.min()}, {values.max()}]."
        )
    return tokens
