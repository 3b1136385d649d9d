"""Running one member of a member-tiled layer: `single_member(m)`.

BatchEnsemble, Masksembles and LoRA-Ensemble layers take a member-major
batch `(members * batch, ...)` and hold one set of member weights per
member. Inside `with single_member(m):` they take a batch of member `m`'s
rows alone, `(batch, ...)`, and use member `m`'s weights only: what a
task's `member_batching="sequential"` uses to run its members one after
another over the whole batch, each pass the size of one explicit member's
(see `ensemble_zoo.models.member_passes`). `m` may be a Python int or a
traced integer scalar (a `keras.ops.map` over the members).
"""

import contextlib

from keras import ops

# The member of the innermost `single_member` block. A plain module value,
# not a `contextvars.ContextVar`: torch.compile (dynamo) breaks its graph
# at every `ContextVar.get`, once per adapted layer (19 graphs for a
# LoRA-Ensemble predict step instead of 1), and reads a module global.
# The blocks are entered while a model is traced, on one thread.
_STATE = {"member": None}


@contextlib.contextmanager
def single_member(member):
    """Within the block, member-tiled layers compute member `member` alone
    on batches of its rows."""
    previous = _STATE["member"]
    _STATE["member"] = member
    try:
        yield
    finally:
        _STATE["member"] = previous


def selected_members(weight, num_members):
    """`(weight, count)`: `weight` `(num_members, ...)` and `num_members`,
    or within `single_member(m)` member `m`'s slice `(1, ...)` and 1."""
    member = _STATE["member"]
    if member is None:
        return weight, num_members
    return ops.expand_dims(ops.take(weight, member, axis=0), 0), 1


def selected_count(num_members):
    """How many members a member-tiled layer computes now: 1 within
    `single_member`, else `num_members`."""
    return num_members if _STATE["member"] is None else 1


def selected_member():
    """The member of the enclosing `single_member` block, or `None`."""
    return _STATE["member"]
