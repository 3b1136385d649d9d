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
over the members in a JAX program, one loop body), and so does the
task's head: the whole graph runs once per member. Every layer computes what it
computes in the tiled pass, row for row (same numbers up to float
round-off). `"auto"` (the default) picks `"sequential"` for JAX on a CPU
and `"tiled"` everywhere else. Training always runs the tiled pass, so
that the dropout draws and the gradients are those of the whole tiled
batch, and so does a batch whose size is unknown when the graph is
traced (an exported model's `serve`, for any batch size).

A member-tiled task builds its graph with `member_tiled.member_rows`
(the tiling and untiling are layers, `TileMembers` / `UntileMembers`) and
sets `member_batching`; `EnsembleClassifier` then runs the whole graph
once per member within `single_member(m)`, where the tiling layers move
member `m`'s rows alone and every member layer uses member `m`'s weights.
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


def run_members_sequentially(graph, inputs, num_members):
    """The member logits of a member-tiled task's graph, computed member
    by member.

    Args:
        graph: callable running the task's functional graph on `inputs`
            (not tiled) at inference; called within `single_member(m)` for
            each member, it returns member `m`'s logits `(batch, 1,
            classes)`.
        inputs: the batch (a tensor or a dict of them), not tiled.
        num_members: int.

    Returns:
        `(batch, num_members, classes)`: what the tiled pass returns.
    """

    def member(m):
        with single_member(m):
            return graph()[:, 0]

    first = keras.tree.flatten(inputs)[0]
    if backend_utils.backend() == "jax" and backend_utils.is_tracing(first):
        stacked = ops.map(member, ops.arange(num_members, dtype="int32"))
    else:
        stacked = ops.stack([member(m) for m in range(num_members)])
    return ops.moveaxis(stacked, 0, 1)
