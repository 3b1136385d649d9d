"""Sequence-level uncertainty of generated text, from per-token figures.

`sequence_uncertainty` turns the per-token arrays that a causal-LM
ensemble's `generate(..., return_uncertainty=True)` returns (or
`score_uncertainty` on given text, with a `generated_mask` added) into one
score per sequence for each estimator. Every score is oriented the same
way: **higher means more uncertain**, so each can be given to
`answer_auroc`, `prediction_rejection_ratio` or `aurc` as it is.

Which tokens count: the generated ones (`generated_mask`), which include
the end-of-sequence token when the model emitted one, as lm-polygraph
counts it (its greedy log-likelihoods and token entropies keep the
position of the end token; the decoded text drops it). The prompt and the
padding after the end token do not count.

Single-model baselines, for the ensemble's predictive distribution or,
with `member=m`, for one member alone (lm-polygraph's definitions):

- `maximum_sequence_probability`: `-sum_t log p(y_t)`, minus the
  sequence's log-likelihood;
- `perplexity`: `-mean_t log p(y_t)`, the log of the perplexity (what
  lm-polygraph's `Perplexity` returns);
- `mean_token_entropy` and `max_token_entropy`: the mean and the maximum
  over tokens of the entropy of the next-token distribution;
- `fisher_rao`, `renyi_negentropy` and `self_certainty`: lm-polygraph's
  `FisherRao`, `RenyiNeg` and `SelfCertainty`, minus the mean over tokens
  of the next-token distribution's distance from the uniform one that the
  decode loop records (`fisher_rao_distance`, `renyi_divergence`,
  `uniform_divergence`, `ensemble_zoo.ops.distribution_figures`); the
  same numbers as `ez.metrics.fisher_rao`, `renyi_negentropy` and
  `self_certainty` on the whole distributions, at their defaults,
  wherever the log-probabilities are finite (keras-hub's models');
- `boosted_probability`: lm-polygraph's `BoostedProbSequence`, minus the
  mean over tokens of the taken token's boosted probability that the
  decode loop records (`ensemble_zoo.ops.distribution_figures`), as
  `ez.metrics.boosted_probability` on the whole distributions.

These four are given when `outputs` holds their per-token arrays (what
`generate` and `score_uncertainty` return).

Attention estimators, given when `outputs` holds the attention weights
that the decode loop records (`member_self_attention`,
`attention_layers`, `attention_score_layer`: the families whose
attention layers take keras-hub's attention route, decoded with a loop
sampler), for one member with `member=m`, or for the ensemble:

- `rauq`: lm-polygraph's `RAUQ` at its defaults (`ez.metrics.rauq`,
  alpha 0.2) over the recorded layers (lm-polygraph's);
- `rauq_entropy`: its entropy variant (`use_entropy=True`, alpha 0.8:
  the confidence recursion on `log V - H_t` in place of the token's
  probability), where `outputs` holds `vocabulary_size`;
- `attention_score`: lm-polygraph's `AttentionScore(gen_only=True)`
  (`ez.metrics.attention_score`) at layer `L // 2`, over the generated
  tokens but the last (the prompt's own attention is not recorded, so
  lm-polygraph's default `gen_only=False` is out of reach).

For the ensemble (our definitions; lm-polygraph has none): each head's
attention is the members' mean weight, RAUQ's token probability the
ensemble's predictive probability (its entropy the predictive entropy);
and `rauq_mutual_information` reads each member's RAUQ as a confidence
that its answer is right, `c_m = exp(1 - rauq_m)` (the smallest over
RAUQ's layers of the geometric mean of the token confidences, in `(0,
1]`), and scores the members' disagreement about it, the mutual
information of a Bernoulli ensemble: `H(mean_m c_m) - mean_m H(c_m)`
with `H(c) = -c log c - (1 - c) log(1 - c)` (0 for one member, or when
the members agree).

Prompt-free estimators, given when `outputs` holds the log-likelihoods
of the generated tokens scored without the prompt (`prompt_free_log_prob`
`(batch, length)` and `member_prompt_free_log_probs` `(batch, members,
length)`, as `ez.evaluation.prompt_free_log_probs` adds them), for one
member or for the ensemble (its predictive distribution with and without
the prompt):

- `pointwise_mutual_information`: lm-polygraph's
  `MeanPointwiseMutualInformation` (`ez.metrics.pointwise_mutual_information`);
- `conditional_pointwise_mutual_information`: its
  `MeanConditionalPointwiseMutualInformation` at its defaults
  (`ez.metrics.conditional_pointwise_mutual_information`, tau 0.0656,
  lambda 3.599), with the next-token entropy given the prompt.

CSL, given when `outputs` holds the attention an eliciting prompt's last
token gives to the generated tokens (`member_eliciting_attention`
`(batch, members, layers x heads, length)`, as
`ez.evaluation.eliciting_attention` adds it), for one member or for the
ensemble (ours: the members' mean weights and the ensemble's predictive
log-likelihoods):

- `contextualized_sequence_likelihood`: lm-polygraph's `CSL`
  (`ez.metrics.contextualized_sequence_likelihood`).

Ensemble measures (Malinin & Gales, "Uncertainty estimation in
autoregressive structured prediction", arXiv:2002.07650), normalised by
the number of tokens `L` as in the paper:

- product of expectations (the ensemble predicts `mean_m p_m` at each
  token), their chain-rule estimates, the token figures averaged over the
  sequence: `pe_total`, `pe_data` (expected member entropy),
  `pe_mutual_information`, `pe_expected_pairwise_kl` and
  `pe_reverse_mutual_information` (`pe_expected_pairwise_kl =
  pe_mutual_information + pe_reverse_mutual_information`);
- expectation of products (the ensemble predicts `mean_m P_m(y)` for the
  whole sequence, so at each token the members weigh by their likelihood
  of the answer so far), their chain-rule estimates from the `ep_*` token
  figures: `ep_total`, `ep_data`, `ep_mutual_information`,
  `ep_expected_pairwise_kl`, `ep_reverse_mutual_information`; and their
  Monte-Carlo estimates from the one generated sequence, from the
  members' sequence log-likelihoods `l_m`: `ep_mc_total =
  -log(mean_m exp(l_m)) / L` and `ep_mc_reverse_mutual_information =
  (log(mean_m exp(l_m)) - mean_m l_m) / L` (>= 0). (lm-polygraph's
  `EPStu` scores `-mean_m exp(l_m)` over beams instead, without the
  length normalisation.)

With one member, every mutual information, pairwise KL and reverse
mutual information is exactly 0.
"""

