import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from conftest import jit_compile
from conftest import requires_jit
from conftest import requires_saved_model
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models import ViTMoEBackbone
from ensemble_zoo.models import ViTMoEImageClassifier


def vit():
    return ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]


def images(n=16):
    x, _ = ez.datasets.load_arrays("digits", "test")
    return x[:n]


def perturb_experts(model, seed=0):
    """Makes every expert (and router) different, so routing matters."""
    rng = np.random.default_rng(seed)
    for block in model.backbone.moe_blocks:
        for v in (block.moe.dense_1.kernel, block.moe.dense_2.kernel, block.moe.router.kernel):
            value = to_np(v)
            v.assign(value + 0.2 * rng.normal(size=value.shape).astype("float32"))


@pytest.mark.parametrize(
    "experts,k,members,pre_logits", [(4, 4, 1, True), (4, 2, 2, False), (8, 2, 4, False)]
)
def test_upcycled_model_with_every_expert_per_token_equals_the_dense_vit(
    experts, k, members, pre_logits
):
    """Gates are not renormalised: with K = E / M and ample capacity they sum
    to 1 and the upcycled MoE is exactly the dense keras-hub ViT (with its
    tanh `pre_logits` layer, keras-hub's `intermediate_dim`, when it has one)."""
    base = vit()
    if pre_logits:
        base = keras_hub.models.ViTImageClassifier(
            backbone=base.backbone,
            num_classes=8,
            intermediate_dim=6,
            preprocessor=base.preprocessor,
        )
    model = ViTMoEImageClassifier.from_keras_hub(
        base,
        num_experts=experts,
        num_selected_experts=k,
        moe_layers=[1, 3],
        ensemble_size=members,
        capacity_factor=1.0,
        eval_capacity_factor=1.0,
    )
    x = images()
    expected = to_np(base(x))
    out = to_np(model(x))
    assert out.shape == (16, members, 8)
    assert model.intermediate_dim == (6 if pre_logits else None)
    np.testing.assert_allclose(out, np.repeat(expected[:, None], members, axis=1), atol=1e-5)


def test_upcycled_top1_model_scales_the_moe_output_by_its_gate():
    """With K=1 the upcycled block computes x + g_top * MLP(LN(x)), g_top < 1."""
    base = vit()
    model = ViTMoEImageClassifier.from_keras_hub(base, num_experts=4, moe_layers=[3])
    x = images(4)
    block = model.backbone.moe_blocks[0]
    dense = base.backbone.get_layer("vit_encoder").encoder_layers[3]
    hidden = keras.Model(model.backbone.input, model.backbone.encoder_blocks[2].output)(x)
    attended = dense.layer_norm_1(hidden)
    attended = to_np(hidden) + to_np(dense.mha(attended, attended))
    normed = dense.layer_norm_2(attended)
    gates = to_np(block.moe.route(normed)["combine"]).sum(axis=(-1, -2))  # (1, G, S)
    expected = attended + gates.reshape(4, -1, 1) * to_np(dense.mlp(normed))
    np.testing.assert_allclose(to_np(block(hidden)), expected, atol=1e-5)
    assert 0.0 < gates.max() < 1.0


def test_e3_member_equals_a_vmoe_on_its_experts_and_router_slice():
    """E3 with M members == M V-MoE models that each own E/M experts (the
    router's row slice), sharing every other weight."""
    base = vit()
    e3 = ViTMoEImageClassifier.from_keras_hub(
        base,
        num_experts=4,
        num_selected_experts=1,
        moe_layers=[1, 3],
        ensemble_size=2,
        capacity_factor=0.5,
        eval_capacity_factor=0.5,
    )
    perturb_experts(e3)
    x = images()
    out = to_np(e3(x))
    for m in range(2):
        vmoe = ViTMoEImageClassifier.from_keras_hub(
            base,
            num_experts=2,
            num_selected_experts=1,
            moe_layers=[1, 3],
            capacity_factor=0.5,
            eval_capacity_factor=0.5,
        )
        for source, target in zip(e3.backbone.moe_blocks, vmoe.backbone.moe_blocks):
            part = slice(2 * m, 2 * m + 2)
            target.moe.router.kernel.assign(to_np(source.moe.router.kernel)[:, part])
            for name in ("dense_1", "dense_2"):
                for var in ("kernel", "bias"):
                    value = to_np(getattr(getattr(source.moe, name), var))[part]
                    getattr(getattr(target.moe, name), var).assign(value)
        np.testing.assert_allclose(out[:, m], to_np(vmoe(x))[:, 0], atol=1e-5)
    assert np.abs(out[:, 0] - out[:, 1]).max() > 1e-3  # members differ


def test_e3_with_one_member_is_vmoe_and_from_vmoe_adds_no_parameters():
    vmoe = ViTMoEImageClassifier.from_keras_hub(
        vit(), num_experts=4, num_selected_experts=2, moe_layers=[1, 3]
    )
    perturb_experts(vmoe)
    x = images()
    same = ViTMoEImageClassifier.from_vmoe(vmoe, ensemble_size=1)
    np.testing.assert_allclose(to_np(same(x)), to_np(vmoe(x)), atol=1e-6)
    e3 = ViTMoEImageClassifier.from_vmoe(vmoe, ensemble_size=2, num_selected_experts=1)
    assert e3.count_params() == vmoe.count_params()
    assert [tuple(v.shape) for v in e3.weights] == [tuple(v.shape) for v in vmoe.weights]
    assert e3.num_members == 2 and to_np(e3(x)).shape == (16, 2, 8)


