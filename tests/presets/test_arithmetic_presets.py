"""The arithmetic language-model presets: keras-hub's loaders
and the zoo's build the same models, the ensemble answers as recorded, and
`ensemble-zoo evaluate` reproduces every recorded number."""

import json

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo import cli
from ensemble_zoo.datasets import arithmetic

ENSEMBLE = "lora_ensemble_gemma_tiny_arithmetic"
BASE = "gemma_tiny_arithmetic"
LOSS = "loss_prediction_gemma_tiny_arithmetic"


def test_keras_hub_and_zoo_loaders_build_the_same_models():
    """keras-hub's `CausalLM.from_preset` finds the zoo's ensemble class
    from `config.json`; the base preset is a plain keras-hub model, which
    both load."""
    path = ez.presets.get_preset_path(ENSEMBLE)
    ours = ez.presets.load_preset(ENSEMBLE)
    theirs = keras_hub.models.CausalLM.from_preset(path)
    assert type(theirs) is type(ours) is ez.models.LoRAEnsembleCausalLM
    base = keras_hub.models.GemmaCausalLM.from_preset(ez.presets.get_preset_path(BASE))
    # The zoo's loader takes a plain keras-hub task's own constructor.
    assert type(ez.presets.load_preset(BASE, load_weights=False)) is type(base)
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


def test_every_zoo_class_loads_the_presets_by_name_and_path():
    """`from_preset` on each class a user reaches for resolves the zoo's
    names offline and its directories, as the image presets do (keras-hub's
    own `Task.from_preset` knows neither the names nor, for the loss
    predictor, the class)."""
    cases = [
        (ez.models.LoRAEnsembleCausalLM, ENSEMBLE),
        (ez.models.LoRAEnsembleGemmaCausalLM, ENSEMBLE),
        (ez.models.TokenLossPredictor, LOSS),
    ]
    for cls, name in cases:
        expected = ez.presets.preset_metadata(name)["class_name"]
        for preset in (name, ez.presets.get_preset_path(name)):
            model = cls.from_preset(preset)
            assert type(model).__name__ == expected, (cls, preset)
    np.testing.assert_array_equal(
        to_np(model.backbone.token_embedding.embeddings),
        to_np(ez.presets.load_preset(LOSS).backbone.token_embedding.embeddings),
    )
    with pytest.raises(ValueError, match="holds a LoRAEnsembleCausalLM, not a TokenLossPredictor"):
        ez.models.TokenLossPredictor.from_preset(ENSEMBLE)


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
    assert report["member_0_test_accuracy"] == recorded["member_0_test_accuracy"]
    assert set(report["uncertainty"]) == {
        "epistemic",
        "total",
        "loss_prediction",
        "member_0_entropy",
    }
    for name, row in recorded["uncertainty"].items():
        for key, value in row.items():
            assert report["uncertainty"][name][key] == pytest.approx(value, abs=1e-6), (name, key)
    assert f"{recorded['uncertainty']['epistemic']['prr']:.4f}" in printed
    with pytest.raises(ValueError, match="evaluated on 'arithmetic', not 'digits'"):
        ez.evaluation.evaluate_preset(ENSEMBLE, "digits")
    with pytest.raises(ValueError, match="evaluated on 'digits', not 'arithmetic'"):
        ez.evaluation.evaluate_preset("vit_tiny_digits", "arithmetic")
