"""The README's commands and code blocks are real and stay in sync."""

import json
import os
import re
import subprocess

import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import copy_test_fixtures
from conftest import run_python
from conftest import with_xla_defaults
from zoo_testing import skip_on_alternate_days

import ensemble_zoo as ez

README = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()


# The documentation pages written by hand (the site also renders README
# sections and the guides, which run elsewhere), in navigation order.
DOC_PAGES = [
    os.path.join(REPO_ROOT, "docs", *page.split("/"))
    for page in (
        "methods/hydra.md",
        "methods/lora_ensemble.md",
        "methods/causal_lm.md",
        "methods/vmoe_e3.md",
        "methods/loss_prediction.md",
        "methods/implicit.md",
        "methods/baselines.md",
        "presets.md",
        "export.md",
        "benchmarks.md",
    )
]


def blocks(language, text=README):
    return re.findall(rf"```{language}\n(.*?)\n```", text, re.S)


def doc_blocks(language):
    """The README's blocks, then each documentation page's."""
    found = blocks(language)
    for path in DOC_PAGES:
        found += blocks(language, open(path, encoding="utf-8").read())
    return found


def marked_command(marker):
    match = re.search(rf"<!-- {marker} -->\s*```bash\n(.*?)\n```", README, re.S)
    assert match, f"README has no {marker} block"
    return match.group(1).strip()


def test_exactly_two_setup_commands():
    setup = README.split("## Set-up")[1].split("\n## ")[0]
    assert len(re.findall(r"```bash\n", setup)) == 2
    main = marked_command("main-command")
    test = marked_command("test-command")
    assert "ensemble-zoo compare" in main and "pip install" in main
    assert "run_all_backends.sh" in test and "[all,test]" in test


def test_ci_runs_the_readme_test_command():
    ci = open(os.path.join(REPO_ROOT, ".ci", "run")).read()
    assert "<!-- test-command -->" in ci
    script = open(os.path.join(REPO_ROOT, "tests", "run_all_backends.sh")).read()
    assert "for backend in jax tensorflow torch" in script


def test_preset_table_matches_metadata():
    README = open(os.path.join(REPO_ROOT, "docs", "presets.md"), encoding="utf-8").read()
    for name in ez.presets.list_presets():
        meta = ez.presets.preset_metadata(name)
        if meta["kind"] == "architecture":
            row = (
                f"| `{name}` | {meta['num_members']} | "
                f"{meta['parameter_count']:,} | "
                f"{meta['multiply_adds'] / 1e9:.2f}G |"
            )
            assert row in README, row
            continue
        metrics = meta["metrics"]
        if meta.get("dataset") == "arithmetic":  # language models: answers
            row = (
                f"| `{name}` | {meta['method']} | {meta['num_members']} | "
                f"{meta['parameter_count']:,} | {metrics['test_accuracy']:.4f} | "
                f"{metrics['ood_accuracy']:.4f} |"
            )
            assert row in README, row
            continue
        row = (
            f"| `{name}` | {meta['method']} | {meta['num_members']} | "
            f"{meta['parameter_count']:,} | {metrics['test_accuracy']:.4f} | "
            f"{metrics['test_nll']:.4f} | {metrics['test_ece']:.4f} |"
        )
        assert row in README, row


def readme_leaderboard():
    """The README's leaderboard rows as {preset: {column: cell}}."""
    section = README.split("## Evaluation and the leaderboard")[1].split("\n## ")[0]
    lines = [l for l in section.splitlines() if l.startswith("| ")]
    headers = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines[1:]]
    return {row[0]: dict(zip(headers, row)) for row in rows}


