"""What `generate` returns, from the decode loop's arrays.

The loop hands back token ids, keras-hub's output padding mask and one
row of per-token figures per position (`token_uncertainty.FIGURES`, the
members' log-probabilities and entropies, the attached loss predictor's
prediction, then the recorded attention weights). These functions turn
them into keras-hub's return value (`strip_prompt`) and the NumPy dict of
`generate(..., return_uncertainty=True)`.
"""

import numpy as np
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import FIGURES
from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import MEMBER_FIGURES


def any_equal(inputs, values, padding_mask):
    """Whether `inputs` equals any of `values` where `padding_mask` is true."""
    output = ops.equal(inputs, values[0])
    for value in values[1:]:
        output = ops.logical_or(output, ops.equal(inputs, value))
    return ops.logical_and(output, padding_mask)


def output_padding_mask(token_ids, padding_mask, stop_token_ids):
    """keras-hub's output padding mask: everything up to and including the
    first stop token after the prompt."""
    if stop_token_ids is None:
        return ops.ones_like(token_ids, dtype="bool")
    ends = ops.cast(
        any_equal(token_ids, stop_token_ids, ops.logical_not(ops.cast(padding_mask, "bool"))),
        "int32",
    )
    overflow = ops.cumsum(ends, axis=-1) - ends
    return ops.logical_not(ops.cast(overflow, "bool"))


def strip_prompt(outputs, prompt_mask):
    """`outputs` (`token_ids`, `padding_mask`) without the prompt, as
    keras-hub's `generate(..., strip_prompt=True)` returns them: each row
    is rolled left by its prompt's length and the mask keeps the generated
    tokens only (NumPy arrays)."""
    token_ids = np.asarray(outputs["token_ids"])
    mask = np.asarray(outputs["padding_mask"]).astype(bool)
    prompt_mask = np.asarray(prompt_mask).astype(bool)
    length = token_ids.shape[1]
    shifts = prompt_mask.sum(axis=1)
    index = (np.arange(length)[None, :] + shifts[:, None]) % length
    return {
        "token_ids": np.take_along_axis(token_ids, index, axis=1),
        "padding_mask": np.logical_xor(
            np.take_along_axis(prompt_mask, index, axis=1), np.take_along_axis(mask, index, axis=1)
        ),
    }


def token_outputs(figures, valid, num_members, attention=None, vocabulary_size=None):
    """The per-position figures as a dict of `(batch, length)` arrays
    (the `MEMBER_FIGURES`: `(batch, members, length)`), zero where
    `valid` is false.

    With `attention` (the `attention_route.RecordedAttention` the decode
    loop or the teacher-forced pass recorded), the last `members x layers
    x heads` columns are its weights: `member_self_attention` `(batch,
    members, layers, heads, length)`, with the blocks it holds
    (`attention_layers`), the attention score's block
    (`attention_score_layer`) and, given, `vocabulary_size` (for RAUQ's
    entropy variant)."""
    attention_shape = None if attention is None else (len(attention.layers), attention.heads)
    width = 0 if attention is None else attention.width(num_members)
    weights = figures[..., figures.shape[-1] - width :]
    figures = np.where(valid[..., None], figures[..., : figures.shape[-1] - width], 0.0)
    figures = figures.astype("float32")
    out = {name: figures[..., i] for i, name in enumerate(FIGURES)}
    start = len(FIGURES)
    for name in MEMBER_FIGURES:
        out[name] = np.moveaxis(figures[..., start : start + num_members], -1, 1)
        start += num_members
    if figures.shape[-1] > start:
        out["loss_prediction"] = figures[..., -1]
    if width:
        weights = np.where(valid[..., None], weights, 0.0).astype("float32")
        weights = weights.reshape(weights.shape[:2] + (num_members, *attention_shape))
        out["member_self_attention"] = np.moveaxis(weights, 1, -1)
        out["attention_layers"] = np.asarray(attention.layers, "int32")
        out["attention_score_layer"] = attention.score_layer
        if vocabulary_size is not None:
            out["vocabulary_size"] = int(vocabulary_size)
    return out


def uncertainty_outputs(batch, num_members, attention=None, vocabulary_size=None):
    """The per-token and per-sequence figures of `generate(...,
    return_uncertainty=True)` from one batch's NumPy arrays
    (`prompt_mask`, `token_ids`, `padding_mask`, `figures`).

    With `attention` (the `attention_route.RecordedAttention` the decode
    loop recorded): its weights and `vocabulary_size`, as
    `token_outputs` gives them."""
    generated = np.logical_and(
        np.logical_not(batch["prompt_mask"].astype(bool)), batch["padding_mask"].astype(bool)
    )
    out = {
        "token_ids": batch["token_ids"],
        "padding_mask": batch["padding_mask"].astype(bool),
        "generated_mask": generated,
        **token_outputs(batch["figures"], generated, num_members, attention, vocabulary_size),
    }
    count = np.maximum(generated.sum(axis=1), 1)
    member_ll = out["member_log_probs"].sum(axis=-1)
    out["log_likelihood"] = out["log_prob"].sum(axis=-1)
    out["member_log_likelihoods"] = member_ll
    for name in FIGURES[: FIGURES.index("log_prob")] + ("loss_prediction",):
        if name == "max_probability" or name not in out:
            continue
        out[f"mean_{name}"] = out[name].sum(axis=-1) / count
    peak = member_ll.max(axis=1, keepdims=True)
    log_mean = np.log(np.mean(np.exp(member_ll - peak), axis=1)) + peak[:, 0]
    out["sequence_epistemic"] = np.maximum(log_mean - member_ll.mean(axis=1), 0.0)
    return out
