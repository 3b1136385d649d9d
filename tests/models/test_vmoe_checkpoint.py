"""`ViTMoEImageClassifier.from_vmoe_checkpoint` against vmoe's own code.

The fixture (`tests/fixtures/vmoe/`, see its README) holds a tiny V-MoE and
a tiny E³ checkpoint written by google-research/vmoe's
`save_checkpoint` (3 data files, 965 chunks each, expert weights sharded
over 2 devices) and the logits vmoe's forward pass gave on the same
images, with the main router settings and variants.
"""

import json
import os
import shutil

import keras_hub
import numpy as np
import pytest
from keras import ops

from conftest import BACKEND
from conftest import REPO_ROOT
from ensemble_zoo.models import ViTMoEImageClassifier
from ensemble_zoo.models.vit_moe import vmoe_checkpoint
from ensemble_zoo.models.vit_moe.vmoe_checkpoint import VMoECheckpointError
from ensemble_zoo.models.vit_moe.vmoe_checkpoint import read_vmoe_checkpoint

FIXTURE = os.path.join(REPO_ROOT, "tests", "fixtures", "vmoe")
REFERENCE = np.load(os.path.join(FIXTURE, "reference.npz"), allow_pickle=False)
CONFIG = json.loads(str(REFERENCE["config_json"]))
IMAGES = REFERENCE["images"]
CHECKPOINT = {"vmoe": os.path.join(FIXTURE, "vmoe_tiny", "ckpt"), "e3": os.path.join(FIXTURE, "e3_tiny", "ckpt")}


def to_np(x):
    return np.asarray(ops.convert_to_numpy(x))


def load(kind, dispatcher):
    """Our model with the router settings of vmoe's config `kind` and the
    dispatcher settings `dispatcher` (as stored in reference.npz)."""
    moe = CONFIG["models"][kind]["config"]["encoder"]["moe"]
    members = moe.get("ensemble_size", 1)
    return ViTMoEImageClassifier.from_vmoe_checkpoint(
        CHECKPOINT[kind],
        num_selected_experts=moe["router"]["num_selected_experts"],
        group_size=moe["group_size"] // members,
        capacity_factor=dispatcher["capacity_factor"],
        batch_priority=dispatcher["batch_priority"],
        bfloat16_dispatch=dispatcher["bfloat16"],
    )


@pytest.mark.parametrize(
    "kind,variant",
    [("vmoe", ""), ("vmoe", "batch_priority"), ("e3", ""), ("e3", "no_drop_f32")],
)
def test_logits_equal_vmoes_own_forward_pass(kind, variant):
    """Main configs (31 resp. 21 token-expert assignments dropped at capacity
    20, bfloat16 dispatch) and variants: Batch-Prioritized Routing changes
    vmoe's logits by 0.35, bfloat16 rounding by 2e-3, so each setting is
    reproduced, not just tolerated."""
    if variant and BACKEND == "jax":
        pytest.skip("test budget: the variants run under TensorFlow and PyTorch (eager JAX is slowest)")
    settings = CONFIG["models"][kind]
    dispatcher = dict(settings["config"]["encoder"]["moe"]["router"]["dispatcher"])
    if variant:
        dispatcher.update(settings["variants"][variant])
    model = load(kind, dispatcher)
    key = f"{kind}_logits" + (f"_{variant}" if variant else "")
    expected = REFERENCE[key]
    got = to_np(model(IMAGES))
    members = model.num_members
    assert got.shape == (6, members, 5)
    # vmoe's E3 rows are image * M + member (jnp.repeat), ours (image, member).
    np.testing.assert_allclose(got.reshape(-1, 5), expected, atol=1e-4, rtol=0)
    assert np.abs(got.reshape(-1, 5) - expected).max() < 1e-5
    if kind == "e3" and not variant:
        # vmoe's ensemble prediction: the log of the members' mean probability.
        probs = to_np(ops.softmax(got, axis=-1)).mean(axis=1)
        np.testing.assert_allclose(np.log(probs), REFERENCE["e3_ensemble_log_probs"], atol=1e-4)


def test_vmoe_settings_are_explicit_options_and_survive_a_keras_hub_preset(tmp_path):
    model = load("e3", CONFIG["models"]["e3"]["config"]["encoder"]["moe"]["router"]["dispatcher"])
    backbone = model.backbone
    # Architecture from the shapes; vmoe's routing defaults made explicit.
    assert (backbone.num_layers, backbone.num_heads, backbone.hidden_dim, backbone.mlp_dim) == (3, 2, 16, 32)
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
        to_np(router.kernel), params["Encoder/encoderblock_1/Moe/Router/dense/kernel"].reshape(16, 4)
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
    embedded = np.einsum("bijpqc,pqcd->bijd", patches, params["embedding/kernel"]) + params["embedding/bias"]
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
    shard.write_bytes(b"\x81\xbe" + vmoe_checkpoint.CHUNK_MAGIC.encode() + b"\xc3")
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
    without_cls = {k: v for k, v in params.items() if k != "cls"}
    with pytest.raises(ValueError, match="classifier='token'"):
        vmoe_checkpoint.vmoe_architecture(without_cls)
    # A V-MoE (dim, E) router read as an E3 of 2 members (the pre-trained E3
    # checkpoint's layout before its fine-tuning reshape).
    vmoe = read_vmoe_checkpoint(CHECKPOINT["vmoe"])
    backbone_kwargs, _ = vmoe_checkpoint.vmoe_architecture(vmoe, ensemble_size=2)
    assert backbone_kwargs["ensemble_size"] == 2
    # Every checkpoint parameter must find a place in the model.
    model = load("vmoe", CONFIG["models"]["vmoe"]["config"]["encoder"]["moe"]["router"]["dispatcher"])
    with pytest.raises(ValueError, match="no place in the model.*extra/kernel"):
        vmoe_checkpoint.load_vmoe_params(model, {**vmoe, "extra/kernel": np.zeros(3)})


def test_bfloat16_arrays_widen_exactly_to_float32():
    """Released checkpoints may store bfloat16 (numpy's ml_dtypes name);
    the reader widens the bits without ml_dtypes. The payload is vmoe's
    ndarray extension: msgpack [shape, dtype name, little-endian bytes]."""
    payload = b"\x93\x91\x03\xa8bfloat16\xc4\x06" + bytes([0x80, 0x3F, 0x00, 0xC0, 0xC9, 0x3F])
    array = vmoe_checkpoint._ndarray(payload)
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, [1.0, -2.0, 1.5703125])
