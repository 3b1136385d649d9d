"""`ViTMoEImageClassifier.from_vmoe_checkpoint` against vmoe's own code.

The fixture (`tests/fixtures/vmoe/`, see its README) holds three tiny
checkpoints written by google-research/vmoe's `save_checkpoint`: a V-MoE
and an E³ with `classifier='token'` (3 data files, 965 chunks each, expert
weights sharded over 2 devices) and a V-MoE with `classifier='gap'` (no
class token; 2 data files); and what vmoe's forward pass gave on the same
images: logits with the main router settings and variants, and the MoE
layer's input and output.

What is guaranteed (`vmoe_checkpoint`'s docstring), and tested here:
with float32 dispatch the logits equal vmoe's to float32 round-off
(<= 1e-5); with bfloat16 dispatch (vmoe's default) a round-off difference
can flip one bfloat16 rounding of an expert output, so the guarantee is
the MoE layer's: on vmoe's input to it, its output equals vmoe's up to
round-off plus one bfloat16 step per expert output.
"""

import functools
import json
import os
import shutil

import keras_hub
import ml_dtypes
import numpy as np
import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from keras import ops
from zoo_testing import to_np

from ensemble_zoo.models import ViTMoEImageClassifier
from ensemble_zoo.models.vit_moe import vmoe_checkpoint
from ensemble_zoo.models.vit_moe import vmoe_checkpoint_reader
from ensemble_zoo.models.vit_moe.vmoe_checkpoint import VMoECheckpointError
from ensemble_zoo.models.vit_moe.vmoe_checkpoint import read_vmoe_checkpoint

FIXTURE = os.path.join(REPO_ROOT, "tests", "fixtures", "vmoe")
REFERENCE = np.load(os.path.join(FIXTURE, "reference.npz"), allow_pickle=False)
GAP_REFERENCE = np.load(os.path.join(FIXTURE, "reference_gap.npz"), allow_pickle=False)
CONFIG = json.loads(str(REFERENCE["config_json"]))
GAP_CONFIG = json.loads(str(GAP_REFERENCE["config_json"]))
MODELS = {**CONFIG["models"], **GAP_CONFIG["models"]}
IMAGES = REFERENCE["images"]
CHECKPOINT = {kind: os.path.join(FIXTURE, f"{kind}_tiny", "ckpt") for kind in MODELS}


def reference(key):
    return (GAP_REFERENCE if key.startswith("gap_") else REFERENCE)[key]


def members(kind):
    return MODELS[kind]["config"]["encoder"]["moe"].get("ensemble_size", 1)


def dispatcher(kind, variant=""):
    """vmoe's dispatcher settings of config `kind`, with `variant`'s."""
    settings = MODELS[kind]
    result = dict(settings["config"]["encoder"]["moe"]["router"]["dispatcher"])
    if variant:
        result.update(settings["variants"][variant])
    return result


@functools.lru_cache(maxsize=None)
def load(kind, variant=""):
    """Our model with the router settings of vmoe's config `kind` and the
    dispatcher settings of `variant` ("" for the main ones). Cached: the
    tests only read the models."""
    moe = MODELS[kind]["config"]["encoder"]["moe"]
    settings = dispatcher(kind, variant)
    return ViTMoEImageClassifier.from_vmoe_checkpoint(
        CHECKPOINT[kind],
        num_selected_experts=moe["router"]["num_selected_experts"],
        group_size=moe["group_size"] // members(kind),
        capacity_factor=settings["capacity_factor"],
        batch_priority=settings["batch_priority"],
        bfloat16_dispatch=settings["bfloat16"],
    )


@pytest.fixture(scope="module", autouse=True)
def free_models():
    yield
    load.cache_clear()


def vmoe_rows(logits):
    """Our `(batch, members, classes)` as vmoe's rows `b * M + m`."""
    return logits.reshape(-1, logits.shape[-1])


@pytest.mark.parametrize("kind", ["vmoe", "e3", "gap"])
def test_logits_equal_vmoes_with_float32_dispatch(kind):
    """Float32 dispatch: vmoe's logits to round-off, with the main
    settings' token drops at capacity (31, 21 and 42 token-expert
    assignments, which move vmoe's logits by 0.2 to 0.55)."""
    model = load(kind, "no_bf16")
    got = to_np(model(IMAGES))
    assert got.shape == (6, members(kind), 5)
    np.testing.assert_allclose(
        vmoe_rows(got), reference(f"{kind}_logits_no_bf16"), atol=1e-5, rtol=0
    )


