"""Uncertainty and calibration metrics.

Plain functions on arrays (`accuracy`, `negative_log_likelihood`,
`brier_score`, `expected_calibration_error`) and `keras.metrics.Metric`
classes for `compile(metrics=...)`.
"""

from ensemble_zoo.metrics.classification import NLL_EPSILON
from ensemble_zoo.metrics.classification import accuracy
from ensemble_zoo.metrics.classification import brier_score
from ensemble_zoo.metrics.classification import expected_calibration_error
from ensemble_zoo.metrics.classification import negative_log_likelihood
from ensemble_zoo.metrics.ensemble_accuracy import EnsembleAccuracy
