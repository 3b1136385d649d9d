"""The benchmark scripts run and their exactness columns hold (timings are
printed, never asserted)."""

import json
import os
import re

import numpy as np
import pytest

from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import run_python


@pytest.mark.skipif(BACKEND != "torch", reason="NumPy-only script; one backend suffices")
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
@pytest.mark.skipif(BACKEND != "torch", reason="one backend suffices for the script")
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
@pytest.mark.skipif(BACKEND != "tensorflow", reason="one backend suffices for the script")
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
@pytest.mark.skipif(BACKEND != "torch", reason="one backend suffices for the script")
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


@pytest.mark.skipif(
    BACKEND != "torch", reason="one backend suffices; eager PyTorch compiles nothing"
)
def test_run_all_quick_measures_every_method(tmp_path):
    """`benchmarks/run_all.py --quick`: one table with every section, the
    device named, and JSON rows whose exactness column holds."""
    path = tmp_path / "rows.json"
    out = run_python(
        "import sys; sys.argv = ['run_all.py', '--quick', '--json', "
        f"{str(path)!r}];"
        "import runpy; runpy.run_path('benchmarks/run_all.py', run_name='__main__')"
    )
    assert re.search(r"^device: cpu \(\d+ cores\); backend torch; dtype float32", out, re.M), out
    report = json.loads(path.read_text())
    variants = {(r["section"], r["variant"]) for r in report["rows"]}
    for expected in [
        ("hydra", "fused"), ("hydra", "3 members separately"), ("lora", "LoRA-Ensemble 4"),
        ("lora", "explicit ensemble of 4"), ("moe", "2 x V-MoE K=1"),
        ("moe", "E³ K=1 M=2 (indices)"), ("sparse_moe", "SparseMoE (indices)"),
        ("dispatch", "indices, C x8"), ("metrics", "OOD AUROC: ensemble_zoo"),
        ("baselines", "Packed-Ensembles 3 (alpha 3)"), ("baselines", "MIMO 3"),
    ]:
        assert expected in variants, expected
    for row in report["rows"]:
        assert row["forward_ms"] > 0 and row["forward_ratio"] > 0, row
        assert re.search(rf"^{row['section']}\s+{re.escape(row['variant'])}\s", out, re.M), row
        if row["section"] == "metrics":
            assert row["max_abs_difference"] <= 1e-6, row
    trained = {r["variant"] for r in report["rows"] if r["train_ms"] is not None}
    assert {"single", "fused", "LoRA-Ensemble 4", "E³ K=1 M=2 (one-hot)", "Masksembles 3"} <= trained


@pytest.mark.skipif(BACKEND != "jax", reason="XLA's memory analysis of a JAX executable")
def test_index_dispatch_needs_less_memory_than_one_hot():
    """The compiled peak memory that `run_all.py` reports: at capacity
    factor 8 the index dispatcher needs well under half the one-hot's."""
    import sys

    import keras

    import ensemble_zoo as ez

    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    from timing import peak_memory_mb

    x = np.random.default_rng(0).normal(size=(8, 17, 32)).astype("float32")
    memory = {}
    for dispatcher in ("einsum", "indices"):
        model = keras.Sequential([
            keras.Input((17, 32)),
            ez.layers.SparseMoE(
                num_experts=8, mlp_dim=8, top_k=2, group_size=8 * 17,
                capacity_factor=8.0, dispatcher=dispatcher,
            ),
        ])
        memory[dispatcher] = (peak_memory_mb(model, x), peak_memory_mb(model, x, train=True))
    assert memory["indices"][0] < 0.5 * memory["einsum"][0], memory
    assert memory["indices"][1] < 0.6 * memory["einsum"][1], memory
