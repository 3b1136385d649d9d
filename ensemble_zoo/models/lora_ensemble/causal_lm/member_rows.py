"""The causal LMs' member layout: members as batch-major rows.

A LoRA-Ensemble decoder runs every member in one batch: row `b * M + m`
of its inputs, activations and KV cache is member `m`'s copy of prompt
`b`. Axis 0 then stays ordered by prompt, so keras-hub's samplers (which
repeat, gather and reorder rows of axis 0 for beams) and its KV cache
work unchanged on `(batch, members, ...)` arrays folded to `(batch * M,
...)`; public outputs keep members on axis 1, as every zoo model does.
"""

import keras
from keras import ops

from ensemble_zoo.utils.validation import check_positive_int


def repeat_rows(x, num_members):
    """`(batch, ...)` -> batch-major `(batch * num_members, ...)`; `None`
    stays `None`."""
    return None if x is None else ops.repeat(x, num_members, axis=0)


def split_members(x, num_members):
    """Batch-major `(batch * members, ...)` -> `(batch, members, ...)`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1, num_members) + tuple(shape[1:]))


def merge_members(x):
    """`(batch, members, ...)` -> batch-major `(batch * members, ...)`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1,) + tuple(shape[2:]))


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class RepeatMembers(keras.layers.Layer):
    """`(batch, ...)` -> batch-major `(batch * members, ...)`: row
    `b * members + m` is member `m`'s copy of sample `b`.

    Args:
        num_members: int.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")

    def call(self, inputs):
        return repeat_rows(inputs, self.num_members)

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        batch = None if batch is None else batch * self.num_members
        return (batch,) + tuple(input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SplitMembers(keras.layers.Layer):
    """Batch-major `(batch * members, ...)` -> `(batch, members, ...)`.

    Args:
        num_members: int.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")

    def call(self, inputs):
        return split_members(inputs, self.num_members)

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        batch = None if batch is None else batch // self.num_members
        return (batch, self.num_members) + tuple(input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members}
