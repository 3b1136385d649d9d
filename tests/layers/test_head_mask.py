import numpy as np
import pytest
from zoo_testing import to_np

from ensemble_zoo.layers import HeadMask
from ensemble_zoo.ops import tile_members


def test_one_copy_mask_computes_alike_on_one_copy_and_member_rows():
    """Members that keep the same heads: the layer zeroes the same heads
    of every row, so one copy of the batch gives each member's rows."""
    x = np.random.default_rng(0).normal(size=(2, 5, 3, 4)).astype("float32")
    layer = HeadMask([[1, 0, 1]] * 3, layout="split", one_copy=True)
    expected = x * np.array([1.0, 0.0, 1.0])[None, None, :, None]
    np.testing.assert_allclose(to_np(layer(x)), expected)
    np.testing.assert_allclose(to_np(layer(tile_members(x, 3))), np.concatenate([expected] * 3))
    per_member = HeadMask([[1, 0, 1]] * 3, layout="split")
    np.testing.assert_allclose(
        to_np(per_member(tile_members(x, 3))), np.concatenate([expected] * 3)
    )
    with pytest.raises(ValueError, match="same heads"):
        HeadMask([[1, 0, 1], [1, 1, 1]], one_copy=True)
