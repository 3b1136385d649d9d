import json

import pytest
from conftest import BACKEND

import ensemble_zoo as ez
from ensemble_zoo import cli


def test_evaluate_preset_reproduces_the_recorded_metrics():
    """`list` shows the recorded metrics, `evaluate` and `compare` compute
    them: one number (for every trained preset, MC dropout's included,
    the README's main command checks it: tests/test_readme.py)."""
    name = "vit_tiny_digits"
    metadata = ez.presets.preset_metadata(name)
    report = ez.evaluation.evaluate_preset(name, progress=False)
    recorded = metadata["metrics"]
    ind = report.metrics["in_distribution"]
    assert round(ind["accuracy"], 4) == recorded["test_accuracy"]
    assert ind["nll"] == pytest.approx(recorded["test_nll"], abs=1e-4)
    assert ind["ece"] == pytest.approx(recorded["test_ece"], abs=1e-4)
    assert set(report.metrics["ood"]) == {"near", "far"}
    assert set(report.metrics["shift"]) == {"shifted"}
    assert report.metrics["temperature_scaled"]["temperature"] > 0


def test_evaluate_preset_errors():
    with pytest.raises(ValueError, match="valid presets: .*vit_tiny_digits"):
        ez.evaluation.evaluate_preset("vit_huge")
    with pytest.raises(ValueError, match="valid datasets: digits"):
        ez.evaluation.evaluate_preset("vit_tiny_digits", dataset="mnist")
    with pytest.raises(ValueError, match="predicts 8 classes but dataset 'cifar10' has 10"):
        ez.evaluation.evaluate_preset("vit_tiny_digits", dataset="cifar10")
    with pytest.raises(ValueError, match="empty"):
        ez.evaluation.compare_presets(presets=[])


@pytest.mark.skipif(
    BACKEND != "jax",
    reason="once: the CLI's path is backend-independent (test_evaluate.py "
    "checks the numbers on every backend)",
)
def test_cli_evaluates_the_loss_prediction_preset(tmp_path, capsys):
    """The CLI once listed this preset but refused it. Its classifier
    is vit_tiny_digits unchanged, so its accuracy is the recorded one; its
    report adds the predicted loss as an OOD score (that score's numbers
    are checked in tests/evaluation/test_evaluate.py)."""
    name = "loss_prediction_vit_tiny_digits"
    assert cli.main(["evaluate", "--preset", name, "--output", str(tmp_path), "--no-progress"]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["name"] == name
    printed = capsys.readouterr().out
    accuracy = saved["in_distribution"]["accuracy"]
    assert f"{accuracy:.4f}" in printed and "predicted loss" in printed
    assert (
        round(accuracy, 4)
        == ez.presets.preset_metadata("vit_tiny_digits")["metrics"]["test_accuracy"]
    )
    for ood_set in ("near", "far"):
        assert 0.5 < saved["ood"][ood_set]["predicted_loss"]["auroc"] <= 1.0


def test_architecture_presets_are_refused_before_loading(capsys):
    with pytest.raises(ValueError, match="'hydra_vit_b16_8x3' is an architecture preset"):
        ez.evaluation.evaluate_preset("hydra_vit_b16_8x3")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["evaluate", "--preset", "hydra_vit_b16_8x3"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'hydra_vit_b16_8x3'" in capsys.readouterr().err


def test_cli_bad_input_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["evaluate", "--preset", "nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and "vit_tiny_digits" in err
    with pytest.raises(SystemExit):
        cli.main(["compare", "--dataset", "mnist"])
    assert "digits" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["compare", "--output", str(blocker / "sub"), "--no-progress"])
    assert exit_info.value.code == 2
    assert "Cannot write to output directory" in capsys.readouterr().err
