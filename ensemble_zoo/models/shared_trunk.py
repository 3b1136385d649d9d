"""Members that share the trunk: a member-major network whose layers that
every member computes alike run once per input row.

A network built for member-major rows (`(members * batch, ...)`, every
member's copy of the batch) runs each layer on `members` copies. A layer
that holds nothing of any one member (no member weights, no member mask)
computes the same on every copy, so while its inputs are copies too it can
run on one copy (`FirstMemberRows`) and the copies are made
(`TileMembers`) only where the first layer that differs per member reads
them: below it the network costs one pass, as the Hydra paper's zero-shot
members that prune text heads only share their whole vision encoder, and as
MIMO (Havasi et al. 2020, "Training independent subnetworks for robust
prediction") shares a backbone. The members' results are unchanged: the
shared layers compute on each copy what they compute on one.

`SharedTrunkCall` is the `call_function` of `keras.models.clone_model`
that does this for a functional network, given which layers differ per
member. A layer that draws random numbers (dropout) differs per member in
training, and counts as such (`draws_randomness`); Keras' implicit masks
do not pass the tiling layers (keras-hub's models pass padding masks as
inputs). The network's member-major inputs must be copies of one batch,
as the tasks tile them: the trunk reads the first member's.
"""

import keras

from ensemble_zoo.layers.member_tiling import FirstMemberRows
from ensemble_zoo.layers.member_tiling import TileMembers


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


class SharedTrunkCall:
    """`keras.models.clone_model`'s `call_function` that runs the layers
    no member differs in on one copy of the member-major rows.

    The cloned network's inputs are member-major rows (copies of one
    batch). A layer for which `per_member(layer)` is false, called only on
    copies or on one copy, is called on one copy (taken by
    `FirstMemberRows`); any other layer on the member-major rows (a copy
    tiled back by `TileMembers` where needed). `network_outputs` tiles
    what the network returns, so that it keeps its member-major outputs.

    Args:
        num_members: int.
        per_member: callable `(layer) -> bool`: whether the layer computes
            differently for each member (holds member weights or masks).
    """

    def __init__(self, num_members, per_member):
        self.num_members = num_members
        self.per_member = per_member
        self._one_copy = {}  # id(member-major tensor) -> its one copy
        self._tiled = {}  # id(one-copy tensor) -> its member-major rows
        self._kept = []  # every tensor keyed above, so that ids stay unique

    def _keep(self, tensor):
        self._kept.append(tensor)
        return tensor

    def one_copy(self, tensor):
        """One copy of a member-major tensor, or `None` where its rows
        differ per member."""
        if id(tensor) in self._tiled:
            return tensor
        if id(tensor) in self._one_copy:
            return self._one_copy[id(tensor)]
        if self._is_output_of_a_layer(tensor):
            return None  # computed per member
        # A network input: member-major copies of the batch.
        copy = FirstMemberRows(self.num_members, autocast=False)(tensor)
        self._one_copy[id(self._keep(tensor))] = self._keep(copy)
        self._tiled[id(copy)] = tensor
        return copy

    def member_rows(self, tensor):
        """The member-major rows of a tensor (a one-copy tensor tiled)."""
        if id(tensor) not in self._tiled:
            return tensor
        rows = self._tiled[id(tensor)]
        if rows is None:
            rows = TileMembers(self.num_members, autocast=False)(tensor)
            self._tiled[id(tensor)] = self._keep(rows)
            self._one_copy[id(rows)] = tensor
        return rows

    def _is_output_of_a_layer(self, tensor):
        history = getattr(tensor, "_keras_history", None)
        return history is not None and not isinstance(history.operation, keras.layers.InputLayer)

    def _has_one_copy(self, tensor):
        """Whether one copy of `tensor` exists or can be taken (built by
        `one_copy`)."""
        return (
            id(tensor) in self._tiled
            or id(tensor) in self._one_copy
            or (not self._is_output_of_a_layer(tensor))
        )

    def __call__(self, layer, *args, **kwargs):
        tensors = [
            t for t in keras.tree.flatten((args, kwargs)) if isinstance(t, keras.KerasTensor)
        ]
        shared = not self.per_member(layer) and all(self._has_one_copy(t) for t in tensors)
        convert = self.one_copy if shared else self.member_rows
        args, kwargs = keras.tree.map_structure(
            lambda t: convert(t) if isinstance(t, keras.KerasTensor) else t, (args, kwargs)
        )
        outputs = layer(*args, **kwargs)
        if shared:
            for output in keras.tree.flatten(outputs):
                if isinstance(output, keras.KerasTensor):
                    self._tiled[id(self._keep(output))] = None
        return outputs

    def network_outputs(self, outputs):
        """`outputs` of the cloned network as member-major rows."""
        return keras.tree.map_structure(self.member_rows, outputs)