def test_gap_checkpoint_loads_with_gap_pooling():
    """vmoe's classifier='gap' has no `cls` parameter and pools the mean of
    the encoder output: the reader infers `pooling="gap"` without a class
    token (it used to refuse such checkpoints)."""
    model = load("gap", "no_bf16")
    backbone = model.backbone
    assert model.pooling == "gap" and not backbone.use_class_token
    assert (backbone.num_layers, backbone.moe_layers, backbone.num_experts) == (2, [1], 4)
    assert tuple(backbone.image_shape) == (16, 16, 3)
    assert (model.num_classes, model.intermediate_dim) == (5, None)
    assert to_np(backbone(IMAGES)).shape == (6, 1, 16, 16)  # 16 patches, no class token
    # The pooling is explicit: inferred from the class token, or asked for.
    params = read_vmoe_checkpoint(CHECKPOINT["gap"])
    assert len(params) == 40 and "cls" not in params
    assert params["Encoder/posembed_input/pos_embedding"].shape == (1, 16, 16)
    backbone_kwargs, head_kwargs = vmoe_checkpoint.vmoe_architecture(params, pooling="gap")
    assert head_kwargs["pooling"] == "gap" and backbone_kwargs["use_class_token"] is False
    token = read_vmoe_checkpoint(CHECKPOINT["vmoe"])
    backbone_kwargs, head_kwargs = vmoe_checkpoint.vmoe_architecture(token)
    assert head_kwargs["pooling"] == "token" and backbone_kwargs["use_class_token"] is True
    with pytest.raises(ValueError, match="`pooling`='gap', but the checkpoint has a `cls` token"):
        vmoe_checkpoint.vmoe_architecture(token, pooling="gap")
    with pytest.raises(ValueError, match="`pooling` must be 'token', 'gap' or None"):
        vmoe_checkpoint.vmoe_architecture(params, pooling="map")
    with pytest.raises(VMoECheckpointError, match="classifier='map'"):
        vmoe_checkpoint.vmoe_architecture({**params, "MapHead/probe": np.zeros((1, 1, 16))})


def test_token_pooling_without_class_token_is_vmoes_classifier_0():
    """vmoe's classifier='0' reads token 0 of a model without class token
    (the first patch); its parameters are 'gap''s, so it is asked for with
    `pooling="token"`."""
    params = read_vmoe_checkpoint(CHECKPOINT["gap"])
    backbone_kwargs, head_kwargs = vmoe_checkpoint.vmoe_architecture(params, pooling="token")
    assert head_kwargs["pooling"] == "token" and backbone_kwargs["use_class_token"] is False
    # The float32-dispatch gap model's backbone has these arguments.
    backbone = load("gap", "no_bf16").backbone
    config = backbone.get_config()
    assert all(
        config[k] == (list(v) if isinstance(v, tuple) else v) for k, v in backbone_kwargs.items()
    )
    model = ViTMoEImageClassifier(backbone, **head_kwargs)
    vmoe_checkpoint.load_vmoe_params(model, params)
    expected = reference("gap_logits_classifier_0_no_bf16")
    np.testing.assert_allclose(vmoe_rows(to_np(model(IMAGES))), expected, atol=1e-5, rtol=0)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def expert_outputs(params, x):
    """Every expert's output `(rows, tokens, experts, dim)` on `x` rounded
    to bfloat16, in float64 (NumPy, from the checkpoint's parameters)."""
    base = "Encoder/encoderblock_1/Moe/Mlp/"
    x = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    hidden = np.einsum("rtd,edf->rtef", x, params[base + "Dense_0/kernel"])
    hidden = gelu_tanh(hidden + params[base + "Dense_0/bias"])
    return (
        np.einsum("rtef,efd->rted", hidden, params[base + "Dense_1/kernel"])
        + params[base + "Dense_1/bias"]
    )


