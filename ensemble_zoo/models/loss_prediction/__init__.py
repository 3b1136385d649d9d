from ensemble_zoo.models.loss_prediction.loss_prediction_image_classifier import (
    LossPredictionImageClassifier,
)
from ensemble_zoo.models.loss_prediction.embedding_cache import cache_embeddings
from ensemble_zoo.models.loss_prediction.embedding_cache import train_head_from_cache
