import json
import os
import shutil

import keras
import numpy as np
import pytest
from keras import ops

import ensemble_zoo as ez
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.presets import PresetError


def to_np(x):
    return np.asarray(ops.convert_to_numpy(x))


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
        path = ez.presets.get_preset_path(name)
        expected = ["config.json", "metadata.json"]
        if ez.presets.preset_metadata(name)["kind"] == "trained":
            expected.append("model.weights.h5")
        assert sorted(os.listdir(path)) == expected


TRAINED = ez.evaluation.trained_presets()
LOW_PRECISION = ("mixed_bfloat16", "mixed_float16")
#: Largest |p_policy - p_float32| of a predictive probability on the test
#: set (bfloat16 keeps 8 mantissa bits, float16 11).
PROBABILITY_TOLERANCE = {"mixed_bfloat16": 0.05, "mixed_float16": 0.01}


def low_precision_policy(index):
    """One policy per preset and backend, alternating, so that over the
    three backends every preset runs under both."""
    from conftest import ALL_BACKENDS
    from conftest import BACKEND

    return LOW_PRECISION[(index + ALL_BACKENDS.index(BACKEND)) % 2]


def check_layers_compute_in(model, policy):
    """Every layer with a kernel computes in the policy's dtype, except the
    MoE routers, which stay float32; all variables stay float32."""
    compute = keras.dtype_policies.get(policy).compute_dtype
    layers = [
        layer for layer in model._flatten_layers()
        if any(w.name.endswith("kernel") for w in layer._trainable_variables
               + layer._non_trainable_variables)
    ]
    assert layers
    for layer in layers:
        expected = "float32" if isinstance(layer, ez.layers.TopKRouter) else compute
        assert layer.compute_dtype == expected, (layer.name, layer.compute_dtype)
    assert {v.dtype for v in model.weights} == {"float32"}


def check_agrees_with_float32(probs, probs32, policy):
    assert np.mean(probs.argmax(-1) == probs32.argmax(-1)) >= 0.99
    assert np.abs(probs - probs32).max() <= PROBABILITY_TOLERANCE[policy]


@pytest.mark.parametrize("name", TRAINED)
def test_shipped_presets_load_offline_and_reproduce_their_metrics(name):
    """... and under a mixed-precision policy every layer computes in low
    precision and predictions agree with float32 (argmax on >= 99% of the
    test set, probabilities within `PROBABILITY_TOLERANCE`)."""
    model = EnsembleClassifier.from_preset(name)
    metadata = ez.presets.preset_metadata(name)
    assert model.num_members == metadata["num_members"] and model.num_classes == 8
    assert type(model).__name__ == metadata["class_name"]
    x, y = ez.datasets.load_arrays("digits", "test")
    probs = model.predict_uncertainty(x, batch_size=128)["probabilities"]
    recorded = ez.presets.preset_metadata(name)["metrics"]
    assert ez.metrics.accuracy(probs, y) == pytest.approx(
        recorded["test_accuracy"], abs=1e-3
    )
    assert ez.metrics.negative_log_likelihood(probs, y) == pytest.approx(
        recorded["test_nll"], abs=1e-3
    )
    assert recorded["test_accuracy"] > 0.9
    policy = low_precision_policy(TRAINED.index(name))
    low = EnsembleClassifier.from_preset(name, dtype=policy)
    check_layers_compute_in(low, policy)
    out = low.predict_uncertainty(x, batch_size=128)
    assert out["probabilities"].dtype == out["epistemic"].dtype == np.float32
    check_agrees_with_float32(out["probabilities"], probs, policy)


def test_bad_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="`dtype` must be a Keras dtype policy"):
        EnsembleClassifier.from_preset("vit_tiny_digits", dtype="mixed_int3")


def test_deep_ensemble_preset_contains_the_base_model():
    base = DeepEnsembleClassifier.from_preset("vit_tiny_digits")
    ensemble = EnsembleClassifier.from_preset("deep_ensemble_vit_tiny_digits")
    x, _ = ez.datasets.load_arrays("digits", "validation")
    np.testing.assert_allclose(
        to_np(ensemble(x))[:, :1], to_np(base(x)), atol=1e-6
    )


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
    "filename", ["config.json", "metadata.json", "model.weights.h5"]
)
def test_missing_file_is_named(saved, filename):
    _, path = saved
    os.remove(os.path.join(path, filename))
    with pytest.raises(PresetError, match=f"{filename} is missing"):
        EnsembleClassifier.from_preset(path)


@pytest.mark.parametrize("filename", ["config.json", "metadata.json"])
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
        os.path.join(other_path, "model.weights.h5"),
        os.path.join(path, "model.weights.h5"),
    )
    with pytest.raises(PresetError, match=r"model.weights.h5.*shape \(64, 32\)"):
        EnsembleClassifier.from_preset(path)


def test_weights_file_that_is_not_hdf5_is_named(saved):
    _, path = saved
    with open(os.path.join(path, "model.weights.h5"), "w") as f:
        f.write("not hdf5")
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
    with pytest.raises(PresetError, match="config.json.*(unsafe|safe_mode)"):
        EnsembleClassifier.from_preset(path)


def test_loss_prediction_preset_reproduces_its_uncertainty_metrics():
    from scipy.stats import spearmanr

    model = ez.models.LossPredictionImageClassifier.from_preset(
        "loss_prediction_vit_tiny_digits"
    )
    recorded = ez.presets.preset_metadata("loss_prediction_vit_tiny_digits")["metrics"]
    base = EnsembleClassifier.from_preset("vit_tiny_digits")
    x, y = ez.datasets.load_arrays("digits", "test")
    out = model.predict(x, batch_size=128, verbose=0)
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
    policy = low_precision_policy(len(TRAINED))
    keras.config.set_dtype_policy(policy)
    try:
        low = ez.models.LossPredictionImageClassifier.from_preset(
            "loss_prediction_vit_tiny_digits"
        )
    finally:
        keras.config.set_dtype_policy("float32")
    check_layers_compute_in(low, policy)
    low_out = low.predict(x, batch_size=128, verbose=0)
    assert low_out["uncertainty"].dtype == np.float32
    check_agrees_with_float32(
        to_np(keras.ops.softmax(low_out["logits"])), probs, policy
    )
    assert spearmanr(low_out["uncertainty"], out["uncertainty"]).statistic > 0.99
