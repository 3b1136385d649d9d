import os

import keras
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import to_np

from ensemble_zoo.layers import GroupedLayerNormalization


@pytest.mark.parametrize("shape", [(4, 3, 16), (2, 3, 5, 16)])
def test_equals_separate_layer_norms(rng, shape):
    layer = GroupedLayerNormalization(num_members=3, epsilon=1e-6)
    x = rng.normal(size=shape).astype("float32") * 3 + 1
    layer.build(x.shape)
    gamma = rng.normal(size=(3, shape[-1])).astype("float32")
    beta = rng.normal(size=(3, shape[-1])).astype("float32")
    layer.set_weights([gamma, beta])
    got = to_np(layer(x))
    expected = []
    for m in range(3):
        norm = keras.layers.LayerNormalization(epsilon=1e-6)
        norm.build(x[:, m].shape)
        norm.set_weights([gamma[m], beta[m]])
        expected.append(to_np(norm(x[:, m])))
    np.testing.assert_allclose(got, np.stack(expected, axis=1), atol=1e-5)


def test_without_scale_and_center_matches_numpy(rng):
    layer = GroupedLayerNormalization(2, epsilon=1e-5, center=False, scale=False)
    x = rng.normal(size=(3, 2, 6)).astype("float32")
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(to_np(layer(x)), expected, atol=1e-5)
    assert layer.weights == []


def test_round_trip_and_jit(tmp_path, rng):
    inputs = keras.Input((3, 4, 8))
    model = keras.Model(inputs, GroupedLayerNormalization(3)(inputs))
    model.compile("adam", "mse", jit_compile=jit_compile())
    x = rng.normal(size=(16, 3, 4, 8)).astype("float32")
    model.fit(x, x * 2 + 1, epochs=2, verbose=0)
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(to_np(restored(x)), model.predict(x, verbose=0), atol=1e-5)


def test_wrong_member_count_is_a_clear_error():
    with pytest.raises(ValueError, match="num_members=3"):
        GroupedLayerNormalization(3)(np.zeros((2, 4, 8), "float32"))
