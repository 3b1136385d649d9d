"""The attention an eliciting prompt gives to a generated answer, for CSL.

lm-polygraph's `CSL` (Lin et al., "Contextualized Sequence Likelihood",
EMNLP 2024; `ez.metrics.contextualized_sequence_likelihood`) weighs each
answer token's log-likelihood by the attention that the last token of an
eliciting prompt gives to it: the question in a template that asks
whether the answer is right, the answer's generated tokens, then a
suffix that asks for the decision (lm-polygraph's
`AttentionElicitingPromptCalculator`: its template's few-shot examples,
the question, "Answer: ", the greedy tokens, "\\n\\nDecision:"), every layer
and head averaged. Here that is one teacher-forced pass of every member
through keras-hub's attention route (`attention_route.query_attention`),
no logits, compiled for the backend as teacher-forced scoring is, over
`ROWS_PER_PASS` sequences (fewer for a smaller batch) padded to one
length per call (a compiled program per length bucket); the template is
ours and a parameter (lm-polygraph's few-shot
template can be passed as it is, with its `{q}`).
"""

import numpy as np
from keras import ops

from ensemble_zoo.evaluation.prompt_free_scoring import prompt_free_prefix

#: The eliciting template: `{q}` is the question (the prompt as given).
CSL_TEMPLATE = (
    "Read the question and decide whether the answer answers it correctly. "
    "Reply Y or N.\nQuestion: {q}\nAnswer: "
)
#: What follows the answer's tokens (lm-polygraph's).
CSL_SUFFIX = "\n\nDecision:"
#: Sequences of one pass (the weights of a layer are `rows x members x
#: heads x length^2` values while it runs).
ROWS_PER_PASS = 16
#: The passes' length is the longest sequence's, rounded up to a multiple
#: of this (fewer compiled programs).
LENGTH_BUCKET = 32


def _tokens(tokenizer, text):
    return [int(t) for t in np.ravel(ops.convert_to_numpy(tokenizer(text)))]


def eliciting_attention(model, prompts, outputs, template=CSL_TEMPLATE, suffix=CSL_SUFFIX):
    """The weights the eliciting prompt's last token gives to each
    generated token, every layer and head.

    Args:
        model: the `LoRAEnsembleCausalLM` (with a preprocessor) that
            generated `outputs`, of a family that takes keras-hub's
            attention route (its `generate` records `member_self_attention`).
        prompts: list of strings, the prompts of `outputs`' rows.
        outputs: dict, `generate(..., return_uncertainty=True)`'s (its
            `token_ids` and `generated_mask`).
        template: str with `{q}`, the eliciting prompt before the answer.
        suffix: str, after the answer.

    Returns:
        dict with `member_eliciting_attention`, float32 `(batch, members,
        layers x heads, length)` aligned with `outputs['generated_mask']`
        (0 elsewhere), as `ez.metrics.sequence_uncertainty` reads it.

    Example:

    ```python
    import ensemble_zoo as ez

    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    prompts = ["12+7=", "3+4="]
    out = model.generate(prompts, max_length=12, return_uncertainty=True)
    out.update(ez.evaluation.eliciting_attention(model, prompts, out))
    ez.metrics.sequence_uncertainty(out)["contextualized_sequence_likelihood"]
    ```
    """
    if model.preprocessor is None:
        raise ValueError("`model` needs a preprocessor: the eliciting prompt is text.")
    if model._recorded_attention is None:
        raise ValueError(
            f"{type(model.backbone.decoder).__name__}'s attention layers do not take "
            "keras-hub's attention route: no attention weights can be read."
        )
    if not isinstance(template, str) or "{q}" not in template:
        raise ValueError(f"`template` must be a string with `{{q}}`; got {template!r}.")
    try:
        template.format(q="")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"`template` must format with `q` alone (double any other braces); got "
            f"{template!r}: {error!r}."
        ) from error
    if not isinstance(suffix, str):
        raise TypeError(f"`suffix` must be a string; got {type(suffix).__name__}.")
    if not isinstance(outputs, dict) or not {"token_ids", "generated_mask"} <= set(outputs):
        raise ValueError(
            "`outputs` must be the dict of `generate(..., return_uncertainty=True)`, with "
            "`token_ids` and `generated_mask`."
        )
    mask = np.asarray(outputs["generated_mask"], bool)
    token_ids = np.asarray(outputs["token_ids"])
    if token_ids.ndim != 2 or token_ids.shape != mask.shape:
        raise ValueError(
            "`outputs['token_ids']` and `outputs['generated_mask']` must be (batch, length) "
            f"arrays of one shape; got {token_ids.shape} and {mask.shape}."
        )
    if (
        isinstance(prompts, str)
        or len(prompts) != len(mask)
        or not all(isinstance(p, str) for p in prompts)
    ):
        raise ValueError(
            f"`prompts` must be a list of one string per row of `outputs` ({len(mask)})."
        )
    tokenizer = model.preprocessor.tokenizer
    start = prompt_free_prefix(model)
    after = _tokens(tokenizer, suffix)
    heads = model._recorded_attention.heads
    layers = len(model.backbone.transformer_layers)
    result = np.zeros((len(mask), model.num_members, layers * heads, mask.shape[1]), "float32")
    sequences = []
    for row, prompt in enumerate(prompts):
        before = start + _tokens(tokenizer, template.format(q=prompt))
        answer = [int(t) for t in token_ids[row, mask[row]]]
        sequences.append((before + answer + after, len(before), len(answer)))
    longest = max(len(ids) for ids, _, _ in sequences)
    width = -(-longest // LENGTH_BUCKET) * LENGTH_BUCKET
    limit = getattr(model.backbone, "max_sequence_length", None)  # learned positions
    if limit is not None:
        if longest > limit:
            raise ValueError(
                f"An eliciting prompt holds {longest} tokens, more than the model's "
                f"{limit} positions: pass a shorter `template`."
            )
        width = min(width, limit)
    rows = min(ROWS_PER_PASS, len(sequences))
    attend = model._query_attention_function()
    for first in range(0, len(sequences), rows):
        part = sequences[first : first + rows]
        ids = np.zeros((rows, width), "int32")
        padding = np.zeros((rows, width), bool)
        padding[:, 0] = True  # the last pass's rows past the sequences
        for i, (sequence, _, _) in enumerate(part):
            ids[i, : len(sequence)] = sequence
            padding[i, : len(sequence)] = True
        last = (padding.sum(axis=1) - 1).astype("int32")
        weights = attend(ids, padding, last)
        weights = np.asarray(ops.convert_to_numpy(weights), "float32")
        weights = weights.reshape(weights.shape[:2] + (-1, width))  # layers x heads
        for i, (_, offset, count) in enumerate(part):
            row = first + i
            result[row][..., mask[row]] = weights[i][..., offset : offset + count]
    return {"member_eliciting_attention": result}
