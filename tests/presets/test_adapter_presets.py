"""Adapter presets (`ensemble_zoo.presets.adapter_presets`): a causal-LM
LoRA-Ensemble saved as its adapters alone, rebuilt on the base model its
metadata names, equals the whole-model preset weight for weight."""

import json
import os

import h5py
import keras_hub
import numpy as np
import pytest
from conftest import BACKEND
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.presets import PresetError

ENSEMBLE = "lora_ensemble_gemma_tiny_arithmetic"
BASE = "gemma_tiny_arithmetic"


@pytest.fixture(scope="module")
def whole():
    return ez.presets.load_preset(ENSEMBLE)


@pytest.fixture(scope="module")
def adapter_preset(whole, tmp_path_factory):
    path = tmp_path_factory.mktemp("adapters") / "lora_ensemble_adapters"
    ez.presets.save_adapter_preset(
        whole, path, base=BASE, metadata={"description": "test", "metrics": {"a": 1}}
    )
    return str(path)


def _weights(model):
    return {w.path: to_np(w) for w in model.weights}


def test_adapter_preset_rebuilds_the_whole_preset_on_its_base(whole, adapter_preset):
    """Two files; loading by directory (its own base, by name), through the
    task class with a base model, equals the whole-model preset's every
    weight bit for bit, and so its logits."""
    assert sorted(os.listdir(adapter_preset)) == ["adapters.lora_ensemble.h5", "metadata.json"]
    meta = ez.presets.preset_metadata(adapter_preset)
    assert meta["kind"] == "adapters" and meta["description"] == "test"
    assert meta["base_model"] == {"preset": BASE, "class_name": "GemmaCausalLM"}
    assert (meta["num_members"], meta["rank"]) == (4, 8)
    assert meta["parameter_count"] == sum(
        np.prod(a.lora_a.shape) + np.prod(a.lora_b.shape) for a in whole.adapters
    )
    expected = _weights(whole)
    base = keras_hub.models.GemmaCausalLM.from_preset(ez.presets.get_preset_path(BASE))
    for loaded in (
        ez.presets.load_preset(adapter_preset),
        ez.models.LoRAEnsembleCausalLM.from_preset(adapter_preset, base=base),
    ):
        assert type(loaded) is type(whole)
        weights = _weights(loaded)
        assert weights.keys() == expected.keys()
        for path, value in expected.items():
            np.testing.assert_array_equal(weights[path], value, err_msg=path)
    x = base.preprocessor.generate_preprocess(["12+7="], sequence_length=8)
    x = {k: to_np(v) for k, v in x.items()}
    np.testing.assert_array_equal(to_np(loaded(x)), to_np(whole(x)))
    assert loaded.preprocessor is not None
    fresh = ez.presets.load_preset(adapter_preset, load_weights=False, preprocessor=None)
    assert fresh.preprocessor is None
    assert not any(np.any(to_np(a.lora_b)) for a in fresh.adapters)  # B = 0


@pytest.mark.skipif(BACKEND != "jax", reason="argument and file checks: backend-independent")
def test_adapter_preset_errors_name_the_problem(whole, adapter_preset, tmp_path):
    with pytest.raises(TypeError, match="holds adapters only.*'rank'"):
        ez.presets.load_preset(adapter_preset, rank=2)
    with pytest.raises(ValueError, match="`base` is for adapter presets"):
        ez.presets.load_preset(BASE, base=BASE)
    with pytest.raises(PresetError, match="not a TokenLossPredictor"):
        ez.models.TokenLossPredictor.from_preset(adapter_preset)
    with pytest.raises(TypeError, match="`base` must be a keras-hub causal LM"):
        ez.presets.load_preset(adapter_preset, base=3)
    with pytest.raises(PresetError, match="Could not load 'vit_tiny_digits', the base model"):
        ez.presets.load_preset(adapter_preset, base="vit_tiny_digits")
    # A base of another shape: the adapters do not fit, and say where.
    other = keras_hub.models.GemmaCausalLM(
        backbone=keras_hub.models.GemmaBackbone(
            vocabulary_size=17,
            num_layers=1,
            num_query_heads=2,
            num_key_value_heads=1,
            hidden_dim=16,
            intermediate_dim=32,
            head_dim=8,
        ),
        preprocessor=None,
    )
    with pytest.raises(PresetError, match="do not fit the base model passed.*adapters: file"):
        ez.presets.load_preset(adapter_preset, base=other)
    # A changed adapters file fails its checksum.
    damaged = tmp_path / "damaged"
    ez.presets.save_adapter_preset(whole, damaged, base=BASE)
    with h5py.File(damaged / "adapters.lora_ensemble.h5", "r+") as f:
        f["adapters/0/lora_b"][0, 0, 0] += 1.0
    with pytest.raises(PresetError, match="does not match the SHA-256"):
        ez.presets.load_preset(str(damaged))
    meta = json.loads((damaged / "metadata.json").read_text())
    del meta["base_model"]
    (damaged / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(PresetError, match="names no base model"):
        ez.presets.load_preset(str(damaged), load_weights=False)
    with pytest.raises(TypeError, match="`model` must be a LoRA-Ensemble causal LM"):
        ez.presets.save_adapter_preset(other, tmp_path / "x", base=BASE)
    with pytest.raises(TypeError, match="`base` must name the preset"):
        ez.presets.save_adapter_preset(whole, tmp_path / "x", base=None)
