"""The estimators of greedy answers that read more than their decode: one
more pass or model call per answer, each a cost stage of
`evaluate_generation` (`estimator_cost`).

- `prompt_free_scores`: the pointwise mutual information and its
  conditional form (`PROMPT_FREE_ESTIMATORS`), from the answers scored
  without their prompts (`prompt_free_log_probs`);
- `relevance_scores`: TokenSAR (`RELEVANCE_ESTIMATORS`), each token's
  relevance the ROUGE-L dissimilarity of the answer without it to the
  whole answer;
- `elicited_scores`: CSL (`ELICITED_ESTIMATORS`), from an eliciting
  prompt's attention (`eliciting_attention`);
- `semantic_density_scores`: semantic density of the greedy answer among
  sampled ones, with an NLI model.
"""

import numpy as np

from ensemble_zoo.evaluation.eliciting_prompt import eliciting_attention
from ensemble_zoo.evaluation.prompt_free_scoring import prompt_free_log_probs
from ensemble_zoo.metrics.lexical_similarity import rouge_l
from ensemble_zoo.metrics.sampled_answer_estimators import semantic_density
from ensemble_zoo.metrics.sampled_answer_estimators import token_sar
from ensemble_zoo.metrics.sequence_uncertainty import ELICITED_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import PROMPT_FREE_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import sequence_uncertainty
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import token_similarities

#: lm-polygraph's TokenSAR of the greedy answer (`ez.metrics.token_sar`),
#: each token's relevance from ROUGE-L (`relevance_scores`).
RELEVANCE_ESTIMATORS = ("token_sar",)


def prompt_free_scores(model, outputs):
    """`PROMPT_FREE_ESTIMATORS` of the ensemble's (or a one-member model's)
    greedy answers: `sequence_uncertainty` with `prompt_free_log_probs`."""
    scores = sequence_uncertainty({**outputs, **prompt_free_log_probs(model, outputs)})
    return {k: scores[k] for k in PROMPT_FREE_ESTIMATORS}


def relevance_scores(model, outputs):
    """`RELEVANCE_ESTIMATORS` of the greedy answers: each token's
    similarity, ROUGE-L, of the answer without it to the whole answer
    (`token_similarities`, the tokenizer's end token as the stop token)."""
    tokenizer = model.preprocessor.tokenizer
    similarity = token_similarities(model, outputs, (tokenizer.end_token_id,), rouge_l)
    return {"token_sar": token_sar(outputs["log_prob"], similarity, outputs["generated_mask"])}


def elicited_scores(model, prompts, outputs):
    """`ELICITED_ESTIMATORS` of the greedy answers where `model`'s decode
    records attention (`eliciting_attention`), else none."""
    if model._recorded_attention is None:
        return {}
    scores = sequence_uncertainty({**outputs, **eliciting_attention(model, prompts, outputs)})
    return {k: scores[k] for k in ELICITED_ESTIMATORS}


def semantic_density_scores(prompts, answers, greedy, sampled, nli):
    """`ez.metrics.semantic_density` of each greedy answer among the
    prompt's sampled answers: `nli(prompt + greedy answer, prompt +
    sample)` on each distinct sample (its first occurrence), as
    lm-polygraph's default (`ConcatGreedySemanticMatrixCalculator`, the
    forward direction) computes it."""
    contradiction = np.zeros(sampled["log_likelihoods"].shape)
    neutral = np.zeros_like(contradiction)
    distinct = np.zeros(contradiction.shape, bool)
    for i, (prompt, answer, samples) in enumerate(zip(prompts, answers, sampled["answers"])):
        seen = set()
        for j, sample in enumerate(samples):
            if sample in seen:
                continue
            seen.add(sample)
            probabilities = np.asarray(nli(prompt + answer, prompt + sample), np.float64)
            _, neutral[i, j], contradiction[i, j] = probabilities
            distinct[i, j] = True
    return semantic_density(
        greedy["log_prob"],
        greedy["generated_mask"],
        sampled["log_likelihoods"],
        sampled["generated_mask"].sum(-1),
        contradiction,
        neutral,
        distinct,
    )
