"""Packed-Ensembles ViT: `alpha=1, gamma=1` is M separate narrow keras-hub
ViTs; `gamma > 1` makes every member's projections block-diagonal; parameter
counts follow Laurent et al.'s formula."""

import keras
import keras_hub
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import to_np64

import ensemble_zoo as ez
from ensemble_zoo.models import PackedEnsembleBackbone
from ensemble_zoo.models import PackedEnsembleImageClassifier
from ensemble_zoo.models.hydra.hydra_cost import hydra_parameter_count
from ensemble_zoo.models.packed_ensemble.packed_ensemble_cost import packed_ensemble_multiply_adds
from ensemble_zoo.models.packed_ensemble.packed_ensemble_cost import packed_ensemble_parameter_count
from ensemble_zoo.utils.parameters import parameter_count

GEOMETRY = dict(
    image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=6, hidden_dim=24, mlp_dim=48
)


def packed(num_members, alpha, gamma, seed=0):
    keras.utils.set_random_seed(seed)
    model = PackedEnsembleImageClassifier(
        PackedEnsembleBackbone(**GEOMETRY, num_members=num_members, alpha=alpha, gamma=gamma),
        num_classes=5,
    )
    rng = np.random.default_rng(seed)
    for w in model.trainable_weights:  # biases and norms non-trivial too
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return model


def narrow_vit_from_slices(model, m):
    """Member m as a keras-hub ViT, filled by slicing the fused variables."""
    b = model.backbone
    w = b.member_hidden_dim
    vit = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(
            **dict(GEOMETRY, num_heads=b.member_num_heads, hidden_dim=w, mlp_dim=b.member_mlp_dim)
        ),
        num_classes=5,
        activation=None,
    )
    values = [to_np64(v)[..., m * w : (m + 1) * w] for v in b.embedding.weights]
    for block in b.encoder_blocks:
        a = block.attention
        values += [to_np64(block.ln_1.gamma)[m], to_np64(block.ln_1.beta)[m]]
        for name in ("query", "key", "value"):
            values += [
                to_np64(getattr(a, f"{name}_kernel"))[m],
                to_np64(getattr(a, f"{name}_bias"))[m],
            ]
        values += [to_np64(a.output_kernel)[m], to_np64(a.output_bias)[m]]
        values += [to_np64(block.ln_2.gamma)[m], to_np64(block.ln_2.beta)[m]]
        for dense in (block.dense_1, block.dense_2):
            values += [to_np64(dense.kernel)[m], to_np64(dense.bias)[m]]
    values += [to_np64(b.layer_norm.gamma)[m], to_np64(b.layer_norm.beta)[m]]
    values += [to_np64(model.head.kernel)[m], to_np64(model.head.bias)[m]]
    vit.set_weights(values)
    return vit


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(1).random((4, 8, 8, 1)).astype("float32")


@pytest.fixture(scope="module")
def models():
    return {(3, 1, 1): packed(3, 1, 1), (2, 2, 2): packed(2, 2, 2)}


def test_alpha_1_gamma_1_equals_separate_narrow_vits(images, models):
    model = models[(3, 1, 1)]
    assert model.backbone.member_hidden_dim == 8 and model.backbone.member_num_heads == 2
    logits = to_np64(model(images))
    assert logits.shape == (4, 3, 5)
    for m in range(3):
        reference = to_np64(narrow_vit_from_slices(model, m)(images))
        np.testing.assert_allclose(logits[:, m], reference, atol=1e-5)


def test_gamma_groups_are_block_diagonal_members(images, models):
    model = models[(2, 2, 2)]
    logits = to_np64(model(images))
    member = model.member_model(1)
    np.testing.assert_allclose(logits[:, 1], to_np64(member(images)), atol=1e-5)
    # member width 24, 6 heads in 2 groups: the query kernel (24, 6, 4) and
    # the MLP's (24, 48) are zero off their two diagonal blocks.
    block = member.backbone.get_layer("vit_encoder").encoder_layers[0]
    query, dense_1 = to_np64(block.mha._query_dense.kernel), to_np64(block.mlp.dense_1.kernel)
    assert query.shape == (24, 6, 4) and dense_1.shape == (24, 48)
    assert not query[:12, 3:].any() and not query[12:, :3].any() and query[:12, :3].all()
    assert not dense_1[:12, 24:].any() and not dense_1[12:, :24].any()


