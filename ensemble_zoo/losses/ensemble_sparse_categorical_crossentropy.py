import keras
from keras import ops

from ensemble_zoo.metrics.prediction_inputs import check_eager_inputs
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_rank
from ensemble_zoo.utils.validation import check_same_batch
from ensemble_zoo.utils.validation import static_rank


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class EnsembleSparseCategoricalCrossentropy(keras.losses.Loss):
    """Mean over members of each member's sparse categorical cross-entropy.

    For member outputs `z` of shape `(batch, members, classes)` and integer
    labels `y` of shape `(batch,)` (or `(batch, 1)`), the per-sample loss is
    `mean_m CE(y, z[:, m])`. Per-member labels `(batch, members)` (MIMO
    training, where member `m` sees its own input) give
    `mean_m CE(y[:, m], z[:, m])`. Training every member on its own likelihood is
    what deep ensembles, Hydra, LoRA-Ensemble and the other zoo methods do;
    it is *not* the cross-entropy of the averaged prediction (which would
    couple the members and reduce their diversity).

    In eager calls, labels that are not integer-valued or outside
    `[0, classes)` (other than `ignore_class`) and NaN or infinite outputs
    raise a `ValueError`; a compiled training step does not check them.

    Because of the mean, each member's gradient is `1/M` of the gradient it
    would get if trained alone; with Adam-type optimizers (the defaults)
    this rescaling has no effect on the updates.

    Args:
        from_logits: bool. Whether `y_pred` holds logits (the zoo's model
            outputs) or probabilities. Defaults to `True`.
        ignore_class: optional int, a label value to ignore. Defaults to
            `None`.
        reduction: reduction over the batch, as for every Keras loss.
            Defaults to `"sum_over_batch_size"`.
        name: str. Defaults to `"ensemble_sparse_categorical_crossentropy"`.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo

    loss = ensemble_zoo.losses.EnsembleSparseCategoricalCrossentropy()
    logits = np.random.normal(size=(8, 3, 10)).astype("float32")
    labels = np.random.randint(0, 10, size=(8,))
    value = loss(labels, logits)
    ```
    """

    def __init__(
        self,
        from_logits=True,
        ignore_class=None,
        reduction="sum_over_batch_size",
        name="ensemble_sparse_categorical_crossentropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = check_bool(from_logits, "from_logits")
        self.ignore_class = ignore_class

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras' `Loss.__call__` converts `y_true` to the loss's float
        # dtype first (strings "1" and complex labels became numbers):
        # the eager checks see the arrays as given.
        check_eager_inputs(type(self).__name__, y_true, y_pred, ignore_class=self.ignore_class)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        check_eager_inputs(type(self).__name__, y_true, y_pred, ignore_class=self.ignore_class)
        y_pred = ops.convert_to_tensor(y_pred)
        shape = check_rank(y_pred, 3, "y_pred", "(batch, members, classes)")
        y_true = ops.convert_to_tensor(y_true)
        check_same_batch(y_true, y_pred)
        rank = static_rank(y_true)
        if rank is None:
            # TensorFlow retraced the step after labels of another rank and
            # relaxed their shape: (batch,) and (batch, 1) both flatten to
            # (batch,); anything else fails below against y_pred's batch.
            y_true = ops.reshape(y_true, (-1,))
            rank = 1
        num_members = shape[1]
        if rank == 2 and y_true.shape[-1] == num_members and num_members > 1:
            labels = y_true  # one label per member (MIMO)
        elif rank == 2 and y_true.shape[-1] == 1:
            y_true = ops.squeeze(y_true, axis=-1)
        elif rank != 1:
            raise ValueError(
                "`y_true` must hold integer class labels of shape (batch,), "
                f"(batch, 1) or (batch, members) = (batch, {num_members}); got "
                f"shape {tuple(y_true.shape)}. For "
                "one-hot labels, take their argmax first."
            )
        if static_rank(y_true) == 1:
            # Broadcast the labels to every member: (batch,) -> (batch, members).
            labels = ops.repeat(ops.expand_dims(y_true, 1), num_members, axis=1)
        # Flattened to (batch * members,) labels and 2-D logits: TensorFlow's
        # rank-2 kernel needs no runtime shape assertion (which XLA drops
        # with an "Ignoring Assert" warning for per-member label batches).
        per_member = keras.losses.sparse_categorical_crossentropy(
            ops.reshape(labels, (-1,)),
            ops.reshape(y_pred, (-1, shape[2])),
            from_logits=self.from_logits,
            ignore_class=self.ignore_class,
            axis=-1,
        )
        return ops.mean(ops.reshape(per_member, (-1, num_members)), axis=1)

    def get_config(self):
        config = super().get_config()
        config.update({"from_logits": self.from_logits, "ignore_class": self.ignore_class})
        return config
