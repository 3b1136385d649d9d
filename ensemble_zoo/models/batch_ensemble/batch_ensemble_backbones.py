"""keras-hub ViT and BERT backbones converted to BatchEnsemble."""

import keras
import keras_hub

from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.method_backbone import MethodBackbone


class _BatchEnsembleBackbone(MethodBackbone):
    method_keys = ("num_members", "fast_weight_initializer", "fast_weight_stddev", "seed")

    def apply_method(self, **method_config):
        apply_batch_ensemble(self, **method_config)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleViTBackbone(_BatchEnsembleBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` converted to BatchEnsemble.

    What `BatchEnsembleImageClassifier` makes of the ViT it is given
    (`apply_batch_ensemble`); it takes member-major batches. Its class
    names the method in a preset's `config.json`, so
    `keras_hub.models.ImageClassifier.from_preset` finds the BatchEnsemble
    classifier. Build it through the classifier.

    Args:
        num_members, fast_weight_initializer, fast_weight_stddev, seed: as
            in `apply_batch_ensemble`.
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleBertBackbone(_BatchEnsembleBackbone, keras_hub.models.BertBackbone):
    """A `keras_hub.models.BertBackbone` converted to BatchEnsemble, as
    `BatchEnsembleTextClassifier` builds it; see `BatchEnsembleViTBackbone`.

    Args:
        num_members, fast_weight_initializer, fast_weight_stddev, seed: as
            in `apply_batch_ensemble`.
        **kwargs: `keras_hub.models.BertBackbone` arguments.
    """


BACKBONES = (BatchEnsembleViTBackbone, BatchEnsembleBertBackbone)
