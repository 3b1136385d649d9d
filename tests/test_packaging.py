"""A built wheel (non-editable install) ships the presets and loads them."""

import glob
import os
import subprocess
import sys

import pytest
from conftest import BACKEND
from conftest import REPO_ROOT


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "torch", reason="packaging is backend-independent")
def test_wheel_loads_presets_without_the_source_tree(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            REPO_ROOT,
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = glob.glob(str(tmp_path / "dist" / "*.whl"))
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), wheel],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = """
import ensemble_zoo as ez
print(ez.__file__)
print(ez.presets.preset_root())
model = ez.models.EnsembleClassifier.from_preset("deep_ensemble_vit_tiny_digits")
x, y = ez.datasets.load_arrays("digits", "test", raw=True)  # the preset's converter's input
probs = model.predict_uncertainty(x)["probabilities"]
print("accuracy", ez.metrics.accuracy(probs, y))
"""
    env = dict(os.environ, PYTHONPATH=str(target), KERAS_BACKEND=BACKEND)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith(str(target))
    assert lines[1] == os.path.join(str(target), "ensemble_zoo", "_preset_files")
    assert float(lines[2].split()[1]) > 0.9


@pytest.mark.skipif(BACKEND != "torch", reason="packaging is backend-independent")
def test_version_has_one_source():
    """The version is `__version__` in the leaf module `ensemble_zoo/version.py`:
    the package exports it and hatch reads the wheel's version from it (the
    regex source that `[tool.hatch.version] path` selects), so pyproject
    holds no second copy."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    from hatchling.version.source.regex import RegexSource

    import ensemble_zoo
    from ensemble_zoo import version

    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    config = pyproject["tool"]["hatch"]["version"]
    assert config == {"path": "ensemble_zoo/version.py"}
    built = RegexSource(REPO_ROOT, config).get_version_data()["version"]
    assert built == version.__version__ == version.version() == ensemble_zoo.__version__
