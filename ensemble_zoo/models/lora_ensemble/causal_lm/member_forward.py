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
