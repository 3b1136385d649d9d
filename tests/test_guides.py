"""Every guide runs as a script under the current backend."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import BACKEND
from conftest import REPO_ROOT

GUIDES = sorted(glob.glob(os.path.join(REPO_ROOT, "guides", "*.py")))


@pytest.mark.slow
@pytest.mark.parametrize("path", GUIDES, ids=os.path.basename)
def test_guide_runs(tmp_path, path):
    env = dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=REPO_ROOT)
    result = subprocess.run(
        [sys.executable, path], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    assert "accuracy" in result.stdout
