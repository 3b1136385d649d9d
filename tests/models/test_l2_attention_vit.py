"""The L2-attention ViT and LRFormer: a keras-hub ViT whose every attention
(found by type) is L2 or Lipschitz-regularized self-attention, its weights carried over, a keras-hub
classifier's backbone that round-trips and trains."""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.layers import L2MultiHeadAttention
from ensemble_zoo.layers import LipschitzRegularizedAttention


@pytest.mark.parametrize(
    "backbone_cls, layer_cls, config",
    [
        (ez.models.L2AttentionViTBackbone, L2MultiHeadAttention, {}),
        (ez.models.LRFormerViTBackbone, LipschitzRegularizedAttention, {"alpha": 5.0}),
    ],
    ids=["l2", "lrformer"],
)
def test_every_attention_is_replaced_and_the_classifier_round_trips_and_trains(
    tmp_path, backbone_cls, layer_cls, config
):
    keras.utils.set_random_seed(0)
    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    l2 = backbone_cls.from_backbone(vit, **config)
    mhas = [l for l in vit._flatten_layers() if isinstance(l, keras.layers.MultiHeadAttention)]
    ours = [l for l in l2._flatten_layers() if type(l) is layer_cls]
    assert len(mhas) == len(ours) == 2
    assert all(layer.get_config().get("alpha") == config.get("alpha") for layer in ours)
    assert not [l for l in l2._flatten_layers() if isinstance(l, keras.layers.MultiHeadAttention)]
    for mha, layer in zip(mhas, ours, strict=True):
        np.testing.assert_array_equal(to_np(layer.query_kernel), to_np(mha.query_dense.kernel))
        np.testing.assert_array_equal(to_np(layer.output_bias), to_np(mha.output_dense.bias))
    # The rest of the ViT is unchanged.
    np.testing.assert_array_equal(to_np(l2.layers[1].weights[0]), to_np(vit.layers[1].weights[0]))
    classifier = keras_hub.models.ViTImageClassifier(backbone=l2, num_classes=3, preprocessor=None)
    x = np.random.default_rng(0).uniform(size=(4, 8, 8, 1)).astype("float32")
    logits = to_np(classifier(x))
    classifier.save(tmp_path / "l2.keras")
    restored = keras.saving.load_model(tmp_path / "l2.keras")
    assert type(restored.backbone) is backbone_cls
    assert restored.backbone.method_config == l2.method_config == config
    np.testing.assert_allclose(to_np(restored(x)), logits, atol=1e-6)
    before = [to_np(w).copy() for w in classifier.trainable_weights]
    classifier.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    classifier.fit(x, np.array([0, 1, 2, 1]), epochs=1, verbose=0)
    changed = [
        not np.array_equal(b, to_np(w)) for b, w in zip(before, classifier.trainable_weights)
    ]
    assert all(changed)
    with pytest.raises(TypeError, match="takes a ViTBackbone"):
        backbone_cls.from_backbone(l2)
