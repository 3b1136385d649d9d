"""Presets by hub handle (hf://, kaggle://) through keras-hub's preset file
getter, against a local fake hub: no network."""

import shutil
import types

import keras
import numpy as np
import pytest
from keras import ops

import ensemble_zoo as ez
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.presets import PresetError


class FakeHub:
    """Stands in for `huggingface_hub.hf_hub_download` and
    `kagglehub.model_download`: serves files from `root/<hub>/<repo>/` and,
    like the real clients, copies each into a cache once."""

    def __init__(self, root, cache):
        self.root, self.cache, self.downloads = root, cache, []

    def _fetch(self, hub, repo, filename, missing):
        source = self.root / hub / repo / filename
        if not source.is_file():
            raise missing
        target = self.cache / hub / repo / filename
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            self.downloads.append(f"{hub}:{repo}/{filename}")
        return str(target)

    def hf_hub_download(self, repo_id, filename, **kwargs):
        from huggingface_hub.utils import EntryNotFoundError

        return self._fetch("hf", repo_id, filename, EntryNotFoundError(filename))

    def model_download(self, handle, path=None, **kwargs):
        from kagglehub.exceptions import KaggleApiHTTPError

        missing = KaggleApiHTTPError("404 Client Error: Not Found")
        return self._fetch("kaggle", handle, path, missing)

    def publish(self, hub, repo, preset_dir):
        shutil.copytree(preset_dir, self.root / hub / repo)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from keras_hub.src.utils import preset_utils

    fake = FakeHub(tmp_path / "hub", tmp_path / "cache")
    monkeypatch.setattr(
        preset_utils, "huggingface_hub", types.SimpleNamespace(hf_hub_download=fake.hf_hub_download)
    )
    monkeypatch.setattr(
        preset_utils, "kagglehub", types.SimpleNamespace(model_download=fake.model_download)
    )
    return fake


def mlp(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(8)(x))


@pytest.fixture
def published(hub, tmp_path):
    model = DeepEnsembleClassifier([mlp(0), mlp(1)])
    model.save_to_preset(str(tmp_path / "local"), metadata={"description": "hub test"})
    hub.publish("hf", "zoo-user/tiny-ensemble", tmp_path / "local")
    hub.publish("kaggle", "zoo-user/tiny/keras/ensemble/2", tmp_path / "local")
    return model


@pytest.mark.parametrize(
    "handle", ["hf://zoo-user/tiny-ensemble", "kaggle://zoo-user/tiny/keras/ensemble/2"]
)
def test_handle_loads_the_same_model_and_caches(hub, published, handle):
    x = np.random.default_rng(0).random((4, 8, 8, 1)).astype("float32")
    loaded = EnsembleClassifier.from_preset(handle)
    assert type(loaded) is DeepEnsembleClassifier
    np.testing.assert_array_equal(
        ops.convert_to_numpy(loaded(x)), ops.convert_to_numpy(published(x))
    )
    fetched = sorted(d.split("/")[-1] for d in hub.downloads)
    assert fetched == ["config.json", "metadata.json", "model.weights.h5", "task.json"]
    assert ez.presets.preset_metadata(handle)["description"] == "hub test"
    EnsembleClassifier.from_preset(handle)
    assert len(hub.downloads) == 4  # the second load reads the cache


def test_missing_hub_file_is_named(hub, published, tmp_path):
    (tmp_path / "hub" / "hf" / "zoo-user" / "tiny-ensemble" / "config.json").unlink()
    with pytest.raises(PresetError, match="hf://zoo-user/tiny-ensemble has no config.json"):
        EnsembleClassifier.from_preset("hf://zoo-user/tiny-ensemble")


def test_damaged_hub_weights_are_named(hub, published, tmp_path):
    weights = tmp_path / "hub" / "hf" / "zoo-user" / "tiny-ensemble" / "model.weights.h5"
    weights.write_bytes(b"not hdf5")
    with pytest.raises(PresetError, match="model.weights.h5"):
        EnsembleClassifier.from_preset("hf://zoo-user/tiny-ensemble")


def test_malformed_kaggle_handle_is_a_clear_error(hub):
    with pytest.raises(PresetError, match="kaggle://"):
        EnsembleClassifier.from_preset("kaggle://zoo-user/tiny")


def test_hub_text_preset_fetches_its_tokenizer_assets(hub, tmp_path):
    """A text preset's vocabulary lives in `assets/`: loading by handle
    fetches it through keras-hub's file getter, so `predict` on raw strings
    equals the published model's."""
    import keras_hub

    vocabulary = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "the",
        "digits",
        "are",
        "fine",
        "bad",
    ]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )
    bert = keras_hub.models.BertTextClassifier(
        backbone=backbone, num_classes=2, preprocessor=preprocessor, dropout=0.0
    )
    model = ez.models.LoRAEnsembleTextClassifier.from_keras_hub(bert, num_members=2, rank=1, seed=0)
    model.save_to_preset(str(tmp_path / "text"))
    hub.publish("hf", "zoo-user/tiny-text", tmp_path / "text")
    loaded = EnsembleClassifier.from_preset("hf://zoo-user/tiny-text")
    assert "hf:zoo-user/tiny-text/assets/tokenizer/vocabulary.txt" in hub.downloads
    assert loaded.preprocessor.tokenizer.get_vocabulary() == vocabulary
    text = np.array(["the digits are fine", "bad digits", "fine"])
    np.testing.assert_allclose(
        loaded.predict(text, verbose=0), model.predict(text, verbose=0), atol=1e-6
    )


def test_hub_adapter_preset_fetches_its_two_files(hub, tmp_path):
    """An adapter preset on a hub: its metadata and adapters are fetched
    (it has no model config), and it loads on its base as the local one."""
    whole = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    ez.presets.save_adapter_preset(whole, tmp_path / "adapters", base="gemma_tiny_arithmetic")
    hub.publish("hf", "zoo-user/adapters", tmp_path / "adapters")
    loaded = ez.models.LoRAEnsembleCausalLM.from_preset("hf://zoo-user/adapters")
    assert sorted(d.split("/")[-1] for d in hub.downloads) == [
        "adapters.lora_ensemble.h5",
        "metadata.json",
    ]
    for ours, theirs in zip(loaded.adapters, whole.adapters):
        np.testing.assert_array_equal(
            ops.convert_to_numpy(ours.lora_b), ops.convert_to_numpy(theirs.lora_b)
        )
