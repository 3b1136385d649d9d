"""The training forward of a causal-LM ensemble with each decoder block
rematerialised: what `fit` runs under the blocked default loss.

Memory. The members run as `members x batch` rows, so a plain training
forward keeps M times the activations that keras-hub's own `fit` of the
base model keeps (the attention scores and MLP intermediates of every
block, for every row). With each decoder block rematerialised
(`utils.gradients.remat`: `keras.remat`, with a JAX checkpoint that
XLA:CPU cannot run early), the backward pass recomputes a block's
internals from its input instead, and the forward keeps only the
blocks' inputs: `layers x rows x tokens x hidden_dim` values. The cost
is a second forward pass of the blocks in the backward pass.

How. keras-hub backbones are Keras functional models; Keras applies
rematerialisation to layers built inside a `keras.RematScope`, which
would rematerialise the blocks in every call of the model (decoding,
scoring, export). Instead the training forward walks the backbone's
graph itself (`utils.graph_walk`, the walk `Functional.call` makes; into
the keras-hub backbone that a zoo backbone wraps) and calls each block of
`backbone.transformer_layers` rematerialised (over a shared trunk,
`member_forward`, those from the lowest adapted one up), but for a block
that draws random numbers (`draws_random_numbers`: dropout above 0),
which runs as it is. Checked with Keras 3.15.1 (`get_stateless_scope`
is Keras' private function, as `graph_walk`'s are:
`test_fit_computes_the_loss_in_blocks_equal_to_the_logits_loss` and the
mixture-of-experts family's fit test fail if they change).
"""

import keras
from keras.src.backend.common.stateless_scope import get_stateless_scope

from ensemble_zoo.models.shared_trunk import holds_random_state
from ensemble_zoo.utils import graph_walk
from ensemble_zoo.utils.gradients import remat


def walk_backbone(backbone, inputs, training=None, remat_blocks=(), wrap=None):
    """`backbone(inputs, training=training)` by its graph
    (`utils.graph_walk.walk`), into a nested functional model that holds
    decoder blocks.

    Args:
        backbone: a keras-hub decoder backbone, or a functional model
            holding it (`LoRAEnsembleDecoderBackbone`).
        inputs: its inputs (a dict of tensors).
        training: bool or `None`.
        remat_blocks: the decoder blocks to rematerialise (but for one
            that `draws_random_numbers`).
        wrap: optional callable `(operation, call) -> call` applied to
            the rematerialised or plain call of each operation
            (`models.shared_trunk.TrunkRows.wrap` shares the trunk).

    Returns:
        The backbone's output.
    """
    blocks = {id(block) for block in backbone.transformer_layers}
    remat_ids = {id(block) for block in remat_blocks if not draws_random_numbers(block)}

    def wrapped(op, call):
        if id(op) in remat_ids:
            call = _rematerialized(call)
        return call if wrap is None else wrap(op, call)

    return graph_walk.walk(
        backbone, inputs, training, wrapped, descend=lambda op: _holds(op, blocks)
    )


def _holds(functional, blocks):
    """Whether a functional model's graph holds one of `blocks`, directly
    or in a functional model it calls."""
    for op in functional.operations:
        if id(op) in blocks or (graph_walk.is_functional(op) and _holds(op, blocks)):
            return True
    return False


def draws_random_numbers(layer):
    """Whether `layer` holds a random generator (a dropout rate above 0, a
    noisy router; `shared_trunk.holds_random_state`). Such a block is not
    rematerialised: its recomputation would draw new numbers under
    TensorFlow and PyTorch (another dropout mask than the forward's), and
    under JAX the generator's new state would escape the rematerialised
    trace."""
    return holds_random_state(layer)


def _rematerialized(call):
    """`call` under `utils.gradients.remat` (`keras.remat`, and under JAX
    a checkpoint XLA:CPU cannot undo), taking its tensors as positional
    arguments (JAX's checkpoint would trace any other value, TensorFlow's
    `recompute_grad` takes positional tensors) and its other arguments
    (`None`, Python values) as they are.

    Losses a layer adds in the block (a mixture of experts' auxiliary
    loss) go, inside a stateless scope collecting them (Keras' JAX
    training step), to that scope; there they would be values of the
    rematerialised trace and escape it. They are taken out of the scope,
    returned by the rematerialised function after its output, and added
    to the scope again outside it."""

    def run(*args, **kwargs):
        structure = (args, kwargs)
        flat = keras.tree.flatten(structure)
        places = [i for i, x in enumerate(flat) if keras.ops.is_tensor(x)]
        scope = get_stateless_scope()
        collecting = scope is not None and scope.collect_losses

        def with_tensors(*tensors):
            values = list(flat)
            for i, x in zip(places, tensors):
                values[i] = x
            call_args, call_kwargs = keras.tree.pack_sequence_as(structure, values)
            if not collecting:
                return call(*call_args, **call_kwargs)
            start = len(scope.losses)
            out = call(*call_args, **call_kwargs)
            added = scope.losses[start:]
            del scope.losses[start:]
            return out, added

        out = remat(with_tensors)(*[flat[i] for i in places])
        if not collecting:
            return out
        out, added = out
        for loss in added:
            scope.add_loss(loss)
        return out

    return run
