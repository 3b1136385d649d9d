import keras
import numpy as np

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.ensemble_classifier import SubclassedEnsembleClassifier
from ensemble_zoo.models.lora_ensemble import adapter_weights
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import lora_ensemble_adapters
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import BACKBONES
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.validation import check_positive_int


class LoRAEnsembleTask(SubclassedEnsembleClassifier):
    """Shared machinery of the LoRA-Ensemble image and text classifiers.

    A subclass implements `_features(tiled_inputs, training)` (the pooled
    `(members * batch, dim)` features of a member-major batch) and
    `_feature_dim()`. This class applies the adapters, owns the per-member
    heads, tiles the inputs once, and implements config, adapter saving
    and the keras-hub conversions' head copy.
    """

    def _setup(
        self,
        backbone,
        num_classes,
        num_members,
        rank,
        targets,
        lora_alpha,
        a_gain,
        dropout,
        seed,
    ):
        num_members = check_positive_int(num_members, "num_members")
        targets = check_targets(targets)
        method_config = {
            "num_members": num_members, "rank": rank, "targets": list(targets),
            "lora_alpha": lora_alpha, "a_gain": float(a_gain), "seed": seed,
        }
        if not isinstance(backbone, MethodBackbone) and lora_ensemble_adapters(backbone):
            raise ValueError(
                "`backbone` already has LoRA-Ensemble adapters; pass a plain "
                "keras-hub backbone (the classifier applies them)."
            )
        backbone = method_backbone(
            backbone, BACKBONES, method_config,
            lambda b: apply_lora_ensemble(b, **method_config),
            "already has LoRA-Ensemble adapters",
        )
        # === Layers ===
        self.backbone = backbone
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
        self.head = GroupedDense(
            check_positive_int(num_classes, "num_classes"),
            num_members,
            name="predictions",
        )
        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.rank = rank
        self.targets = targets
        self.lora_alpha = lora_alpha
        self.a_gain = float(a_gain)
        self.dropout = dropout
        self.seed = seed

    def build(self, input_shape):
        self.head.build((None, self.num_members, self._feature_dim()))
        self.built = True

    @property
    def adapters(self):
        """The `LoRAEnsembleAdapter`s, in a fixed order."""
        return lora_ensemble_adapters(self.backbone)

    def call_members(self, inputs, training=None):
        tiled = keras.tree.map_structure(
            lambda x: tile_members(x, self.num_members), inputs
        )
        features = self._features(tiled, training=training)
        features = untile_members(features, self.num_members)
        features = self.output_dropout(features, training=training)
        return self.head(features)

    def compute_output_shape(self, input_shape):
        return (None, self.num_members, self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_classes": self.num_classes,
            "num_members": self.num_members,
            "rank": self.rank,
            "targets": list(self.targets),
            "lora_alpha": self.lora_alpha,
            "a_gain": self.a_gain,
            "dropout": self.dropout,
            "seed": self.seed,
        }

    # === Adapter weights ===

    def save_adapter_weights(self, filepath):
        """Saves only what training changes: every adapter and the heads.

        A few MB instead of the whole backbone; reload them with
        `load_adapter_weights` into a model built on the same frozen
        backbone. The file is HDF5 (`.h5`), readable under every backend.
        """
        adapter_weights.save(self, filepath)

    def load_adapter_weights(self, filepath):
        """Loads weights written by `save_adapter_weights`.

        Raises a `ValueError` naming the file and the first variable that
        is missing or has the wrong shape.
        """
        adapter_weights.load(self, filepath)

    # === keras-hub conversions ===

    @classmethod
    def _from_keras_hub_parts(
        cls, backbone, head, classes, num_members, rank, num_classes, reuse_head, kwargs
    ):
        """Builds the ensemble on a copy of `backbone`; `head` is the
        classifier's `Dense` (or `None` for a bare backbone with
        `classes=None`)."""
        num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
        ensemble = cls(
            copy_model(backbone),
            num_classes,
            num_members=num_members,
            rank=rank,
            **kwargs,
        )
        if reuse_head:
            ensemble._copy_head(head)
        return ensemble

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


def resolve_head(classifier_classes, num_classes, reuse_head):
    """`(num_classes, reuse_head)` for a conversion from a keras-hub model.

    `classifier_classes` is the keras-hub classifier's number of classes,
    or `None` when converting a bare backbone.
    """
    if classifier_classes is None:
        if num_classes is None:
            raise ValueError(
                "Converting a backbone needs `num_classes` (the heads are new)."
            )
        if reuse_head:
            raise ValueError("`reuse_head=True` needs a classifier, not a backbone.")
        return num_classes, False
    if num_classes is None:
        num_classes = classifier_classes
    if reuse_head is None:
        reuse_head = num_classes == classifier_classes
    if reuse_head and num_classes != classifier_classes:
        raise ValueError(
            f"`reuse_head=True` needs num_classes={classifier_classes} (the "
            f"classifier's); got num_classes={num_classes}."
        )
    return num_classes, bool(reuse_head)


