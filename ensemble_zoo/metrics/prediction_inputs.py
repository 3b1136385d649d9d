"""Turns a classifier's output into what the streaming metrics need."""

from keras import ops

from ensemble_zoo.ops.uncertainty import _predictive_log_probabilities
from ensemble_zoo.utils.validation import check_same_batch


def log_probabilities_and_labels(
    metric_name, y_true, y_pred, log_floor, from_logits=False
):
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
    labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
    return log_probs, labels


def sample_weights(sample_weight, labels, dtype):
    """`(batch,)` weights, ones when `sample_weight` is None."""
    if sample_weight is None:
        return ops.ones(ops.shape(labels), dtype=dtype)
    weight = ops.cast(sample_weight, dtype)
    if len(weight.shape) == 0:
        return ops.broadcast_to(weight, ops.shape(labels))
    return ops.reshape(weight, (-1,))