def test_readme_leaderboard_lists_every_trained_preset():
    assert sorted(readme_leaderboard()) == sorted(ez.evaluation.trained_presets())


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "torch",
    reason="one backend suffices (the blocks fine-tune, evaluate and export; "
    "PyTorch runs them in half TensorFlow's time); the library code they "
    "call is tested on every backend",
)
def test_python_blocks_run(tmp_path):
    copy_test_fixtures(tmp_path)
    stdout = run_python("\n\n".join(doc_blocks("python")), cwd=tmp_path)
    accuracy = float(re.search(r"^accuracy ([0-9.]+)$", stdout, re.M)[1])
    assert accuracy > 0.9
    assert os.path.isfile(tmp_path / "my_deep_ensemble" / "model.weights.h5")
    report = json.loads((tmp_path / "my_report" / "report.json").read_text())
    assert report["ood"]["far"]["msp"]["auroc"] > 0.8
    assert os.path.isfile(tmp_path / "my_report" / "reliability.png")
    if BACKEND != "torch":
        assert os.path.isfile(tmp_path / "deep_ensemble_saved_model" / "saved_model.pb")


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "jax", reason="the main command picks JAX itself")
@skip_on_alternate_days("main_command")
def test_main_command_runs_in_a_fresh_copy(tmp_path):
    """Runs the README's main command verbatim in a clean copy of the repo."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    copy = tmp_path / "repo"
    for name in files:
        source = os.path.join(REPO_ROOT, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(copy / name), exist_ok=True)
            with open(source, "rb") as f, open(copy / name, "wb") as g:
                g.write(f.read())
    # Verbatim: none of the test run's XLA flags or cache (conftest).
    # And none of the test script's settings: TF_CPP_MIN_LOG_LEVEL would
    # hide the log lines a user sees (nor conftest's OMP_NUM_THREADS).
    env = with_xla_defaults(
        {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TF_CPP_MIN_LOG_LEVEL", "OMP_NUM_THREADS")
        }
    )
    # Test budget: pip skips byte-compiling every installed package (13 s
    # of the install; Python compiles what the command imports).
    env["PIP_NO_COMPILE"] = "1"
    result = subprocess.run(
        ["bash", "-c", marked_command("main-command")],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    check_compare_output(copy / "ensemble_zoo_results", result.stdout)
    check_compare_log(result.stdout + result.stderr)


def check_compare_log(log):
    """Piped, the command still says what it does: a line per preset,
    printed before that preset's evaluation (the bars draw only on a
    terminal); and a CPU machine's output holds no CUDA error or other
    TensorFlow / absl log line."""
    names = ez.evaluation.trained_presets()
    lines = log.splitlines()
    first = next(
        i for i, l in enumerate(lines) if l.startswith(f"compare [1/{len(names)}] {names[0]} ")
    )
    done = next(
        i for i, l in enumerate(lines) if l.startswith(f"compare: {len(names)} steps done in ")
    )
    second = next(
        i for i, l in enumerate(lines) if l.startswith(f"compare [2/{len(names)}] {names[1]} ")
    )
    assert first < second < done
    assert not [l for l in lines if "CUDA error" in l or re.match(r"^[EWI]0000 ", l)], log[-3000:]


def check_compare_output(out, printed):
    """`ensemble-zoo compare` wrote the numbers `evaluate_preset` computes,
    every file, and the README's leaderboard shows the same numbers. (This
    used to be a second, in-process compare run under TensorFlow: one run
    of the whole leaderboard is enough, and this one is the README's.)"""
    board = json.loads((out / "leaderboard.json").read_text())
    names = ez.evaluation.trained_presets()
    assert [row[0] for row in board["rows"]] == names
    for name in names:
        assert re.search(rf"^{name}\s", printed, re.M), printed
    assert board["base_presets"]["deep_ensemble_vit_tiny_digits"] == "vit_tiny_digits"
    # A preset's JSON report holds the numbers an independent, in-process
    # `evaluate_preset` call computes (latency aside, which is timed).
    fresh = ez.evaluation.evaluate_preset("deep_ensemble_vit_tiny_digits", progress=False)
    saved = json.loads((out / "deep_ensemble_vit_tiny_digits" / "report.json").read_text())
    for section in ("in_distribution", "temperature_scaled", "ood", "shift", "diversity"):
        for key, value in _leaves(saved[section]):
            assert value == pytest.approx(_get(fresh.metrics[section], key), abs=1e-6), (
                section,
                key,
            )
    # The latency is the one timing of all presets in alternation.
    assert saved["cost"]["latency_ms"] > 0 and saved["cost"]["throughput"] > 0
    row = dict(zip(board["columns"], board["rows"][0]))
    assert f"{row['AUROC far']:.4f}" in printed
    for name in names:
        for f in ("report.json", "report.md", "reliability.png", "accuracy_rejection.png"):
            assert (out / name / f).is_file()
    assert (out / "leaderboard.md").read_text().startswith("| preset | members |")
    assert (out / "leaderboard.png").is_file()
    readme = readme_leaderboard()
    for values in board["rows"]:
        row = dict(zip(board["columns"], values))
        shown = readme[row["preset"]]
        for column, value in row.items():
            if isinstance(value, float):
                assert abs(float(shown[column]) - value) <= 1.5e-4, (column, shown)
            elif column == "params":
                assert shown[column] == f"{value:,}"
        if row["preset"] == "vit_tiny_digits":
            assert row["latency x base"] == shown["latency x base"] == "1.00x"
        # One source per number: `list` shows the recorded test metrics.
        recorded = ez.presets.preset_metadata(row["preset"])["metrics"]
        for column, key in (
            ("accuracy", "test_accuracy"),
            ("NLL", "test_nll"),
            ("ECE", "test_ece"),
        ):
            assert abs(recorded[key] - row[column]) <= 1.5e-4, (row["preset"], column)
    assert "the round-to-round noise is +-" in printed


def _leaves(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, prefix + (key,))
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield prefix, tree


def _get(tree, key):
    for part in key:
        tree = tree[part]
    return tree
