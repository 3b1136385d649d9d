import keras
import pytest

import ensemble_zoo as ez
from ensemble_zoo import cli
from ensemble_zoo.presets.leaderboard import is_compared


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


def test_commands_that_need_no_model_do_not_import_keras():
    """`--help`, `--version`, `list` and argument errors need only the
    preset and dataset tables and the presets' metadata files: importing a
    backend first made each take 11-60 s. (Their time is measured by
    benchmarks/cli_start_up.py, not here.)"""
    import subprocess
    import sys

    code = (
        "import sys, ensemble_zoo_cli\n"
        "for argv in (['--help'], ['--version'], ['list'], ['evaluate', '--preset', 'nope'], "
        "['compare', '--batch-size', '0']):\n"
        "    try:\n"
        "        print('returned', ensemble_zoo_cli.main(argv))\n"
        "    except SystemExit as e:\n"
        "        print(e.code)\n"
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch', 'ensemble_zoo') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    tail = [
        l for l in result.stdout.splitlines() if l in ("0", "2", "returned 0") or l.startswith("[")
    ]
    assert tail == ["0", "0", "returned 0", "2", "2", "[]"], result.stdout + result.stderr
    assert f"ensemble-zoo {ez.__version__}" in result.stdout
    compared = [p for p in ez.presets.list_presets() if is_compared(ez.presets.preset_metadata(p))]
    assert f"compare` ranks the {len(compared)} trained ensemble classifiers" in result.stdout
    assert "invalid choice: 'nope'" in result.stderr
    assert "argument --batch-size: expected a positive integer" in result.stderr
    # The name tables the parser reads equal the package's own lists.
    assert cli.preset_names() == ez.presets.list_presets()
    classification = ez.datasets.list_datasets()  # and the text task, second
    assert (
        cli.dataset_names()
        == classification[:1] + [ez.datasets.arithmetic.NAME] + classification[1:]
    )
    assert set(cli.trained_preset_names()) == {
        p
        for p in ez.presets.list_presets()
        if ez.presets.preset_metadata(p)["kind"] in ("trained", "adapters")
    }
    # `compare` ranks (and `list` marks) the presets that load as ensemble
    # classifiers, by a rule that reads metadata alone.
    classifiers = {
        p
        for p in cli.trained_preset_names()
        if issubclass(
            keras.saving.get_registered_object(
                f"ensemble_zoo>{ez.presets.preset_metadata(p)['class_name']}"
            )
            or object,  # keras-hub's own classes (the arithmetic base model)
            ez.models.EnsembleClassifier,
        )
    }
    assert set(cli.compared_preset_names()) == set(ez.evaluation.trained_presets()) == classifiers


def test_tensorflow_start_up_lines_are_dropped_and_other_output_kept(capfd):
    import os

    from ensemble_zoo.utils.quiet_import import quiet_stderr

    cuinit = (
        b"E0000 00:00:1795810003.598596   12359 cuda_platform.cc:52] failed call to cuInit: "
        b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
    )
    with quiet_stderr():
        os.write(
            2,
            b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
        )
        os.write(
            2,
            b"I0000 00:00:1795398926.570333    6590 port.cc:153] oneDNN custom operations are on.\n",
        )
        os.write(
            2,
            b"I0000 00:00:1795398926.571646    6590 cudart_stub.cc:31] Could not find cuda drivers\n",
        )
        os.write(2, b"a real warning\n")
        os.write(2, b"E0000 00:00:1795398926.571646    6590 cuda_executor.cc:31] an error\n")
        os.write(
            2,
            b"normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization.\n",
        )
        os.write(2, cuinit)
    err = capfd.readouterr().err
    # The cuInit error goes only where TensorFlow found no CUDA driver.
    assert (
        err
        == "a real warning\nE0000 00:00:1795398926.571646    6590 cuda_executor.cc:31] an error\n"
    )
    with quiet_stderr():
        os.write(2, cuinit)
    assert capfd.readouterr().err == cuinit.decode()