import numpy as np

from ensemble_zoo.metrics.generation_output_checks import checked_attention
from ensemble_zoo.metrics.generation_output_checks import checked_eliciting
from ensemble_zoo.metrics.generation_output_checks import checked_outputs
from ensemble_zoo.metrics.token_arrays import all_but_last_counted
from ensemble_zoo.metrics.white_box_estimators import attention_score
from ensemble_zoo.metrics.white_box_estimators import conditional_pointwise_mutual_information
from ensemble_zoo.metrics.white_box_estimators import contextualized_sequence_likelihood
from ensemble_zoo.metrics.white_box_estimators import pointwise_mutual_information
from ensemble_zoo.metrics.white_box_estimators import rauq
from ensemble_zoo.utils.validation import is_integer

#: The estimators of one model's distribution (the ensemble's or a member's).
SINGLE_MODEL_ESTIMATORS = (
    "maximum_sequence_probability",
    "perplexity",
    "mean_token_entropy",
    "max_token_entropy",
    "fisher_rao",
    "renyi_negentropy",
    "self_certainty",
    "boosted_probability",
)
#: The estimators that average a per-token figure of the decode loop ->
#: that figure (the sign flipped: higher = more uncertain).
FIGURE_ESTIMATORS = {
    "fisher_rao": "fisher_rao_distance",
    "renyi_negentropy": "renyi_divergence",
    "self_certainty": "uniform_divergence",
    "boosted_probability": "boosted_probability",
}
#: The estimators of the recorded attention weights, given where
#: `outputs` holds them (`rauq_entropy` where it holds `vocabulary_size`).
ATTENTION_ESTIMATORS = ("rauq", "rauq_entropy", "attention_score")
#: The ensemble's own attention estimator (`member=None` only).
ENSEMBLE_ATTENTION_ESTIMATORS = ("rauq_mutual_information",)
#: The estimators of the answers scored without their prompt, given where
#: `outputs` holds those log-likelihoods.
PROMPT_FREE_ESTIMATORS = (
    "pointwise_mutual_information",
    "conditional_pointwise_mutual_information",
)
_PROMPT_FREE = ("prompt_free_log_prob", "member_prompt_free_log_probs")
#: The estimator of an eliciting prompt's attention, given where `outputs`
#: holds it.
ELICITED_ESTIMATORS = ("contextualized_sequence_likelihood",)
#: The estimators that need the members (`member=None` only).
ENSEMBLE_ESTIMATORS = (
    "pe_total",
    "pe_data",
    "pe_mutual_information",
    "pe_expected_pairwise_kl",
    "pe_reverse_mutual_information",
    "ep_total",
    "ep_data",
    "ep_mutual_information",
    "ep_expected_pairwise_kl",
    "ep_reverse_mutual_information",
    "ep_mc_total",
    "ep_mc_reverse_mutual_information",
)
_MEASURES = {
    "total": "total",
    "data": "aleatoric",
    "mutual_information": "epistemic",
    "expected_pairwise_kl": "expected_pairwise_kl",
    "reverse_mutual_information": "reverse_mutual_information",
}
#: Sequence estimator -> the per-token figure it averages.
_CHAIN_RULE = {
    **{f"pe_{name}": figure for name, figure in _MEASURES.items()},
    **{f"ep_{name}": f"ep_{figure}" for name, figure in _MEASURES.items()},
}
_REQUIRED = ("generated_mask", "log_prob", "member_log_probs", "member_entropy") + tuple(
    _CHAIN_RULE.values()
)
_FIGURES = tuple(FIGURE_ESTIMATORS.values())
_OPTIONAL = _FIGURES + tuple("member_" + k for k in _FIGURES) + _PROMPT_FREE


