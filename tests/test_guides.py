"""Every guide runs as a script, each under one backend, two guides a run.

A guide trains models for minutes, and the library code it calls is tested
on every backend by the unit tests. So that the whole suite stays inside
its time budget, a run takes `GUIDES_PER_RUN` of the guides, rotating with
the day (every guide runs at least once in any five days), and each guide
runs under one backend (where it was cheapest when measured, JAX /
TensorFlow / PyTorch, in seconds on 2 cores, PyTorch with one thread per process as the suite runs it; the last
figure is its home backend's time in the latest full run), and every
backend runs some guide (JAX and TensorFlow one each, where PyTorch was
little faster). Run a guide under any backend by hand:
`KERAS_BACKEND=torch python guides/<guide>.py`.
"""

import glob
import os

import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import run_python
from zoo_testing import this_run

GUIDES = sorted(glob.glob(os.path.join(REPO_ROOT, "guides", "*.py")))

HOME_BACKEND = {
    "deep_ensembles.py": "torch",  # 97 / 96 / 104; 32
    "efficient_ensemble_baselines.py": "torch",  # - / - / 26; 27
    "evaluating_uncertainty.py": "tensorflow",  # - / 43 / 36; 44
    "hydra_ensembles.py": "torch",  # - / 101 / 71; 68
    "implicit_ensembles.py": "jax",  # 63 / - / 48; 55
    "llm_uncertainty.py": "torch",  # 43 / - / 18; 17
    "lora_ensemble.py": "torch",  # 119 / - / 61; 56
    "loss_prediction.py": "torch",  # - / 48 / 34; 35
    "sharing_with_keras_hub.py": "torch",  # - / - / 55; 12
    "vmoe_and_e3.py": "torch",  # 235 / 254 / 30; 33
}


#: The guides a run takes (about 60 s of the suite's 35 minutes each).
GUIDES_PER_RUN = 2


def test_every_guide_has_a_home_backend():
    assert sorted(HOME_BACKEND) == sorted(os.path.basename(p) for p in GUIDES)
    assert set(HOME_BACKEND.values()) == {"jax", "tensorflow", "torch"}


@pytest.mark.slow
@pytest.mark.parametrize("path", GUIDES, ids=os.path.basename)
def test_guide_runs(tmp_path, path):
    name = os.path.basename(path)
    home = HOME_BACKEND[name]
    if BACKEND != home:
        pytest.skip(f"this guide runs under {home} in the test suite")
    if name not in this_run(HOME_BACKEND, GUIDES_PER_RUN):
        pytest.skip("this guide runs on another day (test budget)")
    # A guide trains for minutes: XLA's defaults (optimised code) pay there.
    stdout, stderr = run_python(script=path, cwd=tmp_path, return_stderr=True, xla_defaults=True)
    assert "accuracy" in stdout
    # No TensorFlow start-up lines (the guides import ensemble_zoo
    # first) and no XLA "Ignoring Assert operator" lines.
    for noise in (
        "oneDNN custom operations",
        "Could not find cuda drivers",
        "Ignoring Assert operator",
    ):
        assert noise not in stderr, stderr[-3000:]
