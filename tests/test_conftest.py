"""The test run's XLA settings (tests/conftest.py) reach the workers and
stay out of the subprocesses that want XLA's defaults."""

import os

import numpy as np
import pytest
from conftest import BACKEND
from conftest import TEST_XLA_FLAGS
from conftest import with_xla_defaults


def test_with_xla_defaults_keeps_the_users_flags_and_cache():
    ours = {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8 " + " ".join(TEST_XLA_FLAGS),
        "JAX_COMPILATION_CACHE_DIR": "/tmp/run",
        "ENSEMBLE_ZOO_TEST_JAX_CACHE": "/tmp/run",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        "HOME": "/home/me",
    }
    assert with_xla_defaults(ours) == {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "HOME": "/home/me",
    }
    assert "XLA_FLAGS" in ours  # the argument is not changed
    users = {"XLA_FLAGS": " ".join(TEST_XLA_FLAGS), "JAX_COMPILATION_CACHE_DIR": "/mine"}
    assert with_xla_defaults(users) == {"JAX_COMPILATION_CACHE_DIR": "/mine"}


@pytest.mark.skipif(
    os.environ.get("ENSEMBLE_ZOO_TEST_XLA_DEFAULTS") == "1",
    reason="ENSEMBLE_ZOO_TEST_XLA_DEFAULTS=1: XLA's defaults",
)
def test_this_worker_compiles_with_the_test_flags_into_the_shared_cache():
    flags = os.environ["XLA_FLAGS"].split()
    assert all(flags.count(f) == 1 for f in TEST_XLA_FLAGS), flags
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert os.path.isdir(cache)
    if BACKEND == "jax":
        import jax

        before = set(os.listdir(cache))
        out = jax.jit(lambda x: x * 3.0 + 0.25)(np.arange(7, dtype="float32"))
        np.testing.assert_allclose(np.asarray(out), np.arange(7) * 3.0 + 0.25)
        assert set(os.listdir(cache)) - before  # written where every worker reads
