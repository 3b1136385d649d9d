"""Moving between the member axis and a member-major batch.

Methods that run one unmodified network on every member's copy of the
input (LoRA-Ensemble, MC dropout) fold the members into the batch:
`(batch, ...)` is tiled to `(members * batch, ...)` with row
`m * batch + b` holding member `m`'s copy of sample `b` (member-major),
and per-member results come back as `(batch, members, ...)`, the zoo's
member-axis layout.
"""

from keras import ops

from ensemble_zoo.utils.validation import as_tensor
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape


def _batched_tensor(x):
    x = as_tensor(x, "x")
    if len(static_shape(x)) == 0:
        raise ValueError(
            "`x` must have a batch axis (shape (batch, ...)); got a scalar."
        )
    return x


def tile_members(x, num_members):
    """Tiles `(batch, ...)` to a member-major `(num_members * batch, ...)`.

    Args:
        x: tensor with the batch on axis 0.
        num_members: int, the number of copies.

    Returns:
        `(num_members * batch, ...)`; rows `m * batch : (m + 1) * batch` are
        member `m`'s copy of `x`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import tile_members

    tile_members(np.arange(2.0)[:, None], 3)[:, 0]  # [0, 1, 0, 1, 0, 1]
    ```
    """
    num_members = check_positive_int(num_members, "num_members")
    x = _batched_tensor(x)
    return ops.tile(x, (num_members,) + (1,) * (len(static_shape(x)) - 1))


def untile_members(x, num_members):
    """Inverse layout of `tile_members`: `(M * batch, ...)` to `(batch, M, ...)`.

    Args:
        x: tensor `(num_members * batch, ...)` in member-major order.
        num_members: int.

    Returns:
        `(batch, num_members, ...)`, members on axis 1.
    """
    num_members = check_positive_int(num_members, "num_members")
    x = _batched_tensor(x)
    shape = static_shape(x)
    rest = shape[1:]
    if None in rest:
        raise ValueError(
            "`x` needs static trailing dimensions in untile_members; got "
            f"shape {shape}."
        )
    if shape[0] is not None and shape[0] % num_members:
        raise ValueError(
            f"`x` has {shape[0]} rows, not a multiple of num_members="
            f"{num_members}; untile_members expects the member-major "
            "(num_members * batch, ...) layout of tile_members."
        )
    x = ops.reshape(x, (num_members, -1) + rest)
    return ops.moveaxis(x, 0, 1)