def per_token(kind, name, rows, tokens):
    """vmoe's routing array `name` `(groups, group positions, experts)` as
    `(rows, tokens, experts)` in vmoe's rows; vmoe's E³ groups order their
    positions (image, token, member)."""
    array = reference(f"{kind}_encoderblock_1_moe_{name}")
    m = members(kind)
    array = array.reshape(rows // m, tokens, m, -1).transpose(0, 2, 1, 3)
    return array.reshape(rows, tokens, -1)


@pytest.mark.parametrize("kind", ["vmoe", "e3", "gap"])
def test_moe_layer_with_bfloat16_dispatch_equals_vmoes_on_the_same_input(kind):
    """bfloat16 dispatch (vmoe's default): on vmoe's input to the MoE
    layer, our layer routes as vmoe does (the main settings drop 31, 21
    and 42 token-expert assignments) and its output is vmoe's up to
    round-off plus, per element, `sum_e gate_e * 2**-7 * |expert_e
    output|` (one bfloat16 step of every dispatched expert's output)."""
    model = load(kind)
    moe = model.backbone.moe_blocks[0].moe
    assert moe.bfloat16_dispatch
    x = reference(f"{kind}_encoderblock_1_moe_input")  # (rows, tokens, dim), vmoe's rows
    expected = reference(f"{kind}_encoderblock_1_moe_output")
    m = members(kind)

    # vmoe's rows are b * M + m (jnp.repeat), ours member-major m * B + b.
    def to_vmoe_rows(y):
        return y.reshape(m, -1, *y.shape[1:]).swapaxes(0, 1).reshape(y.shape)

    ours = x.reshape(-1, m, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
    # The same tokens go to the same experts' same buffer slots (-1: not
    # dispatched, including the main settings' dropped assignments).
    slots = to_vmoe_rows(to_np(moe.route(ours)["token_dispatch"]))  # (rows, tokens, E, C)
    positions = np.where(slots.any(-1), slots.argmax(-1), -1)
    np.testing.assert_array_equal(positions, per_token(kind, "buffer_position", *x.shape[:2]))
    got = to_vmoe_rows(to_np(moe(ours, training=False)))
    params = read_vmoe_checkpoint(CHECKPOINT[kind])
    gates = per_token(kind, "combine_weights", *x.shape[:2])
    step = 2.0**-7 * np.einsum("rte,rted->rtd", gates, np.abs(expert_outputs(params, x)))
    error = np.abs(got - expected)
    beyond = int((error > 1e-5 + step).sum())
    assert beyond == 0, f"{beyond} elements beyond one bfloat16 step"
    # Flips are rare (none on the fixtures); skipping the bfloat16 rounding
    # would put 89-99% of the elements beyond round-off.
    assert (error > 1e-5).mean() <= 0.01


@pytest.mark.parametrize("kind,variant", [("e3", ""), ("vmoe", "batch_priority")])
def test_logits_with_bfloat16_dispatch_reproduce_vmoes_settings(kind, variant):
    """End to end with bfloat16 dispatch there is no round-off guarantee
    (one bfloat16 flip moves the E³ fixture's logits by up to 2e-3; the
    whole bfloat16 rounding moves vmoe's by 0.5e-3 to 2e-3), but the
    settings are reproduced: Batch-Prioritized Routing (whose only vmoe
    reference is these logits) and token drops move vmoe's logits by 0.2
    to 0.55, 100x the tolerance."""
    if variant and BACKEND == "jax":
        pytest.skip(
            "test budget: the variants run under TensorFlow and PyTorch (eager JAX is slowest)"
        )
    model = load(kind, variant)
    got = to_np(model(IMAGES))
    expected = reference(f"{kind}_logits" + (f"_{variant}" if variant else ""))
    np.testing.assert_allclose(vmoe_rows(got), expected, atol=5e-3, rtol=0)
    if kind == "e3":
        # vmoe's ensemble prediction: the log of the members' mean probability.
        probs = to_np(ops.softmax(got, axis=-1)).mean(axis=1)
        np.testing.assert_allclose(np.log(probs), reference("e3_ensemble_log_probs"), atol=1e-2)


def test_vmoe_settings_are_explicit_options_and_survive_a_keras_hub_preset(tmp_path):
    model = load("e3")
    backbone = model.backbone
    # Architecture from the shapes; vmoe's routing defaults made explicit.
    assert (backbone.num_layers, backbone.num_heads, backbone.hidden_dim, backbone.mlp_dim) == (
        3,
        2,
        16,
        32,
    )
    assert (backbone.num_experts, backbone.ensemble_size, backbone.moe_layers) == (4, 2, [1])
    assert backbone.patch_size == (4, 4) and tuple(backbone.image_shape) == (16, 16, 3)
    assert (model.num_classes, model.intermediate_dim) == (5, 12)
    assert backbone.mlp_activation == "gelu_approximate" and backbone.bfloat16_dispatch
    assert backbone.capacity_multiple_of == 4 and backbone.noise_std == 2 / 4
    assert backbone.importance_loss_weight == backbone.load_loss_weight == 0.005
    router = backbone.moe_blocks[0].moe.router
    assert router.capacity(34) == 20  # ceil(34 * 1 * 1.0 / 2) = 17 -> 20
    # vmoe's (dim, M, E/M) E3 router kernel, stored as (dim, E) in C order.
    params = read_vmoe_checkpoint(CHECKPOINT["e3"])
    np.testing.assert_array_equal(
        to_np(router.kernel),
        params["Encoder/encoderblock_1/Moe/Router/dense/kernel"].reshape(16, 4),
    )
    # The default preprocessor is vmoe's value_range(-1, 1), at 16x16.
    raw = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    converted = to_np(model.preprocessor.image_converter(raw))
    np.testing.assert_allclose(converted, raw / 127.5 - 1.0, atol=1e-6)
    assert tuple(model.preprocessor.image_converter.image_size) == (16, 16)
    # keras-hub's own loader restores every option (tanh GELU in the dense
    # blocks, bfloat16 dispatch, pre-logits, preprocessor).
    model.save_to_preset(str(tmp_path))
    restored = keras_hub.models.ImageClassifier.from_preset(str(tmp_path))
    assert isinstance(restored, ViTMoEImageClassifier)
    assert restored.backbone.get_config() == backbone.get_config()
    np.testing.assert_array_equal(to_np(restored(IMAGES)), to_np(model(IMAGES)))


def test_reader_reassembles_every_chunk():
    """965 chunks (of single values up to 16) over 3 files become the 59
    arrays of the fixture README; the patch embedding they give equals
    vmoe's intermediate output."""
    params = read_vmoe_checkpoint(CHECKPOINT["vmoe"])
    assert len(params) == 59
    assert params["Encoder/posembed_input/pos_embedding"].shape == (1, 17, 16)
    assert params["Encoder/encoderblock_1/Moe/Mlp/Dense_0/kernel"].shape == (4, 16, 32)
    assert params["Encoder/encoderblock_1/Moe/Router/dense/kernel"].shape == (16, 4)
    assert all(v.dtype == np.float32 for v in params.values())
    patches = IMAGES.reshape(6, 4, 4, 4, 4, 3).transpose(0, 1, 3, 2, 4, 5)
    embedded = (
        np.einsum("bijpqc,pqcd->bijd", patches, params["embedding/kernel"])
        + params["embedding/bias"]
    )
    np.testing.assert_allclose(embedded, REFERENCE["vmoe_patch_embedding"], atol=1e-5)
    # The prefix, the index file and the directory name the same checkpoint.
    for path in (CHECKPOINT["vmoe"] + ".index", os.path.dirname(CHECKPOINT["vmoe"])):
        again = read_vmoe_checkpoint(path)
        assert all(np.array_equal(again[k], params[k]) for k in params)


def copy_checkpoint(tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(os.path.dirname(CHECKPOINT["vmoe"]), target)
    return target


def test_damaged_checkpoints_name_the_file(tmp_path):
    directory = copy_checkpoint(tmp_path)
    prefix = str(directory / "ckpt")
    shard = directory / "ckpt.data-00001-of-00003"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(VMoECheckpointError, match="ckpt.data-00001-of-00003.*truncated"):
        read_vmoe_checkpoint(prefix)
    # A well-formed data file without the chunks the index puts there.
    shard.write_bytes(b"\x81\xbe" + vmoe_checkpoint_reader.CHUNK_MAGIC.encode() + b"\xc3")
    with pytest.raises(VMoECheckpointError, match="values in no chunk"):
        read_vmoe_checkpoint(prefix)
    shard.unlink()
    with pytest.raises(FileNotFoundError, match="ckpt.data-00001-of-00003"):
        read_vmoe_checkpoint(prefix)
    (directory / "ckpt.index").write_bytes(b"\x81\xa7version\xa3v99")
    with pytest.raises(VMoECheckpointError, match="not a vmoe checkpoint index"):
        read_vmoe_checkpoint(prefix)
    with pytest.raises(FileNotFoundError, match="No vmoe checkpoint index"):
        read_vmoe_checkpoint(str(tmp_path / "nothing"))


def test_architecture_errors_are_clear():
    params = read_vmoe_checkpoint(CHECKPOINT["e3"])
    with pytest.raises(ValueError, match="image_shape.*16 patches of 4x4"):
        vmoe_checkpoint.vmoe_architecture(params, image_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="E³ kernels for 2 members"):
        vmoe_checkpoint.vmoe_architecture(params, ensemble_size=4)
    # A classifier='token' checkpoint without `cls` reads as 'gap' with 17
    # patch positions, which names the likely cause.
    without_cls = {k: v for k, v in params.items() if k != "cls"}
    with pytest.raises(ValueError, match="17 patch positions.*lost its `cls`"):
        vmoe_checkpoint.vmoe_architecture(without_cls)
    # A V-MoE (dim, E) router read as an E3 of 2 members (the pre-trained E3
    # checkpoint's layout before its fine-tuning reshape).
    vmoe = read_vmoe_checkpoint(CHECKPOINT["vmoe"])
    backbone_kwargs, _ = vmoe_checkpoint.vmoe_architecture(vmoe, ensemble_size=2)
    assert backbone_kwargs["ensemble_size"] == 2
    # Every checkpoint parameter must find a place in the model.
    model = load("vmoe", "no_bf16")
    with pytest.raises(ValueError, match="no place in the model.*extra/kernel"):
        vmoe_checkpoint.load_vmoe_params(model, {**vmoe, "extra/kernel": np.zeros(3)})


def test_bfloat16_arrays_widen_exactly_to_float32():
    """Released checkpoints may store bfloat16 (numpy's ml_dtypes name);
    the reader widens the bits without ml_dtypes. The payload is vmoe's
    ndarray extension: msgpack [shape, dtype name, little-endian bytes]."""
    payload = b"\x93\x91\x03\xa8bfloat16\xc4\x06" + bytes([0x80, 0x3F, 0x00, 0xC0, 0xC9, 0x3F])
    array = vmoe_checkpoint_reader._ndarray(payload)
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, [1.0, -2.0, 1.5703125])


ROUTERS = np.load(os.path.join(FIXTURE, "routers.npz"), allow_pickle=False)
ROUTER_MODELS = json.loads(str(ROUTERS["config_json"]))["models"]


@functools.lru_cache(maxsize=None)
def load_routed(kind, bfloat16):
    """The Experts Choice / Soft MoE checkpoint with its vmoe router settings."""
    moe = ROUTER_MODELS[kind]["config"]["encoder"]["moe"]
    kwargs = dict(group_size=moe["group_size"], bfloat16_dispatch=bfloat16, preprocessor=None)
    if kind == "ec":
        dispatch = moe["router"]["dispatcher"]
        kwargs.update(
            router="experts_choice",
            capacity_factor=dispatch["capacity_factor"],
            capacity_rounding=dispatch["capacity_ceil_or_round"],
            capacity_multiple_of=dispatch["capacity_multiple_of"],
        )
    return ViTMoEImageClassifier.from_vmoe_checkpoint(
        os.path.join(FIXTURE, f"{kind}_tiny", "ckpt"), **kwargs
    )


@pytest.mark.parametrize("kind", ["ec", "soft"])
def test_experts_choice_and_soft_moe_checkpoints_equal_vmoe(kind):
    """Checkpoints of vmoe models with Experts Choice (capacity
    round(17 / 4) = 4, vmoe's soft_moe configs) and Soft MoE (slots read
    from `mu`: round(17 / 4) = 4 per expert) routers load, and the logits
    equal vmoe's to round-off with float32 dispatch. With vmoe's bfloat16
    dispatch they agree to one bfloat16 step of an expert output."""
    model = load_routed(kind, False)
    backbone = model.backbone
    assert backbone.router == {"ec": "experts_choice", "soft": "soft"}[kind]
    if kind == "soft":
        assert backbone.num_slots == 4
        assert tuple(backbone.moe_blocks[0].moe.router.mu.shape) == (16, 4, 4)
    got = to_np(model(IMAGES))[:, 0]
    np.testing.assert_allclose(got, ROUTERS[f"{kind}_logits_f32"], atol=1e-5, rtol=0)
    got = to_np(load_routed(kind, True)(IMAGES))[:, 0]
    np.testing.assert_allclose(got, ROUTERS[f"{kind}_logits"], atol=2e-3, rtol=0)
    assert np.abs(ROUTERS[f"{kind}_logits"] - ROUTERS[f"{kind}_logits_f32"]).max() > 2e-4


def test_router_of_a_checkpoint_is_checked():
    path = os.path.join(FIXTURE, "soft_tiny", "ckpt")
    with pytest.raises(ValueError, match="Soft MoE one"):
        ViTMoEImageClassifier.from_vmoe_checkpoint(path, router="experts_choice")
    with pytest.raises(ValueError, match="does not choose experts per token"):
        ViTMoEImageClassifier.from_vmoe_checkpoint(path, num_selected_experts=2)
    path = os.path.join(FIXTURE, "ec_tiny", "ckpt")
    with pytest.raises(ValueError, match="`router`='soft', but the checkpoint's routers are dense"):
        ViTMoEImageClassifier.from_vmoe_checkpoint(path, router="soft")
    with pytest.raises(ValueError, match="`num_selected_experts` is required for the top-K"):
        ViTMoEImageClassifier.from_vmoe_checkpoint(path)