def test_progress_bars_are_drawn_only_where_they_can_redraw(monkeypatch):
    """Nested bars printed junk when stderr was a file or pipe: there, lines
    instead (next test); a bar on a terminal."""
    import io
    import sys

    from ensemble_zoo.utils.progress import progress_bar

    items = [1, 2, 3]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = progress_bar(items, desc="x")
    assert type(bar).__module__.startswith("tqdm") and list(bar) == items
    assert progress_bar(items, enable=False) is items


def test_progress_lines_in_a_log(monkeypatch):
    """Piped or logged, the outermost loop prints a line at its start, one
    per named step and one at its end; loops nested in it stay quiet."""
    import io
    import sys

    from ensemble_zoo.utils.progress import progress_bar
    from ensemble_zoo.utils.progress import progress_note

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    for name in progress_bar(["a", "b"], desc="compare", name_steps=True):
        for _ in progress_bar(range(3), desc="predict test"):
            pass
        progress_note("nested note")
    progress_note("timing")
    for _ in progress_bar(range(2), desc="predict test"):
        pass
    lines = log.getvalue().splitlines()
    assert [l.split(" (elapsed")[0] for l in lines[:3]] == [
        "compare: 2 steps",
        "compare [1/2] a",
        "compare [2/2] b",
    ]
    assert lines[3].startswith("compare: 2 steps done in ") and lines[3].endswith(" s")
    assert lines[4:6] == ["timing", "predict test: 2 batches"]
    assert lines[6].startswith("predict test: 2 batches done in ")
    assert len(lines) == 7


@pytest.mark.skipif(keras.config.backend() != "torch", reason="backend-independent; runs once")
def test_a_missing_backend_names_its_extra(tmp_path):
    """KERAS_BACKEND=torch without torch: one line that names the extra to
    install (was Keras' 55-line traceback), from Python and from the CLI."""
    import os
    import subprocess
    import sys

    block = "import sys; sys.modules['torch'] = None  # torch not installed\n"
    env = dict(os.environ, KERAS_BACKEND="torch")
    for code, stream in (
        (block + "import ensemble_zoo", "stderr"),
        (
            block
            + "import ensemble_zoo_cli; ensemble_zoo_cli.main(['evaluate', '--preset', 'vit_tiny_digits'])",
            "stderr",
        ),
    ):
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert result.returncode != 0
        err = getattr(result, stream)
        assert 'pip install "ensemble_zoo[torch]"' in err, err
        assert err.count("\n") < 8, err


@pytest.mark.skipif(keras.config.backend() != "jax", reason="backend-independent; runs once")
def test_the_default_output_directory_is_git_ignored():
    import subprocess

    from conftest import REPO_ROOT

    result = subprocess.run(
        ["git", "check-ignore", "-q", f"{cli.DEFAULT_OUTPUT}/leaderboard.json"], cwd=REPO_ROOT
    )
    assert result.returncode == 0, "add the compare output directory to .gitignore"


def test_evaluate_passes_the_base_model_of_an_adapter_preset(capsys):
    """`--base` reaches the adapter preset's loader: the tiny arithmetic
    model is not the Gemma 3 270M the shipped adapters were trained on."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            [
                "evaluate",
                "--preset",
                "lora_ensemble_gemma3_270m_arithmetic",
                "--base",
                "gemma_tiny_arithmetic",
                "--no-progress",
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "do not fit the base model 'gemma_tiny_arithmetic'" in err
    assert "backbone: file Gemma3Backbone, model GemmaBackbone" in err


def test_a_mistyped_name_gets_the_closest_suggested(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--preset", "vit_tiny_digit"])
    assert info.value.code == 2
    assert "invalid choice: 'vit_tiny_digit'; did you mean 'vit_tiny_digits'?" in (
        capsys.readouterr().err
    )
    with pytest.raises(ez.presets.PresetError, match="did you mean 'hydra_taylor_vit_tiny_digits'"):
        ez.presets.get_preset_path("hydra_taylor_vit_tiny_digit")
    with pytest.raises(ValueError, match="did you mean 'mimo_vit_tiny_digits'"):
        ez.evaluation.evaluate_preset("mimo_vit_tiny", progress=False)
