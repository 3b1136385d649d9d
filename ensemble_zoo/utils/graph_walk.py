"""Running a Keras functional model's graph operation by operation, as
`Functional.call` runs it, with a hook on each operation's call.

What the zoo's forward passes that treat some layers of a keras-hub model
differently use: the causal LM's training forward rematerialises its
decoder blocks (`block_remat`), and a shared trunk runs the layers that no
member differs in on one copy of the rows (`models.shared_trunk.
TrunkRows`), in a keras-hub backbone nested in a task's graph too. Every
other call of the model is Keras' own.

Checked with Keras 3.15.1: `Function._run_through_graph`,
`Functional._standardize_inputs` and `functional.operation_fn` (the
call-context arguments, `training`) are Keras' private functions; the
causal LM's blocked-loss fit test and the shared-trunk tests fail if they
change.
"""

import keras
from keras.src.models.functional import operation_fn


def is_functional(operation):
    """Whether `operation` is a Keras functional model (a graph to walk)."""
    return isinstance(operation, keras.Model) and hasattr(operation, "_run_through_graph")


def graph_operations(functional, descend):
    """The operations of `functional`'s graph in the order its call runs
    them, each once, a nested functional model for which `descend(op)` is
    true replaced by its own operations."""
    ordered, seen = [], set()
    for depth in sorted(functional._nodes_by_depth, reverse=True):
        for node in functional._nodes_by_depth[depth]:
            op = node.operation
            if not op or node.is_input or id(op) in seen:
                continue
            seen.add(id(op))
            if is_functional(op) and descend(op):
                ordered += [o for o in graph_operations(op, descend) if id(o) not in seen]
                seen.update(id(o) for o in ordered)
            else:
                ordered.append(op)
    return ordered


def walk(functional, inputs, training=None, wrap=None, descend=None):
    """`functional(inputs, training=training)` by its graph.

    Args:
        functional: a Keras functional model.
        inputs: its inputs.
        training: bool or `None`, passed to the operations that take it.
        wrap: optional callable `(operation, call) -> call`, applied to
            each operation's call.
        descend: optional callable `(operation) -> bool`: a nested
            functional model for which it is true is walked alike (called
            with its inputs only) rather than called.

    Returns:
        The model's outputs.

    Raises:
        ValueError: a nested model walked into is called with arguments
            other than its inputs and `training`.
    """

    def operation(op):
        if descend is not None and is_functional(op) and descend(op):

            def nested(inputs, **kwargs):
                given = sorted(
                    k
                    for k, v in kwargs.items()
                    if k != "training" and any(x is not None for x in keras.tree.flatten(v))
                )
                if given:
                    raise ValueError(
                        f"The nested model '{op.name}' is called with {given}; a walk of "
                        "its graph takes its inputs only."
                    )
                return walk(op, inputs, training, wrap, descend)

            return nested
        call = operation_fn(op, training=training)
        return call if wrap is None else wrap(op, call)

    outputs = functional._run_through_graph(
        functional._standardize_inputs(inputs), operation_fn=operation
    )
    return outputs[0] if isinstance(outputs, (list, tuple)) and len(outputs) == 1 else outputs
