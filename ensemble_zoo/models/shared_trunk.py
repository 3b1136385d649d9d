"""Members that share the trunk: a member-major network whose layers that
every member computes alike run once per input row.

A network built for member-major rows (`(members * batch, ...)`, every
member's copy of the batch) runs each layer on `members` copies. A layer
that holds nothing of any one member (no member weights, no member mask)
computes the same on every copy, so while its inputs are copies too it can
run on one copy (the first member's rows) and the copies are made
(`ensemble_zoo.ops.tile_members`) only where the first layer that differs
per member reads them: below it the network costs one pass, as the Hydra paper's zero-shot
members that prune text heads only share their whole vision encoder, and as
MIMO (Havasi et al. 2020, "Training independent subnetworks for robust
prediction") shares a backbone. The members' results are unchanged: the
shared layers compute on each copy what they compute on one.

`shared_trunk_call` does this at call time, when the network knows
whether it trains (a layer that draws random numbers, dropout, differs
per member in training only): it walks the network's graph
(`ensemble_zoo.utils.graph_walk`), into the nested models (a keras-hub
backbone) that hold member layers, and `TrunkRows` tells which tensors
are one copy. The network's member-major inputs must be copies of one
batch, as the tasks tile them: the trunk reads the first member's.
`LoRAEnsembleClassifier(..., adapted_layers=...)` runs it, with the
blocks `site_blocks` finds, and so does every Hydra classifier
(`HydraModelBackbone`: its layers where the members keep different heads
are the member layers); the causal LMs' forward pass
(`lora_ensemble.causal_lm.member_forward`) runs `TrunkRows` on their
batch-major rows.
"""

import keras
from keras import ops

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.utils import graph_walk


def holds_random_state(layer):
    """Whether `layer` holds a random generator's state (a seed generator
    under any attribute name): its `variables` go beyond its `weights`."""
    return isinstance(layer, keras.layers.Layer) and len(layer.variables) != len(layer.weights)


def draws_randomness(layer):
    """Whether `layer` or a layer inside it draws random numbers (a
    `Dropout` of a positive rate, or a seed generator): in training each
    member's copy needs its own draws."""
    if not isinstance(layer, keras.layers.Layer):
        return False
    for sub in layer._flatten_layers(include_self=True):
        if isinstance(sub, keras.layers.Dropout) and sub.rate > 0:
            return True
        if getattr(sub, "seed_generator", None) is not None:
            return True
    return False


def _is_tensor(x):
    return ops.is_tensor(x) or isinstance(x, keras.KerasTensor)


# The walk's own traversal of an operation's arguments and outputs (lists,
# tuples and dicts): `keras.tree` under PyTorch (torch 2.13's pytree) breaks
# a `torch.compile` graph at every operation (dynamo cannot trace its
# `is not` on tuples).


_PLAIN = (list, tuple, dict)


def _plain(structure):
    """Whether `structure` nests only plain lists, tuples and dicts (no
    namedtuple, no other container type): what the traversal below
    handles itself; any other goes through `keras.tree`."""
    if type(structure) in (list, tuple):
        return all(_plain(item) for item in structure)
    if type(structure) is dict:
        return all(_plain(item) for item in structure.values())
    if structure is None or _is_tensor(structure):
        return True
    return not isinstance(structure, _PLAIN) and not keras.tree.is_nested(structure)


def _leaves(structure):
    """The leaves of a nested structure (in no particular order)."""
    if not _plain(structure):
        return keras.tree.flatten(structure)
    return _plain_leaves(structure)


def _plain_leaves(structure):
    if type(structure) in (list, tuple):
        return [leaf for item in structure for leaf in _plain_leaves(item)]
    if type(structure) is dict:
        return [leaf for value in structure.values() for leaf in _plain_leaves(value)]
    return [structure]


def _map_tensors(fn, structure):
    """`structure` with `fn` applied to its tensors, its containers kept."""
    if not _plain(structure):
        return keras.tree.map_structure(lambda x: fn(x) if _is_tensor(x) else x, structure)
    return _map_plain(fn, structure)


def _map_plain(fn, structure):
    if type(structure) in (list, tuple):
        return type(structure)(_map_plain(fn, item) for item in structure)
    if type(structure) is dict:
        return {key: _map_plain(fn, value) for key, value in structure.items()}
    return fn(structure) if _is_tensor(structure) else structure


class TrunkRows:
    """Which tensors of a walk of a network's graph are member rows: the
    shared trunk of a forward pass that knows whether it trains.

    The walk (`utils.graph_walk.walk`) starts on one copy of the batch.
    An operation for which `per_member(operation)` is false and that reads
    no member rows runs on one copy; any other reads member rows (one-copy
    tensors tiled once, `ensemble_zoo.ops.tile_members`) and returns
    member rows. Tensors are known by identity while the walk keeps them
    alive (`_kept`), so that a conversion Keras makes of a walked model's
    inputs counts as one copy. A tensor whose first axis is known and not
    `batch` (a constant of the graph, a scalar) is not a batch: it is
    passed as it is.

    Args:
        num_members: int.
        per_member: callable `(operation) -> bool`, whether an operation
            computes differently for each member.
        order: the member rows' layout, `"member_major"` (the
            classifiers') or `"batch_major"` (the causal LMs').
        batch: the one copy's rows, or `None` where unknown (a traced
            dynamic batch).
    """

    def __init__(self, num_members, per_member, order, batch=None):
        self.num_members = num_members
        self.per_member = per_member
        self.order = order
        self.batch = batch
        self._members = set()  # ids of member-row tensors
        self._tiled = {}  # id(one-copy tensor) -> its member rows
        self._kept = []

    def _mark(self, x):
        self._kept.append(x)
        self._members.add(id(x))
        return x

    def member_rows(self, x):
        """`x` as member rows: itself if it is, else its copy tiled."""
        if id(x) in self._members:
            return x
        rows = tuple(x.shape)[0] if len(x.shape) else 1
        if rows is not None and self.batch is not None and rows != self.batch:
            return x  # not a batch: a constant broadcasts over the members
        if id(x) not in self._tiled:
            self._kept.append(x)
            self._tiled[id(x)] = self._mark(tile_members(x, self.num_members, self.order))
        return self._tiled[id(x)]

    def wrap(self, operation, call):
        """`call` of `operation` on one copy or on member rows (see the
        class): a `utils.graph_walk.walk`'s `wrap`."""

        def run(*args, **kwargs):
            flat = [x for x in _leaves((args, kwargs)) if _is_tensor(x)]
            shared = not self.per_member(operation) and not any(
                id(x) in self._members for x in flat
            )
            if shared:
                return call(*args, **kwargs)
            args, kwargs = _map_tensors(self.member_rows, (args, kwargs))
            outputs = call(*args, **kwargs)
            for x in _leaves(outputs):
                if _is_tensor(x):
                    self._mark(x)
            return outputs

        return run


