"""The arithmetic language-model presets (issue 32): keras-hub's loaders
and the zoo's build the same models, the ensemble answers as recorded, and
`ensemble-zoo evaluate` reproduces every recorded number."""

import json

import keras
import keras_hub
import numpy as np
import pytest

import ensemble_zoo as ez
from ensemble_zoo import cli
from ensemble_zoo.datasets import arithmetic
from zoo_testing import to_np

ENSEMBLE = "lora_ensemble_gemma_tiny_arithmetic"
BASE = "gemma_tiny_arithmetic"
LOSS = "loss_prediction_gemma_tiny_arithmetic"


def test_keras_hub_and_zoo_loaders_build_the_same_models():
    """keras-hub's `CausalLM.from_preset` finds the zoo's ensemble class
    from `config.json`; the base preset is a plain keras-hub model."""
    path = ez.presets.get_preset_path(ENSEMBLE)
    ours = ez.presets.load_preset(ENSEMBLE)
    theirs = keras_hub.models.CausalLM.from_preset(path)
    assert type(theirs) is type(ours) is ez.models.LoRAEnsembleGemmaCausalLM
    base = keras_hub.models.GemmaCausalLM.from_preset(ez.presets.get_preset_path(BASE))
    questions, answers = arithmetic.load_questions("test")
    x = base.preprocessor.generate_preprocess(questions[:8], sequence_length=12)
    x = {k: to_np(v) for k, v in x.items()}
    logits = to_np(ours(x))
    np.testing.assert_array_equal(to_np(theirs(x)), logits)
    assert logits.shape == (8, 4, 12, 17)
    # Greedy answers from the ensemble's mean probabilities.
    ours.compile(sampler="greedy")
    given = [arithmetic.parse_answer(t) for t in ours.generate(questions[:40], max_length=12)]
    accuracy = np.mean([g == a for g, a in zip(given, answers[:40])])
    assert accuracy >= ez.presets.preset_metadata(ENSEMBLE)["metrics"]["test_accuracy"] - 0.1
    predictor = ez.presets.load_preset(LOSS)
    assert isinstance(predictor, ez.models.TokenLossPredictor)
    np.testing.assert_array_equal(
        to_np(predictor.backbone.token_embedding.embeddings),
        to_np(base.backbone.token_embedding.embeddings),
    )


@pytest.mark.skipif(
    keras.config.backend() != "jax",
    reason="the presets were made under JAX; greedy answers near ties may differ elsewhere",
)
def test_evaluate_command_reproduces_the_recorded_numbers(tmp_path, capsys):
    assert cli.main(["evaluate", "--preset", ENSEMBLE, "--output", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())["metrics"]
    recorded = ez.presets.preset_metadata(ENSEMBLE)["metrics"]
    assert report["test_accuracy"] == recorded["test_accuracy"] > 0.9
    assert report["single_model_test_accuracy"] == recorded["single_model_test_accuracy"]
    assert set(report["uncertainty"]) == {"epistemic", "total", "loss_prediction", "single_model_entropy"}
    for name, row in recorded["uncertainty"].items():
        for key, value in row.items():
            assert report["uncertainty"][name][key] == pytest.approx(value, abs=1e-6), (name, key)
    assert f"{recorded['uncertainty']['epistemic']['prr']:.4f}" in printed
    with pytest.raises(ValueError, match="evaluated on 'arithmetic', not 'digits'"):
        ez.evaluation.evaluate_preset(ENSEMBLE, "digits")
    with pytest.raises(ValueError, match="evaluated on 'digits', not 'arithmetic'"):
        ez.evaluation.evaluate_preset("vit_tiny_digits", "arithmetic")
