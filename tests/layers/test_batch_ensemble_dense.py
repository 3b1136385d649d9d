import json

import numpy as np
import pytest
from keras import ops

from ensemble_zoo.layers import BatchEnsembleDense


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def reference(layer, x, num_members):
    """Member m alone: a dense layer with kernel W * outer(r_m, s_m) and
    bias b_m, applied to member m's rows (a loop, in float64)."""
    w, r, s = numpy(layer.kernel), numpy(layer.fast_in), numpy(layer.fast_out)
    b = numpy(layer.bias)
    batch = x.shape[0] // num_members
    outputs = []
    for m in range(num_members):
        rows = x[m * batch : (m + 1) * batch].astype(np.float64)
        flat = rows.reshape(rows.shape[: rows.ndim - layer.num_input_axes] + (-1,))
        y = flat @ (w * np.outer(r[m], s[m])) + b[m]
        outputs.append(y.reshape(y.shape[:-1] + layer.units))
    return np.concatenate(outputs)


@pytest.mark.parametrize(
    "units, input_shape, axes", [(5, (6, 3, 4), 1), ((2, 3), (6, 3, 4), 1), (7, (6, 3, 2, 4), 2)]
)
def test_each_member_equals_a_dense_layer_with_its_rank_one_kernel(units, input_shape, axes):
    layer = BatchEnsembleDense(
        units, num_members=3, num_input_axes=axes, bias_initializer="random_normal", seed=1
    )
    x = np.random.default_rng(0).normal(size=input_shape).astype("float32")
    y = numpy(layer(x))
    np.testing.assert_allclose(y, reference(layer, x, 3), atol=1e-5)
    np.testing.assert_allclose(
        numpy(layer.member_kernels()),
        numpy(layer.kernel)[None]
        * numpy(layer.fast_in)[:, :, None]
        * numpy(layer.fast_out)[:, None, :],
        atol=1e-6,
    )


def test_parameter_count_is_the_published_formula():
    """Wen et al.: a shared d_in x d_out kernel plus M * (d_in + d_out) fast
    weights, plus one bias per member."""
    d_in, d_out, m = 12, 5, 4
    layer = BatchEnsembleDense(d_out, num_members=m)
    layer.build((None, d_in))
    assert layer.count_params() == d_in * d_out + m * (d_in + d_out) + m * d_out
    no_bias = BatchEnsembleDense(d_out, m, use_bias=False)
    no_bias.build((None, d_in))
    assert no_bias.count_params() == d_in * d_out + m * (d_in + d_out)


def test_fast_weight_initializers():
    sign = BatchEnsembleDense(64, 4, fast_weight_initializer="random_sign", seed=0)
    sign.build((None, 128))
    values = numpy(sign.fast_in)
    assert set(np.unique(values)) == {-1.0, 1.0} and abs(values.mean()) < 0.1
    normal = BatchEnsembleDense(64, 4, seed=0)
    normal.build((None, 128))
    values = numpy(normal.fast_in)
    assert abs(values.mean() - 1.0) < 0.05 and abs(values.std() - 0.5) < 0.05
    assert not np.allclose(values[0], values[1])  # members differ


def test_config_round_trip_and_errors():
    layer = BatchEnsembleDense((2, 3), 2, num_input_axes=1, activation="gelu", seed=3)
    x = np.random.default_rng(1).normal(size=(4, 5)).astype("float32")
    y = numpy(layer(x))
    config = json.loads(json.dumps(layer.get_config()))
    clone = BatchEnsembleDense.from_config(config)
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(numpy(clone(x)), y, atol=1e-6)
    with pytest.raises(ValueError, match="`inputs` have 5 rows, not a multiple of it"):
        layer(np.zeros((5, 5), "float32"))
    with pytest.raises(ValueError, match="was built for input features \\(5,\\)"):
        layer(np.zeros((4, 6), "float32"))


@pytest.mark.parametrize("rows", [1, 40])  # row scaling, then the merged kernel
def test_single_member_equals_its_rows_of_the_tiled_pass(rows):
    """Within `single_member(m)` the layer takes member m's rows alone;
    few rows scale rows, many rows scale the kernel, with the same result."""
    from ensemble_zoo.layers.member_selection import single_member

    layer = BatchEnsembleDense(6, num_members=3, fast_weight_stddev=0.5, seed=0)
    x = np.random.default_rng(0).normal(size=(3 * rows, 5)).astype("float32")
    layer.build(x.shape)
    layer.bias.assign(np.random.default_rng(1).normal(size=layer.bias.shape))
    tiled = numpy(layer(x)).reshape(3, rows, 6)
    for m in range(3):
        with single_member(m):
            np.testing.assert_allclose(
                numpy(layer(x[m * rows : (m + 1) * rows])), tiled[m], atol=1e-5
            )
