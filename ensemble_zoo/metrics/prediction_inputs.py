"""Turns a classifier's output into what the streaming metrics need."""

import numpy as np
from keras import ops

from ensemble_zoo.ops.uncertainty import _predictive_log_probabilities
from ensemble_zoo.utils.backend import concrete_value
from ensemble_zoo.utils.validation import check_same_batch


def log_probabilities_and_labels(metric_name, y_true, y_pred, log_floor, from_logits=False):
    """Predictive log-probabilities `(batch, classes)` and int32 labels.

    `y_pred` is either member logits `(batch, members, classes)`, whose
    member softmaxes are averaged (in log space), or a 2-D
    `(batch, classes)` output: probabilities, or logits when
    `from_logits=True`. Log-probabilities are floored at `log_floor`.
    """
    y_pred = ops.convert_to_tensor(y_pred)
    rank = len(y_pred.shape)
    if rank == 3:
        log_probs = _predictive_log_probabilities(y_pred)
    elif rank == 2 and from_logits:
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
    elif rank == 2:
        log_probs = ops.log(ops.maximum(ops.cast(y_pred, "float32"), 0.0))
    else:
        raise ValueError(
            f"{metric_name} expects `y_pred` of shape (batch, members, "
            "classes) (member logits) or (batch, classes) (probabilities); "
            f"got shape {tuple(y_pred.shape)}."
        )
    log_probs = ops.maximum(ops.cast(log_probs, "float32"), log_floor)
    y_true = ops.convert_to_tensor(y_true)
    check_same_batch(y_true, y_pred)
    if is_one_hot(y_true, y_pred):
        labels = ops.cast(ops.argmax(y_true, axis=-1), "int32")
    else:
        labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
    return log_probs, labels


def is_one_hot(y_true, y_pred):
    """Whether `y_true` holds one-hot (or soft) labels `(batch, classes)`
    for `y_pred` `(batch, [members,] classes)`, read by their argmax as
    Keras' `CategoricalAccuracy` reads them; integer labels are `(batch,)`
    or `(batch, 1)`."""
    shape = tuple(getattr(y_true, "shape", ()) or ())
    classes = y_pred.shape[-1]
    return len(shape) == 2 and classes not in (None, 1) and shape[-1] == classes


def sample_weights(sample_weight, labels, dtype):
    """`(batch,)` weights, ones when `sample_weight` is None."""
    if sample_weight is None:
        return ops.ones(ops.shape(labels), dtype=dtype)
    weight = ops.cast(sample_weight, dtype)
    if len(weight.shape) == 0:
        return ops.broadcast_to(weight, ops.shape(labels))
    return ops.reshape(weight, (-1,))


def check_eager_inputs(name, y_true, y_pred, probabilities=False, ignore_class=None, one_hot=False):
    """Checks labels and predictions whose values exist now (eager calls),
    as scikit-learn checks arrays; in a compiled graph (`fit`, `evaluate`
    with `jit_compile`) nothing here runs, as for Keras' own metrics.

    Raises a `TypeError` naming the class and the argument for `None`,
    strings and complex numbers, and a `ValueError` for: an empty axis of
    `y_pred`; NaN or infinite predictions; labels that are not integer-valued, or outside
    `[0, classes)` (`classes` is `y_pred`'s last axis; `ignore_class` is
    allowed); and, with `probabilities=True` (a 2-D `y_pred` read as
    probabilities), values outside [0, 1] or rows that do not sum to 1 (a
    hint to pass `from_logits=True`).
    """
    for argument, value in (("y_true", y_true), ("y_pred", y_pred)):
        if value is None:
            raise TypeError(f"{name}: `{argument}` must be an array; got None.")
        if isinstance(value, np.ndarray) and value.dtype.kind not in "iubf":
            raise TypeError(
                f"{name}: `{argument}` must hold real numbers; got dtype {value.dtype}."
            )
    predictions = concrete_value(y_pred)
    if predictions is not None and predictions.dtype.kind not in "f":
        raise TypeError(
            f"{name}: `y_pred` must hold floating-point values; got dtype {predictions.dtype}."
        )
    if predictions is not None and 0 in predictions.shape:
        raise ValueError(
            f"{name}: `y_pred` must be non-empty on every axis (batch, members, "
            f"classes); got shape {predictions.shape}."
        )
    if predictions is not None and predictions.dtype.kind == "f":
        # Logits may be -inf (a masked class); probabilities are finite.
        invalid = np.isnan(predictions) | np.isposinf(predictions)
        if probabilities:
            invalid |= np.isneginf(predictions)
        bad = int(invalid.sum())
        if bad:
            raise ValueError(f"{name}: `y_pred` holds {bad} NaN or infinite values.")
        if probabilities:
            rows = predictions.sum(axis=-1)
            if predictions.min() < 0 or predictions.max() > 1 or np.abs(rows - 1).max() > 1e-3:
                raise ValueError(
                    f"{name} reads a 2-D `y_pred` as probabilities, but its rows "
                    f"are not distributions (values in [{predictions.min():.3g}, "
                    f"{predictions.max():.3g}], row sums up to "
                    f"{np.abs(rows - 1).max() + 1:.3g}). For logits pass "
                    "`from_logits=True`."
                )
    labels = concrete_value(y_true)
    if labels is None or np.size(labels) == 0:
        return
    classes = y_pred.shape[-1]
    if is_one_hot(labels, y_pred) and not one_hot:
        raise ValueError(
            f"{name}: `y_true` of shape {labels.shape} looks one-hot; it takes "
            "integer class labels of shape (batch,): pass "
            "`np.argmax(y_true, axis=-1)`."
        )
    if is_one_hot(labels, y_pred):
        if not np.isfinite(labels).all() or labels.min() < 0:
            raise ValueError(
                f"{name}: one-hot `y_true` {labels.shape} must hold finite, non-negative values."
            )
        labels = np.argmax(labels, axis=-1)
    if labels.dtype.kind == "f":
        if not np.isfinite(labels).all() or not np.all(labels == np.round(labels)):
            bad = labels[~np.isfinite(labels) | (labels != np.round(labels))].ravel()[0]
            raise ValueError(
                f"{name}: `y_true` must hold integer class labels; got {bad.item()!r}."
            )
    elif labels.dtype.kind not in "iub":
        raise ValueError(
            f"{name}: `y_true` must hold integer class labels; got dtype {labels.dtype}."
        )
    outside = (labels < 0) | (labels >= classes)
    if ignore_class is not None:
        outside &= labels != ignore_class
    if classes is not None and outside.any():
        raise ValueError(
            f"{name}: `y_true` labels must lie in [0, {classes}) (the classes "
            f"of `y_pred`); got {labels[outside].ravel()[0].item()!r}."
        )
