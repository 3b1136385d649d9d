"""What the LoRA-Ensemble image and text classifiers share."""

import keras
import numpy as np

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.lora_ensemble import adapter_files
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import DEFAULT_TARGETS
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import lora_ensemble_adapters
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import BACKBONES
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.validation import check_positive_int

#: The method's arguments and their defaults.
METHOD_DEFAULTS = {
    "num_members": 8,
    "rank": 4,
    "targets": DEFAULT_TARGETS,
    "lora_alpha": None,
    "a_gain": 10.0,
    "seed": None,
}


def lora_ensemble_backbone(backbone, **given):
    """The LoRA-Ensemble backbone a classifier runs.

    Arguments left `None` are the backbone's (a `LoRAEnsembleViTBackbone` /
    `LoRAEnsembleBertBackbone`) or `METHOD_DEFAULTS`'. Returns `backbone`
    itself when it is a LoRA-Ensemble backbone built with these arguments,
    else a new one built from `backbone`'s config and weights
    (`method_backbone`); `backbone` is never changed.
    """
    config = method_arguments(backbone, BACKBONES, METHOD_DEFAULTS, **given)
    config["num_members"] = check_positive_int(config["num_members"], "num_members")
    config["rank"] = check_positive_int(config["rank"], "rank")
    config["targets"] = list(check_targets(config["targets"]))
    config["a_gain"] = float(config["a_gain"])
    if not isinstance(backbone, MethodBackbone) and lora_ensemble_adapters(backbone):
        raise ValueError(
            "`backbone` already has LoRA-Ensemble adapters; pass a plain "
            "keras-hub backbone (the classifier applies them)."
        )
    return method_backbone(backbone, BACKBONES, config, lambda b: apply_lora_ensemble(b, **config))


class LoRAEnsembleTask:
    """Behaviour shared by the LoRA-Ensemble image and text classifiers
    (no Keras base; listed before `MemberTiledClassifier`): their
    constructor (the method's arguments, documented on
    `LoRAEnsembleImageClassifier`), one head per member, the adapters,
    config, adapter saving and the keras-hub conversions' head copy."""

    method_backbone = staticmethod(lora_ensemble_backbone)

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        rank=None,
        targets=None,
        lora_alpha=None,
        a_gain=None,
        *,
        seed=None,
        **kwargs,
    ):
        super().__init__(
            backbone=backbone,
            num_classes=num_classes,
            method_arguments={
                "num_members": num_members,
                "rank": rank,
                "targets": targets,
                "lora_alpha": lora_alpha,
                "a_gain": a_gain,
                "seed": seed,
            },
            **kwargs,
        )

    def _make_head(self, backbone, num_classes, dropout):
        self.output_dropout, self.head = task_head(
            backbone, dropout, GroupedDense, num_classes, backbone.method_config["num_members"]
        )

    def _member_outputs(self, features):
        """Member-major pooled features -> member logits."""
        num_members = self.backbone.method_config["num_members"]
        x = self.output_dropout(untile_members(features, num_members))
        return member_logits(self.head(x))

    def _set_method_config(self):
        super()._set_method_config()
        self.rank = int(self.rank)
        self.targets = tuple(self.targets)
        self.a_gain = float(self.a_gain)

    @property
    def adapters(self):
        """The `LoRAEnsembleAdapter`s, in a fixed order."""
        return lora_ensemble_adapters(self.backbone)

    @property
    def method_config(self):
        """The LoRA-Ensemble arguments the backbone was built with."""
        return self.backbone.method_config

    @property
    def base_backbone_class(self):
        """The keras-hub backbone class the adapters sit on."""
        return self.backbone.base_cls()

    def get_config(self):
        return {**super().get_config(), "targets": list(self.targets)}

    # === Adapter weights ===

    def save_adapter_weights(self, filepath):
        """Saves only what training changes: every adapter and the heads.

        A few MB instead of the whole backbone; reload them with
        `load_adapter_weights` into a model built on the same frozen
        backbone. The file is HDF5 (`.h5`), readable under every backend,
        in the causal LMs' adapter format (`adapter_files`) with the heads.
        """
        adapter_files.save_adapters(self, filepath, suffix=".h5", head=self.head)

    def load_adapter_weights(self, filepath):
        """Loads weights written by `save_adapter_weights`.

        Raises a `ValueError` naming the file and the first variable that
        is missing or has the wrong shape.
        """
        adapter_files.load_adapters(self, filepath, suffix=".h5", head=self.head)

    # === keras-hub conversions ===

    @classmethod
    def from_keras_hub(
        cls, model, num_members=8, rank=4, num_classes=None, reuse_head=None, **kwargs
    ):
        """A LoRA-Ensemble on a copy of a keras-hub ViT (image classifier)
        or BERT (text classifier).

        Args:
            model: a `keras_hub.models.ViTImageClassifier` or `ViTBackbone`
                (`LoRAEnsembleImageClassifier`), a `BertTextClassifier` or
                `BertBackbone` (`LoRAEnsembleTextClassifier`). It is not
                changed.
            num_members: int. Defaults to `8`.
            rank: int. Defaults to `4`.
            num_classes: int; defaults to the classifier's. Required for a
                backbone.
            reuse_head: bool. `True` starts every member's head as a copy of
                the classifier's, so that before training (B = 0) every
                member equals `model`; `False` gives fresh heads (the
                paper's fine-tuning setting). `None` (default) reuses the
                head when `model` is a classifier with `num_classes` classes.
            **kwargs: other constructor arguments (`targets`, `lora_alpha`,
                `a_gain`, `seed`, and for a backbone `pooling`, `dropout`).

        Returns:
            A `LoRAEnsembleImageClassifier` or `LoRAEnsembleTextClassifier`.

        Raises:
            TypeError: `model` is of another family; the message points
                to `LoRAEnsembleClassifier.from_model`, which takes every
                keras-hub classifier with attention.
        """
        kwargs.update(num_members=num_members, rank=rank)
        return cls._from_keras_hub(model, num_classes, reuse_head, kwargs)

    def _copy_head(self, dense):
        """Starts every member's head as a copy of a keras `Dense` head."""
        kernel = np.asarray(keras.ops.convert_to_numpy(dense.kernel))
        bias = np.asarray(keras.ops.convert_to_numpy(dense.bias))
        if kernel.shape != tuple(self.head.kernel.shape[1:]):
            raise ValueError(
                f"The classifier's head has kernel shape {kernel.shape}; the "
                f"members need {tuple(self.head.kernel.shape[1:])}."
            )
        self.head.kernel.assign(np.broadcast_to(kernel, self.head.kernel.shape))
        self.head.bias.assign(np.broadcast_to(bias, self.head.bias.shape))
