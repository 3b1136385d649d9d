"""What the BatchEnsemble image and text classifiers share: the method's
defaults, its backbone, the graph, the config, members as keras-hub
models and the keras-hub conversion."""

import numpy as np
from keras import ops

from ensemble_zoo.layers.batch_ensemble_dense import BatchEnsembleDense
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import apply_batch_ensemble
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import batch_ensemble_layers
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import projection_sites
from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BACKBONES
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_tiled import from_keras_hub_parts
from ensemble_zoo.models.member_tiled import member_rows
from ensemble_zoo.models.member_tiled import members_of_rows
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.method_backbone import plain_backbone_copy
from ensemble_zoo.models.task_head import task_head
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


def batch_ensemble_head(backbone, dropout, num_classes):
    """`(output_dropout, head)`: a `BatchEnsembleDense` head whose fast
    weights continue the backbone's seeds."""
    config = backbone.method_config
    seed = config["seed"]
    return task_head(
        backbone,
        dropout,
        BatchEnsembleDense,
        num_classes,
        config["num_members"],
        fast_weight_initializer=config["fast_weight_initializer"],
        fast_weight_stddev=config["fast_weight_stddev"],
        seed=None if seed is None else seed + 2 * len(batch_ensemble_layers(backbone)),
    )


def batch_ensemble_logits(backbone, inputs, pooling, output_dropout, head):
    """The functional graph of a BatchEnsemble classifier: the backbone
    once on the member-major batch (rows of member m use `W * outer(r_m,
    s_m)` and `b_m` in every projection), the head on the same rows,
    float32 member logits `(batch, members, classes)`."""
    num_members = backbone.method_config["num_members"]
    features = member_rows(backbone, inputs, num_members, pooling)
    x = head(output_dropout(features))
    return member_logits(members_of_rows(x, num_members))


def batch_ensemble_config(task):
    """The constructor arguments of a BatchEnsemble classifier `task`
    beyond keras-hub's task config (`get_config`)."""
    config = {
        "num_classes": task.num_classes,
        "num_members": task.num_members,
        "fast_weight_initializer": task.fast_weight_initializer,
        "fast_weight_stddev": task.fast_weight_stddev,
        "seed": task.seed,
        "dropout": task.dropout,
        "member_batching": task.member_batching,
    }
    if task.pooling is not None:
        config["pooling"] = task.pooling
    return config


def set_batch_ensemble_config(task, backbone, num_classes, pooling, dropout):
    """Sets `task`'s config attributes: its arguments and the method's,
    as its backbone holds them."""
    method_config = backbone.method_config
    task.num_members = int(method_config["num_members"])
    task.num_classes = num_classes
    task.pooling = pooling
    task.dropout = dropout
    task.fast_weight_initializer = method_config["fast_weight_initializer"]
    task.fast_weight_stddev = float(method_config["fast_weight_stddev"])
    task.seed = method_config["seed"]


def batch_ensemble_member_model(task, member, plain_task):
    """Member `member` of the BatchEnsemble classifier `task` as the plain
    keras-hub task `plain_task(task, backbone)` builds (`ViTImageClassifier`
    or `BertTextClassifier`): every converted projection holds `W *
    outer(r_m, s_m)` and `b_m`."""
    if not 0 <= member < task.num_members:
        raise ValueError(f"`member` must be in [0, {task.num_members - 1}]; got {member!r}.")
    backbone = plain_backbone_copy(task.backbone)
    sites = projection_sites(backbone)
    converted = {id(w) for p, a in sites for w in getattr(p, a).weights}
    mine = {id(w) for layer in batch_ensemble_layers(task.backbone) for w in layer.weights}
    targets = [w for w in backbone.weights if id(w) not in converted]
    sources = [w for w in task.backbone.weights if id(w) not in mine]
    for target, source in zip(targets, sources, strict=True):
        if tuple(target.shape) != tuple(source.shape):
            raise RuntimeError(f"Weight order mismatch: {target.path} vs {source.path}.")
        target.assign(ops.convert_to_numpy(source))
    for (parent, attribute), layer in zip(sites, batch_ensemble_layers(task.backbone), strict=True):
        _set_member_weights(getattr(parent, attribute), layer, member)
    model = plain_task(task, backbone)
    _set_member_weights(model.output_dense, task.head, member)
    return model


def batch_ensemble_from_keras_hub(cls, parts, model, num_members, num_classes, reuse_head, kwargs):
    """`cls.from_keras_hub` (the image and text classifiers'; see
    `BatchEnsembleImageClassifier.from_keras_hub`): the task on a copy of
    `model`, the head started from the classifier's when it is reused
    (its kernel shared, its bias every member's)."""
    kwargs.setdefault("fast_weight_stddev", 0.1)
    kwargs["num_members"] = num_members
    task, dense = from_keras_hub_parts(cls, parts, model, num_classes, reuse_head, kwargs)
    if dense is not None:
        task.head.kernel.assign(ops.convert_to_numpy(dense.kernel))
        bias = np.asarray(ops.convert_to_numpy(dense.bias))
        task.head.bias.assign(np.broadcast_to(bias, task.head.bias.shape))
    return task


def _set_member_weights(target, source, member):
    """Gives a plain `Dense` / `EinsumDense` `target` the member kernel and
    bias of the `BatchEnsembleDense` `source`."""
    kernel = np.asarray(ops.convert_to_numpy(source.member_kernels()[member]))
    target.kernel.assign(kernel.reshape(tuple(target.kernel.shape)))
    bias = np.asarray(ops.convert_to_numpy(source.bias[member]))
    if getattr(target, "bias", None) is None:
        raise ValueError(f"Layer '{target.name}' has no bias to hold member {member}'s.")
    target.bias.assign(bias.reshape(tuple(target.bias.shape)))


def task_batch_ensemble_layers(task):
    """The backbone's `BatchEnsembleDense` layers, then the head."""
    return batch_ensemble_layers(task.backbone) + [task.head]
