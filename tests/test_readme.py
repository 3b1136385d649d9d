"""The README's commands and code blocks are real and stay in sync."""

import json
import os
import re
import subprocess

import pytest

import ensemble_zoo as ez
from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import run_python

README = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)\n```", README, re.S)


def marked_command(marker):
    match = re.search(rf"<!-- {marker} -->\s*```bash\n(.*?)\n```", README, re.S)
    assert match, f"README has no {marker} block"
    return match.group(1).strip()


def test_exactly_two_setup_commands():
    setup = README.split("## Set-up")[1].split("\n## ")[0]
    assert len(re.findall(r"```bash\n", setup)) == 2
    main = marked_command("main-command")
    test = marked_command("test-command")
    assert "ensemble-zoo demo" in main and "pip install" in main
    assert "run_all_backends.sh" in test and "[all,test]" in test


def test_ci_runs_the_readme_test_command():
    ci = open(os.path.join(REPO_ROOT, ".ci", "run")).read()
    assert "<!-- test-command -->" in ci
    script = open(os.path.join(REPO_ROOT, "tests", "run_all_backends.sh")).read()
    assert "for backend in jax tensorflow torch" in script


def test_preset_table_matches_metadata():
    for name in ez.presets.list_presets():
        meta = ez.presets.preset_metadata(name)
        metrics = meta["metrics"]
        row = (
            f"| `{name}` | {meta['method']} | {meta['num_members']} | "
            f"{meta['parameter_count']:,} | {metrics['test_accuracy']:.4f} | "
            f"{metrics['test_nll']:.4f} | {metrics['test_ece']:.4f} |"
        )
        assert row in README, row


@pytest.mark.slow
def test_python_blocks_run(tmp_path):
    stdout = run_python("\n\n".join(blocks("python")), cwd=tmp_path)
    accuracy = float(re.search(r"^accuracy ([0-9.]+)$", stdout, re.M)[1])
    assert accuracy > 0.9
    assert os.path.isfile(tmp_path / "my_deep_ensemble" / "model.weights.h5")
    if BACKEND != "torch":
        assert os.path.isfile(tmp_path / "deep_ensemble_saved_model" / "saved_model.pb")


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "jax", reason="the main command picks JAX itself")
def test_main_command_runs_in_a_fresh_copy(tmp_path):
    """Runs the README's main command verbatim in a clean copy of the repo."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    copy = tmp_path / "repo"
    for name in files:
        source = os.path.join(REPO_ROOT, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(copy / name), exist_ok=True)
            with open(source, "rb") as f, open(copy / name, "wb") as g:
                g.write(f.read())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        ["bash", "-c", marked_command("main-command")],
        cwd=copy, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    for name in ez.presets.list_presets():
        assert re.search(rf"^{name}\s", result.stdout, re.M), result.stdout
