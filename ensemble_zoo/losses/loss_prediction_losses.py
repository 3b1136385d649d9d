"""Losses that train an uncertainty head to predict a classifier's loss."""

import keras
from keras import ops

from ensemble_zoo.utils.validation import as_tensor
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import static_shape


def _loss_pair(target_losses, predicted):
    """Both arguments as float tensors of one `(batch,)` shape, or raises."""
    target_losses = as_tensor(target_losses, "target_losses")
    predicted = as_tensor(predicted, "predicted")
    shape, other = static_shape(target_losses), static_shape(predicted)
    if (
        len(shape) != 1
        or len(other) != 1
        or (None not in (shape[0], other[0]) and shape[0] != other[0])
    ):
        raise ValueError(
            "`target_losses` and `predicted` must both have shape (batch,); "
            f"got {shape} and {other}."
        )
    check_floating(target_losses, "target_losses")
    check_floating(predicted, "predicted")
    if shape[0] == 0:
        raise ValueError(
            "`target_losses` and `predicted` are empty; the loss needs at least "
            "one pair of samples."
        )
    return target_losses, ops.cast(predicted, target_losses.dtype), shape


def pairwise_ranking_loss(target_losses, predicted, margin=0.1):
    """The pairwise ranking loss of Yoo & Kweon (2019), as "Pretrained Visual
    Uncertainties" uses it.

    The batch is split into consecutive disjoint pairs `(0, 1), (2, 3),
    ...` (shuffle the data for random pairs). For a pair with target losses
    `l1, l2` and predictions `u1, u2`, with `s = +1` if `l1 > l2` else `-1`
    (ties count as -1, as in the authors' code), the loss is
    `max(0, -s * (u1 - u2) + margin)`, averaged over pairs.

    Pretrained Visual Uncertainties writes Eq. 3 as
    `max(0, s * (u1 - u2) + m)`, which would push
    the predicted order *against* the target order; that is a sign error
    (its code and Yoo & Kweon use the form above), and we follow the code.
    The loss depends on the targets only through their order, so it is
    invariant to positive scaling of the targets, and it is 0 when every
    pair is ordered correctly with at least `margin` between predictions.

    Args:
        target_losses: `(batch,)` per-sample losses (already detached when
            they come from the model being trained).
        predicted: `(batch,)` predicted losses.
        margin: float, the hinge margin. Defaults to `0.1`.

    Returns:
        scalar tensor.

    Raises:
        ValueError: if the batch size is known and odd, or the shapes differ.
    """
    margin = check_real(margin, "margin", low=0.0)
    target_losses, predicted, shape = _loss_pair(target_losses, predicted)
    if shape[0] is not None and shape[0] % 2:
        raise ValueError(
            f"The pairwise ranking loss needs an even batch size; got {shape[0]}. "
            "Batch the data with an even size (and drop_remainder=True)."
        )
    target = ops.reshape(target_losses, (-1, 2))
    pred = ops.reshape(predicted, (-1, 2))
    return ops.mean(pair_hinge(target[:, 0], target[:, 1], pred[:, 0], pred[:, 1], margin))


def pair_hinge(loss_a, loss_b, predicted_a, predicted_b, margin):
    """Per pair, `max(0, -s * (u_a - u_b) + margin)` with `s = +1` where
    `loss_a > loss_b`, else -1 (ties count -1, as in the authors' code):
    the hinge of `pairwise_ranking_loss`, for any pairing."""
    sign = ops.cast(ops.where(loss_a > loss_b, 1.0, -1.0), predicted_a.dtype)
    return ops.relu(-sign * (predicted_a - predicted_b) + margin)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossRankingLoss(keras.losses.Loss):
    """`pairwise_ranking_loss` as a Keras loss: `y_true` are the target
    losses, `y_pred` the predicted ones (both `(batch,)`).

    Args:
        margin: float. Defaults to `0.1`.
    """

    def __init__(self, margin=0.1, name="loss_ranking", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = check_real(margin, "margin", low=0.0)

    def call(self, y_true, y_pred):
        return pairwise_ranking_loss(y_true, y_pred, self.margin)

    def get_config(self):
        config = super().get_config()
        config["margin"] = self.margin
        return config


def squared_error_loss(target_losses, predicted):
    """The vanilla loss-prediction objective (Pretrained Visual Uncertainties,
    Eq. 1):
    `mean((u - l)^2)`; not scale-free, but no pairs are needed."""
    target_losses, predicted, _ = _loss_pair(target_losses, predicted)
    return ops.mean(ops.square(predicted - target_losses))
