"""What the BatchEnsemble image and text classifiers share."""

import numpy as np
from keras import ops

from ensemble_zoo.layers.batch_ensemble_dense import BatchEnsembleDense
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import batch_ensemble_layers
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import projection_sites
from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BACKBONES
from ensemble_zoo.models.head_reuse import resolve_head
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.method_backbone import plain_backbone_copy
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.validation import check_positive_int

#: The method's arguments and their defaults.
METHOD_DEFAULTS = {
    "num_members": 4,
    "fast_weight_initializer": "normal",
    "fast_weight_stddev": 0.5,
    "seed": None,
}


def batch_ensemble_backbone(backbone, **given):
    """The BatchEnsemble backbone a classifier runs.

    Arguments left `None` are the backbone's (a `BatchEnsembleViTBackbone` /
    `BatchEnsembleBertBackbone`) or `METHOD_DEFAULTS`'. Returns `backbone`
    itself when it is a BatchEnsemble backbone built with these arguments,
    else a new one built from `backbone`'s config and weights
    (`method_backbone`); `backbone` is never changed.
    """
    config = method_arguments(backbone, BACKBONES, METHOD_DEFAULTS, **given)
    config["num_members"] = check_positive_int(config["num_members"], "num_members")
    config["fast_weight_stddev"] = float(config["fast_weight_stddev"])
    if not isinstance(backbone, MethodBackbone) and batch_ensemble_layers(backbone):
        raise ValueError(
            f"`backbone` '{backbone.name}' is already a BatchEnsemble; pass a "
            "plain keras-hub backbone (the classifier converts it)."
        )
    return method_backbone(backbone, BACKBONES, config, lambda b: apply_batch_ensemble(b, **config))


class BatchEnsembleTask:
    """Behaviour shared by the BatchEnsemble image and text classifiers (no
    Keras base; listed before `MemberTiledClassifier`).

    `MemberTiledClassifier.__init__` converts the backbone
    (`batch_ensemble_backbone`); a subclass implements
    `_plain_task(backbone)` (the keras-hub task of one member).
    """

    method_backbone = staticmethod(batch_ensemble_backbone)

    def _make_head(self, backbone, num_classes, dropout):
        config = backbone.method_config
        seed = config["seed"]
        self.output_dropout, self.head = task_head(
            backbone,
            dropout,
            BatchEnsembleDense,
            num_classes,
            config["num_members"],
            fast_weight_initializer=config["fast_weight_initializer"],
            fast_weight_stddev=config["fast_weight_stddev"],
            seed=None if seed is None else seed + 2 * len(batch_ensemble_layers(backbone)),
        )

    def _member_outputs(self, features):
        """Pooled features `(members * batch, dim)` of the member-major
        batch -> float32 member logits `(batch, members, classes)`."""
        x = self.output_dropout(features)
        x = self.head(x)
        return member_logits(untile_members(x, self.backbone.method_config["num_members"]))

    def _set_method_config(self):
        config = self.backbone.method_config
        self.fast_weight_initializer = config["fast_weight_initializer"]
        self.fast_weight_stddev = float(config["fast_weight_stddev"])
        self.seed = config["seed"]

    @property
    def batch_ensemble_layers(self):
        """The backbone's `BatchEnsembleDense` layers, then the head."""
        return batch_ensemble_layers(self.backbone) + [self.head]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "fast_weight_initializer": self.fast_weight_initializer,
                "fast_weight_stddev": self.fast_weight_stddev,
                "seed": self.seed,
            }
        )
        return config

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
        for (parent, attribute), layer in zip(
            sites, batch_ensemble_layers(self.backbone), strict=True
        ):
            _set_member_weights(getattr(parent, attribute), layer, member)
        model = self._plain_task(backbone)
        _set_member_weights(model.output_dense, self.head, member)
        return model

    @classmethod
    def _from_keras_hub_parts(
        cls, backbone, head, classes, num_members, num_classes, reuse_head, kwargs
    ):
        kwargs.setdefault("fast_weight_stddev", 0.1)
        num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
        ensemble = cls(backbone, num_classes, num_members=num_members, **kwargs)
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
