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
reads them (`ensemble_zoo.models.shared_trunk.TrunkRows`), as the
shared-trunk decode step does (`trunk_step`). The members' results are unchanged: the shared
blocks compute on one copy what they compute on each.

In training, a layer that draws random numbers (dropout above 0) differs
per member and is tiled before, so that every member draws its own; under
the default blocked loss the blocks from the lowest adapted one up are
rematerialised (`block_remat`), the shared ones, which take no gradient,
are not.
"""

import inspect

import keras

from ensemble_zoo.models.lora_ensemble.causal_lm.block_remat import walk_backbone
from ensemble_zoo.models.shared_trunk import TrunkRows
from ensemble_zoo.models.shared_trunk import draws_randomness
from ensemble_zoo.models.shared_trunk import holds_random_state

#: The members' rows, as the decode engine keeps them.
ROWS = "batch_major"


def member_hidden(model, inputs, training=None, remat=False):
    """The members' final hidden states, batch-major rows `(batch *
    members, tokens, hidden_dim)`.

    Args:
        model: an `EnsembleCausalLM` (`LoRAEnsembleCausalLM`).
        inputs: dict of `token_ids` and `padding_mask`, one row per
            sample.
        training: bool or `None`.
        remat: bool, rematerialise the blocks from the lowest adapted one
            up (`block_remat`).

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
        model.num_members,
        lambda op: (
            id(op) in adapted or bool(training and (draws_randomness(op) or holds_random_state(op)))
        ),
        order=ROWS,
        batch=keras.tree.flatten(inputs)[0].shape[0],
    )
    hidden = walk_backbone(
        backbone, inputs, training, blocks[trunk:] if remat else (), wrap=rows.wrap
    )
    return rows.member_rows(hidden)


def member_block_input(model, inputs, block_index):
    """The members' rows entering decoder block `block_index` (what a
    Hugging Face model returns as `hidden_states[block_index]`), `(batch *
    members, tokens, hidden_dim)`: the backbone walked by its graph
    (`block_remat.walk_backbone`), the block's input read on its way in.

    Args:
        model: an `EnsembleCausalLM` (`LoRAEnsembleCausalLM`).
        inputs: dict of `token_ids` and `padding_mask`, one row per
            sample.
        block_index: int, the decoder block.

    Returns:
        The members' batch-major rows (a shared block's rows tiled to the
        members).
    """
    backbone = model.backbone
    target = backbone.transformer_layers[block_index]
    captured = []

    def tap(op, call):
        if op is not target:
            return call

        first = next(iter(inspect.signature(op.call).parameters))

        def tapped(*args, **kwargs):
            captured.append(args[0] if args else kwargs[first])  # Falcon's: a keyword
            return call(*args, **kwargs)

        return tapped

    trunk = getattr(model, "trunk_blocks", 0)
    if not trunk:
        tiled = {name: model.repeat_members(x) for name, x in inputs.items()}
        walk_backbone(backbone, tiled, False, (), wrap=tap)
        return captured[0]
    adapted = {id(block) for block in backbone.transformer_layers[trunk:]}
    rows = TrunkRows(
        model.num_members,
        lambda op: id(op) in adapted,
        order=ROWS,
        batch=keras.tree.flatten(inputs)[0].shape[0],
    )
    walk_backbone(backbone, inputs, False, (), wrap=lambda op, call: rows.wrap(op, tap(op, call)))
    if block_index < trunk:  # one copy of the rows
        return model.repeat_members(captured[0])
    return captured[0]
