"""The benchmark scripts run and their exactness columns hold (timings are
printed, never asserted)."""

import re

import pytest

from conftest import BACKEND
from conftest import run_python


@pytest.mark.skipif(BACKEND != "jax", reason="NumPy-only script; one backend suffices")
def test_metrics_benchmark_results_equal_sklearn():
    out = run_python(
        "import sys; sys.argv = ['metrics.py', '--samples', '20000', '--repeats', '1'];"
        "import runpy; runpy.run_path('benchmarks/metrics.py', run_name='__main__')"
    )
    rows = re.findall(r"^(ECE \(15 bins\)|AUROC|AUPR \(OOD positive\)|FPR95)\s+(.*)$", out, re.M)
    assert len(rows) == 4, out
    for name, rest in rows:
        columns = rest.split()
        assert float(columns[3]) <= 1e-6, (name, out)