def test_tokens_are_tiled_right_before_the_first_moe_block():
    backbone = ViTMoEBackbone(
        image_shape=(8, 8, 1),
        patch_size=2,
        num_layers=6,
        num_heads=2,
        hidden_dim=16,
        mlp_dim=32,
        num_experts=4,
        moe_layers=[3, 5],
        ensemble_size=2,
    )
    tile = backbone.get_layer("tile_members")
    assert tile.input is backbone.encoder_blocks[2].output
    assert backbone.encoder_blocks[3].input is tile.output
    assert [type(b).__name__ for b in backbone.encoder_blocks] == [
        "ViTEncoderBlock",
        "ViTEncoderBlock",
        "ViTEncoderBlock",
        "ViTMoEEncoderBlock",
        "ViTEncoderBlock",
        "ViTMoEEncoderBlock",
    ]
    # The default placement is the paper's "last-2": the last two odd blocks.
    default = ViTMoEBackbone(
        image_shape=(8, 8, 1),
        patch_size=2,
        num_layers=12,
        num_heads=2,
        hidden_dim=16,
        mlp_dim=32,
        num_experts=4,
    )
    assert default.moe_layers == [9, 11]


def test_auxiliary_losses_are_added_in_training_only():
    model = ViTMoEImageClassifier.from_keras_hub(
        vit(), num_experts=4, num_selected_experts=1, moe_layers=[1, 3], ensemble_size=2
    )
    x = images()
    model(x, training=False)
    assert len(model.losses) == 0
    model(x, training=True)
    losses = [float(to_np(l)) for l in model.losses]
    assert len(losses) == 2 and all(l > 0 for l in losses)


@requires_jit
def test_trains_with_jit_compile():
    model = ViTMoEImageClassifier.from_keras_hub(
        vit(), num_experts=4, num_selected_experts=1, moe_layers=[1, 3], ensemble_size=2, seed=0
    )
    perturb_experts(model)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    history = model.fit(x[:256], y[:256], batch_size=32, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_fit_trains_routers_and_experts():
    model = ViTMoEImageClassifier.from_keras_hub(
        vit(), num_experts=4, num_selected_experts=1, moe_layers=[3], ensemble_size=2, seed=0
    )
    block = model.backbone.moe_blocks[0]
    before = [to_np(v) for v in (block.moe.router.kernel, block.moe.dense_1.kernel)]
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    x, y = ez.datasets.load_arrays("digits", "train")
    model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
    after = [to_np(v) for v in (block.moe.router.kernel, block.moe.dense_1.kernel)]
    assert all(np.abs(a - b).max() > 0 for a, b in zip(after, before))


@requires_saved_model
def test_saved_model_matches_keras(tmp_path):
    model = ViTMoEImageClassifier.from_keras_hub(
        vit(),
        num_experts=4,
        num_selected_experts=1,
        moe_layers=[1, 3],
        ensemble_size=2,
        dispatcher="indices",  # gathers and a sort export too
    )
    perturb_experts(model)
    x = images()
    model.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    served = loaded.serve(tf.constant(x))
    np.testing.assert_allclose(served["member_logits"].numpy(), to_np(model(x)), atol=1e-5)
    served = loaded.serve(tf.constant(x[:3]))  # another batch size
    np.testing.assert_allclose(served["member_logits"].numpy(), to_np(model(x[:3])), atol=1e-5)


def test_config_and_preset_round_trip(tmp_path):
    model = ViTMoEImageClassifier.from_keras_hub(
        vit(),
        num_experts=4,
        num_selected_experts=1,
        moe_layers=[1, 3],
        ensemble_size=2,
        batch_priority=True,
        capacity_factor=1.25,
        eval_capacity_factor=0.5,
        dispatcher="indices",
    )
    perturb_experts(model)
    x = images()
    path = str(tmp_path / "preset")
    model.save_to_preset(path)
    restored = ez.models.EnsembleClassifier.from_preset(path)
    assert isinstance(restored, ViTMoEImageClassifier)
    assert restored.backbone.get_config() == model.backbone.get_config()
    np.testing.assert_allclose(to_np(restored(x)), to_np(model(x)), atol=1e-6)
    # The one-hot dispatcher gives the same model outputs (tokens dropped
    # at capacity factor 0.5 included).
    for block in restored.backbone.moe_blocks:
        block.moe.dispatcher = "einsum"
    np.testing.assert_allclose(to_np(restored(x)), to_np(model(x)), atol=1e-5)


def test_bad_arguments_are_clear_errors():
    kwargs = dict(
        image_shape=(8, 8, 1), patch_size=2, num_layers=4, num_heads=2, hidden_dim=16, mlp_dim=32
    )
    with pytest.raises(ValueError, match="divisible by `ensemble_size`"):
        ViTMoEBackbone(num_experts=6, ensemble_size=4, **kwargs)
    with pytest.raises(ValueError, match="moe_layers"):
        ViTMoEBackbone(num_experts=4, moe_layers=[4], **kwargs)
    with pytest.raises(ValueError, match="moe_layers"):
        ViTMoEBackbone(num_experts=4, moe_layers=[], **kwargs)
    with pytest.raises(ValueError, match="top_k"):
        ViTMoEBackbone(num_experts=4, num_selected_experts=3, ensemble_size=2, **kwargs)
    with pytest.raises(ValueError, match="ViTImageClassifier"):
        ViTMoEImageClassifier.from_keras_hub(vit().backbone, num_experts=4)
    softmax = keras_hub.models.ViTImageClassifier(
        backbone=vit().backbone, num_classes=8, activation="softmax"
    )
    with pytest.raises(ValueError, match="output activation"):
        ViTMoEImageClassifier.from_keras_hub(softmax, num_experts=4)
    with pytest.raises(ValueError, match="expects inputs of shape"):
        ViTMoEImageClassifier.from_keras_hub(vit(), num_experts=4)(np.zeros((2, 8, 8), "float32"))
