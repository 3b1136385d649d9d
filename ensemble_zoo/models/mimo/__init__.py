from ensemble_zoo.models.mimo.mimo_backbone import MIMOViTBackbone
from ensemble_zoo.models.mimo.mimo_batches import MIMOBatches
from ensemble_zoo.models.mimo.mimo_batches import mimo_batch
from ensemble_zoo.models.mimo.mimo_image_classifier import MIMOImageClassifier
