"""The members' forward pass of a causal-LM ensemble: what `call`, `fit`
and teacher-forced scoring run.

The members are batch-major rows (row `b * M + m` is member `m`'s copy of
sample `b`). Without `layers` every decoder block holds adapters, and the
forward is the backbone on the tiled rows. With adapters on the upper
blocks only (`LoRAEnsembleCausalLM.from_keras_hub(..., layers=...)`,
`trunk_blocks > 0`), the blocks below the lowest adapted one compute the
same for every member: the forward walks the backbone's graph
(`block_remat.walk_backbone`) on one copy of the rows and tiles them into
the members' rows where the first operation that differs per member
reads them (`TrunkRows`), as the shared-trunk decode step does
(`trunk_step`) and as `ensemble_zoo.models.shared_trunk` does for
classifiers' graphs. The members' results are unchanged: the shared
blocks compute on one copy what they compute on each.

In training, a layer that draws random numbers (dropout above 0) differs
per member and is tiled before, so that every member draws its own; under
the default blocked loss the adapted blocks are rematerialised
(`block_remat`), the shared ones, which take no gradient, are not.
"""

import keras
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.block_remat import walk_backbone
from ensemble_zoo.models.shared_trunk import draws_randomness
from ensemble_zoo.ops.member_tiling import tile_members

#: The members' rows, as the decode engine keeps them.
ROWS = "batch_major"


def _is_tensor(x):
    return ops.is_tensor(x) or isinstance(x, keras.KerasTensor)


class TrunkRows:
    """Which tensors of a walk of the backbone's graph are member rows.

    The walk starts on one copy of the batch. An operation for which
    `per_member(operation)` is false and that reads no member rows runs on
    one copy; any other reads member rows (one-copy tensors tiled once,
    `ensemble_zoo.ops.tile_members`) and returns member rows. Tensors are
    known by identity while the walk keeps them alive (`_kept`), so that a
    conversion Keras makes of a walked model's inputs counts as one copy.

    Args:
        num_members: int.
        per_member: callable `(operation) -> bool`, whether an operation
            computes differently for each member.
    """

    def __init__(self, num_members, per_member):
        self.num_members = num_members
        self.per_member = per_member
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
        if id(x) not in self._tiled:
            self._kept.append(x)
            self._tiled[id(x)] = self._mark(tile_members(x, self.num_members, ROWS))
        return self._tiled[id(x)]

    def wrap(self, operation, call):
        """`call` of `operation` on one copy or on member rows (see the
        class); `block_remat.walk_backbone`'s `wrap`."""

        def run(*args, **kwargs):
            flat = [x for x in keras.tree.flatten((args, kwargs)) if _is_tensor(x)]
            shared = not self.per_member(operation) and not any(
                id(x) in self._members for x in flat
            )
            if shared:
                return call(*args, **kwargs)
            args, kwargs = keras.tree.map_structure(
                lambda x: self.member_rows(x) if _is_tensor(x) else x, (args, kwargs)
            )
            outputs = call(*args, **kwargs)
            for x in keras.tree.flatten(outputs):
                if _is_tensor(x):
                    self._mark(x)
            return outputs

        return run


def member_hidden(model, inputs, training=None, remat=False):
    """The members' final hidden states, batch-major rows `(batch *
    members, tokens, hidden_dim)`.

    Args:
        model: an `EnsembleCausalLM` (`LoRAEnsembleCausalLM`).
        inputs: dict of `token_ids` and `padding_mask`, one row per
            sample.
        training: bool or `None`.
        remat: bool, rematerialise the blocks that hold adapters
            (`block_remat`).

    Returns:
        The members' rows after the decoder's final norm.
    """
    backbone = model.backbone
    trunk = getattr(model, "trunk_blocks", 0)
    blocks = backbone.transformer_layers
    if not trunk:
        tiled = {name: model.repeat_members(x) for name, x in inputs.items()}
        if not remat:
            return backbone(tiled, training=training)
        return walk_backbone(backbone, tiled, training, blocks)
    adapted = {id(block) for block in blocks[trunk:]}
    rows = TrunkRows(
        model.num_members, lambda op: id(op) in adapted or bool(training and draws_randomness(op))
    )
    hidden = walk_backbone(
        backbone, inputs, training, blocks[trunk:] if remat else (), wrap=rows.wrap
    )
    return rows.member_rows(hidden)
