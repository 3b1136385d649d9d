"""Running one member of a member-tiled layer: `single_member(m)`.

BatchEnsemble, Masksembles and LoRA-Ensemble layers take a member-major
batch `(members * batch, ...)` and hold one set of member weights per
member. Inside `with single_member(m):` they take a batch of member `m`'s
rows alone, `(batch, ...)`, and use member `m`'s weights only: what a
task's `member_batching="sequential"` uses to run its members one after
another over the whole batch, each pass the size of one explicit member's
(see `ensemble_zoo.models.member_passes`). `m` may be a Python int or a
traced integer scalar (a `keras.ops.map` over the members).

The selection belongs to the thread that entered the block: two threads
predicting at once (a server's workers), one running its members one
after another and one the tiled pass, each compute what they compute
alone. JAX and TensorFlow read it while tracing, on the calling thread;
eager PyTorch at every call; `torch.compile` (dynamo) traces a
`threading.local` attribute into the graph and guards on it (one graph
per selection, measured with torch 2.13), where a
`contextvars.ContextVar` would break the graph at every adapted layer.
"""

import contextlib
import threading

from keras import ops

# The member of the calling thread's innermost `single_member` block.
_LOCAL = threading.local()


@contextlib.contextmanager
def single_member(member):
    """Within the block, member-tiled layers compute member `member` alone
    on batches of its rows."""
    previous = selected_member()
    _LOCAL.member = member
    try:
        yield
    finally:
        _LOCAL.member = previous


def selected_members(weight, num_members):
    """`(weight, count)`: `weight` `(num_members, ...)` and `num_members`,
    or within `single_member(m)` member `m`'s slice `(1, ...)` and 1."""
    member = selected_member()
    if member is None:
        return weight, num_members
    return ops.expand_dims(ops.take(weight, member, axis=0), 0), 1


def selected_count(num_members):
    """How many members a member-tiled layer computes now: 1 within
    `single_member`, else `num_members`."""
    return num_members if selected_member() is None else 1


def selected_member():
    """The member of the calling thread's enclosing `single_member`
    block, or `None`."""
    return getattr(_LOCAL, "member", None)
