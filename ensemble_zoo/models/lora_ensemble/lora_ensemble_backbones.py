"""keras-hub ViT and BERT backbones with LoRA-Ensemble adapters."""

from types import MappingProxyType

import keras
import keras_hub

from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.method_backbone import MethodBackbone


class _LoRAEnsembleBackbone(MethodBackbone):
    method_keys = ("num_members", "rank", "targets", "lora_alpha", "a_gain", "seed", "blob")
    # Presets saved before BLoB have no `blob` in their config.
    method_defaults = MappingProxyType({"blob": None})

    def apply_method(self, **method_config):
        apply_lora_ensemble(self, **method_config)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleViTBackbone(_LoRAEnsembleBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` with LoRA-Ensemble adapters.

    What `LoRAEnsembleImageClassifier` makes of the ViT it is given
    (`apply_lora_ensemble`, frozen base weights); it takes member-major
    batches. Its class names the method in a preset's `config.json`, so
    `keras_hub.models.ImageClassifier.from_preset` finds the LoRA-Ensemble
    classifier. Build it through the classifier.

    Args:
        num_members, rank, targets, lora_alpha, a_gain, seed, blob: as in
            `apply_lora_ensemble`.
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleBertBackbone(_LoRAEnsembleBackbone, keras_hub.models.BertBackbone):
    """A `keras_hub.models.BertBackbone` with LoRA-Ensemble adapters, as
    `LoRAEnsembleTextClassifier` builds it; see `LoRAEnsembleViTBackbone`.

    Args:
        num_members, rank, targets, lora_alpha, a_gain, seed, blob: as in
            `apply_lora_ensemble`.
        **kwargs: `keras_hub.models.BertBackbone` arguments.
    """


BACKBONES = (LoRAEnsembleViTBackbone, LoRAEnsembleBertBackbone)
