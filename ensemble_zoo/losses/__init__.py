"""Ensemble losses."""

from ensemble_zoo.losses.ensemble_sparse_categorical_crossentropy import (
    EnsembleSparseCategoricalCrossentropy,
)
from ensemble_zoo.losses.loss_prediction_losses import LossRankingLoss
from ensemble_zoo.losses.loss_prediction_losses import pairwise_ranking_loss
from ensemble_zoo.losses.loss_prediction_losses import squared_error_loss
