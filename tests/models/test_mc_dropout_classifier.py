import keras
import numpy as np
import pytest
from conftest import BACKEND
from conftest import jit_compile
from conftest import requires_jit
from conftest import requires_saved_model
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import MCDropoutClassifier


def mlp(seed=0, rate=0.3, batch_norm=False):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6,))
    x = keras.layers.Dense(32, activation="relu")(inputs)
    if batch_norm:
        x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Dropout(rate)(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def data(n=5):
    return np.random.default_rng(0).normal(size=(n, 6)).astype("float32")


def test_rate_zero_gives_identical_members_equal_to_the_model():
    model = mlp()
    mc = MCDropoutClassifier.from_model(model, num_members=4, rate=0.0)
    out = mc.predict(data(), verbose=0)
    assert out.shape == (5, 4, 3)
    for m in range(4):
        np.testing.assert_allclose(out[:, m], to_np(model(data())), atol=1e-6)


def test_batch_normalization_keeps_its_moving_statistics():
    """Only the dropout layers sample: with rate 0 a model with trained
    BatchNormalization statistics gives its inference logits, and `fit`
    leaves the statistics (and the source model) as they were."""
    model = mlp(batch_norm=True)
    norm = model.layers[2]
    norm.moving_mean.assign(np.linspace(-1, 1, 32).astype("float32"))
    norm.moving_variance.assign(np.linspace(0.5, 2, 32).astype("float32"))
    mc = MCDropoutClassifier.from_model(model, num_members=3, rate=0.0)
    expected = to_np(model(data(), training=False))
    for m in range(3):
        np.testing.assert_allclose(mc.predict(data(), verbose=0)[:, m], expected, atol=1e-5)
    mc.compile(optimizer="sgd")
    mc.fit(data(8), np.arange(8) % 3, epochs=1, batch_size=4, verbose=0)
    copy = next(
        l for l in mc.backbone.model.layers if isinstance(l, keras.layers.BatchNormalization)
    )
    np.testing.assert_array_equal(to_np(copy.moving_mean), to_np(norm.moving_mean))
    assert norm.trainable


def test_a_keras_hub_resnet_gives_its_inference_logits_at_rate_zero():
    """A keras-hub family built on BatchNormalization (ResNet, whose head
    has a Dropout): its training-mode logits differ, the ensemble's equal
    its inference logits."""
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64],
        stackwise_num_blocks=[1],
        stackwise_num_strides=[1],
        block_type="basic_block",
        image_shape=(8, 8, 3),
    )
    resnet = keras_hub.models.ResNetImageClassifier(backbone=backbone, num_classes=3, dropout=0.1)
    for layer in resnet._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(np.full(layer.moving_mean.shape, 0.3, "float32"))
    x = np.random.default_rng(0).random((2, 8, 8, 3)).astype("float32")
    expected = to_np(resnet(x))
    mc = MCDropoutClassifier(resnet, num_members=2, rate=0.0)
    np.testing.assert_allclose(mc.predict(x, verbose=0)[:, 1], expected, atol=1e-5)
    # (Last: training mode moves the model's BatchNormalization statistics.)
    assert np.abs(to_np(resnet(x, training=True)) - expected).max() > 1e-4


def test_members_are_dropout_samples_of_the_model():
    """With an identity output layer after the dropout, each member's logits
    are the hidden activations times a 0 / (1 / keep) mask."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    hidden_layer = keras.layers.Dense(4, activation="relu")
    x = keras.layers.Dropout(0.5)(hidden_layer(inputs))
    out_layer = keras.layers.Dense(4, kernel_initializer="identity")
    model = keras.Model(inputs, out_layer(x))
    mc = MCDropoutClassifier.from_model(model, num_members=200, seed=1)
    x = data(3)
    out = mc.predict(x, verbose=0)
    hidden = np.maximum(x @ to_np(hidden_layer.kernel) + to_np(hidden_layer.bias), 0)
    active = np.broadcast_to(hidden[:, None, :] > 1e-3, out.shape)
    ratio = out / np.where(active, hidden[:, None, :], 1.0)
    assert np.all(np.isclose(ratio, 0, atol=1e-4) | np.isclose(ratio, 2, atol=1e-4) | ~active)
    kept = np.isclose(ratio, 2, atol=1e-4)[active]
    assert 0.4 < kept.mean() < 0.6  # keep probability 0.5
    assert np.abs(out[:, 0] - out[:, 1]).max() > 1e-3


def test_seeded_samples_are_reproducible():
    x = data()
    first = MCDropoutClassifier.from_model(mlp(), num_members=4, seed=3)
    second = MCDropoutClassifier.from_model(mlp(), num_members=4, seed=3)
    a = first.predict(x, verbose=0)
    np.testing.assert_array_equal(a, second.predict(x, verbose=0))
    # Successive calls draw fresh samples.
    assert np.abs(first.predict(x, verbose=0) - a).max() > 1e-3


def test_preset_round_trip_and_errors(tmp_path):
    mc = MCDropoutClassifier.from_model(mlp(rate=0.0), num_members=3, rate=0.2, seed=0)
    mc.save_to_preset(str(tmp_path / "p"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "p"))
    assert isinstance(loaded, MCDropoutClassifier) and loaded.rate == 0.2
    np.testing.assert_allclose(
        loaded.predict(data(), verbose=0), mc.predict(data(), verbose=0), atol=1e-6
    )
    # A backbone carries its rate and seed: `None` takes them, others clash.
    again = MCDropoutClassifier(backbone=mc.backbone, num_members=2, seed=0)
    assert (again.rate, again.seed) == (0.2, 0)
    with pytest.raises(ValueError, match="was built with .*'rate': 0.5"):
        MCDropoutClassifier(backbone=mc.backbone, num_members=2, rate=0.5)
    with pytest.raises(ValueError, match="rate"):
        MCDropoutClassifier(mlp(), num_members=2, rate=1.0)
    inputs = keras.Input((6,))
    with pytest.raises(ValueError, match="no Dropout"):
        MCDropoutClassifier(keras.Model(inputs, keras.layers.Dense(3)(inputs)), 2)


@requires_jit
def test_trains_with_jit_compile():
    mc = MCDropoutClassifier.from_model(mlp(), num_members=4, seed=0)
    mc.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    x, y = data(64), np.arange(64) % 3
    history = mc.fit(x, y, epochs=5, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


@requires_saved_model
def test_saved_model_export_with_rate_zero_matches_keras(tmp_path):
    import tensorflow as tf

    mc = MCDropoutClassifier.from_model(mlp(), num_members=3, rate=0.0)
    mc.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    served = loaded.serve(tf.constant(data()))
    np.testing.assert_allclose(
        served["member_logits"].numpy(), mc.predict(data(), verbose=0), atol=1e-5
    )
    # With dropout on, only TensorFlow's SavedModel keeps the seed state
    # (and samples); elsewhere an artifact would repeat one set of masks.
    mc = MCDropoutClassifier.from_model(mlp(), num_members=3, seed=0)
    if BACKEND != "tensorflow":
        with pytest.raises(ValueError, match="only a SavedModel written under TensorFlow"):
            mc.export(str(tmp_path / "sm2"))
        return
    mc.export(str(tmp_path / "sm2"))
    loaded = tf.saved_model.load(str(tmp_path / "sm2"))
    probs = loaded.serve(tf.constant(data()))["probabilities"].numpy()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
