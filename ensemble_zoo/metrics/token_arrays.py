"""Array checks and masked reductions shared by lm-polygraph's estimators
(`white_box_estimators`, `distribution_estimators`,
`similarity_estimators`, `sampled_answer_estimators`): `(batch, length,
...)` arrays with a bool `mask` `(batch, length)` of the tokens that
count, and `(batch, samples, ...)` arrays of sampled answers."""

import numpy as np


def log_softmax(x):
    """`log_softmax` over the last axis in float64 (`-inf` entries stay
    `-inf`)."""
    top = np.max(x, axis=-1, keepdims=True)
    shifted = x - np.where(np.isfinite(top), top, 0.0)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def masked_mean(per_token, mask):
    """The mean of `per_token` `(batch, length)` over each row's counted
    tokens; NaN for a row with none."""
    count = mask.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(mask, per_token, 0.0).sum(axis=1) / count
    return np.where(count > 0, mean, np.nan)


def first_counted(mask):
    """True at each row's first counted token."""
    first = np.zeros_like(mask)
    rows = np.flatnonzero(mask.any(axis=1))
    first[rows, np.argmax(mask[rows], axis=1)] = True
    return first


def all_but_last_counted(mask):
    """`mask` without each row's last counted token."""
    last = np.zeros_like(mask)
    rows = np.flatnonzero(mask.any(axis=1))
    last[rows, mask.shape[1] - 1 - np.argmax(mask[rows, ::-1], axis=1)] = True
    return mask & ~last


def checked_mask(mask):
    """`mask` as a bool `(batch, length)` array, or a `ValueError`."""
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.dtype != bool:
        raise ValueError(
            f"`mask` must be a bool array (batch, length); got dtype {mask.dtype} and "
            f"shape {mask.shape}."
        )
    return mask


def checked_array(x, name, ndim, dtype="float64"):
    """`x` as an array of `ndim` axes: real numbers as `dtype`, or with
    `dtype="bool"` a bool array; a `ValueError` naming `name` otherwise."""
    x = np.asarray(x)
    if x.ndim != ndim:
        raise ValueError(f"`{name}` must have {ndim} axes; got shape {x.shape}.")
    if dtype == "bool":
        if x.dtype != bool:
            raise ValueError(f"`{name}` must be a bool array; got dtype {x.dtype}.")
        return x
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"`{name}` must hold real numbers; got dtype {x.dtype}.")
    return x.astype(dtype)


def check_same_shapes(**arrays):
    """A `ValueError` naming the arrays unless they share one shape."""
    shapes = {name: np.shape(x) for name, x in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"These arrays must have one shape: {shapes}.")


def checked_distributions(log_probs, mask):
    """`(log_probs, mask)`: float64 log-probabilities `(batch, length,
    vocabulary)` without NaN or `+inf` at counted tokens, and the mask."""
    mask = checked_mask(mask)
    log_probs = np.asarray(log_probs, np.float64)
    if log_probs.ndim != 3 or log_probs.shape[:2] != mask.shape:
        raise ValueError(
            "`log_probs` must have shape (batch, length, vocabulary) matching `mask` "
            f"{mask.shape}; got {log_probs.shape}."
        )
    if np.isnan(log_probs[mask]).any() or (log_probs[mask] == np.inf).any():
        raise ValueError("`log_probs` has NaN or +inf values at counted tokens.")
    return log_probs, mask


def checked_per_token(mask, **arrays):
    """The named `(batch, length)` float arrays, checked against `mask`,
    then the mask."""
    mask = checked_mask(mask)
    out = []
    for name, value in arrays.items():
        value = np.asarray(value, np.float64)
        if value.shape != mask.shape:
            raise ValueError(
                f"`{name}` must have shape (batch, length) = {mask.shape} as `mask`; "
                f"got {value.shape}."
            )
        if np.isnan(value[mask]).any():
            raise ValueError(f"`{name}` has NaN values at counted tokens.")
        out.append(value)
    return out + [mask]


def checked_tokens(tokens, mask, vocabulary):
    """Token ids `(batch, length)` within the vocabulary at counted
    tokens (0 elsewhere)."""
    tokens = np.asarray(tokens)
    if tokens.shape != mask.shape or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"`tokens` must be an int array of shape (batch, length) = {mask.shape}; "
            f"got dtype {tokens.dtype} and shape {tokens.shape}."
        )
    if tokens[mask].size and (tokens[mask].min() < 0 or tokens[mask].max() >= vocabulary):
        raise ValueError(f"`tokens` must be ids in [0, {vocabulary}) at counted tokens.")
    return np.where(mask, tokens, 0)
