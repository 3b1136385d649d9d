"""The code keeps one style: `ruff format` and ruff's import sorting (the
settings in `pyproject.toml`: 100 columns, one import a line) leave every
Python file of the repository unchanged (fix a failure with
`ruff check --select I --fix . && ruff format .`), the package's lines
(docstrings too) fit in 100 columns, and no module of the package grows
past 500 lines (one concept a file, as in keras-hub).

Pure Python: runs under one backend only.
"""

import pathlib
import subprocess
import sys

import pytest
from conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="backend-independent")

REPO = pathlib.Path(__file__).resolve().parent.parent


def _ruff(*args):
    pytest.importorskip("ruff", reason="ruff is in the `test` extra")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_ruff_format_leaves_every_file_unchanged():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_imports_are_sorted():
    result = _ruff("check", "--select", "I", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_lines_fit_in_100_columns():
    """Docstrings and strings too, which `ruff format` leaves as they are."""
    result = _ruff("check", "--select", "E501", "--output-format", "concise", "ensemble_zoo")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_package_module_over_500_lines():
    long = {
        str(path.relative_to(REPO)): count
        for path in (REPO / "ensemble_zoo").rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert not long, f"split these modules: {long}"
