import os

import keras
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import to_np

from ensemble_zoo.layers import GroupedDense
from ensemble_zoo.layers import MemberInitializer


def separate_dense_loop(layer, x):
    """Reference: one keras Dense per member, applied in a Python loop."""
    outputs = []
    for m in range(layer.num_members):
        dense = keras.layers.Dense(
            layer.units, activation=layer.activation, use_bias=layer.use_bias
        )
        dense.build(x.shape[2:])
        weights = [to_np(layer.kernel[m])]
        if layer.use_bias:
            weights.append(to_np(layer.bias[m]))
        dense.set_weights(weights)
        outputs.append(to_np(dense(x[:, m])))
    return np.stack(outputs, axis=1)


@pytest.mark.parametrize(
    "shape,use_bias,activation",
    [
        ((4, 3, 16), True, None),
        ((4, 3, 5, 16), True, "gelu"),
        ((2, 2, 3, 5, 16), False, "relu"),
        ((4, 1, 16), True, None),
    ],
)
def test_equals_separate_dense_layers(rng, shape, use_bias, activation):
    layer = GroupedDense(
        units=7,
        num_members=shape[1],
        use_bias=use_bias,
        activation=activation,
        bias_initializer="random_normal",
    )
    x = rng.normal(size=shape).astype("float32")
    got = to_np(layer(x))
    assert got.shape == shape[:-1] + (7,)
    np.testing.assert_allclose(got, separate_dense_loop(layer, x), atol=1e-5)


def test_members_are_initialized_independently_with_dense_scale():
    layer = GroupedDense(units=256, num_members=4)
    layer.build((None, 4, 256))
    kernel = to_np(layer.kernel)
    # Glorot uniform on (256, 256): limit sqrt(6 / 512), variance 1/256.
    assert np.abs(kernel).max() <= np.sqrt(6 / 512) + 1e-7
    np.testing.assert_allclose(kernel.var(axis=(1, 2)), 1 / 256, rtol=0.05)
    assert not np.allclose(kernel[0], kernel[1])


def test_member_initializer_seeds_are_reproducible():
    init = MemberInitializer(keras.initializers.GlorotUniform(seed=3))
    a, b = to_np(init((3, 4, 5))), to_np(init((3, 4, 5)))
    np.testing.assert_array_equal(a, b)
    single = to_np(keras.initializers.GlorotUniform(seed=4)((4, 5)))
    np.testing.assert_array_equal(a[1], single)  # member 1 has seed 3 + 1
    restored = keras.initializers.deserialize(keras.initializers.serialize(init))
    np.testing.assert_array_equal(to_np(restored((3, 4, 5))), a)


def test_config_and_weights_round_trip(tmp_path, rng):
    inputs = keras.Input((3, 8))
    layer = GroupedDense(5, num_members=3, activation="tanh", kernel_regularizer="l2")
    model = keras.Model(inputs, layer(inputs))
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(to_np(restored(x)), to_np(model(x)), atol=1e-6)
    config = layer.get_config()
    assert GroupedDense.from_config(config).get_config() == config


def test_trains_under_jit(rng):
    inputs = keras.Input((3, 8))
    outputs = GroupedDense(2, num_members=3)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.05), "mse", jit_compile=jit_compile())
    x = rng.normal(size=(64, 3, 8)).astype("float32")
    true_kernel = rng.normal(size=(3, 8, 2)).astype("float32")
    y = np.einsum("bmi,mio->bmo", x, true_kernel)
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=50, verbose=0)
    assert model.evaluate(x, y, verbose=0) < 0.1 * before
    np.testing.assert_allclose(model.predict(x, verbose=0), to_np(model(x)), atol=1e-5)


def test_bad_inputs_are_clear_errors():
    layer = GroupedDense(4, num_members=3)
    with pytest.raises(ValueError, match="num_members=3"):
        layer(np.zeros((2, 5, 8), "float32"))
    with pytest.raises(ValueError, match="at least 3 axes"):
        GroupedDense(4, num_members=3)(np.zeros((2, 8), "float32"))
    with pytest.raises(ValueError, match="num_members"):
        GroupedDense(4, num_members=0)
    with pytest.raises(ValueError, match="units"):
        GroupedDense(2.5, num_members=2)
    layer = GroupedDense(4, num_members=3)
    layer(np.zeros((2, 3, 8), "float32"))
    with pytest.raises(ValueError, match="8 input features"):
        layer(np.zeros((2, 3, 6), "float32"))


def test_member_major_rows_equal_separate_dense_layers_and_one_member_alone(rng):
    """Members folded into the rows (`member_layout="member_major"`): the
    rows of member m go through member m's Dense, also inside
    `single_member(m)`, and the config keeps the layout."""
    from ensemble_zoo.layers.member_selection import single_member
    from ensemble_zoo.ops import tile_members
    from ensemble_zoo.ops import untile_members

    layer = GroupedDense(units=5, num_members=3, activation="tanh", member_layout="member_major")
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    rows = tile_members(x, 3)
    outputs = to_np(untile_members(layer(rows), 3))
    expected = separate_dense_loop(layer, np.stack([x] * 3, axis=1))
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    with single_member(2):
        np.testing.assert_allclose(to_np(layer(x)), expected[:, 2], atol=1e-5)
    clone = GroupedDense.from_config(layer.get_config())
    assert clone.member_layout == "member_major"
    with pytest.raises(ValueError, match="member_layout"):
        GroupedDense(units=5, num_members=3, member_layout="batch_major")
