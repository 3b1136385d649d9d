"""Every guide runs as a script under the current backend."""

import glob
import os

import pytest

from conftest import REPO_ROOT
from conftest import run_python

GUIDES = sorted(glob.glob(os.path.join(REPO_ROOT, "guides", "*.py")))


@pytest.mark.slow
@pytest.mark.parametrize("path", GUIDES, ids=os.path.basename)
def test_guide_runs(tmp_path, path):
    stdout = run_python(script=path, cwd=tmp_path)
    assert "accuracy" in stdout
