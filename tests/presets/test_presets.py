import json
import os
import shutil

import keras
import keras_hub
import numpy as np
import pytest
from conftest import BACKEND
from zoo_testing import this_run
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.presets import PresetError


def mlp_member(seed, hidden=16):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(hidden, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(8)(x))


@pytest.fixture
def saved(tmp_path):
    model = DeepEnsembleClassifier([mlp_member(0), mlp_member(1)])
    path = str(tmp_path / "preset")
    model.save_to_preset(path, metadata={"description": "test"})
    return model, path


def test_list_presets_matches_shipped_directories():
    names = ez.presets.list_presets()
    assert "vit_tiny_digits" in names
    assert "deep_ensemble_vit_tiny_digits" in names
    for name in names:
        files = set(os.listdir(ez.presets.get_preset_path(name)))
        kind = ez.presets.preset_metadata(name)["kind"]
        if kind == "adapters":  # ensemble_zoo.presets.adapter_presets
            assert files == {"metadata.json", "adapters.lora_ensemble.h5"}, name
            continue
        # keras-hub's layout (ensemble_zoo.presets.keras_hub_layout).
        trained = kind == "trained"
        assert {"config.json", "metadata.json", "task.json"} <= files, name
        assert ("model.weights.h5" in files) == trained, name
        assert files <= {
            "config.json",
            "metadata.json",
            "task.json",
            "model.weights.h5",
            "task.weights.h5",
            "preprocessor.json",
            "image_converter.json",
            "tokenizer.json",
            "assets",
        }, name
        # The model is named after its preset (reports and plots take the
        # model's name; it was Keras' "deep_ensemble_classifier_4").
        with open(os.path.join(ez.presets.get_preset_path(name), "task.json")) as f:
            assert json.load(f)["config"]["name"] == name


TRAINED = ez.evaluation.trained_presets()
LOW_PRECISION = ("mixed_bfloat16", "mixed_float16")
#: Largest |p_policy - p_float32| of a predictive probability on the test
#: set (bfloat16 keeps 8 mantissa bits, float16 11).
PROBABILITY_TOLERANCE = {"mixed_bfloat16": 0.05, "mixed_float16": 0.01}


