"""ensemble_zoo: efficient ensembles and uncertainty for Keras 3 transformers.

One fused forward pass for all ensemble members, the same code on JAX,
TensorFlow and PyTorch, presets that load offline with `from_preset`.
"""

# keras-hub imports TensorFlow whenever it is installed, under every Keras
# backend; import both here without TensorFlow's C++ start-up lines.
from ensemble_zoo.utils.quiet_import import import_quietly as _import_quietly
from ensemble_zoo.utils.quiet_import import missing_backend_error as _missing
from ensemble_zoo.version import __version__

try:
    _import_quietly("keras", "keras_hub")
except ModuleNotFoundError as _error:
    # KERAS_BACKEND names a backend that is not installed: say which extra
    # installs it instead of Keras' 50-line traceback.
    if _missing(_error) is None:
        raise
    raise _missing(_error) from None

from ensemble_zoo import calibration
from ensemble_zoo import datasets
from ensemble_zoo import evaluation
from ensemble_zoo import export
from ensemble_zoo import layers
from ensemble_zoo import losses
from ensemble_zoo import metrics
from ensemble_zoo import models
from ensemble_zoo import ops
from ensemble_zoo import presets
from ensemble_zoo import pruning
from ensemble_zoo import training
