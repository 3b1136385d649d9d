"""Masksembles on a keras-hub ViT: member m equals the plain ViT with mask m
applied, folded by hand into the layers that read the masked units."""

import keras
import keras_hub
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import tiny_vit
from zoo_testing import to_np64

import ensemble_zoo as ez
from ensemble_zoo.models import MasksemblesImageClassifier


@pytest.fixture(scope="module")
def vit_and_model():
    vit = tiny_vit()
    return vit, MasksemblesImageClassifier.from_keras_hub(vit, num_members=3, scale=2.0, seed=0)


def masked_vit(vit, model, m):
    """The plain ViT whose masked units are scaled by mask m (times
    channels / kept): the rows of each MLP's second kernel and of the head."""
    clone = keras_hub.models.ViTImageClassifier.from_config(vit.get_config())
    clone.set_weights(vit.get_weights())
    masks = [to_np64(layer.masks)[m] for layer in model.mask_layers]
    blocks = clone.backbone.get_layer("vit_encoder").encoder_layers
    for block, mask in zip(blocks, masks[:-1], strict=True):
        dense = block.mlp.dense_2
        dense.kernel.assign(to_np64(dense.kernel) * (mask * mask.size / mask.sum())[:, None])
    head = masks[-1] * masks[-1].size / masks[-1].sum()
    clone.output_dense.kernel.assign(to_np64(vit.output_dense.kernel) * head[:, None])
    return clone


def test_each_member_is_the_vit_with_its_masks(vit_and_model):
    vit, model = vit_and_model
    x = np.random.default_rng(1).random((4, 8, 8, 1)).astype("float32")
    logits = to_np64(model(x))
    assert logits.shape == (4, 3, 5)
    for m in range(3):
        reference = to_np64(masked_vit(vit, model, m)(x))
        np.testing.assert_allclose(logits[:, m], reference, atol=1e-5)
    np.testing.assert_allclose(to_np64(model.member_model(2)(x)), logits[:, 2], atol=1e-5)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3
    # the model converted a copy: 2 blocks + features of masks, no new weight
    assert model.count_params() == vit.count_params() + 3 * (2 * 32 + 16)
    assert len(model.trainable_weights) == len(vit.trainable_weights)


def test_fit_keeps_masks_fixed_and_preset_round_trips(tmp_path):
    model = MasksemblesImageClassifier.from_keras_hub(tiny_vit(1), num_members=2, seed=3)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    masks = [to_np64(layer.masks) for layer in model.mask_layers]
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:32], np.minimum(y[:32], 4)
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for before, layer in zip(masks, model.mask_layers):
        np.testing.assert_array_equal(before, to_np64(layer.masks))
    model.save_to_preset(tmp_path / "ms")
    loaded = ez.models.EnsembleClassifier.from_preset(tmp_path / "ms")
    assert isinstance(loaded, MasksemblesImageClassifier)
    np.testing.assert_allclose(
        to_np64(loaded.predict(x[:4], verbose=0)),
        to_np64(model.predict(x[:4], verbose=0)),
        atol=1e-5,
    )


def test_converting_twice_and_bad_arguments_are_refused(vit_and_model):
    _, model = vit_and_model
    # A second task on the classifier's backbone takes its masks (and
    # shares the backbone, as keras-hub tasks do); other masks are refused.
    with pytest.raises(ValueError, match="was built with"):
        MasksemblesImageClassifier(model.backbone, num_classes=5, num_members=5)
    second = MasksemblesImageClassifier(model.backbone, num_classes=5)
    assert second.backbone is model.backbone and second.num_members == model.num_members
    with pytest.raises(ValueError, match="scale"):
        MasksemblesImageClassifier.from_keras_hub(tiny_vit(), scale=0.5)
