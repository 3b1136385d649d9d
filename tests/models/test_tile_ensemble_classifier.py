import keras
import numpy as np
import pytest
from conftest import requires_jit
from zoo_testing import tiny_vit
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import TileEnsembleClassifier
from ensemble_zoo.models.implicit.tile_pooling import adaptive_windows


def cnn(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="conv")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(5, name="head")(x))


def gap_vit(seed=0, class_token=True):
    return tiny_vit(
        seed, pooling="gap", num_layers=1, hidden_dim=8, mlp_dim=16, use_class_token=class_token
    )


def images(n=4):
    return np.random.default_rng(0).random((n, 8, 8, 1)).astype("float32")


def reference_tiles(grid_features, s, kernel, bias, cls=None):
    """NumPy adaptive average pooling of (n, h, w, c) features and a linear head."""
    n, h, w, _ = grid_features.shape
    logits = []
    for r0, r1 in adaptive_windows(h, s):
        for c0, c1 in adaptive_windows(w, s):
            cells = grid_features[:, r0:r1, c0:c1].reshape(n, -1, grid_features.shape[-1])
            if cls is not None:
                cells = np.concatenate([cls[:, None], cells], axis=1)
            logits.append(cells.mean(axis=1) @ kernel + bias)
    return np.stack(logits, axis=1)


@pytest.mark.parametrize("s", [1, 2, 3, 8])
def test_cnn_tiles_equal_a_numpy_reference(s):
    model = cnn()
    x = images()
    tiles = TileEnsembleClassifier.from_model(model, grid_size=s)
    out = tiles.predict(x, verbose=0)
    assert out.shape == (4, s * s, 5)
    features = to_np(keras.Model(model.inputs, model.get_layer("conv").output)(x))
    head = model.get_layer("head")
    expected = reference_tiles(features, s, to_np(head.kernel), to_np(head.bias))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    if s in (1, 2, 8):  # equal tiles: their mean is the pooled classifier
        np.testing.assert_allclose(out.mean(axis=1), to_np(model(x)), atol=1e-5)


@pytest.mark.parametrize("class_token", [True, False])
def test_vit_one_tile_is_the_keras_hub_model_and_tiles_match_numpy(class_token):
    vit = gap_vit(class_token=class_token)
    x = images()
    one = TileEnsembleClassifier.from_keras_hub(vit, grid_size=1)
    np.testing.assert_allclose(one.predict(x, verbose=0)[:, 0], to_np(vit(x)), atol=1e-5)
    tokens = to_np(vit.backbone(x))
    cls = tokens[:, 0] if class_token else None
    grid = tokens[:, 1:] if class_token else tokens
    grid = grid.reshape(4, 4, 4, -1)
    dense = vit.output_dense
    four = TileEnsembleClassifier.from_keras_hub(vit, grid_size=2)
    np.testing.assert_allclose(
        four.predict(x, verbose=0),
        reference_tiles(grid, 2, to_np(dense.kernel), to_np(dense.bias), cls),
        atol=1e-5,
    )


def test_preset_round_trip(tmp_path):
    tiles = TileEnsembleClassifier.from_model(cnn(), grid_size=2)
    tiles.save_to_preset(str(tmp_path / "p"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "p"))
    assert isinstance(loaded, TileEnsembleClassifier)
    np.testing.assert_allclose(
        loaded.predict(images(), verbose=0), tiles.predict(images(), verbose=0), atol=1e-6
    )


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="grid_size"):
        TileEnsembleClassifier.from_model(cnn(), grid_size=9)
    inputs = keras.Input((8, 8, 1))
    flat = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))
    with pytest.raises(ValueError, match="GlobalAveragePooling2D"):
        TileEnsembleClassifier.from_model(flat, grid_size=2)
    token_vit = gap_vit()
    token_vit.pooling = "token"
    with pytest.raises(ValueError, match="pooling='gap'"):
        TileEnsembleClassifier.from_keras_hub(token_vit, grid_size=2)


@requires_jit
def test_predicts_with_jit_compile():
    tiles = TileEnsembleClassifier.from_keras_hub(gap_vit(), grid_size=2)
    expected = tiles.predict(images(), verbose=0)
    tiles.compile(jit_compile=True)
    np.testing.assert_allclose(tiles.predict(images(), verbose=0), expected, atol=1e-5)
