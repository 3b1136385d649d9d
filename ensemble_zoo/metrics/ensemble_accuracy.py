import keras
from keras import ops

from ensemble_zoo.metrics.prediction_inputs import check_eager_inputs
from ensemble_zoo.metrics.prediction_inputs import sample_weights
from ensemble_zoo.ops.uncertainty import _predictive_log_probabilities
from ensemble_zoo.utils.validation import check_same_batch
from ensemble_zoo.utils.validation import static_rank


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class EnsembleAccuracy(keras.metrics.Metric):
    """Accuracy of the ensemble's averaged prediction, for `compile()`.

    Accepts per-member logits `(batch, members, classes)` (the output of
    every zoo classifier), whose member softmaxes are averaged, or
    predictive probabilities `(batch, classes)`. Labels are integer class
    indices `(batch,)` or `(batch, 1)`. With per-member labels `(batch,
    members)` (MIMO training, each member on its own input) it is the mean
    over members of each member's accuracy on its own labels. Eager calls
    check their values (`prediction_inputs.check_eager_inputs`: integer
    labels in `[0, classes)`, finite predictions); a compiled step does
    not.

    Args:
        name: str. Defaults to `"accuracy"`.
        dtype: the metric's dtype.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo

    metric = ensemble_zoo.metrics.EnsembleAccuracy()
    logits = np.random.normal(size=(8, 3, 10)).astype("float32")
    metric.update_state(np.random.randint(0, 10, size=(8,)), logits)
    metric.result()
    ```
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        check_eager_inputs("EnsembleAccuracy", y_true, y_pred)
        y_pred = ops.convert_to_tensor(y_pred)
        rank = len(y_pred.shape)
        if rank == 3:
            scores = _predictive_log_probabilities(y_pred)
        elif rank == 2:
            scores = y_pred
        else:
            raise ValueError(
                "EnsembleAccuracy expects `y_pred` of shape (batch, members, "
                f"classes) or (batch, classes); got shape {tuple(y_pred.shape)}."
            )
        y_true = ops.convert_to_tensor(y_true)
        check_same_batch(y_true, y_pred)
        members = y_pred.shape[1] if rank == 3 else None
        if static_rank(y_true) == 2 and members and members > 1 and y_true.shape[-1] == members:
            predicted = ops.argmax(y_pred, axis=-1)  # (batch, members)
            matches = ops.mean(
                ops.cast(
                    ops.equal(ops.cast(y_true, "int32"), ops.cast(predicted, "int32")), self.dtype
                ),
                axis=1,
            )
        else:
            y_true = ops.reshape(y_true, (-1,))
            predicted = ops.argmax(scores, axis=-1)
            matches = ops.cast(
                ops.equal(ops.cast(y_true, "int32"), ops.cast(predicted, "int32")), self.dtype
            )
        weight = sample_weights(sample_weight, matches, self.dtype)
        matches = matches * weight
        total = ops.sum(weight)
        self.correct.assign_add(ops.sum(matches))
        self.count.assign_add(total)

    def result(self):
        return ops.divide_no_nan(self.correct, self.count)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)