def sequence_uncertainty(outputs, member=None):
    """One uncertainty score per sequence for each estimator.

    Args:
        outputs: dict of arrays, as `generate(..., return_uncertainty=True)`
            returns it: `generated_mask` `(batch, length)`, the per-token
            `log_prob`, `total`, `aleatoric`, `epistemic`,
            `expected_pairwise_kl`, `reverse_mutual_information` and their
            `ep_*` versions `(batch, length)`, and `member_log_probs`,
            `member_entropy`
            `(batch, members, length)`; optionally the per-token figures
            of `FIGURE_ESTIMATORS` (and their `member_` versions), the
            recorded attention weights (`member_self_attention`,
            `attention_layers`, `attention_score_layer`, and
            `vocabulary_size`), the prompt-free log-likelihoods
            (`prompt_free_log_prob`, `member_prompt_free_log_probs`) and
            an eliciting prompt's attention (`member_eliciting_attention`).
            Values outside `generated_mask` are ignored.
        member: optional int. `None` (default): the ensemble's estimators
            (`SINGLE_MODEL_ESTIMATORS` on its predictive distribution,
            `ATTENTION_ESTIMATORS`, `PROMPT_FREE_ESTIMATORS` and
            `ELICITED_ESTIMATORS` where given, and `ENSEMBLE_ESTIMATORS` and
            `ENSEMBLE_ATTENTION_ESTIMATORS`). An index `m`: the
            single-model, attention, prompt-free and elicited estimators
            of member `m` alone.

    Returns:
        dict of float64 arrays `(batch,)`, one per estimator named in the
        module docstring, higher = more uncertain; NaN for a sequence with
        no generated token.

    Example:

    ```python
    import ensemble_zoo as ez
    import keras_hub
    import numpy as np

    gemma = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(
            vocabulary_size=50, num_layers=1, num_query_heads=2,
            num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8,
        ),
        preprocessor=None,
    )
    ensemble = ez.models.LoRAEnsembleCausalLM.from_keras_hub(gemma, num_members=3, rank=2)
    prompt = {"token_ids": np.array([[1, 5, 7, 0, 0]]),
              "padding_mask": np.array([[1, 1, 1, 0, 0]], bool)}
    out = ensemble.generate(prompt, stop_token_ids=None, return_uncertainty=True)
    scores = ez.metrics.sequence_uncertainty(out)
    scores["pe_mutual_information"], scores["perplexity"]
    ```
    """
    mask, arrays = checked_outputs(outputs, _REQUIRED, _OPTIONAL)
    attention = checked_attention(outputs, mask, arrays["member_log_probs"].shape[1])
    num_members = arrays["member_log_probs"].shape[1]
    prompt_free = all(k in arrays for k in _PROMPT_FREE)
    elicited = checked_eliciting(outputs, mask, num_members)
    if not prompt_free and any(k in arrays for k in _PROMPT_FREE):
        raise ValueError(f"`outputs` must hold both of {_PROMPT_FREE} or neither.")
    if member is not None:
        if not is_integer(member) or not 0 <= member < num_members:
            raise ValueError(
                f"`member` must be None or a member index in [0, {num_members}); got {member!r}."
            )
        scores = _single_model(
            arrays["member_log_probs"][:, member],
            arrays["member_entropy"][:, member],
            mask,
            {k: arrays["member_" + k][:, member] for k in _FIGURES if "member_" + k in arrays},
        )
        if attention is not None:
            scores.update(
                _attention_scores(
                    attention[0][:, member],
                    attention[1:],
                    arrays["member_log_probs"][:, member],
                    arrays["member_entropy"][:, member],
                    mask,
                )
            )
        if prompt_free:
            scores.update(
                _prompt_free_scores(
                    arrays["member_log_probs"][:, member],
                    arrays["member_prompt_free_log_probs"][:, member],
                    arrays["member_entropy"][:, member],
                    mask,
                )
            )
        if elicited is not None:
            scores["contextualized_sequence_likelihood"] = contextualized_sequence_likelihood(
                arrays["member_log_probs"][:, member], elicited[:, member], mask
            )
        return scores
    scores = _single_model(
        arrays["log_prob"], arrays["total"], mask, {k: arrays[k] for k in _FIGURES if k in arrays}
    )
    if attention is not None:
        scores.update(
            _attention_scores(
                attention[0].mean(axis=1), attention[1:], arrays["log_prob"], arrays["total"], mask
            )
        )
        members = [
            _attention_scores(
                attention[0][:, m], attention[1:], arrays["member_log_probs"][:, m], None, mask
            )["rauq"]
            for m in range(num_members)
        ]
        scores["rauq_mutual_information"] = _bernoulli_mutual_information(
            np.exp(1.0 - np.stack(members, axis=1))
        )
    if prompt_free:
        scores.update(
            _prompt_free_scores(
                arrays["log_prob"], arrays["prompt_free_log_prob"], arrays["total"], mask
            )
        )
    if elicited is not None:
        scores["contextualized_sequence_likelihood"] = contextualized_sequence_likelihood(
            arrays["log_prob"], elicited.mean(axis=1), mask
        )
    length = mask.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, figure in _CHAIN_RULE.items():
            scores[name] = np.where(mask, arrays[figure], 0.0).sum(axis=1) / length
        member_ll = np.where(mask[:, None], arrays["member_log_probs"], 0.0).sum(axis=2)
        peak = member_ll.max(axis=1)
        log_ep = peak + np.log(np.mean(np.exp(member_ll - peak[:, None]), axis=1))
        scores["ep_mc_total"] = -log_ep / length
        rmi = np.maximum(log_ep - member_ll.mean(axis=1), 0.0)  # 0 for one member
        scores["ep_mc_reverse_mutual_information"] = rmi / length
    for name in scores:
        scores[name] = np.where(length > 0, scores[name], np.nan)
    return scores


