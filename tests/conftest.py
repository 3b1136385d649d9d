import os
import shutil
import subprocess
import sys

import ensemble_zoo  # noqa: F401  (first: TensorFlow loads without its start-up lines)
import keras
import numpy as np
import pytest

BACKEND = keras.config.backend()
ALL_BACKENDS = ("jax", "tensorflow", "torch")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: `jit_compile=True` is exercised where it means XLA (JAX, TensorFlow);
#: PyTorch runs eagerly (torch.compile costs tens of seconds on CPU).
JIT_BACKENDS = ("jax", "tensorflow")


def jit_compile():
    return BACKEND in JIT_BACKENDS


requires_jit = pytest.mark.skipif(
    BACKEND not in JIT_BACKENDS,
    reason="jit_compile=True means XLA only on JAX and TensorFlow",
)
requires_saved_model = pytest.mark.skipif(
    BACKEND == "torch", reason="no SavedModel export under PyTorch"
)


def run_python(code=None, backend=BACKEND, timeout=900, cwd=REPO_ROOT, script=None, return_stderr=False):
    """Runs `code` (or the file `script`) in a fresh interpreter under
    `backend` with the source tree importable; returns stdout (and stderr
    with `return_stderr=True`) and raises with the captured output if it
    fails."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = [script] if script is not None else ["-c", code]
    result = subprocess.run(
        [sys.executable] + args,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"Subprocess under {backend} failed:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-5000:]}"
        )
    if return_stderr:
        return result.stdout, result.stderr
    return result.stdout


def copy_test_fixtures(directory):
    """Copies `tests/fixtures/vmoe/` under `directory`, so README and
    docstring examples that run there find the vmoe checkpoints at the
    paths they have in a clone of the repository."""
    target = os.path.join(directory, "tests", "fixtures", "vmoe")
    shutil.copytree(os.path.join(REPO_ROOT, "tests", "fixtures", "vmoe"), target)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_report_header(config):
    return f"keras backend: {BACKEND}"


def pytest_collection_modifyitems(config, items):
    """Runs the slow tests (subprocesses: guides, README, docstrings,
    benchmarks) first, so that pytest-xdist's two workers share them instead
    of one worker finishing a long tail alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
