import keras
import numpy as np
import pytest
from keras import ops
from zoo_testing import to_np

from ensemble_zoo.layers import LossPredictionHead
from ensemble_zoo.utils.gradients import loss_gradients


def numpy_head(head, x):
    """The paper's head in NumPy: Dense -> LeakyReLU(0.01) ... -> softplus."""
    for layer in head.hidden:
        x = x @ to_np(layer.kernel) + to_np(layer.bias)
        x = np.where(x > 0, x, 0.01 * x)
    z = (x @ to_np(head.score.kernel) + to_np(head.score.bias))[..., 0]
    return np.log1p(np.exp(z)) + 1e-6


def test_equals_a_numpy_mlp_and_is_positive():
    keras.utils.set_random_seed(0)
    head = LossPredictionHead(hidden_units=(8, 6))
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    out = to_np(head(x))
    assert out.shape == (5,) and (out > 0).all()
    np.testing.assert_allclose(out, numpy_head(head, x), rtol=1e-5, atol=1e-6)
    assert [tuple(w.shape) for w in head.weights] == [(4, 8), (8,), (8, 6), (6,), (6, 1), (1,)]
    # Per token: (batch, tokens, dim) -> (batch, tokens), also after build.
    tokens = np.random.default_rng(1).normal(size=(2, 3, 4)).astype("float32")
    np.testing.assert_allclose(to_np(head(tokens)), numpy_head(head, tokens), rtol=1e-5, atol=1e-6)
    assert head.compute_output_shape((2, 3, 4)) == (2, 3)


def test_default_sizes_match_the_paper():
    head = LossPredictionHead()
    head.build((None, 768))
    assert head.count_params() == 656_897  # App. A, ViT-B: 768 -> 512 -> 512 -> 1


def test_config_round_trip():
    keras.utils.set_random_seed(0)
    head = LossPredictionHead(
        hidden_units=(8,), negative_slope=0.1, epsilon=1e-3, stop_gradient=False
    )
    x = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    out = to_np(head(x))
    restored = LossPredictionHead.from_config(head.get_config())
    restored.build((None, 4))
    restored.set_weights(head.get_weights())
    np.testing.assert_allclose(to_np(restored(x)), out, atol=1e-7)
    assert restored.stop_gradient is False and restored.negative_slope == 0.1


def test_stop_gradient_blocks_the_input_gradient():
    x = np.random.default_rng(2).normal(size=(4, 4)).astype("float32")
    for stop, expect_zero in ((True, True), (False, False)):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        features = keras.layers.Dense(4, name="features")(inputs)
        model = keras.Model(
            inputs, LossPredictionHead(hidden_units=(8,), stop_gradient=stop)(features)
        )
        grads = loss_gradients(
            model,
            lambda y, u: ops.sum(u),
            x,
            np.zeros(4),
            model.get_layer("features").trainable_variables,
        )
        assert (max(np.abs(g).max() for g in grads) == 0.0) == expect_zero


def test_bad_arguments():
    with pytest.raises(ValueError, match="hidden_units"):
        LossPredictionHead(hidden_units=(0,))
    with pytest.raises(ValueError, match="negative_slope"):
        LossPredictionHead(negative_slope=-1.0)
    with pytest.raises(ValueError, match=r"\(batch, dim\)"):
        LossPredictionHead()(np.zeros((4,), "float32"))
