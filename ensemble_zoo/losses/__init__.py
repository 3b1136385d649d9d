"""Ensemble losses."""

from ensemble_zoo.losses.ensemble_sparse_categorical_crossentropy import (
    EnsembleSparseCategoricalCrossentropy,
)
