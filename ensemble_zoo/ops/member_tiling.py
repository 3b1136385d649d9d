"""Moving between the member axis and a batch of member rows.

Methods that run one unmodified network on every member's copy of the
input fold the members into the batch and unfold per-member results into
the zoo's member-axis layout `(batch, members, ...)`. One API serves both
row orders (`order`):

- `"member_major"` (default): `(batch, ...)` is tiled to `(members * batch,
  ...)` with row `m * batch + b` holding member `m`'s copy of sample `b`
  (LoRA-Ensemble, BatchEnsemble and Masksembles classifiers, MC dropout);
- `"batch_major"`: row `b * members + m`. The causal LMs use it: axis 0
  stays ordered by prompt, so keras-hub's samplers (which repeat, gather
  and reorder rows for beams) and its KV cache work unchanged.

`tile_members` folds a shared batch, `fold_members` a member axis, and
`untile_members` unfolds.
"""

from keras import ops

from ensemble_zoo.utils.validation import as_tensor
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

#: The row orders of a batch of member rows.
ORDERS = ("member_major", "batch_major")


def _batched_tensor(x):
    x = as_tensor(x, "x")
    if len(static_shape(x)) == 0:
        raise ValueError("`x` must have a batch axis (shape (batch, ...)); got a scalar.")
    return x


def tile_members(x, num_members, order="member_major"):
    """Tiles `(batch, ...)` to `(num_members * batch, ...)` member rows.

    Args:
        x: tensor with the batch on axis 0.
        num_members: int, the number of copies.
        order: `"member_major"` (default) or `"batch_major"`.

    Returns:
        `(num_members * batch, ...)`: member-major, rows `m * batch : (m +
        1) * batch` are member `m`'s copy of `x`; batch-major, row `b *
        num_members + m` is member `m`'s copy of sample `b`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import tile_members

    tile_members(np.arange(2.0)[:, None], 3)[:, 0]  # [0, 1, 0, 1, 0, 1]
    ```
    """
    num_members = check_positive_int(num_members, "num_members")
    order = check_choice(order, "order", ORDERS)
    x = _batched_tensor(x)
    if order == "batch_major":
        return ops.repeat(x, num_members, axis=0)
    return ops.tile(x, (num_members,) + (1,) * (len(static_shape(x)) - 1))


def untile_members(x, num_members, order="member_major"):
    """Inverse layout of `tile_members`: `(M * batch, ...)` to `(batch, M, ...)`.

    Args:
        x: tensor `(num_members * batch, ...)` of member rows in `order`.
        num_members: int.
        order: `"member_major"` (default) or `"batch_major"`.

    Returns:
        `(batch, num_members, ...)`, members on axis 1.
    """
    num_members = check_positive_int(num_members, "num_members")
    order = check_choice(order, "order", ORDERS)
    x = _batched_tensor(x)
    if order == "batch_major":
        # Any trailing shape, also one known only when the graph runs.
        return ops.reshape(x, (-1, num_members) + tuple(ops.shape(x)[1:]))
    shape = static_shape(x)
    rest = shape[1:]
    if None in rest:
        raise ValueError(
            f"`x` needs static trailing dimensions in untile_members; got shape {shape}."
        )
    if shape[0] is not None and shape[0] % num_members:
        raise ValueError(
            f"`x` has {shape[0]} rows, not a multiple of num_members="
            f"{num_members}; untile_members expects the member-major "
            "(num_members * batch, ...) layout of tile_members."
        )
    x = ops.reshape(x, (num_members, -1) + rest)
    return ops.moveaxis(x, 0, 1)


def fold_members(x, order="member_major"):
    """A member axis folded into member rows: `(batch, M, ...)` to `(M *
    batch, ...)` in `order`, the layout `tile_members` makes (the inverse
    of `untile_members`).

    Args:
        x: tensor `(batch, members, ...)`.
        order: `"member_major"` (default) or `"batch_major"`.

    Returns:
        `(members * batch, ...)`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import fold_members

    fold_members(np.arange(4.0).reshape(2, 2), order="batch_major")  # [0, 1, 2, 3]
    ```
    """
    order = check_choice(order, "order", ORDERS)
    x = as_tensor(x, "x")
    if len(static_shape(x)) < 2:
        raise ValueError(
            "`x` must have a batch and a member axis (shape (batch, members, "
            f"...)); got shape {static_shape(x)}."
        )
    if order == "member_major":
        x = ops.moveaxis(x, 1, 0)
    return ops.reshape(x, (-1,) + tuple(ops.shape(x)[2:]))
