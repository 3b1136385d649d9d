"""Checks of the per-token outputs `ez.metrics.sequence_uncertainty`
reads (`generate(..., return_uncertainty=True)`'s dict): shapes, masks
and the optional groups, each error naming the key and what it expects."""

import numpy as np

from ensemble_zoo.utils.validation import is_integer

#: The keys of the recorded attention weights, all or none.
ATTENTION_KEYS = ("member_self_attention", "attention_layers", "attention_score_layer")


def checked_attention(outputs, mask, num_members):
    """`(member_self_attention, attention score's index among the
    recorded layers, vocabulary size or None)`, or `None` where `outputs`
    holds no attention."""
    if "member_self_attention" not in outputs:
        return None
    missing = [k for k in ATTENTION_KEYS if k not in outputs]
    if missing:
        raise ValueError(f"`outputs` has `member_self_attention` but lacks {missing}.")
    attention = np.asarray(outputs["member_self_attention"], np.float64)
    layers = [int(x) for x in np.ravel(outputs["attention_layers"])]
    score_layer = int(outputs["attention_score_layer"])
    if (
        attention.ndim != 5
        or attention.shape[:2] != (mask.shape[0], num_members)
        or attention.shape[2] != len(layers)
        or attention.shape[-1] != mask.shape[1]
    ):
        raise ValueError(
            "`outputs['member_self_attention']` must have shape (batch, members, layers, "
            f"heads, length) with {num_members} members, {len(layers)} layers "
            f"(`attention_layers`) and `generated_mask` {mask.shape}; got {attention.shape}."
        )
    if score_layer not in layers:
        raise ValueError(
            f"`outputs['attention_score_layer']` ({score_layer}) must be one of "
            f"`attention_layers` {layers}."
        )
    vocabulary_size = outputs.get("vocabulary_size")
    if vocabulary_size is not None:
        if not is_integer(vocabulary_size) or int(vocabulary_size) < 2:
            raise ValueError(
                f"`outputs['vocabulary_size']` must be an int >= 2; got {vocabulary_size!r}."
            )
        vocabulary_size = int(vocabulary_size)
    return attention, layers.index(score_layer), vocabulary_size


def checked_eliciting(outputs, mask, num_members):
    """`member_eliciting_attention` as float64, or `None` where absent."""
    if "member_eliciting_attention" not in outputs:
        return None
    attention = np.asarray(outputs["member_eliciting_attention"], np.float64)
    if (
        attention.ndim != 4
        or attention.shape[:2] != (mask.shape[0], num_members)
        or (attention.shape[-1] != mask.shape[1])
    ):
        raise ValueError(
            "`outputs['member_eliciting_attention']` must have shape (batch, members, "
            f"layers x heads, length) with {num_members} members and `generated_mask` "
            f"{mask.shape}; got {attention.shape}."
        )
    return attention


def checked_outputs(outputs, required, optional):
    if not isinstance(outputs, dict):
        raise TypeError(
            "`outputs` must be the dict that `generate(..., return_uncertainty=True)` "
            f"returns; got {type(outputs).__name__}."
        )
    missing = [k for k in required if k not in outputs]
    if missing:
        raise ValueError(
            f"`outputs` lacks {missing}: pass the dict of `generate(..., "
            "return_uncertainty=True)` (or of `score_uncertainty` with a `generated_mask`)."
        )
    mask = np.asarray(outputs["generated_mask"])
    if mask.ndim != 2 or mask.dtype != bool:
        raise ValueError(
            "`outputs['generated_mask']` must be a bool array (batch, length); "
            f"got dtype {mask.dtype} and shape {mask.shape}."
        )
    arrays = {}
    present = [k for k in optional if k in outputs]
    for name in tuple(required[1:]) + tuple(present):
        value = np.asarray(outputs[name], np.float64)
        per_member = name.startswith("member_")
        expected = 3 if per_member else 2
        if (
            value.ndim != expected
            or value.shape[0] != mask.shape[0]
            or value.shape[-1] != mask.shape[1]
        ):
            layout = "(batch, members, length)" if per_member else "(batch, length)"
            raise ValueError(
                f"`outputs['{name}']` must have shape {layout} matching "
                f"`generated_mask` {mask.shape}; got {value.shape}."
            )
        where = np.broadcast_to(mask[:, None], value.shape) if per_member else mask
        if np.isnan(value[where]).any():
            raise ValueError(f"`outputs['{name}']` has NaN values at generated tokens.")
        arrays[name] = value
    members = arrays["member_log_probs"].shape
    for name, value in arrays.items():
        if name.startswith("member_") and value.shape != members:
            raise ValueError(
                f"`outputs['member_log_probs']` and `outputs['{name}']` must have the "
                f"same shape (batch, members, length); got {members} and {value.shape}."
            )
    return mask, arrays
