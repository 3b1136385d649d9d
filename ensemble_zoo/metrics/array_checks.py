"""Input checks for the array metrics: shapes, NaNs, probability ranges."""

import numpy as np


def as_probabilities(probs, name="probs"):
    """Returns `probs` as a float64 `(samples, classes)` array, or raises."""
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise ValueError(
            f"`{name}` must have shape (samples, classes); got shape "
            f"{probs.shape}. For member outputs (samples, members, classes), "
            "combine them first with "
            "ensemble_zoo.ops.predictive_probabilities."
        )
    if probs.shape[0] == 0:
        raise ValueError(f"`{name}` is empty (shape {probs.shape}).")
    # min/max propagate NaN, so two passes check both NaN and the range.
    low, high = probs.min(), probs.max()
    if np.isnan(low) or np.isnan(high):
        raise ValueError(
            f"`{name}` contains {int(np.isnan(probs).sum())} NaN values."
        )
    if low < 0 or high > 1:
        raise ValueError(
            f"`{name}` must hold probabilities in [0, 1]; got values in "
            f"[{low:.4g}, {high:.4g}]. Pass softmax outputs, "
            "not logits."
        )
    row_sums = probs @ np.ones(probs.shape[1])  # BLAS: faster than sum
    worst = int(np.argmax(np.abs(row_sums - 1.0)))
    if abs(row_sums[worst] - 1.0) > 1e-3:
        raise ValueError(
            f"Each row of `{name}` must sum to 1; row {worst} sums to "
            f"{row_sums[worst]:.6g}."
        )
    return probs


def as_labels(labels, num_samples, num_classes, name="labels"):
    """Returns integer labels of shape `(samples,)`, or raises."""
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or labels.shape[0] != num_samples:
        raise ValueError(
            f"`{name}` must have shape ({num_samples},) to match the "
            f"predictions; got shape {labels.shape}."
        )
    if labels.dtype.kind == "f":
        if np.isnan(labels).any():
            raise ValueError(f"`{name}` contains NaN values.")
        if not np.all(labels == np.round(labels)):
            raise ValueError(f"`{name}` must hold integer class indices.")
    elif labels.dtype.kind not in "iu":
        raise ValueError(
            f"`{name}` must hold integer class indices; got dtype "
            f"{labels.dtype}."
        )
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"`{name}` must lie in [0, {num_classes - 1}]; got values in "
            f"[{labels.min()}, {labels.max()}]."
        )
    return labels
