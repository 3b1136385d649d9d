"""A keras-hub task's head, one copy per member: what a method that puts
members into a whole keras-hub classifier does after its backbone.

keras-hub's classifiers end in a few `Dense` layers after their backbone
(BERT's `output_dense`; RoBERTa's `pooled_dense` and `output_dense`; a
ViT's optional `intermediate_layer`), with the family's own pooling
between. `member_heads_network` keeps that graph as the family wrote it
and gives every one of those `Dense` layers a kernel per member
(`GroupedDense` on member-major rows), so that the rows of member `m`
go through member `m`'s head, whatever the family.
"""

import keras
import numpy as np

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model


def member_head(dense, num_members, reuse_head):
    """A member-major `GroupedDense` with `dense`'s units, activation and
    initializers: each member a copy of `dense`'s kernel and bias
    (`reuse_head=True`), or initialized on its own (`False`). A quantized
    `dense` is refused (its kernel is not the float one)."""
    if getattr(dense, "quantization_mode", None) is not None:
        raise ValueError(
            f"The classifier's head layer '{dense.name}' is quantized "
            f"({dense.quantization_mode}); convert the float classifier, then quantize "
            "the ensemble."
        )
    head = GroupedDense(
        dense.units,
        num_members,
        activation=dense.activation,
        use_bias=dense.use_bias,
        kernel_initializer=dense.kernel_initializer,
        bias_initializer=dense.bias_initializer,
        member_layout="member_major",
        dtype=dense.dtype_policy,
        name=f"{dense.name}_members",
    )
    head.build((None, int(dense.kernel.shape[0])))
    if reuse_head:
        kernel = keras.ops.convert_to_numpy(dense.kernel)
        head.kernel.assign(np.broadcast_to(kernel, tuple(head.kernel.shape)))
        if dense.use_bias:
            bias = keras.ops.convert_to_numpy(dense.bias)
            head.bias.assign(np.broadcast_to(bias, tuple(head.bias.shape)))
    return head


def member_heads_network(task, num_members, reuse_head=True):
    """`task`'s graph with a head per member.

    Args:
        task: a built functional keras-hub task (a `backbone` attribute
            and a graph from its inputs to its outputs). Its layers are
            shared with the result, not copied; its `Dense` layers after
            the backbone, which the result does not run, are frozen.
        num_members: int.
        reuse_head: bool, see `member_head`.

    Returns:
        `(network, heads)`: a functional model that takes member-major
        rows `(members * batch, ...)` of `task`'s inputs and runs `task`'s
        graph on them, every `Dense` layer outside `task.backbone`
        replaced by its `member_head`; and those heads, in graph order.

    Raises:
        TypeError, ValueError: see `logits_layer` (a functional keras-hub
            task whose output is its last `Dense` layer's logits).
    """
    logits_layer(task)
    heads = []

    def replace(layer):
        if type(layer) is keras.layers.Dense:
            heads.append(member_head(layer, num_members, reuse_head))
            # `task` keeps the layer (its architecture), the network runs
            # the member heads: frozen, it takes no gradient.
            layer.trainable = False
            return heads[-1]
        return layer

    network = keras.models.clone_model(task, clone_function=replace)
    # The new functional model holds the task's layers: it takes its policy.
    network.dtype_policy = task.dtype_policy
    return network, heads


def member_rows_classifier(model, num_members, reuse_head, dtype=None, adopt=False):
    """What a method that puts members into a whole keras-hub classifier
    starts from.

    Args:
        model: a built keras-hub classifier returning logits.
        num_members: int.
        reuse_head: bool, see `member_head`.
        dtype: optional dtype policy of the copy (`own_wrapped_model`).
        adopt: bool, hold `model` itself (what `from_config` passes).

    Returns:
        `(input_spec, num_classes, copy, network, heads)`: `model`'s inputs
        and class count (`member_io_shapes`), the copy of `model` the
        method changes in place (`model` is not changed), and
        `member_heads_network(copy, ...)`.
    """
    input_spec, num_classes = member_io_shapes(model)
    copy = own_wrapped_model(model, dtype, copy=True, adopt=adopt)
    network, heads = member_heads_network(copy, num_members, reuse_head)
    return input_spec, num_classes, copy, network, heads


def head_features(task):
    """`(features, head)`: a functional model from `task`'s inputs to what
    its last `Dense` layer reads (the pooled embedding, after the family's
    own pooling and any hidden head layer, also those of a nested
    `Sequential` head such as VGG's), and that `Dense` layer, whose output
    is `task`'s logits (`logits_layer`)."""
    nested = _nested_head(task)
    if nested is None:
        head = logits_layer(task)
        return keras.Model(task.input, head.input, name=f"{task.name}_features"), head
    # A nested `Sequential` head ending in the logits `Dense` (VGG's): the
    # features are its other layers' output on what the task passes it.
    node, head = nested
    x = node.input_tensors[0]
    for layer in node.operation.layers[:-1]:
        x = layer(x)
    return keras.Model(task.input, x, name=f"{task.name}_features"), head


def _nested_head(task):
    """`(node, dense)` when `task`'s output comes from a nested
    `keras.Sequential` (its call's node in the task's graph) whose last
    layer is a linear float `Dense`; else `None`."""
    outputs = getattr(task, "outputs", None) or []
    if len(outputs) != 1:
        return None
    history = outputs[0]._keras_history
    sequential = history.operation
    if not isinstance(sequential, keras.Sequential) or not sequential.layers:
        return None
    dense = sequential.layers[-1]
    linear = (None, keras.activations.linear)
    if type(dense) is not keras.layers.Dense or dense.activation not in linear:
        return None
    if dense.quantization_mode is not None:
        return None
    return sequential._inbound_nodes[history.node_index], dense


def logits_layer(task):
    """The `Dense` layer whose output is `task`'s output: its logits.

    Raises:
        TypeError: `task` is not a functional keras-hub task.
        ValueError: `task`'s output is not a linear `Dense` layer's (an
            activation after the logits, or a nested model's output), or
            that layer is quantized.
    """
    backbone = getattr(task, "backbone", None)
    outputs = getattr(task, "outputs", None) or []
    if not isinstance(backbone, keras.Model) or len(outputs) != 1:
        raise TypeError(
            "The model must be a keras-hub task (a classifier with a `backbone`, e.g. "
            f"`keras_hub.models.RobertaTextClassifier`); got {type(task).__name__}."
        )
    head = outputs[0]._keras_history.operation
    if isinstance(head, keras.Model):
        raise ValueError(
            f"The model's logits come from the nested model '{head.name}' "
            f"({type(head).__name__}; VGG's classifier head is one): the methods that read "
            "or replace a classifier's logits layer need it at the classifier's top level."
        )
    if type(head) is not keras.layers.Dense or head.activation not in (
        None,
        keras.activations.linear,
    ):
        raise ValueError(
            f"The model's output comes from {type(head).__name__} '{head.name}'; its last "
            "layer must be a `Dense` layer returning logits (build the classifier with "
            "`activation=None`)."
        )
    if head.quantization_mode is not None:
        raise ValueError(
            f"The classifier's head layer '{head.name}' is quantized "
            f"({head.quantization_mode}); convert the float classifier."
        )
    return head
