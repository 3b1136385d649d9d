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


def test_help_and_argument_errors_do_not_import_keras():
    """Issue 15: every call took 27-59 s because it imported every backend
    first. Parsing needs only the preset and dataset name tables."""
    import subprocess
    import sys

    code = (
        "import sys, ensemble_zoo_cli\n"
        "for argv in (['--help'], ['evaluate', '--preset', 'nope'], "
        "['compare', '--batch-size', '0']):\n"
        "    try:\n"
        "        ensemble_zoo_cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        print(e.code)\n"
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch', 'ensemble_zoo') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines()[-4:] == ["0", "2", "2", "[]"], result.stdout + result.stderr
    assert "invalid choice: 'nope'" in result.stderr
    assert "argument --batch-size: expected a positive integer" in result.stderr
    # The name tables the parser reads equal the package's own lists.
    assert cli.preset_names() == ez.presets.list_presets()
    classification = ez.datasets.list_datasets()  # and the text task, second
    assert cli.dataset_names() == classification[:1] + [ez.datasets.arithmetic.NAME] + classification[1:]
    assert set(cli.trained_preset_names()) == {
        p for p in ez.presets.list_presets() if ez.presets.preset_metadata(p)["kind"] == "trained"
    }


def test_tensorflow_start_up_lines_are_dropped_and_other_output_kept(capfd):
    from ensemble_zoo.utils.quiet_import import _filtered_stderr
    import os

    with _filtered_stderr():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1795398926.570333    6590 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"I0000 00:00:1795398926.571646    6590 cudart_stub.cc:31] Could not find cuda drivers\n")
        os.write(2, b"a real warning\n")
        os.write(2, b"E0000 00:00:1795398926.571646    6590 cuda_executor.cc:31] an error\n")
    err = capfd.readouterr().err
    assert err == "a real warning\nE0000 00:00:1795398926.571646    6590 cuda_executor.cc:31] an error\n"


def test_progress_bars_are_drawn_only_where_they_can_redraw(monkeypatch):
    """Issue 15: nested bars printed junk when stderr was a file or pipe."""
    import io
    import sys

    from ensemble_zoo.utils.progress import progress_bar

    items = [1, 2, 3]
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log file
    assert progress_bar(items) is items

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = progress_bar(items, desc="x")
    assert bar is not items and list(bar) == items
    assert progress_bar(items, enable=False) is items
