"""Generated answers scored without their prompt, for the pointwise mutual
information estimators.

lm-polygraph's `PointwiseMutualInformation` and its conditional form
subtract from each answer token's log-likelihood given the prompt,
`log p(y_t | y_<t, x)`, its log-likelihood under the same model without
the prompt, `log p(y_t | y_<t)`. lm-polygraph reads the second from one
more forward pass over the answer alone (its `GreedyLMProbsCalculator`:
the decoded answer tokenised again, so with the tokenizer's start token
in front). Here that pass is one teacher-forced forward of every member
at once over the preprocessor's tokens of the empty prompt (its start
token, where it adds one) followed by the answer's generated tokens,
`greedy_alternatives.LOGIT_BUDGET` member logits at a time (the members' log-probabilities
of the taken tokens only: none of `score_uncertainty`'s figures, whose
vocabulary-wide work would cost several times the decode's); the
ensemble's prompt-free probability is its predictive one, the members'
mean. `ez.metrics.sequence_uncertainty` reads the two arrays this
returns.
"""

import numpy as np
from keras import ops

from ensemble_zoo.evaluation.greedy_alternatives import LOGIT_BUDGET
from ensemble_zoo.utils.backend import no_gradients


def prompt_free_prefix(model):
    """The tokens an empty prompt becomes under `model`'s preprocessor
    (its start token, where it adds one); `[]` without a preprocessor."""
    if model.preprocessor is None:
        return []
    empty = model.preprocessor.generate_preprocess([""], sequence_length=8)
    ids = np.asarray(ops.convert_to_numpy(empty["token_ids"]))[0]
    mask = np.asarray(ops.convert_to_numpy(empty["padding_mask"]), bool)[0]
    return [int(token) for token in ids[mask]]


def prompt_free_log_probs(model, outputs):
    """The generated tokens' log-likelihoods without the prompt.

    Args:
        model: the `LoRAEnsembleCausalLM` that generated `outputs`.
        outputs: dict, `generate(..., return_uncertainty=True)`'s (its
            `token_ids` and `generated_mask`, one contiguous run of
            generated tokens per row).

    Returns:
        dict of float arrays aligned with `outputs['generated_mask']`:
        `prompt_free_log_prob` `(batch, length)`, the ensemble's predictive
        log-probability of each generated token given the generated
        tokens before it (and the start token), and
        `member_prompt_free_log_probs` `(batch, members, length)`, each
        member's; 0 outside the generated tokens, and at an answer's first
        token where the preprocessor adds no start token (nothing to
        condition on; the estimators subtract nothing there).

    Example:

    ```python
    import ensemble_zoo as ez

    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    out = model.generate(["12+7="], max_length=12, return_uncertainty=True)
    out.update(ez.evaluation.prompt_free_log_probs(model, out))
    ez.metrics.sequence_uncertainty(out)["pointwise_mutual_information"]
    ```
    """
    for key in ("token_ids", "generated_mask"):
        if not isinstance(outputs, dict) or key not in outputs:
            raise ValueError(
                f"`outputs` must be the dict of `generate(..., return_uncertainty=True)`; "
                f"it lacks `{key}`."
            )
    token_ids = np.asarray(outputs["token_ids"])
    mask = np.asarray(outputs["generated_mask"], bool)
    if token_ids.shape != mask.shape or token_ids.ndim != 2:
        raise ValueError(
            "`outputs['token_ids']` and `outputs['generated_mask']` must be (batch, length) "
            f"arrays of one shape; got {token_ids.shape} and {mask.shape}."
        )
    prefix = prompt_free_prefix(model)
    counts = mask.sum(axis=1)
    # One width for every call of a model's outputs: one compiled scoring.
    width = max(token_ids.shape[1], len(prefix) + int(counts.max()), 2)
    ids = np.zeros((len(mask), width), "int32")
    padding = np.zeros((len(mask), width), bool)
    ids[:, : len(prefix)] = prefix
    padding[:, : max(len(prefix), 1)] = True
    for row in range(len(mask)):
        end = len(prefix) + counts[row]
        ids[row, len(prefix) : end] = token_ids[row, mask[row]]
        padding[row, :end] = True
    scored = _taken_log_probs(model, ids, padding)  # (batch, members, width)
    ensemble = np.zeros(mask.shape, "float32")
    members = np.zeros((len(mask), model.num_members) + mask.shape[1:], "float32")
    for row in range(len(mask)):
        answer = slice(len(prefix), len(prefix) + counts[row])
        taken = scored[row][:, answer]
        mean = np.logaddexp.reduce(taken, axis=0) - np.log(model.num_members)
        ensemble[row, mask[row]] = mean
        members[row][:, mask[row]] = taken
    return {"prompt_free_log_prob": ensemble, "member_prompt_free_log_probs": members}


def _taken_log_probs(model, token_ids, padding_mask):
    """Each member's `log p(token t | tokens < t)`, float64 `(batch,
    members, length)` (position 0: 0), `LOGIT_BUDGET` member logits at a
    time, without gradients."""
    batch, length = token_ids.shape
    vocabulary = model.backbone.vocabulary_size
    rows = max(1, LOGIT_BUDGET // (model.num_members * length * vocabulary))
    out = np.zeros((batch, model.num_members, length))
    for start in range(0, batch, rows):
        part = slice(start, start + rows)
        with no_gradients():
            logits = model({"token_ids": token_ids[part], "padding_mask": padding_mask[part]})
            log_p = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)[:, :, :-1]
            taken = ops.convert_to_tensor(token_ids[part, 1:], "int32")[:, None, :, None]
            taken = ops.take_along_axis(log_p, taken, axis=-1)[..., 0]
            out[part, :, 1:] = np.asarray(ops.convert_to_numpy(taken), np.float64)
    return out