def site_blocks(backbone, sites):
    """The blocks of `backbone` that hold `sites`, in the model's order:
    `[(block, parents)]`, each block a layer and the sites' parent layers
    inside it.

    A site's block is the deepest layer on its path from `backbone` that
    has a sibling of its own class holding sites too (keras-hub's
    transformer blocks, a ViT's encoder blocks inside its encoder layer,
    a CLIP's blocks in either encoder), or the site's parent where none
    has. A family that calls one layer for every block (ALBERT) has one.

    Args:
        backbone: a keras-hub backbone.
        sites: `[(parent, attribute)]` of the projections a method adapts
            (`ensemble_zoo.models.member_sites.attention_sites`).
    """
    parents = {id(parent) for parent, _ in sites}
    holding = {}  # id(layer) -> whether it holds a site's parent

    def holds(layer):
        if id(layer) not in holding:
            holding[id(layer)] = any(
                id(sub) in parents for sub in layer._flatten_layers(include_self=True)
            )
        return holding[id(layer)]

    blocks, found = [], {}

    def visit(layer, block):
        children = [child for child in layer._layers if holds(child)]
        for child in children:
            repeated = sum(type(other) is type(child) for other in children) > 1
            inner = child if repeated else block
            if id(child) in parents:
                owner = inner if inner is not None else child
                if id(owner) not in found:
                    found[id(owner)] = (owner, [])
                    blocks.append(found[id(owner)])
                found[id(owner)][1].append(child)
            visit(child, inner)

    visit(backbone, None)
    return blocks


def trunk_block_count(backbone, blocks):
    """How many of `blocks` (`site_blocks`) run once per input row in a
    walk of `backbone`'s graph (`shared_trunk_call`): those inside the
    operations before the first that holds member weights. A family whose
    backbone runs every block in one layer (keras-hub's ViT encoder) has
    none."""
    count = 0
    for op in graph_walk.graph_operations(backbone, descend=_holds_members):
        if not isinstance(op, keras.layers.Layer):
            continue  # an operation of the graph (`ops.not_equal`): no blocks
        if _holds_members(op):
            break
        inside = {id(sub) for sub in op._flatten_layers(include_self=True)}
        count += sum(id(block) in inside for block, _ in blocks)
    return count


def _holds_members(operation):
    """Whether an operation holds member weights (LoRA-Ensemble adapters or
    member heads), directly or inside it."""
    if not isinstance(operation, keras.layers.Layer):
        return False
    return any(
        isinstance(sub, (LoRAEnsembleAdapter, GroupedDense))
        for sub in operation._flatten_layers(include_self=True)
    )


def shared_trunk_call(network, inputs, num_members, training=None, per_member=None):
    """`network(inputs, training=training)` over a shared trunk.

    `network` takes member-major rows of a batch (copies, as the tasks tile
    it) and holds member weights in some of its layers. The call walks its
    graph (`utils.graph_walk.walk`, into the nested models that hold member
    layers, a keras-hub backbone in a task) from the first member's rows:
    the operations before the first member layer (one that holds member
    weights or for which `per_member` is true, or, in training, one that
    draws random numbers) run once per input row (`TrunkRows`). The
    members' results are those of `network(inputs)`.

    Args:
        network: a functional model on member-major rows.
        inputs: its member-major inputs.
        num_members: int.
        training: bool or `None`.
        per_member: optional callable `(operation) -> bool`: the layers
            that compute differently per member besides those holding
            member weights (LoRA-Ensemble adapters, member heads), e.g.
            Hydra's head masks.

    Returns:
        `network`'s member-major outputs.
    """
    inputs = keras.tree.map_structure(ops.convert_to_tensor, inputs)
    # Within `single_member(m)` the rows are member `m`'s alone.
    num_members = selected_count(num_members)
    one_copy = keras.tree.map_structure(
        # The first member's rows, sliced so that an exported signature's
        # dynamic sizes pass.
        lambda x: x[: ops.shape(x)[0] // num_members] if _is_tensor(x) else x,
        inputs,
    )

    def member_layer(op):
        return _holds_members(op) or bool(per_member is not None and per_member(op))

    rows = TrunkRows(
        num_members,
        lambda op: (
            member_layer(op) or bool(training and (draws_randomness(op) or holds_random_state(op)))
        ),
        order="member_major",
        batch=keras.tree.flatten(one_copy)[0].shape[0],
    )
    outputs = graph_walk.walk(network, one_copy, training, rows.wrap, descend=member_layer)
    return keras.tree.map_structure(rows.member_rows, outputs)
