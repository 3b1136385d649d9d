"""The graph pieces of the classifiers whose backbone runs every member
at once along a member axis (Hydra, Packed-Ensembles, ViT-MoE / E³).

Such a backbone returns `(batch, members, tokens, dim)` (or, for text, a
dict whose `pooled_output` is `(batch, members, dim)`); the task pools
each member's tokens, applies dropout and a head, and returns member
logits `(batch, members, classes)` in float32 (`member_axis_logits`).
"""

from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_head import pool_member_tokens


def check_backbone_class(backbone, backbone_cls):
    """A `TypeError` unless `backbone` is a `backbone_cls`."""
    if not isinstance(backbone, backbone_cls):
        raise TypeError(
            f"`backbone` must be a {backbone_cls.__name__}; got {type(backbone).__name__}."
        )


def member_axis_logits(backbone, inputs, pooling, output_dropout, head, pre_logits=None):
    """The functional graph of a member-axis classifier.

    Args:
        backbone: the task's backbone, with a member axis.
        inputs: `backbone.input`.
        pooling: `"token"` (each member's class token) or `"gap"` (the
            mean of its tokens), or `None` for a backbone whose output dict
            holds a `pooled_output` `(batch, members, dim)`.
        output_dropout: the dropout layer before the head.
        head: the head: a `GroupedDense` (one per member) or a `Dense`
            shared by the members.
        pre_logits: optional layer between the pooling and the dropout
            (ViT-MoE's `pre_logits`).

    Returns:
        Float32 member logits `(batch, members, classes)`.
    """
    outputs = backbone(inputs)
    if pooling is None:
        x = outputs["pooled_output"]
    else:
        x = pool_member_tokens(outputs, pooling)  # (batch, members, dim)
    if pre_logits is not None:
        x = pre_logits(x)
    return member_logits(head(output_dropout(x)))


def member_axis_config(task):
    """The constructor arguments of a member-axis classifier `task` beyond
    keras-hub's task config: `num_classes`, `dropout` and (unless it reads
    a pooled output) `pooling`."""
    config = {"num_classes": task.num_classes, "dropout": task.dropout}
    if task.pooling is not None:
        config["pooling"] = task.pooling
    return config