@pytest.mark.parametrize("members,alpha,gamma", [(3, 1, 1), (2, 2, 2)])
def test_parameter_count_is_the_packed_formula(models, members, alpha, gamma):
    model = models[(members, alpha, gamma)]
    counted = packed_ensemble_parameter_count(
        **GEOMETRY, num_classes=5, num_members=members, alpha=alpha, gamma=gamma
    )
    assert parameter_count(model) == counted  # head masks excluded


def test_cost_formulas_reduce_to_the_single_vit_and_scale_as_published():
    vit_b16 = dict(
        image_shape=(224, 224, 3),
        patch_size=16,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        mlp_dim=3072,
        num_classes=1000,
    )
    single = hydra_parameter_count(**vit_b16)
    assert packed_ensemble_parameter_count(**vit_b16, num_members=1, alpha=1, gamma=1) == single
    # The setting of the Hydra paper ("Ensembling Pruned Attention Heads for
    # Uncertainty-Aware Efficient Transformers"), M=3, alpha=2: projections
    # cost alpha^2 / M = 4/3 of the base model's; gamma=2 halves them.
    projections = 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    p32 = packed_ensemble_parameter_count(**vit_b16, num_members=3, alpha=2, gamma=1)
    p32g = packed_ensemble_parameter_count(**vit_b16, num_members=3, alpha=2, gamma=2)
    assert p32 - p32g == projections * 4 // 3 // 2
    macs = packed_ensemble_multiply_adds(**vit_b16, num_members=1, alpha=1, gamma=1)
    assert macs == ez.models.hydra.hydra_cost.hydra_multiply_adds(**vit_b16)
    # M=3 alpha=1: three members of width 256 cost three 256-wide ViTs
    narrow = ez.models.hydra.hydra_cost.hydra_multiply_adds(
        **dict(vit_b16, hidden_dim=256, num_heads=4, mlp_dim=1024)
    )
    assert packed_ensemble_multiply_adds(**vit_b16, num_members=3, alpha=1, gamma=1) == 3 * narrow


def test_fit_and_preset_round_trip(tmp_path, images):
    keras.utils.set_random_seed(0)
    vit = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(**GEOMETRY), num_classes=5, preprocessor=None
    )
    model = PackedEnsembleImageClassifier.like_keras_hub(vit, num_members=3, alpha=2)
    assert model.backbone.member_hidden_dim == 16 and model.num_classes == 5
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:64], np.minimum(y[:64], 4)
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    model.save_to_preset(tmp_path / "packed")
    loaded = ez.models.EnsembleClassifier.from_preset(tmp_path / "packed")
    assert isinstance(loaded, PackedEnsembleImageClassifier)
    assert loaded.backbone.get_config() == model.backbone.get_config()
    np.testing.assert_allclose(
        to_np64(loaded.predict(images, verbose=0)),
        to_np64(model.predict(images, verbose=0)),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_members=4, alpha=1), "alpha"),  # 6 heads / 4 members
        (dict(num_members=2, alpha=1, gamma=2), "gamma"),  # 3 heads, 2 groups
        (dict(num_members=2, alpha=0), "alpha"),
        (dict(num_members=2, gamma=0), "gamma"),
    ],
)
def test_bad_packing_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PackedEnsembleBackbone(**GEOMETRY, **kwargs)


def test_backbone_type_is_checked():
    with pytest.raises(TypeError, match="PackedEnsembleBackbone"):
        PackedEnsembleImageClassifier(keras_hub.models.ViTBackbone(**GEOMETRY), num_classes=5)
