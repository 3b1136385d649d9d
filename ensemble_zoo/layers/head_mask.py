"""`HeadMask`: which attention heads each member keeps, on member-major rows."""

import keras
import numpy as np
from keras import ops

from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.layers.member_selection import selected_members
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import static_shape

#: How the heads lie in the input: on their own axis before the features
#: (`(..., heads, head_dim)`, the input of keras' `MultiHeadAttention`
#: output projection) or side by side on the last axis (`(..., heads *
#: head_dim)`, a `Dense` output projection's).
LAYOUTS = ("split", "flat")


def check_head_masks(masks, num_heads=None, name="head_masks"):
    """`masks` as a 0 / 1 float array `(members, heads)`; a `ValueError`
    naming `name` unless it is a non-empty 2-D array of 0 / 1 values with
    `num_heads` heads (when given) in which every member keeps a head."""
    array = np.asarray(masks)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"`{name}` must be a (members, heads) array; got shape {array.shape}.")
    if not np.isin(array, (0, 1)).all():
        raise ValueError(f"`{name}` must hold 0 / 1 (or bool) values.")
    if num_heads is not None and array.shape[1] != num_heads:
        raise ValueError(f"`{name}` must have {num_heads} heads; got {array.shape[1]}.")
    if not array.any(axis=1).all():
        raise ValueError(f"Every member must keep a head; `{name}` has a member that keeps none.")
    return array.astype("float32")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HeadMask(keras.layers.Layer):
    """Zeroes, for each member's rows, the attention heads it does not keep.

    The input is the input of an attention layer's output projection on a
    member-major batch `(members * batch, ..., features)` (rows `m *
    batch` to `(m + 1) * batch` are member `m`'s, as
    `ensemble_zoo.ops.tile_members` lays them out): each head's context
    vectors, on a head axis (`layout="split"`, `(..., heads, head_dim)`)
    or side by side (`layout="flat"`, `(..., heads * head_dim)`). Member
    `m`'s rows keep the heads where `masks[m]` is 1; the output projection
    then computes what it computes with the other heads removed (the
    Hydra paper's pruned members, "Ensembling Pruned Attention Heads for
    Uncertainty-Aware Efficient Transformers"). The masks are a
    non-trainable weight, saved with the model. Within `single_member(m)`
    the rows are member `m`'s alone.

    Args:
        masks: 0 / 1 array `(members, heads)`, the heads each member keeps.
        layout: `"split"` or `"flat"`, where the heads lie in the input.
        one_copy: bool. `True`: every member keeps the same heads (the
            rows of `masks` must be equal) and the first row applies to
            every input row, so the layer computes the same on member-major
            rows and on one copy of the batch, as a shared trunk runs it
            (`ensemble_zoo.models.shared_trunk`); the rows must stay equal
            (only the first is read). Defaults to `False`.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import HeadMask

    layer = HeadMask([[1, 0], [0, 1]], layout="flat")
    x = np.ones((2 * 3, 5, 8), "float32")  # 2 members x batch 3, 2 heads of 4
    y = np.asarray(layer(x))
    y[0, 0], y[3, 0]  # member 0 keeps head 0, member 1 head 1
    ```
    """

    def __init__(self, masks, layout="split", one_copy=False, **kwargs):
        super().__init__(**kwargs)
        self.initial_masks = check_head_masks(masks, name="masks")
        self.num_members, self.num_heads = self.initial_masks.shape
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.one_copy = check_bool(one_copy, "one_copy")
        if self.one_copy and not (self.initial_masks == self.initial_masks[:1]).all():
            raise ValueError(
                "`one_copy=True` needs every member to keep the same heads (equal rows of "
                f"`masks`); got {self.initial_masks.astype(int).tolist()}."
            )

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if self.layout == "split":
            if len(input_shape) < 3 or input_shape[-2] != self.num_heads:
                raise ValueError(
                    f"HeadMask '{self.name}' (layout='split') expects `inputs` of shape "
                    f"(rows, ..., {self.num_heads}, head_dim); got {input_shape}."
                )
            self.head_dim = int(input_shape[-1])
        else:
            features = input_shape[-1]
            if features is None or features % self.num_heads:
                raise ValueError(
                    f"HeadMask '{self.name}' (layout='flat') expects a last axis of "
                    f"{self.num_heads} heads x head_dim features; got {input_shape}."
                )
            self.head_dim = int(features) // self.num_heads
        self.masks = self.add_weight(
            name="masks",
            shape=self.initial_masks.shape,
            initializer=keras.initializers.Constant(self.initial_masks),
            trainable=False,
        )

    def call(self, inputs):
        if self.one_copy:
            mask = ops.cast(self.masks[0], inputs.dtype)
            return self._masked(inputs, mask[None], 1)
        static = static_shape(inputs)
        members = selected_count(self.num_members)
        if static[0] is not None and static[0] % members:
            raise ValueError(
                f"HeadMask '{self.name}' expects member-major rows, a multiple of "
                f"{members}; got {static[0]}."
            )
        masks, members = selected_members(ops.cast(self.masks, inputs.dtype), self.num_members)
        return self._masked(inputs, masks, members)

    def _masked(self, inputs, masks, members):
        """`inputs` (rows of `members` members, member-major) with member
        `m`'s heads outside `masks[m]` zeroed."""
        shape = ops.shape(inputs)
        x = ops.reshape(inputs, (members, -1, self.num_heads, self.head_dim))
        x = x * masks[:, None, :, None]
        return ops.reshape(x, shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "masks": self.initial_masks.astype(int).tolist(),
            "layout": self.layout,
            "one_copy": self.one_copy,
        }
