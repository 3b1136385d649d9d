"""Presets in keras-hub's layout: what `save_to_preset` writes, what
keras-hub's loader and `upload_preset` make of it, the old zoo layout's
deprecation and its converter, and damaged keras-hub-layout files."""

import json
import os
import shutil
import types
import warnings

import h5py
import keras
import keras_hub
import numpy as np
import pytest

import ensemble_zoo as ez
import zoo_testing
from ensemble_zoo.presets import PresetError

LAYOUT = ["config.json", "metadata.json", "model.weights.h5", "task.json", "task.weights.h5"]


def tiny_vit(seed=0, preprocessor=False):
    if preprocessor:
        converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 255.0)
        preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    return zoo_testing.tiny_vit(
        seed, num_classes=4, preprocessor=preprocessor or None, num_layers=1,
        hidden_dim=8, mlp_dim=16, dropout_rate=0.0, attention_dropout=0.0,
    )


def mlp(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(4)(x))


def write_old_layout(model, directory):
    """A preset as the zoo wrote it before the keras-hub layout: the whole
    classifier in config.json, all its weights in model.weights.h5."""
    os.makedirs(directory)
    config = keras.saving.serialize_keras_object(model)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    model.save_weights(os.path.join(directory, "model.weights.h5"))
    with open(os.path.join(directory, "metadata.json"), "w") as f:
        json.dump({"kind": "trained", "description": "old", "metrics": {"a": 1}}, f)


def images(n=6, size=8):
    return np.random.default_rng(0).random((n, size, size, 1)).astype("float32")


def test_keras_hub_layout_loads_through_keras_hub_and_uploads(tmp_path, monkeypatch):
    """A LoRA-Ensemble with the ViT's preprocessor: keras-hub's files, its
    loader returns our class (raw uint8 images of another size in, as
    the keras-hub model), and `upload_preset` sends the directory."""
    vit = tiny_vit(preprocessor=True)
    model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=2, rank=1, seed=0)
    path = str(tmp_path / "preset")
    model.save_to_preset(path, metadata={"description": "lora"})
    assert sorted(os.listdir(path)) == sorted(LAYOUT + ["image_converter.json", "preprocessor.json"])
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["registered_name"] == "ensemble_zoo>LoRAEnsembleViTBackbone"
    metadata = ez.presets.preset_metadata(path)
    assert metadata["keras_hub_version"] == keras_hub.__version__
    assert metadata["keras_version"] == keras.version()
    assert metadata["layout"] == "keras_hub" and metadata["description"] == "lora"
    assert metadata["tasks"] == ["ImageClassifier"]

    loaded = keras_hub.models.ImageClassifier.from_preset(path)
    assert type(loaded) is ez.models.LoRAEnsembleImageClassifier
    raw = np.random.default_rng(1).integers(0, 256, (5, 12, 12, 1)).astype("uint8")
    np.testing.assert_array_equal(loaded.predict(raw, verbose=0), model.predict(raw, verbose=0))
    backbone = keras_hub.models.Backbone.from_preset(path)
    assert type(backbone) is ez.models.LoRAEnsembleViTBackbone
    assert backbone.method_config == model.backbone.method_config

    from keras_hub.src.utils import preset_utils

    uploaded = {}

    def upload_folder(repo_id, folder_path):
        uploaded[repo_id] = sorted(os.listdir(folder_path))

    monkeypatch.setattr(preset_utils, "huggingface_hub", types.SimpleNamespace(
        create_repo=lambda repo_id, exist_ok: types.SimpleNamespace(repo_id=repo_id),
        file_exists=lambda repo_id, filename: True,
        upload_folder=upload_folder,
    ))
    keras_hub.upload_preset("hf://zoo-user/lora-digits", path)
    assert uploaded == {"zoo-user/lora-digits": sorted(os.listdir(path))}


@pytest.mark.parametrize("kind", ["lora", "deep_ensemble"])
def test_old_layout_loads_with_a_warning_and_converts(kind, tmp_path):
    """The deep ensemble's members moved into its backbone: the old
    weights file still loads (same variable paths, one level down)."""
    if kind == "lora":
        model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
            tiny_vit(), num_members=2, rank=1, seed=0
        )
    else:
        model = ez.models.DeepEnsembleClassifier([mlp(0), mlp(1)])
    old = str(tmp_path / "old")
    write_old_layout(model, old)
    with pytest.warns(FutureWarning, match="convert_preset"):
        loaded = ez.presets.load_preset(old)
    x = images()
    expected = model.predict(x, verbose=0)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)

    assert ez.presets.convert_preset(old) == old
    assert set(os.listdir(old)) >= {"task.json", "config.json", "model.weights.h5"}
    metadata = ez.presets.preset_metadata(old)
    assert metadata["description"] == "old" and metadata["metrics"] == {"a": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        converted = keras_hub.models.ImageClassifier.from_preset(old)
        ours = ez.presets.load_preset(old)
    assert type(converted) is type(model) and type(ours) is type(model)
    np.testing.assert_array_equal(converted.predict(x, verbose=0), expected)
    np.testing.assert_array_equal(ours.predict(x, verbose=0), expected)


@pytest.fixture(scope="module")
def hub_preset(tmp_path_factory):
    model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        tiny_vit(), num_members=2, rank=1, seed=0
    )
    path = str(tmp_path_factory.mktemp("presets") / "lora")
    model.save_to_preset(path)
    return path


@pytest.fixture
def damaged(hub_preset, tmp_path):
    path = str(tmp_path / "damaged")
    shutil.copytree(hub_preset, path)
    return path


def test_missing_task_weights_are_named(damaged):
    os.remove(os.path.join(damaged, "task.weights.h5"))
    with pytest.raises(PresetError, match="task.weights.h5 is missing"):
        ez.presets.load_preset(damaged)


def test_changed_task_weights_fail_their_checksum(damaged):
    with h5py.File(os.path.join(damaged, "task.weights.h5"), "a") as f:
        names = []
        f.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
        f[names[0]][...] = f[names[0]][()] + 1.0
    with pytest.raises(PresetError, match="task.weights.h5 has SHA-256"):
        ez.presets.load_preset(damaged)


def test_backbone_config_of_another_class_is_named(damaged):
    path = os.path.join(damaged, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["registered_name"] = "keras_hub>ViTBackbone"
    with open(path, "w") as f:
        json.dump(config, f)
    with pytest.raises(PresetError, match="config.json names the backbone class 'keras_hub>ViTBackbone'"):
        ez.presets.load_preset(damaged)


def test_converting_a_current_preset_changes_nothing(hub_preset):
    before = {n: os.path.getmtime(os.path.join(hub_preset, n)) for n in os.listdir(hub_preset)}
    assert ez.presets.convert_preset(hub_preset) == hub_preset
    assert before == {n: os.path.getmtime(os.path.join(hub_preset, n)) for n in os.listdir(hub_preset)}
