import keras
import numpy as np
import pytest
from conftest import jit_compile
from conftest import requires_jit
from conftest import requires_saved_model
from zoo_testing import tiny_vit
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import SubnetworkEnsembleClassifier


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def mlp(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6,))
    x = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(x))


def vit(seed=0):
    return tiny_vit(seed, num_classes=4, hidden_dim=8, mlp_dim=16)


def data(n=5):
    return np.random.default_rng(0).normal(size=(n, 6)).astype("float32")


def images(n=3):
    return np.random.default_rng(1).random((n, 8, 8, 1)).astype("float32")


def set_masks(model, value=None, seed=0):
    rng = np.random.default_rng(seed)
    for layer in model.masked_layers:
        for logits in layer.mask_logits():
            new = (
                np.full(logits.shape, value)
                if value is not None
                else rng.normal(size=logits.shape) * 3
            )
            logits.assign(new.astype("float32"))


def masked_copy(original, dense_layers, wrappers, m):
    """A plain copy of the model with member m's masks multiplied into
    its Dense kernels and biases (NumPy)."""
    for dense, wrapper in zip(dense_layers, wrappers):
        c = sigmoid(to_np(wrapper.column_logits)[m]) if wrapper.column_logits is not None else 1
        r = sigmoid(to_np(wrapper.row_logits)[m]) if wrapper.row_logits is not None else 1
        kernel = to_np(wrapper.base_layer.kernel)
        dense.kernel.assign(
            (kernel * np.outer(np.ones(kernel.shape[0]) * c, np.ones(kernel.shape[1]) * r)).astype(
                "float32"
            )
        )
        dense.bias.assign((to_np(wrapper.base_layer.bias) * r).astype("float32"))
    return original


def test_all_ones_masks_equal_the_original_mlp_and_vit():
    model = mlp()
    masks = SubnetworkEnsembleClassifier.from_model(model, num_members=3)
    set_masks(masks, 100.0)
    out = masks.predict(data(), verbose=0)
    assert out.shape == (5, 3, 3)
    for m in range(3):
        np.testing.assert_allclose(out[:, m], to_np(model(data())), atol=1e-6)
    base = vit()
    vit_masks = SubnetworkEnsembleClassifier.from_model(base, num_members=2)
    assert len(vit_masks.masked_layers) == 4  # 2 blocks x (dense_1, dense_2)
    set_masks(vit_masks, 100.0)
    out = vit_masks.predict(images(), verbose=0)
    np.testing.assert_allclose(out[:, 1], to_np(base(images())), atol=1e-5)


def test_members_equal_separately_masked_mlps():
    model = mlp()
    masks = SubnetworkEnsembleClassifier.from_model(model, num_members=3, seed=0)
    set_masks(masks)
    out = masks.predict(data(), verbose=0)
    assert masks.masked_layers[-1].row_logits is None  # logits never dropped
    for m in range(3):
        reference = mlp()
        dense = [reference.get_layer("hidden"), reference.get_layer("logits")]
        masked_copy(reference, dense, masks.masked_layers, m)
        np.testing.assert_allclose(out[:, m], to_np(reference(data())), atol=1e-5)
    assert np.abs(out[:, 0] - out[:, 1]).max() > 1e-2


def test_members_equal_separately_masked_keras_hub_vits():
    base = vit()
    masks = SubnetworkEnsembleClassifier.from_model(base, num_members=2, seed=0)
    set_masks(masks)
    out = masks.predict(images(), verbose=0)
    from keras_hub.src.models.vit.vit_layers import MLP

    for m in range(2):
        reference = vit()
        blocks = [l for l in reference.backbone._flatten_layers() if isinstance(l, MLP)]
        dense = [d for b in blocks for d in (b.dense_1, b.dense_2)]
        masked_copy(reference, dense, masks.masked_layers, m)
        np.testing.assert_allclose(out[:, m], to_np(reference(images())), atol=1e-5)


def test_mask_mutual_information_matches_numpy():
    masks = SubnetworkEnsembleClassifier.from_model(mlp(), num_members=4, seed=0)
    set_masks(masks)

    def hb(p):
        return -(p * np.log(p) + (1 - p) * np.log(1 - p))

    values = []
    for layer in masks.masked_layers:
        for logits in layer.mask_logits():
            p = sigmoid(to_np(logits).astype("float64"))
            values.append(np.mean(hb(p.mean(0)) - hb(p).mean(0)))
    assert float(to_np(masks.mask_mutual_information())) == pytest.approx(np.mean(values), abs=1e-5)
    # The training loss is the mean member cross-entropy minus lambda * MI.
    x, y = data(8), np.arange(8) % 3
    logits = masks.predict(x, verbose=0)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.mean(log_probs[np.arange(8), :, y])
    loss = masks.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    assert loss == pytest.approx(ce - 2.0 * np.mean(values), abs=1e-4)


def test_training_changes_only_masks_and_diversifies_them():
    masks = SubnetworkEnsembleClassifier.from_model(mlp(), num_members=4, seed=0)
    frozen = [to_np(w).copy() for w in masks.network.non_trainable_weights]
    assert {w.name for w in masks.trainable_weights} == {"column_logits", "row_logits"}
    mi_before = float(to_np(masks.mask_mutual_information()))
    masks.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=jit_compile())
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(128, 6)).astype("float32"), rng.integers(0, 3, 128)
    masks.fit(x, y, epochs=10, batch_size=32, verbose=0)
    for before, after in zip(frozen, masks.network.non_trainable_weights):
        np.testing.assert_array_equal(to_np(after), before)
    assert float(to_np(masks.mask_mutual_information())) > 2 * mi_before


def test_preset_round_trip_and_errors(tmp_path):
    for model in (mlp(), vit()):
        masks = SubnetworkEnsembleClassifier.from_model(model, num_members=2, seed=0)
        set_masks(masks)
        x = (
            data()
            if model.name != "vit_image_classifier" and len(model.inputs[0].shape) == 2
            else images()
        )
        masks.save_to_preset(str(tmp_path / model.name))
        loaded = EnsembleClassifier.from_preset(str(tmp_path / model.name))
        assert isinstance(loaded, SubnetworkEnsembleClassifier)
        np.testing.assert_allclose(
            loaded.predict(x, verbose=0), masks.predict(x, verbose=0), atol=1e-6
        )
    inputs = keras.Input((4, 4, 1))
    conv = keras.Model(
        inputs, keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(3, 2)(inputs))
    )
    with pytest.raises(ValueError, match="no Dense layer"):
        SubnetworkEnsembleClassifier(conv, num_members=2)
    with pytest.raises(ValueError, match="diversity_weight"):
        SubnetworkEnsembleClassifier(mlp(), num_members=2, diversity_weight=-1.0)


@requires_jit
def test_trains_with_jit_compile():
    masks = SubnetworkEnsembleClassifier.from_model(vit(), num_members=2, seed=0)
    masks.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=jit_compile())
    history = masks.fit(images(16), np.arange(16) % 4, epochs=3, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


@requires_saved_model
def test_saved_model_matches_keras(tmp_path):
    import tensorflow as tf

    masks = SubnetworkEnsembleClassifier.from_model(mlp(), num_members=3, seed=0)
    set_masks(masks)
    masks.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    served = loaded.serve(tf.constant(data()))
    np.testing.assert_allclose(
        served["member_logits"].numpy(), masks.predict(data(), verbose=0), atol=1e-5
    )
