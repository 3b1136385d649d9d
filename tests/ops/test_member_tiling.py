"""The member-row layout API: both row orders against index arithmetic in
NumPy, round trips, and the layers' configs."""

import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez


@pytest.mark.parametrize("order", ["member_major", "batch_major"])
def test_tile_untile_and_fold_follow_the_row_order(order):
    batch, members = 3, 4
    x = np.random.default_rng(0).normal(size=(batch, 2, 5)).astype("float32")
    tiled = to_np(ez.ops.tile_members(x, members, order=order))
    assert tiled.shape == (batch * members, 2, 5)
    for b in range(batch):
        for m in range(members):
            row = m * batch + b if order == "member_major" else b * members + m
            np.testing.assert_array_equal(tiled[row], x[b])
    # Distinct member rows: untile puts row (b, m) at [b, m], fold inverts.
    rows = np.arange(batch * members * 2, dtype="float32").reshape(batch * members, 2)
    split = to_np(ez.ops.untile_members(rows, members, order=order))
    for b in range(batch):
        for m in range(members):
            row = m * batch + b if order == "member_major" else b * members + m
            np.testing.assert_array_equal(split[b, m], rows[row])
    np.testing.assert_array_equal(to_np(ez.ops.fold_members(split, order=order)), rows)
    layer = ez.layers.TileMembers(members, order=order)
    assert layer.get_config()["order"] == order
    np.testing.assert_array_equal(to_np(layer(x)), tiled)
    untile = ez.layers.UntileMembers.from_config(
        ez.layers.UntileMembers(members, order=order).get_config()
    )
    np.testing.assert_array_equal(to_np(untile(rows)), split)


def test_a_bad_order_is_named():
    with pytest.raises(ValueError, match="order"):
        ez.ops.tile_members(np.zeros((2, 3)), 2, order="rows")
    with pytest.raises(ValueError, match="order"):
        ez.layers.UntileMembers(2, order="columns")
    with pytest.raises(ValueError, match="batch and a member axis"):
        ez.ops.fold_members(np.zeros((3,)))
