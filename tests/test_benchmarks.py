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


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices for the script")
def test_implicit_ensembles_experiment_runs_and_collapse_shows(tmp_path):
    out = run_python(
        "import sys; sys.argv = ['implicit_ensembles.py', '--seeds', '0', '--epochs', '5',"
        f" '--widths', '1', '4', '--mask-epochs', '2', '--output', {str(tmp_path)!r}];"
        "sys.path.insert(0, 'benchmarks');"
        "import runpy; runpy.run_path('benchmarks/implicit_ensembles.py', run_name='__main__')"
    )
    rows = dict(re.findall(r"^(1|12)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+$", out, re.M))
    assert float(rows["12"]) < float(rows["1"]) / 5, out  # between-group MI collapses
    for name in ("ensembles_of_ensembles.png", "width.png", "extraction.png"):
        assert (tmp_path / name).stat().st_size > 1000


@pytest.mark.slow
def test_loss_prediction_benchmark_heads_agree():
    """Cached and on-the-fly head training reach the same weights (tiny ViT)."""
    out = run_python(
        "import sys; sys.argv = ['loss_prediction.py', '--image-size', '32', '--patch-size', '8',"
        " '--layers', '2', '--width', '64', '--heads', '2', '--classes', '10', '--steps', '6',"
        " '--batch-size', '16'];"
        "import runpy; runpy.run_path('benchmarks/loss_prediction.py', run_name='__main__')"
    )
    diff = float(re.search(r"max \|head weight difference\|: (\S+)", out)[1])
    assert diff < 1e-4, out
    assert re.search(r"^from the cache\s+[0-9.]+\s+[0-9.]+$", out, re.M), out


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices for the script")
def test_moe_benchmark_runs_and_e3_members_are_vmoes():
    """Tiny V-MoE / E³ benchmark: every row prints and each E³ member
    equals the V-MoE of its expert partition."""
    out = run_python(
        "import sys; sys.argv = ['moe.py', '--image-size', '32', '--patch-size', '8',"
        " '--layers', '4', '--width', '32', '--experts', '4', '--batch-size', '4',"
        " '--repeats', '1'];"
        "sys.path.insert(0, 'benchmarks');"
        "import runpy; runpy.run_path('benchmarks/moe.py', run_name='__main__')"
    )
    for name in ("dense ViT", "V-MoE K=1", "V-MoE K=2", "2 x V-MoE K=1", "E³ K=1 M=2"):
        row = rf"^{re.escape(name)}(\s+[0-9.]+){{2}}\s+\S+(\s+[0-9.]+){{2}}$"
        assert re.search(row, out, re.M), (name, out)
    diff = float(re.search(r"max \|E³ member logits - V-MoE on its experts\|: (\S+)", out)[1])
    assert diff <= 1e-4, out
    assert re.search(r"^SparseMoE / dense MLP throughput: [0-9.]+ ", out, re.M), out