def _single_model(log_probs, entropies, mask, distances):
    length = mask.sum(axis=1)
    nll = -np.where(mask, log_probs, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = {
            "maximum_sequence_probability": nll,
            "perplexity": nll / length,
            "mean_token_entropy": np.where(mask, entropies, 0.0).sum(axis=1) / length,
            "max_token_entropy": np.where(mask, entropies, -np.inf).max(axis=1),
        }
        for name, figure in FIGURE_ESTIMATORS.items():
            if figure in distances:
                scores[name] = -np.where(mask, distances[figure], 0.0).sum(axis=1) / length
    return {k: np.where(length > 0, v, np.nan) for k, v in scores.items()}


def _attention_scores(attention, where, log_probs, entropies, mask):
    """RAUQ (and, with `entropies` and a vocabulary size, its entropy
    variant) and the attention score of one model's attention weights
    `(batch, layers, heads, length)` (each position holding the weight
    that the step which generated its token gave to the step's own
    position); `where`: the attention score's index among the layers and
    the vocabulary size or `None`."""
    score_layer, vocabulary_size = where
    layers = range(attention.shape[1])
    self_attention = np.roll(attention[:, score_layer], -1, axis=-1)  # the token's own step
    scores = {
        "rauq": rauq(attention, log_probs, mask, layers=layers),
        "attention_score": np.where(
            mask.any(axis=1), attention_score(self_attention, all_but_last_counted(mask)), np.nan
        ),
    }
    if entropies is not None and vocabulary_size is not None:
        scores["rauq_entropy"] = rauq(
            attention,
            log_probs,
            mask,
            layers=layers,
            entropies=np.where(mask, entropies, 0.0),
            vocabulary_size=vocabulary_size,
        )
    return scores


def _bernoulli_mutual_information(confidences):
    """`H(mean_m c_m) - mean_m H(c_m)` of confidences `(batch, members)`."""

    def entropy(c):
        c = np.clip(c, 0.0, 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            terms = -c * np.log(c) - (1.0 - c) * np.log1p(-c)
        return np.where((c > 0.0) & (c < 1.0), terms, 0.0)

    information = entropy(confidences.mean(axis=1)) - entropy(confidences).mean(axis=1)
    return np.where(np.isnan(confidences).any(axis=1), np.nan, np.maximum(information, 0.0))


def _prompt_free_scores(log_probs, prompt_free_log_probs, entropies, mask):
    """The pointwise mutual information and its conditional form of one
    model's log-likelihoods with and without the prompt."""
    scores = {
        "pointwise_mutual_information": pointwise_mutual_information(
            log_probs, np.where(mask, prompt_free_log_probs, 0.0), mask
        ),
        "conditional_pointwise_mutual_information": conditional_pointwise_mutual_information(
            log_probs, np.where(mask, prompt_free_log_probs, 0.0), entropies, mask
        ),
    }
    return {k: np.where(mask.any(axis=1), v, np.nan) for k, v in scores.items()}
