import os
import shutil
import subprocess
import sys
import tempfile

#: Test budget: XLA compiles every eager JAX op and every jitted test model,
#: tens of milliseconds each on CPU, which is most of the JAX run (and of
#: TensorFlow's `jit_compile=True` tests). Without the XLA:CPU fusion
#: emitters and LLVM's optimisation, tiny programs compile in half the time
#: and the test models, microseconds per call, hardly run slower (measured
#: with the shared cache below, on 2 cores: the JAX run 1,228 s -> 789 s,
#: TensorFlow's 913 s -> 730 s, the guides kept on XLA's defaults). Set
#: `ENSEMBLE_ZOO_TEST_XLA_DEFAULTS=1` to test with XLA's own defaults.
TEST_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=0")
_CACHE_MARKER = "ENSEMBLE_ZOO_TEST_JAX_CACHE"
_JAX_CACHE_VARIABLES = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
)


_created_cache = None


def _speed_up_xla_compilation():
    """Adds `TEST_XLA_FLAGS`, and a JAX compilation cache that the
    pytest-xdist workers and the test subprocesses share (they inherit this
    process's environment), so a program compiles once per run. Runs before
    JAX or TensorFlow start; workers find both already set."""
    if os.environ.get("ENSEMBLE_ZOO_TEST_XLA_DEFAULTS") == "1":
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    names = {f.split("=")[0] for f in flags}
    flags += [f for f in TEST_XLA_FLAGS if f.split("=")[0] not in names]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        global _created_cache
        cache = _created_cache = tempfile.mkdtemp(prefix="ensemble_zoo_jax_cache_")
        os.environ[_CACHE_MARKER] = cache
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


_speed_up_xla_compilation()


def _one_thread_per_worker():
    """Test budget: one OpenMP thread per process. The suite runs two
    pytest-xdist workers on two cores, and PyTorch's CPU kernels (and
    NumPy's BLAS) default to a thread per core: two processes with two
    spinning OpenMP threads each slow PyTorch's small ops tenfold and more
    (a V-MoE epoch on the digits took 9-44 s in each of two concurrent
    processes, against 1.0 s each with one thread, on 2 cores). Subprocesses
    (guides, README blocks, other backends) inherit the setting; JAX's and
    TensorFlow's own thread pools are unaffected by it and were measured
    unaffected by the contention. Runs before PyTorch is imported; set
    `OMP_NUM_THREADS` to override."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


_one_thread_per_worker()


def with_xla_defaults(env):
    """A copy of `env` without `TEST_XLA_FLAGS` and the test run's JAX
    cache: for subprocesses that train or evaluate for minutes (the guides,
    the README's main command), where optimised code pays for its compile
    time."""
    env = dict(env)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    if env.get(_CACHE_MARKER) and env.get("JAX_COMPILATION_CACHE_DIR") == env[_CACHE_MARKER]:
        for name in _JAX_CACHE_VARIABLES:
            env.pop(name, None)
    env.pop(_CACHE_MARKER, None)
    return env


import ensemble_zoo  # noqa: F401  (first: TensorFlow loads without its start-up lines)

# isort: split
import keras
import numpy as np
import pytest
from zoo_testing import MODEL_ROTATION
from zoo_testing import run_day
from zoo_testing import runs_today

BACKEND = keras.config.backend()
ALL_BACKENDS = ("jax", "tensorflow", "torch")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: `jit_compile=True` is exercised where it means XLA (JAX, TensorFlow);
#: PyTorch runs eagerly (torch.compile costs tens of seconds on CPU).
JIT_BACKENDS = ("jax", "tensorflow")


def jit_compile():
    return BACKEND in JIT_BACKENDS


requires_jit = pytest.mark.skipif(
    BACKEND not in JIT_BACKENDS, reason="jit_compile=True means XLA only on JAX and TensorFlow"
)
requires_saved_model = pytest.mark.skipif(
    BACKEND == "torch", reason="no SavedModel export under PyTorch"
)


def run_python(
    code=None,
    backend=BACKEND,
    timeout=900,
    cwd=REPO_ROOT,
    script=None,
    return_stderr=False,
    xla_defaults=False,
):
    """Runs `code` (or the file `script`) in a fresh interpreter under
    `backend` with the source tree importable; returns stdout (and stderr
    with `return_stderr=True`) and raises with the captured output if it
    fails. `xla_defaults=True` runs it without `TEST_XLA_FLAGS`."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    if xla_defaults:
        env = with_xla_defaults(env)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = [script] if script is not None else ["-c", code]
    result = subprocess.run(
        [sys.executable] + args, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    if result.returncode != 0:
        raise AssertionError(
            f"Subprocess under {backend} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
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


def pytest_unconfigure(config):
    """The process that made the JAX cache removes it (after the workers)."""
    if _created_cache is not None:
        shutil.rmtree(_created_cache, ignore_errors=True)


def pytest_report_header(config):
    return f"keras backend: {BACKEND}"


# The model tests (`tests/models/`) rotate with the day (`MODEL_ROTATION`):
# each runs under one backend a day at most, under JAX and TensorFlow one
# day in four and under PyTorch one in two (test budget: every model test
# builds, compiles and runs its models, 5 to 40 s under TensorFlow and 2
# to 20 s under JAX on 2 cores against about 1 s under PyTorch; each
# backend's own code paths, its layers, exports and presets, are tested
# every run). The day is fixed once per run (the workers inherit it).
run_day()


#: The tests the rotation takes, by backend: the model tests, and under JAX,
#: which compiles every model and layer it runs, also keras-hub's harness
#: (each of its tests picks one backend by a hash of its name; JAX's share
#: then runs one day in four) and the mixture-of-experts layers (their
#: routers compile a program per configuration: 2 minutes a run).
ROTATED = {
    "jax": ("tests/models/", "tests/layers/moe/"),
    "tensorflow": ("tests/models/",),
    "torch": ("tests/models/",),
}


def _runs_today(item):
    """Whether a test runs under this backend today (see `MODEL_ROTATION`
    and `ROTATED`). Tests that choose their backends themselves (a
    `skipif` other than `requires_jit` or `requires_saved_model`, and
    keras-hub's harness but under JAX) always keep their choice."""
    if not item.nodeid.startswith(ROTATED[BACKEND]):
        return True
    if "keras_hub_harness" in item.nodeid and BACKEND != "jax":
        return True
    shared = (requires_jit.mark, requires_saved_model.mark)
    if item.get_closest_marker("skip") or any(
        mark not in shared for mark in item.iter_markers("skipif")
    ):
        return True
    return runs_today(item.nodeid, BACKEND)


def pytest_collection_modifyitems(config, items):
    """Runs the slow tests (subprocesses: guides, README, docstrings,
    benchmarks) first, so that pytest-xdist's two workers share them instead
    of one worker finishing a long tail alone; skips the model tests whose
    day it is not (`MODEL_ROTATION`)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    skip = pytest.mark.skip(
        reason=f"under {BACKEND} one day in {MODEL_ROTATION[BACKEND]} (test budget)"
    )
    for item in items:
        if not _runs_today(item):
            item.add_marker(skip)
