"""ensemble_zoo: efficient ensembles and uncertainty for Keras 3 transformers.

One fused forward pass for all ensemble members, the same code on JAX,
TensorFlow and PyTorch, presets that load offline with `from_preset`.
"""

__version__ = "0.1.0"

from ensemble_zoo import calibration
from ensemble_zoo import datasets
from ensemble_zoo import evaluation
from ensemble_zoo import layers
from ensemble_zoo import losses
from ensemble_zoo import metrics
from ensemble_zoo import models
from ensemble_zoo import ops
from ensemble_zoo import presets
from ensemble_zoo import pruning
