"""What the BatchEnsemble image and text classifiers share."""

import keras
import numpy as np
from keras import ops

from ensemble_zoo.layers.batch_ensemble_dense import BatchEnsembleDense
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import batch_ensemble_layers
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import projection_sites
from ensemble_zoo.models.ensemble_classifier import SubclassedEnsembleClassifier
from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BACKBONES
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import resolve_head
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.method_backbone import plain_backbone_copy
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


class BatchEnsembleTask(SubclassedEnsembleClassifier):
    """A keras-hub backbone converted to BatchEnsemble, plus a
    `BatchEnsembleDense` head on its pooled features.

    A subclass checks its backbone, calls `_setup`, and implements
    `_features(tiled_inputs, training)` (pooled `(members * batch, dim)`
    features), `_tile(inputs)`, `_config()` (its own constructor
    arguments) and `_plain_task(backbone)` (the keras-hub task of one
    member).
    """

    def _setup(self, backbone, num_classes, num_members, dropout,
               fast_weight_initializer, fast_weight_stddev, seed, feature_dim):
        num_members = check_positive_int(num_members, "num_members")
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(dropout, "dropout")
        method_config = {
            "num_members": num_members,
            "fast_weight_initializer": fast_weight_initializer,
            "fast_weight_stddev": float(fast_weight_stddev),
            "seed": seed,
        }
        backbone = method_backbone(
            backbone, BACKBONES, method_config,
            lambda b: apply_batch_ensemble(b, **method_config),
            "is already a BatchEnsemble",
        )
        converted = batch_ensemble_layers(backbone)
        # === Layers ===
        self.backbone = backbone
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
        self.head = BatchEnsembleDense(
            num_classes,
            num_members,
            fast_weight_initializer=fast_weight_initializer,
            fast_weight_stddev=fast_weight_stddev,
            seed=None if seed is None else seed + 2 * len(converted),
            name="predictions",
        )
        self.head.build((None, feature_dim))
        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.dropout = dropout
        self.fast_weight_initializer = fast_weight_initializer
        self.fast_weight_stddev = float(fast_weight_stddev)
        self.seed = seed

    @property
    def batch_ensemble_layers(self):
        """The backbone's `BatchEnsembleDense` layers, then the head."""
        return batch_ensemble_layers(self.backbone) + [self.head]

    def call_members(self, inputs, training=None):
        features = self._features(self._tile(inputs), training)
        features = self.output_dropout(features, training=training)
        return untile_members(self.head(features), self.num_members)

    def compute_output_shape(self, input_shape):
        return (None, self.num_members, self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            # The plain keras-hub backbone: `__init__` converts it again.
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_classes": self.num_classes,
            "num_members": self.num_members,
            "dropout": self.dropout,
            "fast_weight_initializer": self.fast_weight_initializer,
            "fast_weight_stddev": self.fast_weight_stddev,
            "seed": self.seed,
            **self._config(),
        }

    def member_model(self, member):
        """Member `member` as the plain keras-hub task (`ViTImageClassifier`
        or `BertTextClassifier`): every converted projection holds
        `W * outer(r_m, s_m)` and `b_m`.

        Useful to inspect or export one member alone; running the M member
        models one by one gives the same logits as this model (tested).
        """
        if not 0 <= member < self.num_members:
            raise ValueError(f"`member` must be in [0, {self.num_members - 1}]; got {member!r}.")
        backbone = plain_backbone_copy(self.backbone)
        sites = projection_sites(backbone)
        converted = {id(w) for p, a in sites for w in getattr(p, a).weights}
        mine = {id(w) for layer in batch_ensemble_layers(self.backbone) for w in layer.weights}
        targets = [w for w in backbone.weights if id(w) not in converted]
        sources = [w for w in self.backbone.weights if id(w) not in mine]
        for target, source in zip(targets, sources, strict=True):
            if tuple(target.shape) != tuple(source.shape):
                raise RuntimeError(f"Weight order mismatch: {target.path} vs {source.path}.")
            target.assign(ops.convert_to_numpy(source))
        for (parent, attribute), layer in zip(sites, batch_ensemble_layers(self.backbone), strict=True):
            _set_member_weights(getattr(parent, attribute), layer, member)
        model = self._plain_task(backbone)
        _set_member_weights(model.output_dense, self.head, member)
        return model

    @classmethod
    def _from_keras_hub_parts(cls, backbone, head, classes, num_members, num_classes, reuse_head, kwargs):
        kwargs.setdefault("fast_weight_stddev", 0.1)
        num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
        ensemble = cls(copy_model(backbone), num_classes, num_members=num_members, **kwargs)
        if reuse_head:
            ensemble.head.kernel.assign(ops.convert_to_numpy(head.kernel))
            bias = np.asarray(ops.convert_to_numpy(head.bias))
            ensemble.head.bias.assign(np.broadcast_to(bias, ensemble.head.bias.shape))
        return ensemble


def _set_member_weights(target, source, member):
    """Gives a plain `Dense` / `EinsumDense` `target` the member kernel and
    bias of the `BatchEnsembleDense` `source`."""
    kernel = np.asarray(ops.convert_to_numpy(source.member_kernels()[member]))
    target.kernel.assign(kernel.reshape(tuple(target.kernel.shape)))
    bias = np.asarray(ops.convert_to_numpy(source.bias[member]))
    if getattr(target, "bias", None) is None:
        raise ValueError(f"Layer '{target.name}' has no bias to hold member {member}'s.")
    target.bias.assign(bias.reshape(tuple(target.bias.shape)))
