"""Streaming calibration metrics for `compile(metrics=...)`.

Each accepts the zoo classifiers' output, member logits
`(batch, members, classes)` (member softmaxes are averaged), or a 2-D
`(batch, classes)` output: predictive probabilities by default, logits with
`from_logits=True` (2-D inputs are not checked, so pass `from_logits=True`
for a plain Keras classifier that outputs logits). Labels are integer
class indices `(batch,)` or `(batch, 1)` in `[0, classes)`, or one-hot
`(batch, classes)` (read by their argmax, as Keras' `CategoricalAccuracy`
reads them). In eager calls (`update_state` on arrays) labels that are
not integer-valued or outside `[0, classes)`, NaN or `+inf` predictions
(logits may be `-inf`: a masked class), and a 2-D `y_pred` that is not
probabilities without `from_logits=True` raise a `ValueError`; inside a
compiled `fit` / `evaluate` step nothing is checked (as for Keras' own
metrics): validate the data before. They accumulate exact sums over
batches, so after a pass over
a dataset they equal the array functions of the same name (up to float32
round-off).
"""

import math

import keras
from keras import ops

from ensemble_zoo.metrics.classification import NLL_EPSILON
from ensemble_zoo.metrics.prediction_inputs import check_eager_inputs
from ensemble_zoo.metrics.prediction_inputs import log_probabilities_and_labels
from ensemble_zoo.metrics.prediction_inputs import sample_weights
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import is_integer

_LOG_FLOOR = math.log(NLL_EPSILON)


def _check(metric, y_true, y_pred):
    """Eager calls: `check_eager_inputs` (a 2-D `y_pred` is read as
    probabilities unless `from_logits`)."""
    rank = len(getattr(y_pred, "shape", ()) or ())
    check_eager_inputs(
        type(metric).__name__,
        y_true,
        y_pred,
        probabilities=rank == 2 and not metric.from_logits,
        one_hot=True,
    )


