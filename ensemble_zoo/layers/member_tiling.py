"""Layers moving between a shared batch and a member-major tiled batch.

`TileMembers` and `UntileMembers` wrap `ensemble_zoo.ops.tile_members` and
`untile_members` for functional models: a network that runs unmodified
layers on every member's copy of the input folds the members into the
batch (`(members * batch, ...)`, row `m * batch + b` is member `m`'s copy
of sample `b`) and unfolds them into the zoo's member axis at the end.
`FirstMemberRows` takes one copy back out of a tiled batch, for a
functional network whose layers every member computes alike run on one
copy (the zoo's own shared trunk, `ensemble_zoo.models.shared_trunk`,
does this at call time, without layers).
"""

import keras

from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.ops.member_tiling import ORDERS
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_positive_int


def _times(dim, factor):
    return None if dim is None else dim * factor


class _MemberRows(keras.layers.Layer):
    """The arguments and config of `TileMembers` and `UntileMembers`."""

    def __init__(self, num_members, order="member_major", **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")
        self.order = check_choice(order, "order", ORDERS)

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members, "order": self.order}

    def _member_batch(self, rows):
        """One member's batch of `rows` member rows (`None` if unknown)."""
        if rows is None:
            return None
        if rows % self.num_members:
            raise ValueError(
                f"{type(self).__name__}({self.num_members}) needs a batch divisible "
                f"by {self.num_members}; got {rows}."
            )
        return rows // self.num_members

    def compute_output_spec(self, inputs):
        # The rows keep their dtype (token ids stay integers), whatever the
        # layer's dtype policy.
        shape = self.compute_output_shape(inputs.shape)
        return keras.KerasTensor(shape, dtype=inputs.dtype)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TileMembers(_MemberRows):
    """`(batch, ...)` -> `(num_members * batch, ...)` member rows
    (`ensemble_zoo.ops.tile_members`).

    Args:
        num_members: int, the number of copies.
        order: `"member_major"` (default: row `m * batch + b`) or
            `"batch_major"` (row `b * num_members + m`).
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import TileMembers

    TileMembers(3)(np.zeros((2, 17, 8), "float32")).shape  # (6, 17, 8)
    ```
    """

    def call(self, inputs):
        return tile_members(inputs, selected_count(self.num_members), self.order)

    def compute_output_shape(self, input_shape):
        return (_times(input_shape[0], self.num_members),) + tuple(input_shape[1:])


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class UntileMembers(_MemberRows):
    """`(num_members * batch, ...)` member rows -> `(batch, num_members,
    ...)` (`ensemble_zoo.ops.untile_members`).

    Args:
        num_members: int.
        order: `"member_major"` (default) or `"batch_major"`, as the rows
            were tiled.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import UntileMembers

    UntileMembers(3)(np.zeros((6, 17, 8), "float32")).shape  # (2, 3, 17, 8)
    ```
    """

    def call(self, inputs):
        return untile_members(inputs, selected_count(self.num_members), self.order)

    def compute_output_shape(self, input_shape):
        batch = self._member_batch(input_shape[0])
        return (batch, self.num_members) + tuple(input_shape[1:])


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class FirstMemberRows(_MemberRows):
    """`(num_members * batch, ...)` member rows -> the first member's
    `(batch, ...)`: one copy of a batch tiled by `TileMembers`, for layers
    every member computes alike.

    Args:
        num_members: int.
        order: `"member_major"` (default) or `"batch_major"`, as the rows
            were tiled.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import FirstMemberRows

    FirstMemberRows(3)(np.zeros((6, 17, 8), "float32")).shape  # (2, 17, 8)
    ```
    """

    def call(self, inputs):
        return untile_members(inputs, selected_count(self.num_members), self.order)[:, 0]

    def compute_output_shape(self, input_shape):
        return (self._member_batch(input_shape[0]),) + tuple(input_shape[1:])
