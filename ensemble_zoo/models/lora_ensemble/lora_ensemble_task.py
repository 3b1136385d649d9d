"""What the LoRA-Ensemble image and text classifiers share: the method's
defaults, its backbone, the graph, the config, the keras-hub conversion,
and the methods both classes take as they are (`adapters`,
`method_config`, `base_backbone_class`, `save_adapter_weights`,
`load_adapter_weights`)."""

import keras
import numpy as np

from ensemble_zoo.layers.blob_posterior import check_blob
from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.lora_ensemble import adapter_files
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import DEFAULT_TARGETS
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import lora_ensemble_adapters
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import BACKBONES
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_tiled import from_keras_hub_parts
from ensemble_zoo.models.member_tiled import member_rows
from ensemble_zoo.models.member_tiled import members_of_rows
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.utils.validation import check_positive_int

#: The method's arguments and their defaults.
METHOD_DEFAULTS = {
    "num_members": 8,
    "rank": 4,
    "targets": DEFAULT_TARGETS,
    "lora_alpha": None,
    "a_gain": 10.0,
    "seed": None,
    "blob": None,
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
    config["blob"] = check_blob(config["blob"])
    if not isinstance(backbone, MethodBackbone) and lora_ensemble_adapters(backbone):
        raise ValueError(
            "`backbone` already has LoRA-Ensemble adapters; pass a plain "
            "keras-hub backbone (the classifier applies them)."
        )
    return method_backbone(backbone, BACKBONES, config, lambda b: apply_lora_ensemble(b, **config))


def lora_ensemble_head(backbone, dropout, num_classes):
    """`(output_dropout, head)`: one `GroupedDense` head per member."""
    num_members = backbone.method_config["num_members"]
    return task_head(backbone, dropout, GroupedDense, num_classes, num_members)


def lora_ensemble_logits(backbone, inputs, pooling, output_dropout, head):
    """The functional graph of a LoRA-Ensemble classifier: the backbone
    once on the member-major batch, each member's pooled features through
    its own head, float32 member logits `(batch, members, classes)`."""
    num_members = backbone.method_config["num_members"]
    features = member_rows(backbone, inputs, num_members, pooling)
    x = output_dropout(members_of_rows(features, num_members))
    return member_logits(head(x))


def lora_ensemble_config(task):
    """The constructor arguments of a LoRA-Ensemble classifier `task`
    beyond keras-hub's task config (`get_config`)."""
    config = {
        "num_classes": task.num_classes,
        "num_members": task.num_members,
        "rank": task.rank,
        "targets": list(task.targets),
        "lora_alpha": task.lora_alpha,
        "a_gain": task.a_gain,
        "seed": task.seed,
        "blob": task.blob,
        "dropout": task.dropout,
        "member_batching": task.member_batching,
    }
    if task.pooling is not None:
        config["pooling"] = task.pooling
    return config


def set_lora_ensemble_config(task, backbone, num_classes, pooling, dropout):
    """Sets `task`'s config attributes: its arguments and the method's,
    as its backbone holds them."""
    method_config = backbone.method_config
    task.num_members = int(method_config["num_members"])
    task.num_classes = num_classes
    task.pooling = pooling
    task.dropout = dropout
    task.rank = int(method_config["rank"])
    task.targets = tuple(method_config["targets"])
    task.lora_alpha = method_config["lora_alpha"]
    task.a_gain = float(method_config["a_gain"])
    task.seed = method_config["seed"]
    task.blob = method_config["blob"]


def lora_ensemble_from_keras_hub(
    cls, parts, model, num_members, rank, num_classes, reuse_head, kwargs
):
    """`cls.from_keras_hub` (the image and text classifiers'): the task on
    a copy of `model`, every member's head started from the classifier's
    when it is reused (`copy_head_to_members`)."""
    kwargs.update(num_members=num_members, rank=rank)
    task, head = from_keras_hub_parts(cls, parts, model, num_classes, reuse_head, kwargs)
    if head is not None:
        copy_head_to_members(task.head, head)
    return task


def copy_head_to_members(grouped, dense):
    """Starts every member's kernel and bias of the `GroupedDense` head
    `grouped` as a copy of a keras `Dense` head's."""
    kernel = np.asarray(keras.ops.convert_to_numpy(dense.kernel))
    bias = np.asarray(keras.ops.convert_to_numpy(dense.bias))
    if kernel.shape != tuple(grouped.kernel.shape[1:]):
        raise ValueError(
            f"The classifier's head has kernel shape {kernel.shape}; the "
            f"members need {tuple(grouped.kernel.shape[1:])}."
        )
    grouped.kernel.assign(np.broadcast_to(kernel, grouped.kernel.shape))
    grouped.bias.assign(np.broadcast_to(bias, grouped.bias.shape))


# === Methods of both classifiers (assigned in their class bodies) ===


def task_adapters(task):
    """The `LoRAEnsembleAdapter`s, in a fixed order."""
    return lora_ensemble_adapters(task.backbone)


def task_method_config(task):
    """The LoRA-Ensemble arguments the backbone was built with."""
    return task.backbone.method_config


def task_base_backbone_class(task):
    """The keras-hub backbone class the adapters sit on."""
    return task.backbone.base_cls()


def save_adapter_weights(task, filepath):
    """Saves only what training changes: every adapter and the heads.

    A few MB instead of the whole backbone; reload them with
    `load_adapter_weights` into a model built on the same frozen
    backbone. The file is HDF5 (`.h5`), readable under every backend,
    in the causal LMs' adapter format (`adapter_files`) with the heads.
    """
    adapter_files.save_adapters(task, filepath, suffix=".h5", head=task.head)


def load_adapter_weights(task, filepath):
    """Loads weights written by `save_adapter_weights`.

    Raises a `ValueError` naming the file and the first variable that
    is missing or has the wrong shape.
    """
    adapter_files.load_adapters(task, filepath, suffix=".h5", head=task.head)