class _SumMetric(keras.metrics.Metric):
    """Weighted mean of a per-sample value over all batches seen."""

    def __init__(self, name, from_logits=False, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.from_logits = check_bool(from_logits, "from_logits")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def per_sample(self, log_probs, labels):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        _check(self, y_true, y_pred)
        log_probs, labels = log_probabilities_and_labels(
            type(self).__name__, y_true, y_pred, _LOG_FLOOR, self.from_logits
        )
        weights = sample_weights(sample_weight, labels, self.dtype)
        values = ops.cast(self.per_sample(log_probs, labels), self.dtype)
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class NegativeLogLikelihood(_SumMetric):
    """Mean negative log-likelihood of the ensemble prediction (nats).

    Probabilities are floored at `NLL_EPSILON` (1e-12), as in
    `ensemble_zoo.metrics.negative_log_likelihood`.

    Args:
        name: str. Defaults to `"nll"`.
        from_logits: bool, read a 2-D `y_pred` as logits. Defaults to
            `False` (probabilities). 3-D inputs are always member logits.
        dtype: the metric's dtype.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo

    metric = ensemble_zoo.metrics.NegativeLogLikelihood()
    logits = np.random.normal(size=(8, 3, 10)).astype("float32")
    metric.update_state(np.random.randint(0, 10, size=(8,)), logits)
    float(metric.result())
    ```
    """

    def __init__(self, name="nll", from_logits=False, dtype=None):
        super().__init__(name=name, from_logits=from_logits, dtype=dtype)

    def per_sample(self, log_probs, labels):
        one_hot = ops.one_hot(labels, ops.shape(log_probs)[-1])
        return -ops.sum(one_hot * log_probs, axis=-1)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BrierScore(_SumMetric):
    """Brier score of the ensemble prediction (summed over classes).

    Args:
        name: str. Defaults to `"brier"`.
        from_logits: bool, read a 2-D `y_pred` as logits. Defaults to
            `False` (probabilities). 3-D inputs are always member logits.
        dtype: the metric's dtype.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo

    metric = ensemble_zoo.metrics.BrierScore()
    probs = np.full((4, 5), 0.2, dtype="float32")
    metric.update_state(np.array([0, 1, 2, 3]), probs)
    float(metric.result())  # 0.8
    ```
    """

    def __init__(self, name="brier", from_logits=False, dtype=None):
        super().__init__(name=name, from_logits=from_logits, dtype=dtype)

    def per_sample(self, log_probs, labels):
        one_hot = ops.one_hot(labels, ops.shape(log_probs)[-1])
        return ops.sum(ops.square(ops.exp(log_probs) - one_hot), axis=-1)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ExpectedCalibrationError(keras.metrics.Metric):
    """Top-label ECE with equal-width bins, accumulated over batches.

    Keeps the per-bin sample count, confidence sum and accuracy sum, so
    the result over several batches is the ECE of all samples together,
    not an average of per-batch ECEs. Bins and conventions match
    `ensemble_zoo.metrics.expected_calibration_error`.

    Args:
        num_bins: int, number of equal-width bins. Defaults to `15`.
        name: str. Defaults to `"ece"`.
        from_logits: bool, read a 2-D `y_pred` as logits. Defaults to
            `False` (probabilities). 3-D inputs are always member logits.
        dtype: the metric's dtype.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo

    model = ensemble_zoo.models.EnsembleClassifier.from_preset(
        "deep_ensemble_vit_tiny_digits"
    )
    model.compile(
        metrics=[
            ensemble_zoo.metrics.EnsembleAccuracy(),
            ensemble_zoo.metrics.ExpectedCalibrationError(),
        ]
    )
    # The preset's image converter takes the raw digits (0-16).
    x, y = ensemble_zoo.datasets.load_arrays("digits", "validation", raw=True)
    model.evaluate(x, y, return_dict=True, verbose=0)
    ```
    """

    def __init__(self, num_bins=15, name="ece", from_logits=False, dtype=None):
        if not is_integer(num_bins):
            raise ValueError(f"`num_bins` must be an int; got {num_bins!r}.")
        if num_bins < 1:
            raise ValueError(f"`num_bins` must be >= 1; got {num_bins}.")
        super().__init__(name=name, dtype=dtype)
        self.num_bins = int(num_bins)
        self.from_logits = check_bool(from_logits, "from_logits")
        self.bin_count = self.add_variable(shape=(num_bins,), initializer="zeros", name="bin_count")
        self.bin_confidence = self.add_variable(
            shape=(num_bins,), initializer="zeros", name="bin_confidence"
        )
        self.bin_correct = self.add_variable(
            shape=(num_bins,), initializer="zeros", name="bin_correct"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        _check(self, y_true, y_pred)
        log_probs, labels = log_probabilities_and_labels(
            "ExpectedCalibrationError", y_true, y_pred, _LOG_FLOOR, self.from_logits
        )
        weights = sample_weights(sample_weight, labels, self.dtype)
        confidence = ops.cast(ops.exp(ops.max(log_probs, axis=-1)), self.dtype)
        predicted = ops.cast(ops.argmax(log_probs, axis=-1), "int32")
        correct = ops.cast(ops.equal(predicted, labels), self.dtype)
        bins = ops.minimum(
            ops.cast(ops.floor(confidence * self.num_bins), "int32"), self.num_bins - 1
        )
        one_hot = ops.one_hot(bins, self.num_bins, dtype=self.dtype)
        one_hot = one_hot * weights[:, None]
        self.bin_count.assign_add(ops.sum(one_hot, axis=0))
        self.bin_confidence.assign_add(ops.sum(one_hot * confidence[:, None], axis=0))
        self.bin_correct.assign_add(ops.sum(one_hot * correct[:, None], axis=0))

    def result(self):
        gaps = ops.sum(ops.abs(self.bin_correct - self.bin_confidence))
        return ops.divide_no_nan(gaps, ops.sum(self.bin_count))

    def reset_state(self):
        for variable in (self.bin_count, self.bin_confidence, self.bin_correct):
            variable.assign(ops.zeros(variable.shape, dtype=variable.dtype))

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins, "from_logits": self.from_logits}