def second_check(index):
    """Which extra check a preset gets under this backend (test budget):
    TensorFlow and PyTorch split the presets, so that each preset is
    loaded through keras-hub's loader on one of them and predicts under a
    low-precision policy on the other. The policy alternates over the
    presets, so both policies run on both backends."""
    from conftest import ALL_BACKENDS
    from conftest import BACKEND

    if (index + ALL_BACKENDS.index(BACKEND)) % 2:
        return "keras_hub_loader", None
    return "low_precision", LOW_PRECISION[(index // 2) % 2]


def check_layers_compute_in(model, policy):
    """Every layer with a kernel computes in the policy's dtype, except the
    MoE routers, which stay float32; all float variables stay float32."""
    compute = keras.dtype_policies.get(policy).compute_dtype
    layers = [
        layer
        for layer in model._flatten_layers()
        if any(
            w.name.endswith("kernel")
            for w in layer._trainable_variables + layer._non_trainable_variables
        )
    ]
    assert layers
    for layer in layers:
        routers = (ez.layers.TopKRouter, ez.layers.ExpertsChoiceRouter, ez.layers.SoftRouter)
        expected = "float32" if isinstance(layer, routers) else compute
        assert layer.compute_dtype == expected, (layer.name, layer.compute_dtype)
    # Integer weights (keras-hub's CLIP position ids) keep their dtype.
    assert {v.dtype for v in model.weights if "int" not in v.dtype} == {"float32"}


def check_agrees_with_float32(probs, probs32, policy):
    assert np.mean(probs.argmax(-1) == probs32.argmax(-1)) >= 0.99
    assert np.abs(probs - probs32).max() <= PROBABILITY_TOLERANCE[policy]


@pytest.mark.parametrize("name", TRAINED)
def test_shipped_presets_load_offline_and_reproduce_their_metrics(name):
    """... and under a mixed-precision policy every layer computes in low
    precision and predictions agree with float32 (argmax on >= 99% of the
    test set, probabilities within `PROBABILITY_TOLERANCE`).

    Under JAX the README's main command (`test_readme.py`) loads every
    trained preset offline, evaluates it and checks its recorded metrics:
    this test covers PyTorch every run and TensorFlow a third of the
    presets a run, in turn (about 100 s for all of them there)."""
    if BACKEND == "jax":
        pytest.skip("under JAX, test_readme.py's main command checks every preset's record")
    if BACKEND == "tensorflow" and name not in this_run(TRAINED, -(-len(TRAINED) // 3)):
        pytest.skip("under TensorFlow a third of the presets a run, in turn (test budget)")
    x, y = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    check, policy = second_check(TRAINED.index(name))
    if check == "keras_hub_loader":
        # keras-hub's own loader finds our class from the preset's
        # config.json, and builds the zoo loader's model bit for bit.
        model = keras_hub.models.ImageClassifier.from_preset(ez.presets.get_preset_path(name))
        ours = EnsembleClassifier.from_preset(name)
        np.testing.assert_array_equal(to_np(model(x[:32])), to_np(ours(x[:32])))
    else:
        # Test budget: one loader on the backend that checks low precision
        # (see second_check; test_keras_hub_tasks.py and
        # test_keras_hub_layout.py check the loaders under JAX too, and
        # every preset's config copies agree).
        model = EnsembleClassifier.from_preset(name)
    metadata = ez.presets.preset_metadata(name)
    assert model.num_members == metadata["num_members"] and model.num_classes == 8
    assert type(model).__name__ == metadata["class_name"]
    # The batch size of the recorded metrics (presets/make_*.py).
    # The preset's image converter takes the raw digits (0-16).
    assert model.preprocessor.image_converter.scale == 1 / 16
    probs = model.predict_uncertainty(raw, batch_size=256)["probabilities"]
    recorded = ez.presets.preset_metadata(name)["metrics"]
    tolerance = 1e-3
    if metadata["class_name"] == "MCDropoutClassifier":
        # MC dropout draws masks per call and batch shape: its record is
        # `evaluate`'s (the last batch padded to 256; that exact figure is
        # tested in tests/evaluation/test_preset_evaluation.py), here other
        # masks, so the sampling error of 8 samples (about 2 of the 289
        # test images, and their NLL).
        tolerance = 0.015
    assert ez.metrics.accuracy(probs, y) == pytest.approx(recorded["test_accuracy"], abs=tolerance)
    assert ez.metrics.negative_log_likelihood(probs, y) == pytest.approx(
        recorded["test_nll"], abs=tolerance
    )
    assert recorded["test_accuracy"] > 0.9
    if check != "low_precision":
        # Test budget: the presets were trained under JAX (and
        # test_mixed_precision.py covers JAX's mixed policies).
        return
    low = EnsembleClassifier.from_preset(name, dtype=policy)
    check_layers_compute_in(low, policy)
    out = low.predict_uncertainty(raw, batch_size=256)
    assert out["probabilities"].dtype == out["epistemic"].dtype == np.float32
    if metadata["class_name"] == "MCDropoutClassifier":
        # Masks drawn in another dtype differ: compare with the record.
        assert ez.metrics.accuracy(out["probabilities"], y) == pytest.approx(
            recorded["test_accuracy"], abs=0.015
        )
        return
    check_agrees_with_float32(out["probabilities"], probs, policy)


def bilinear_resize(images, size):
    """NumPy bilinear resize with half-pixel centres (no antialiasing), the
    sampling of keras-hub's image converters, written out."""
    n, height, width, channels = images.shape
    out = np.empty((n, size, size, channels), "float64")

    def weights(src, dst):
        pos = np.clip((np.arange(dst) + 0.5) * src / dst - 0.5, 0, src - 1)
        low = np.floor(pos).astype(int)
        return low, np.minimum(low + 1, src - 1), pos - low

    r0, r1, fr = weights(height, size)
    c0, c1, fc = weights(width, size)
    x = images.astype("float64")
    top = x[:, r0][:, :, c0] * (1 - fc)[:, None] + x[:, r0][:, :, c1] * fc[:, None]
    bottom = x[:, r1][:, :, c0] * (1 - fc)[:, None] + x[:, r1][:, :, c1] * fc[:, None]
    out[:] = top * (1 - fr)[:, None, None] + bottom * fr[:, None, None]
    return out


@pytest.mark.parametrize("name", ["vit_tiny_digits", "hydra_circuit_vit_tiny_digits"])
def test_predict_takes_raw_images_of_another_size(name):
    """Raw uint8 images (the digits' 0-16 scale) of 12x12 and 5x5 pixels:
    `predict` equals the model on the images resized (NumPy bilinear) and
    divided by 16 by hand; images already in [0, 1] are a clear error."""
    model = EnsembleClassifier.from_preset(name)
    rng = np.random.default_rng(0)
    for size in (12, 5):
        raw = rng.integers(0, 17, (6, size, size, 1)).astype("uint8")
        by_hand = (bilinear_resize(raw, 8) / 16).astype("float32")
        np.testing.assert_allclose(model.predict(raw, verbose=0), to_np(model(by_hand)), atol=2e-5)
    x, _ = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    # Without its preprocessor (as keras-hub's `preprocessor=None`) the
    # preset takes the [0, 1] images: the same predictions (to the
    # round-off of two compiled pipelines).
    plain = EnsembleClassifier.from_preset(name, preprocessor=None)
    assert plain.preprocessor is None
    np.testing.assert_allclose(
        plain.predict(x[:32], verbose=0), model.predict(raw[:32], verbose=0), atol=1e-5
    )
    with pytest.raises(TypeError, match="`preprocessor` must be"):
        EnsembleClassifier.from_preset(name, preprocessor="digits")
    with pytest.raises(ValueError, match=r"already scaled to \[0, 1\].*raw=True"):
        model.predict(x[:4], verbose=0)
    with pytest.raises(ValueError, match="already scaled"):
        model.fit(ez.datasets.load("digits", "train", batch_size=8), epochs=1, verbose=0)


def test_bad_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="`dtype` must be a Keras dtype policy"):
        EnsembleClassifier.from_preset("vit_tiny_digits", dtype="mixed_int3")


def test_deep_ensemble_preset_contains_the_base_model():
    base = DeepEnsembleClassifier.from_preset("vit_tiny_digits")
    ensemble = EnsembleClassifier.from_preset("deep_ensemble_vit_tiny_digits")
    x, _ = ez.datasets.load_arrays("digits", "validation")
    np.testing.assert_allclose(to_np(ensemble(x))[:, :1], to_np(base(x)), atol=1e-6)


def test_save_to_preset_round_trip(saved, rng):
    model, path = saved
    restored = EnsembleClassifier.from_preset(path)
    assert type(restored) is DeepEnsembleClassifier
    x = rng.random((4, 8, 8, 1)).astype("float32")
    np.testing.assert_array_equal(to_np(restored(x)), to_np(model(x)))
    metadata = ez.presets.preset_metadata(path)
    assert metadata["description"] == "test"
    assert metadata["num_members"] == 2
    assert metadata["parameter_count"] == model.count_params()


def test_load_weights_false_builds_fresh_model(saved, rng):
    model, path = saved
    fresh = EnsembleClassifier.from_preset(path, load_weights=False)
    x = rng.random((4, 8, 8, 1)).astype("float32")
    assert not np.allclose(to_np(fresh(x)), to_np(model(x)))


def test_unknown_preset_name_lists_valid_names():
    with pytest.raises(PresetError, match="vit_tiny_digits"):
        EnsembleClassifier.from_preset("vit_huge_imagenet")


@pytest.mark.parametrize(
    "filename", ["config.json", "metadata.json", "model.weights.h5", "task.json"]
)
def test_missing_file_is_named(saved, filename):
    _, path = saved
    os.remove(os.path.join(path, filename))
    with pytest.raises(PresetError, match=f"{filename} is missing"):
        EnsembleClassifier.from_preset(path)


@pytest.mark.parametrize("filename", ["config.json", "metadata.json", "task.json"])
def test_invalid_json_is_named(saved, filename):
    _, path = saved
    with open(os.path.join(path, filename), "w") as f:
        f.write('{"class_name": "DeepEnsembleClassifier", ')
    with pytest.raises(PresetError, match=f"{filename} is not valid JSON"):
        EnsembleClassifier.from_preset(path)


def test_weights_of_the_wrong_shape_are_named(saved, tmp_path):
    _, path = saved
    other = DeepEnsembleClassifier([mlp_member(0, hidden=32), mlp_member(1)])
    other_path = str(tmp_path / "other")
    other.save_to_preset(other_path)
    shutil.copy(
        os.path.join(other_path, "model.weights.h5"), os.path.join(path, "model.weights.h5")
    )
    _edit_metadata(path, lambda m: m.pop("weights_sha256"))  # past the checksum
    with pytest.raises(PresetError, match=r"model.weights.h5.*shape \(64, 32\)"):
        EnsembleClassifier.from_preset(path)


def test_weights_file_that_is_not_hdf5_is_named(saved):
    _, path = saved
    with open(os.path.join(path, "model.weights.h5"), "w") as f:
        f.write("not hdf5")
    _edit_metadata(path, lambda m: m.pop("weights_sha256"))  # past the checksum
    with pytest.raises(PresetError, match="model.weights.h5 is not a readable"):
        EnsembleClassifier.from_preset(path)


def test_unknown_class_is_named(saved):
    _, path = saved
    config_path = os.path.join(path, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["registered_name"] = "ensemble_zoo>NoSuchModel"
    with open(config_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(PresetError, match="NoSuchModel"):
        EnsembleClassifier.from_preset(path)


def test_an_argument_the_constructor_does_not_take_is_named(saved):
    """Keras' functional models drop unknown keyword arguments: a misspelt
    argument in task.json loaded as the default without a word."""
    _, path = saved
    task_path = os.path.join(path, "task.json")
    with open(task_path) as f:
        config = json.load(f)
    config["config"]["num_memberz"] = 3
    with open(task_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(
        PresetError,
        match=r"task.json gives DeepEnsembleClassifier the argument\(s\) \['num_memberz'\]",
    ):
        EnsembleClassifier.from_preset(path)


def test_wrong_class_is_a_clear_error(saved):
    _, path = saved

    class OtherEnsemble(EnsembleClassifier):
        pass

    with pytest.raises(PresetError, match="holds a DeepEnsembleClassifier"):
        OtherEnsemble.from_preset(path)


def test_loading_uses_safe_mode(tmp_path):
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Lambda(lambda t: t * 2.0)(x)
    member = keras.Model(inputs, keras.layers.Dense(8)(x))
    path = str(tmp_path / "lambda")
    DeepEnsembleClassifier([member]).save_to_preset(path)
    with pytest.raises(PresetError, match="task.json.*(unsafe|safe_mode)"):
        EnsembleClassifier.from_preset(path)


def test_loss_prediction_preset_reproduces_its_uncertainty_metrics():
    from scipy.stats import spearmanr

    model = keras_hub.models.ImageClassifier.from_preset(
        ez.presets.get_preset_path("loss_prediction_vit_tiny_digits")
    )
    assert type(model) is ez.models.LossPredictionImageClassifier
    recorded = ez.presets.preset_metadata("loss_prediction_vit_tiny_digits")["metrics"]
    base = EnsembleClassifier.from_preset("vit_tiny_digits")
    x, y = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    # Raw digits in (the preset's image converter), as the model on [0, 1].
    out = model.predict(raw, batch_size=128, verbose=0)
    # The classifier is vit_tiny_digits, frozen while the head trained.
    np.testing.assert_allclose(out["logits"], to_np(base(x))[:, 0], atol=1e-5)
    probs = to_np(keras.ops.softmax(out["logits"]))
    losses = -np.log(probs[np.arange(len(y)), y])
    correlation = spearmanr(out["uncertainty"], losses).statistic
    assert correlation == pytest.approx(recorded["test_spearman_uncertainty_loss"], abs=1e-3)
    assert correlation > 0.9
    embeddings = to_np(model.embed(x))
    assert ez.metrics.r_auroc(embeddings, y, out["uncertainty"]) == pytest.approx(
        recorded["test_r_auroc"], abs=1e-3
    )
    assert "loss_prediction_vit_tiny_digits" not in ez.evaluation.trained_presets()
    with pytest.raises(ValueError, match="LossPredictionImageClassifier"):
        EnsembleClassifier.from_preset("loss_prediction_vit_tiny_digits")
    # The global policy reaches every layer too (no `dtype` argument).
    # One policy per backend (JAX bfloat16, TensorFlow float16, PyTorch bfloat16).
    from conftest import ALL_BACKENDS
    from conftest import BACKEND as backend

    policy = LOW_PRECISION[ALL_BACKENDS.index(backend) % 2]
    keras.config.set_dtype_policy(policy)
    try:
        low = ez.models.LossPredictionImageClassifier.from_preset("loss_prediction_vit_tiny_digits")
    finally:
        keras.config.set_dtype_policy("float32")
    check_layers_compute_in(low, policy)
    low_out = low.predict(raw, batch_size=128, verbose=0)
    assert low_out["uncertainty"].dtype == np.float32
    check_agrees_with_float32(to_np(keras.ops.softmax(low_out["logits"])), probs, policy)
    assert spearmanr(low_out["uncertainty"], out["uncertainty"]).statistic > 0.99


# === Integrity: damaged weights and metadata are named ===


def _edit_weights(path, edit, keep_checksum=False):
    """Applies `edit(h5py_file)` to a saved preset's weights; by default
    also drops the checksum so the later checks are reached."""
    import h5py

    with h5py.File(os.path.join(path, "model.weights.h5"), "a") as f:
        edit(f)
    if not keep_checksum:
        _edit_metadata(path, lambda m: m.pop("weights_sha256"))


def _edit_metadata(path, edit):
    metadata_path = os.path.join(path, "metadata.json")
    with open(metadata_path) as f:
        metadata = json.load(f)
    edit(metadata)
    with open(metadata_path, "w") as f:
        json.dump(metadata, f)


def _first_kernel(f):
    names = []
    f.visit(lambda n: names.append(n) if n.endswith("vars/0") else None)
    return names[0]


def test_changed_weights_fail_the_checksum(saved):
    _, path = saved
    weights = os.path.join(path, "model.weights.h5")
    assert ez.presets.preset_metadata(path)["weights_sha256"] == (
        ez.presets.preset_io.file_sha256(weights)
    )
    data = bytearray(open(weights, "rb").read())
    data[-100] ^= 0xFF  # one flipped byte
    open(weights, "wb").write(bytes(data))
    with pytest.raises(PresetError, match=r"model.weights.h5 has SHA-256 .*changed or corrupted"):
        EnsembleClassifier.from_preset(path)


def test_non_finite_weights_are_named(saved):
    _, path = saved

    def poison(f):
        name = _first_kernel(f)
        values = f[name][()]
        values[0, 0] = np.nan
        f[name][...] = values

    _edit_weights(path, poison)
    with pytest.raises(PresetError, match=r"model.weights.h5 holds NaN or infinite values in 1"):
        EnsembleClassifier.from_preset(path)


def test_retyped_weights_are_named(saved):
    _, path = saved

    def retype(f):
        name = _first_kernel(f)
        values = f[name][()]
        del f[name]
        f.create_dataset(name, data=values.astype("float16"))

    _edit_weights(path, retype)
    with pytest.raises(
        PresetError, match=r"model.weights.h5.*dtype float16, the model expects float32"
    ):
        EnsembleClassifier.from_preset(path)


def test_kind_must_match_the_weights(saved):
    _, path = saved
    _edit_metadata(path, lambda m: m.update(kind="architecture"))
    with pytest.raises(
        PresetError, match=r"metadata.json says kind 'architecture'.*model.weights.h5 exists"
    ):
        EnsembleClassifier.from_preset(path)
    _edit_metadata(path, lambda m: m.update(kind="pretrained"))
    with pytest.raises(PresetError, match=r"metadata.json has kind 'pretrained'"):
        EnsembleClassifier.from_preset(path)


def test_a_layer_config_is_not_a_preset(saved):
    _, path = saved
    with open(os.path.join(path, "task.json"), "w") as f:
        json.dump(keras.saving.serialize_keras_object(keras.layers.Dense(3)), f)
    with pytest.raises(PresetError, match=r"task.json holds a Dense, which is not a keras.Model"):
        ez.presets.load_preset(path)


def test_class_mismatch_suggests_a_call_that_works(saved):
    model, path = saved
    with pytest.raises(PresetError) as info:
        ez.models.LossPredictionImageClassifier.from_preset(path)
    message = str(info.value)
    assert f"ensemble_zoo.models.DeepEnsembleClassifier.from_preset({path!r})" in message
    assert f"ensemble_zoo.presets.load_preset({path!r})" in message
    restored = ez.models.DeepEnsembleClassifier.from_preset(path)
    x = np.zeros((2, 8, 8, 1), "float32")
    np.testing.assert_array_equal(to_np(restored(x)), to_np(model(x)))


def test_failed_save_leaves_the_previous_preset_intact(saved):
    model, path = saved
    before = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    other = DeepEnsembleClassifier([mlp_member(5), mlp_member(6)])
    with pytest.raises(TypeError, match="`metadata` must be JSON-serializable"):
        other.save_to_preset(path, metadata={"created": object()})
    after = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    assert after == before
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".preset-")]
    # Saving an architecture preset over a trained one removes the weights.
    other.save_to_preset(path, include_weights=False)
    assert sorted(os.listdir(path)) == ["config.json", "metadata.json", "task.json"]
    assert ez.presets.preset_metadata(path)["kind"] == "architecture"
    EnsembleClassifier.from_preset(path)


# Test budget: `quantize("int8")` takes 5-40 s per preset on the 2-core
# machine (Keras quantizes layer by layer), so the tests check the
# lowest-agreeing deterministic preset of the README's table (JAX's; the
# test runs under TensorFlow, where quantizing is twice as fast) and the
# refusal; `benchmarks/int8_agreement.py` measures every trained preset
# and prints the table.
@pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason="once: quantizing takes half as long under TensorFlow as under JAX",
)
def test_int8_quantization_reaches_every_kernel_and_keeps_the_argmax(tmp_path):
    from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin

    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    model = EnsembleClassifier.from_preset("hydra_circuit_vit_tiny_digits")
    # Quantized before any predict (the preprocessor is left out).
    model.quantize("int8")
    kernels = [
        layer
        for layer in model._flatten_layers()
        if type(layer) in (keras.layers.Dense, keras.layers.EinsumDense)
        or isinstance(layer, Int8KernelsMixin)
    ]
    assert {type(layer).__name__ for layer in kernels} >= {"GroupedDense", "HydraAttention"}
    assert all(layer.quantization_mode == "int8" for layer in kernels)
    probs = model.predict_uncertainty(raw, batch_size=256)["probabilities"]
    float32 = EnsembleClassifier.from_preset("hydra_circuit_vit_tiny_digits")
    probs32 = float32.predict_uncertainty(raw, batch_size=256)["probabilities"]
    assert np.mean(probs.argmax(-1) == probs32.argmax(-1)) >= 0.99
    with pytest.raises(NotImplementedError, match="quantized .*after `from_preset`"):
        model.save_to_preset(str(tmp_path / "q"))
    # Soft MoE (the experts as in every MoE preset): the experts are
    # quantized, the router (Soft MoE's slot vectors) routes in float32.
    moe = EnsembleClassifier.from_preset("soft_moe_vit_tiny_digits")
    probs32 = moe.predict(raw[:128], batch_size=128, verbose=0)
    moe.quantize("int8")
    for block in moe.backbone.moe_blocks:
        assert block.moe.dense_1.quantization_mode == "int8"
        assert block.moe.router.compute_dtype == "float32"
    probs = moe.predict(raw[:128], batch_size=128, verbose=0)
    assert np.mean(probs.argmax(-1) == probs32.argmax(-1)) >= 0.99
    # A subnetwork ensemble refuses (quantized, it predicted 23% of the
    # float32 model's classes).
    subnetwork = EnsembleClassifier.from_preset("subnetwork_vit_tiny_digits")
    with pytest.raises(ValueError, match="cannot be quantized"):
        subnetwork.quantize("int8")
