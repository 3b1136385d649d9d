import keras
import numpy as np
from keras import ops

from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.layers.member_selection import selected_members
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_built_features
from ensemble_zoo.utils.validation import check_member_rows
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import static_shape

MAX_DRAWS = 200


def masksembles_masks(num_channels, num_masks, scale, seed=None):
    """Masksembles' fixed binary masks (Durasov et al., CVPR 2021, §3.2).

    Each of the `num_masks` masks switches on `m` of `round(m * scale)`
    positions, drawn uniformly without replacement; positions no mask uses
    are dropped, which leaves `round(m * scale) * (1 - (1 - 1/scale)^n)`
    columns on average. `m` is searched (nearest first, then more random
    draws) until exactly `num_channels` columns remain. `scale` sets the
    overlap: `1` gives identical all-ones masks (one model), larger values
    make masks sparser and closer to disjoint (an explicit ensemble); each
    mask keeps `m / num_channels ~ 1 / (scale * (1 - (1 - 1/scale)^n))` of
    the channels.

    Args:
        num_channels: int, the width the masks apply to.
        num_masks: int, one mask per member.
        scale: float >= 1.
        seed: optional int; the masks are a deterministic function of the
            arguments and the seed.

    Returns:
        A float32 `(num_masks, num_channels)` array of 0/1; every row has
        the same number of ones and every column at least one.

    Raises:
        ValueError: naming the argument, or when no `m` gives exactly
            `num_channels` columns (very large `scale` for few channels).
    """
    num_channels = check_positive_int(num_channels, "num_channels")
    num_masks = check_positive_int(num_masks, "num_masks")
    scale = check_real(scale, "scale", low=1.0)
    if scale == 1.0 or num_masks == 1:
        return np.ones((num_masks, num_channels), "float32")
    rng = np.random.default_rng(seed)
    used_fraction = 1.0 - (1.0 - 1.0 / scale) ** num_masks
    estimate = num_channels / (scale * used_fraction)
    candidates = sorted(
        {max(1, int(round(estimate)) + k) for k in range(-3, 4)}, key=lambda m: abs(m - estimate)
    )
    for _ in range(MAX_DRAWS):
        for m in candidates:
            positions = max(m, int(round(m * scale)))
            masks = np.zeros((num_masks, positions), "float32")
            for row in masks:
                row[rng.choice(positions, m, replace=False)] = 1.0
            masks = masks[:, masks.any(axis=0)]
            if masks.shape[1] == num_channels:
                return masks
    raise ValueError(
        f"No Masksembles masks of exactly {num_channels} channels for "
        f"num_masks={num_masks}, scale={scale}: lower `scale` or widen the layer."
    )


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MasksemblesMask(keras.layers.Layer):
    """Applies member `m`'s fixed Masksembles mask to its slice of a
    member-major tiled batch.

    The input is `(members * batch, ..., channels)`, as produced by
    `ensemble_zoo.ops.tile_members`; rows `[m * batch, (m + 1) * batch)`
    are multiplied by mask `m` on the last axis. The masks
    (`masksembles_masks`) are generated once, at build, and kept in a
    non-trainable `masks` variable `(members, channels)`, so they are saved
    with the weights. With `rescale=True` the kept channels are scaled by
    `channels / kept` (as inverted dropout does), so that a layer
    converted from a trained model starts at the same activation scale (a
    decision; the paper does not rescale, which a following layer absorbs
    while training).

    Args:
        num_members: int.
        scale: float >= 1, the masks' overlap parameter. Defaults to `2.0`.
        rescale: bool. Defaults to `True`.
        seed: optional int.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import MasksemblesMask

    layer = MasksemblesMask(num_members=4, scale=2.0, seed=0)
    x = np.ones((4 * 2, 96), "float32")  # 4 members x batch 2
    y = layer(x)
    (np.asarray(layer.masks) > 0).sum(axis=1)  # each member keeps 52 of 96
    ```
    """

    def __init__(self, num_members, scale=2.0, rescale=True, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")
        self.scale = check_real(scale, "scale", low=1.0)
        self.rescale = check_bool(rescale, "rescale")
        self.seed = seed

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError("`MasksemblesMask` needs a known last (channel) axis.")
        masks = masksembles_masks(int(channels), self.num_members, self.scale, self.seed)
        self.masks = self.add_weight(
            name="masks",
            shape=masks.shape,
            initializer=keras.initializers.Constant(masks),
            trainable=False,
        )

    def member_factors(self):
        """`(members, channels)` multipliers: the masks, rescaled if set."""
        masks = ops.cast(self.masks, self.compute_dtype)
        if not self.rescale:
            return masks
        kept = ops.sum(masks, axis=-1, keepdims=True)
        return masks * (masks.shape[-1] / ops.maximum(kept, 1.0))

    def call(self, inputs):
        static = static_shape(inputs)
        check_built_features(self, static, (self.masks.shape[-1],))
        check_member_rows(self, static, selected_count(self.num_members))
        shape = ops.shape(inputs)
        factors, members = selected_members(self.member_factors(), self.num_members)
        x = ops.reshape(inputs, (members, -1, shape[-1]))
        x = x * factors[:, None, :]
        return ops.reshape(x, shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_members": self.num_members,
            "scale": self.scale,
            "rescale": self.rescale,
            "seed": self.seed,
        }
