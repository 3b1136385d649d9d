from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import batch_ensemble_layers
from ensemble_zoo.models.batch_ensemble.batch_ensemble_image_classifier import (
    BatchEnsembleImageClassifier,
)
from ensemble_zoo.models.batch_ensemble.batch_ensemble_text_classifier import (
    BatchEnsembleTextClassifier,
)
