"""NumPy integer scalars are accepted wherever Python ints are, with the
same results and configs that stay JSON-serializable; bools, floats and
strings are still rejected."""

import json

import numpy as np
import pytest
from keras import ops

import ensemble_zoo as ez


def test_numpy_integers_act_as_python_ints():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=50).astype("float32")
    labels = rng.integers(0, 4, size=50)
    assert ez.metrics.expected_calibration_error(
        probs, labels, num_bins=np.int64(15)
    ) == ez.metrics.expected_calibration_error(probs, labels, num_bins=15)
    x = rng.normal(size=(2, 5)).astype("float32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(ez.ops.tile_members(x, np.int64(3))),
        ops.convert_to_numpy(ez.ops.tile_members(x, 3)),
    )
    metric = ez.metrics.ExpectedCalibrationError(num_bins=np.int32(10))
    layer = ez.layers.GroupedDense(np.int64(4), num_members=np.int32(2))
    for config in (metric.get_config(), layer.get_config()):
        json.dumps(config)  # Python ints, not NumPy scalars
    assert type(layer.units) is int and type(metric.num_bins) is int


@pytest.mark.parametrize("bad", [True, np.bool_(True), 2.0, np.float32(2.0), "3", 0, np.int64(-1)])
def test_non_integers_are_still_rejected(bad):
    x = np.zeros((2, 5), "float32")
    with pytest.raises(ValueError, match="`num_members` must be a positive integer"):
        ez.ops.tile_members(x, bad)
