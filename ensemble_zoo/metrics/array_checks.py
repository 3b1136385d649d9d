"""Input checks for the array metrics: shapes, NaNs, probability ranges.

The array metrics raise where scikit-learn raises: NaN or infinite
values, empty inputs, zero classes, probabilities outside [0, 1] or rows
that do not sum to one, complex or string arrays, fractional, NaN or
out-of-range labels. The building blocks live in
`ensemble_zoo.utils.validation`, shared with the ops and layers.
"""

import numpy as np

from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_finite
from ensemble_zoo.utils.validation import check_logits
from ensemble_zoo.utils.validation import check_nonempty_axes
from ensemble_zoo.utils.validation import check_probability_rows

_MEMBER_LAYOUT = "(samples, members, classes)"


def as_probabilities(probs, name="probs"):
    """Returns `probs` as a float64 `(samples, classes)` array, or raises."""
    probs = as_numeric_array(probs, name).astype(np.float64)
    if probs.ndim != 2:
        raise ValueError(
            f"`{name}` must have shape (samples, classes); got shape "
            f"{probs.shape}. For member outputs (samples, members, classes), "
            "combine them first with "
            "ensemble_zoo.ops.predictive_probabilities."
        )
    if probs.shape[0] == 0:
        raise ValueError(f"`{name}` is empty (shape {probs.shape}).")
    check_nonempty_axes(probs.shape, name, "(samples, classes)", {1: "class"})
    return check_probability_rows(probs, name)


def as_member_probabilities(member_outputs, from_logits=False, name="member_probs"):
    """`(samples, members, classes)` outputs as float64 probabilities: the
    softmax of logits (`from_logits=True`: finite or `-inf`, a masked
    class) or
    checked probability rows."""
    from_logits = check_bool(from_logits, "from_logits")
    member_outputs = as_numeric_array(member_outputs, name).astype(np.float64)
    if member_outputs.ndim != 3:
        raise ValueError(
            f"`{name}` must have shape {_MEMBER_LAYOUT}; got shape {member_outputs.shape}."
        )
    check_nonempty_axes(
        member_outputs.shape, name, _MEMBER_LAYOUT, {0: "sample", 1: "member", 2: "class"}
    )
    if from_logits:
        check_logits(member_outputs, name)
        shifted = member_outputs - member_outputs.max(axis=-1, keepdims=True)
        exp = np.exp(shifted)
        return exp / exp.sum(axis=-1, keepdims=True)
    return check_probability_rows(member_outputs, name)


def as_labels(labels, num_samples, num_classes, name="labels"):
    """Returns integer labels of shape `(samples,)`, or raises."""
    labels = as_numeric_array(labels, name)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or labels.shape[0] != num_samples:
        raise ValueError(
            f"`{name}` must have shape ({num_samples},) to match the "
            f"predictions; got shape {labels.shape}."
        )
    if labels.dtype.kind == "f":
        check_finite(labels, name)
        if not np.all(labels == np.round(labels)):
            raise ValueError(
                f"`{name}` must hold integer class indices; got fractional "
                f"values such as {labels[labels != np.round(labels)][0].item()!r}."
            )
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"`{name}` must lie in [0, {num_classes - 1}]; got values in "
            f"[{labels.min()}, {labels.max()}]."
        )
    return labels
