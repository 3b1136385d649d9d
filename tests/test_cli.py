import pytest

import ensemble_zoo as ez
from ensemble_zoo import cli


def test_list_prints_every_preset(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ez.presets.list_presets():
        assert name in out


def test_list_shows_recorded_metrics(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    meta = ez.presets.preset_metadata("vit_tiny_digits")
    row = next(line for line in out.splitlines() if line.startswith("vit_tiny_digits "))
    assert f"{meta['parameter_count']:,}" in row
    assert f"{meta['metrics']['test_accuracy']:.4f}" in row
    assert "trained" in row and meta["method"] in row


def test_bad_batch_size_is_rejected_before_anything_loads(capsys, monkeypatch):
    from ensemble_zoo import evaluation

    def never(*args, **kwargs):
        raise AssertionError("the preset was loaded")

    monkeypatch.setattr(evaluation, "evaluate_preset", never)
    for bad in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as info:
            cli.main(["evaluate", "--preset", "vit_tiny_digits", "--batch-size", bad])
        assert info.value.code == 2
        assert "argument --batch-size: expected a positive integer" in capsys.readouterr().err
