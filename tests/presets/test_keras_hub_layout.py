"""Presets in keras-hub's layout: what `save_to_preset` writes, what
keras-hub's loader and `upload_preset` make of it, the refused old zoo
layout, and damaged keras-hub-layout files."""

import json
import os
import shutil
import types

import h5py
import keras
import keras_hub
import numpy as np
import pytest
import zoo_testing
from conftest import BACKEND

import ensemble_zoo as ez
from ensemble_zoo.presets import PresetError

LAYOUT = ["config.json", "metadata.json", "model.weights.h5", "task.json", "task.weights.h5"]


def tiny_vit(seed=0, preprocessor=False):
    if preprocessor:
        converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 255.0)
        preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    return zoo_testing.tiny_vit(
        seed,
        num_classes=4,
        preprocessor=preprocessor or None,
        num_layers=1,
        hidden_dim=8,
        mlp_dim=16,
        dropout_rate=0.0,
        attention_dropout=0.0,
    )


def mlp(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(4)(x))


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
    assert sorted(os.listdir(path)) == sorted(
        LAYOUT + ["image_converter.json", "preprocessor.json"]
    )
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

    monkeypatch.setattr(
        preset_utils,
        "huggingface_hub",
        types.SimpleNamespace(
            create_repo=lambda repo_id, exist_ok: types.SimpleNamespace(repo_id=repo_id),
            file_exists=lambda repo_id, filename: True,
            upload_folder=upload_folder,
        ),
    )
    keras_hub.upload_preset("hf://zoo-user/lora-digits", path)
    assert uploaded == {"zoo-user/lora-digits": sorted(os.listdir(path))}


def test_old_layout_is_refused_by_name(tmp_path):
    """The zoo's old layout (the whole classifier in config.json) is no
    longer read; nothing shipped uses it. A `save_preset` of a model that
    is not a keras-hub task says what it takes."""
    model = ez.models.DeepEnsembleClassifier([mlp(0), mlp(1)])
    old = str(tmp_path / "old")
    os.makedirs(old)
    with open(os.path.join(old, "config.json"), "w") as f:
        json.dump(keras.saving.serialize_keras_object(model), f)
    with open(os.path.join(old, "metadata.json"), "w") as f:
        json.dump({"kind": "architecture"}, f)
    with pytest.raises(
        PresetError, match="old layout .*DeepEnsembleClassifier.*task.json is missing"
    ):
        ez.presets.load_preset(old)
    with pytest.raises(TypeError, match="keras-hub task .*got Functional"):
        ez.presets.save_preset(mlp(0), str(tmp_path / "plain"))


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
    with pytest.raises(
        PresetError, match="config.json and the backbone in task.json differ at /registered_name"
    ):
        ez.presets.load_preset(damaged)


@pytest.fixture(scope="module")
def preprocessor_preset(tmp_path_factory):
    """A BatchEnsemble whose ViT carries an image converter: every config
    that keras-hub's layout holds twice (backbone, preprocessor, image
    converter)."""
    model = ez.models.BatchEnsembleImageClassifier.from_keras_hub(
        tiny_vit(preprocessor=True), num_members=2, seed=0
    )
    path = str(tmp_path_factory.mktemp("presets") / "batch_ensemble")
    model.save_to_preset(path)
    return path


def _edit_json(path, edit):
    with open(path) as f:
        content = json.load(f)
    edit(content)
    with open(path, "w") as f:
        json.dump(content, f)


@pytest.mark.parametrize(
    "filename, edit, match",
    [
        (
            "config.json",
            lambda c: c["config"].update(num_layers=2),
            r"config.json and the backbone in task.json differ at /config/num_layers \(2 in config.json, 1 in task.json\)",
        ),
        (
            "preprocessor.json",
            lambda c: c["config"]["image_converter"]["config"].update(scale=0.5),
            r"preprocessor.json and the preprocessor in task.json differ at /config/image_converter/config/scale",
        ),
        (
            "image_converter.json",
            lambda c: c["config"].update(image_size=[4, 4]),
            r"image_converter.json and the image converter in preprocessor.json differ at /config/image_size",
        ),
        (
            "task.json",
            lambda c: c["config"].pop("preprocessor"),
            r"preprocessor.json exists, but the task in task.json has no preprocessor",
        ),
    ],
    ids=["backbone", "preprocessor", "image_converter", "task_without_preprocessor"],
)
def test_config_copies_that_differ_are_named(preprocessor_preset, tmp_path, filename, edit, match):
    """Each config the layout holds twice is compared at load time; before,
    damaging the copy that the zoo's loader does not read (keras-hub's
    loader does) went unnoticed."""
    path = str(tmp_path / "damaged")
    shutil.copytree(preprocessor_preset, path)
    _edit_json(os.path.join(path, filename), edit)
    with pytest.raises(PresetError, match=match):
        ez.presets.load_preset(path)


@pytest.mark.skipif(BACKEND != "jax", reason="JSON only: backend-independent")
def test_every_shipped_preset_holds_one_version_of_each_config():
    """Both loaders build the same model from every shipped preset: the
    configs keras-hub reads (config.json, preprocessor.json and its
    components) equal the copies the zoo reads (task.json), entry by
    entry; test_presets.py loads the trained presets through both."""
    from ensemble_zoo.presets.config_copies import check_config_copies
    from ensemble_zoo.presets.preset_io import _read_json

    for name in ez.presets.list_presets():
        if ez.presets.preset_metadata(name)["kind"] == "adapters":
            continue  # no model config: ensemble_zoo.presets.adapter_presets
        directory = ez.presets.get_preset_path(name)
        check_config_copies(
            directory,
            _read_json(directory, "task.json"),
            _read_json(directory, "config.json"),
            _read_json,
        )
