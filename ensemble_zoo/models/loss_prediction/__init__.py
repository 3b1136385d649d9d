from ensemble_zoo.models.loss_prediction.embedding_cache import cache_embeddings
from ensemble_zoo.models.loss_prediction.embedding_cache import train_head_from_cache
from ensemble_zoo.models.loss_prediction.loss_prediction_backbone import LossPredictionModelBackbone
from ensemble_zoo.models.loss_prediction.loss_prediction_backbone import LossPredictionViTBackbone
from ensemble_zoo.models.loss_prediction.loss_prediction_image_classifier import (
    LossPredictionImageClassifier,
)
from ensemble_zoo.models.loss_prediction.token_loss_predictor import TokenLossPredictor
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(
    Method(
        name="loss_prediction",
        tasks=(LossPredictionImageClassifier, TokenLossPredictor),
        keras_hub_kwargs=dict(head_hidden_units=(4,)),
    )
)
