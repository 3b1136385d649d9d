"""How a member-tiled task runs at inference: one pass or one per member.

BatchEnsemble, Masksembles and LoRA-Ensemble run a keras-hub network once
on the member-major batch `(members * batch, ...)`. That single large
batch is what an accelerator wants (on an H200 the tiled pass of 3
members takes 0.51-0.67x three separate passes; docs/benchmarks.md). On a CPU under
JAX it is not: XLA:CPU (jax 0.10) runs a ViT-B/16 on 12 rows at 1.17x
the time of 3 passes of 4 rows and on 64 rows at 1.32x 16 passes of 4,
so the tiled methods took 1.18-1.38x the explicit ensemble of the same
members (`benchmarks/tiled_batch.py`), although they do the same backbone
work. TensorFlow (with or without XLA) and PyTorch show no such penalty
on the same machine.

`member_batching="sequential"` runs the members one after another, each
over the whole batch, as an explicit ensemble does: the backbone computes
member `m`'s rows alone with member `m`'s fast weights, masks or adapters
(`ensemble_zoo.layers.member_selection.single_member`; a `keras.ops.map`
over the members in a JAX program, one loop body), and the task's head
then runs once on every member's features. Every layer computes what it
computes in the tiled pass, row for row (same numbers up to float
round-off). `"auto"` (the default) picks `"sequential"` for JAX on a CPU
and `"tiled"` everywhere else. Training always runs the tiled pass, so
that the dropout draws and the gradients are those of the whole tiled
batch, and so does a batch whose size is unknown when the graph is
traced (an exported model's `serve`, for any batch size).

`MemberTiledClassifier` (`member_tiled_classifier.py`) builds its graph as
`_member_outputs(_member_features(tile_members(inputs, M)))` and, at
inference, runs it as this module says.
"""

import keras
from keras import ops

from ensemble_zoo.layers.member_selection import single_member
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_choice

MEMBER_BATCHING = ("auto", "tiled", "sequential")


def check_member_batching(value):
    """Validates a `member_batching` argument; returns it."""
    return check_choice(value, "member_batching", MEMBER_BATCHING)


def resolve_member_batching(value):
    """`"tiled"` or `"sequential"` for a `member_batching` argument on the
    current backend and device (see the module docstring)."""
    value = check_member_batching(value)
    if value != "auto":
        return value
    if backend_utils.backend() == "jax" and backend_utils.accelerator() == "cpu":
        return "sequential"
    return "tiled"


def run_members_sequentially(features_fn, outputs_fn, inputs, num_members):
    """`outputs_fn(features)`, the features computed member by member.

    Args:
        features_fn: member-major inputs -> member-major features (the
            backbone and pooling of a member-tiled task); called on the
            untiled `inputs` within `single_member(m)` for each member.
        outputs_fn: member-major features `(members * batch, ...)` -> the
            task's outputs.
        inputs: the batch (a tensor or a dict of them), not tiled.
        num_members: int.

    Returns:
        What the tiled graph `outputs_fn(features_fn(tile_members(inputs,
        num_members)))` returns.
    """

    def member(m):
        with single_member(m):
            return features_fn(inputs)

    first = keras.tree.flatten(inputs)[0]
    if backend_utils.backend() == "jax" and backend_utils.is_tracing(first):
        stacked = ops.map(member, ops.arange(num_members, dtype="int32"))
    else:
        stacked = ops.stack([member(m) for m in range(num_members)])
    features = ops.reshape(stacked, (-1,) + tuple(stacked.shape[2:]))
    return outputs_fn(features)
