"""The benchmark scripts run and their exactness columns hold (timings are
printed, never asserted)."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import run_python
from zoo_testing import skip_on_alternate_days


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
@skip_on_alternate_days("benchmark_scripts")
def test_implicit_ensembles_experiment_runs_and_collapse_shows(tmp_path):
    out = run_python(
        "import sys; sys.argv = ['implicit_ensembles.py', '--seeds', '0', '--epochs', '3',"
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
@skip_on_alternate_days("benchmark_scripts")
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


SECTIONS = ("hydra", "lora", "moe", "sparse_moe", "baselines", "metrics", "decoding")
#: TensorFlow's C++ start-up lines (keras-hub imports TensorFlow under
#: every backend).
TF_START_UP = re.compile(
    r"absl::InitializeLog|port\.cc|cudart_stub\.cc|cpu_feature_guard\.cc|oneDNN custom"
    r"|Could not find cuda drivers|rebuild TensorFlow|cuInit"
)


@pytest.mark.skipif(
    BACKEND != "torch", reason="one backend suffices; eager PyTorch compiles nothing"
)
def test_run_all_quick_measures_every_method(tmp_path):
    """`benchmarks/run_all.py --quick`: one table with every section, the
    device named, and JSON rows whose exactness column holds; before each
    section a line says the memory it needs, after it the measured peak;
    no TensorFlow start-up lines. `--quick` runs every section in one
    process (a process start costs more than the tiny sections); the
    process per section of a full run goes the same way through
    `--child-output` and the same collecting code."""
    path = tmp_path / "rows.json"
    env = dict(os.environ, KERAS_BACKEND=BACKEND)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # run_all.py sets it itself
    result = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--quick", "--json", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for stream in (out, result.stderr):
        assert not TF_START_UP.search(stream), stream
    assert re.search(
        r"^run_all: backend torch; .*; one process for all sections; [\d.]+ GiB memory available$",
        out,
        re.M,
    ), out
    assert re.search(r"^device: cpu \(\d+ cores\); backend torch; dtype float32", out, re.M), out
    # The memory line comes before each section's rows are measured, the
    # measured peak after them, section after section.
    lines = out.splitlines()
    position = 0
    for name in SECTIONS:
        held = (
            r"held once the models are built \([\d.]+ (MiB|GiB) runtime \+ [\d.]+ MiB weights"
            r" of [\d,]+ parameters.*\)"
            if name not in ("metrics", "decoding")
            else r"runtime"
        )
        needs = next(
            i
            for i, line in enumerate(lines)
            if re.match(
                rf"\[{name}: needs ~[\d.]+ (MiB|GiB) = [\d.]+ (MiB|GiB) {held} \+ .*;"
                r" [\d.]+ GiB available \(.*\)\]$",
                line,
            )
        )
        done = next(
            i
            for i, line in enumerate(lines)
            if re.match(
                rf"\[{name}: \d+ s; peak RSS so far [\d.]+ (MiB|GiB) \(.*\),"
                r" [\d.]+ (MiB|GiB) estimated\]$",
                line,
            )
        )
        assert position <= needs < done, (name, out)
        position = done
    report = json.loads(path.read_text())
    assert report["isolation"] == "run"
    for name in SECTIONS:
        memory = report["memory"][name]
        assert memory["status"] == "ok", memory
        # At this size the estimate is mostly the runtime's resident memory.
        ratio = memory["measured_peak_rss_mib"] / memory["estimated_peak_mib"]
        assert 0.5 < ratio < 2, (name, memory)
        assert memory["estimate_mib"]["weights"] == pytest.approx(
            4 * memory["parameters"] / 2**20
        ), memory
    variants = {(r["section"], r["variant"]) for r in report["rows"]}
    for expected in [
        ("hydra", "fused"),
        ("hydra", "3 members separately"),
        ("lora", "LoRA-Ensemble 4"),
        ("lora", "explicit ensemble of 4"),
        ("moe", "2 x V-MoE K=1"),
        ("moe", "E³ K=1 M=2 (indices)"),
        ("moe", "Experts Choice, C x1"),
        ("moe", "Soft MoE, tokens/E slots"),
        ("sparse_moe", "SparseMoE (indices)"),
        ("dispatch", "indices, C x8"),
        ("metrics", "OOD AUROC: ensemble_zoo"),
        ("baselines", "Packed-Ensembles 3 (alpha 3)"),
        ("baselines", "MIMO 3"),
    ]:
        assert expected in variants, expected
    decoding = [r for r in report["rows"] if r["section"] == "decoding"]
    assert [r["variant"] for r in decoding] == [
        "keras-hub generate",
        "plain",
        "LoRA-Ensemble 1",
        "LoRA-Ensemble 2",
        "LoRA-Ensemble 2, upper 1/2",
        "2 separate models",
    ]
    for row in decoding:
        assert row["first_token_ms"] > 0 and row["decode_ms_per_token"] > 0, row
        assert re.search(rf"^{re.escape(row['variant'])}\s+[\d.]+\s", out, re.M), row
    # Separate models hold M times the weights and cache; the ensemble
    # holds them once (plus its adapters), and with the lower of the two
    # blocks a shared trunk, that block's cache once: 3 of 4 blocks' worth.
    assert decoding[5]["held_mib"] == pytest.approx(2 * decoding[0]["held_mib"])
    assert decoding[3]["held_mib"] < decoding[5]["held_mib"]
    assert decoding[4]["kv_cache_mib"] == pytest.approx(0.75 * decoding[3]["kv_cache_mib"])
    # Each member holds a KV cache; the measured rows time a cold call.
    assert decoding[3]["kv_cache_mib"] == pytest.approx(2 * decoding[2]["kv_cache_mib"])
    assert all(row["first_call_s"] > 0 and row["peak_mib"] >= 0 for row in decoding[:4])
    for row in report["rows"]:
        if row["section"] == "decoding":
            continue
        assert row["forward_ms"] > 0 and row["forward_ratio"] > 0, row
        assert re.search(rf"^{row['section']}\s+{re.escape(row['variant'])}\s", out, re.M), row
        if row["section"] == "metrics":
            assert row["max_abs_difference"] <= 1e-6, row
    trained = {r["variant"] for r in report["rows"] if r.get("train_ms") is not None}
    assert {
        "single",
        "fused",
        "LoRA-Ensemble 4",
        "E³ K=1 M=2 (one-hot)",
        "Masksembles 3",
    } <= trained


def _run_all_module():
    spec = importlib.util.spec_from_file_location(
        "run_all", os.path.join(REPO_ROOT, "benchmarks", "run_all.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_all_refuses_a_section_that_would_not_fit(tmp_path, capsys):
    """A section estimated to need more memory than there is (here a fake
    limit of 64 MiB, below any Python process with a backend) is refused
    before anything is compiled, with a clear message, the others still
    run and the exit status is 1; `--ignore-memory-check` runs it with a
    warning. In this process (`--isolation none`): the tiny models only
    are built."""
    run_all = _run_all_module()
    path = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exited:
        run_all.main(
            [
                "--quick",
                "--only",
                "lora",
                "metrics",
                "--isolation",
                "none",
                "--memory-limit",
                "64",
                "--json",
                str(path),
            ]
        )
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert re.search(
        r"^\[lora: needs ~[\d.]+ (MiB|GiB) = [\d.]+ (MiB|GiB) held once the models are built"
        r" \([\d.]+ (MiB|GiB) runtime \+ [\d.]+ MiB weights of [\d,]+ parameters.*\) \+ [\d.]+ MiB"
        r" gradients and AdamW state \([\d,]+ trained in 2 models\) \+ [\d.]+ MiB activations"
        r" \(train step of LoRA-Ensemble 4, batch 4, float32\) \+ 512 MiB compiler;"
        r" 64 MiB available \(--memory-limit\)\]$",
        out,
        re.M,
    ), out
    assert re.search(
        r"^\[lora: refused: needs ~[\d.]+ (MiB|GiB) but only 64 MiB is available, so it would be"
        r" killed for lack of memory; even without its activations it needs ~[\d.]+ (MiB|GiB):"
        r" run it on a machine with more memory, or the other sections with --only;"
        r" --ignore-memory-check runs it anyway\]$",
        out,
        re.M,
    ), out
    assert re.search(r"^not run: lora \(refused\), metrics \(refused\)$", out, re.M), out
    assert not re.search(r"^\[lora: \d+ s", out, re.M), out  # nothing ran
    report = json.loads(path.read_text())
    assert report["rows"] == []
    memory = report["memory"]["lora"]
    assert memory["status"] == "refused" and memory["estimated_peak_mib"] > 64, memory
    assert memory["estimate_mib"]["weights"] == pytest.approx(4 * memory["parameters"] / 2**20)

    rows = run_all.main(
        [
            "--quick",
            "--only",
            "metrics",
            "--isolation",
            "none",
            "--memory-limit",
            "64",
            "--ignore-memory-check",
            "--repeats",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert re.search(
        r"^\[metrics: warning: needs ~[\d.]+ (MiB|GiB) but only 64 MiB is available; running it"
        r" anyway \(--ignore-memory-check\)\]$",
        out,
        re.M,
    ), out
    assert {r["section"] for r in rows} == {"metrics"}

    # What a refusal suggests: the largest batch that fits, bfloat16.
    gib = 2**30
    estimate = dict(total=10 * gib, activations=8 * gib, per_image=2 * gib)
    args = argparse.Namespace(batch_size=4, dtype="float32")
    assert run_all._advice(estimate, args, 7 * gib) == (
        "--batch-size 2 would fit (~6.0 GiB); --dtype bfloat16 would fit (~6.0 GiB)"
    )
    assert run_all._advice(estimate, args, 1 * gib).startswith(
        "even without its activations it needs ~2.0 GiB: run it on a machine with more memory"
    )


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
        model = keras.Sequential(
            [
                keras.Input((17, 32)),
                ez.layers.SparseMoE(
                    num_experts=8,
                    mlp_dim=8,
                    top_k=2,
                    group_size=8 * 17,
                    capacity_factor=8.0,
                    dispatcher=dispatcher,
                ),
            ]
        )
        memory[dispatcher] = (peak_memory_mb(model, x), peak_memory_mb(model, x, train=True))
    assert memory["indices"][0] < 0.5 * memory["einsum"][0], memory
    assert memory["indices"][1] < 0.6 * memory["einsum"][1], memory


@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices; kernel counts are JAX's")
def test_hydra_profile_stages_compose_to_the_block():
    """The profile's stages are the block split in two: attention then MLP
    equals the whole block for the single and the fused model, and every
    stage gets a time and a kernel count."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    import hydra_profile

    size = hydra_profile.SIZES["tiny"]
    single, fused = hydra_profile.models(size, "auto")
    stages = hydra_profile.stage_models(single, fused, size, batch=2)
    rng = np.random.default_rng(0)
    _, x = hydra_profile.stage_inputs("block", 2, size, rng)
    for which, x in enumerate((x[:, 0], x)):
        attention, mlp, block = (stages[s][which] for s in ("attention", "mlp", "block"))
        np.testing.assert_allclose(np.asarray(mlp(attention(x))), np.asarray(block(x)), atol=1e-5)
    rows = hydra_profile.profile("tiny", batch=2, repeats=1, attention="auto")
    assert [r["stage"] for r in rows] == [
        "embedding",
        "attention",
        "mlp",
        "block",
        "block x layers",
        "whole model",
    ]
    assert all(r["fused_kernels"] > 0 for r in rows if r["stage"] != "block x layers")
    assert rows[-1]["mac_ratio"] == pytest.approx(2.24, abs=0.01)


@pytest.mark.skipif(BACKEND != "torch", reason="one backend suffices for the script")
def test_llm_memory_benchmark_measures_each_call():
    spec = importlib.util.spec_from_file_location(
        "llm_memory", os.path.join(REPO_ROOT, "benchmarks", "llm_memory.py")
    )
    llm_memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(llm_memory)
    rows = llm_memory.main(["--lengths", "20", "--members", "2", "--rank", "2", "--compare-fit"])
    assert [row["call"] for row in rows] == [
        "generate",
        "score_uncertainty",
        "fit step",
        "fit, logits loss",
        "keras-hub fit",
    ]
    assert all(row["length"] == 20 and 0.0 <= row["peak_gb"] < 1.0 for row in rows), rows


@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices for the script")
@skip_on_alternate_days("benchmark_scripts")
def test_zero_shot_hydra_benchmark_runs_and_agrees():
    out = run_python(
        "import sys; sys.argv = ['zero_shot_hydra.py', '--batches', '4', '--repeats', '1'];"
        "import runpy; runpy.run_path('benchmarks/zero_shot_hydra.py', run_name='__main__')"
    )
    row = re.search(r"^\s+4\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)x\s+([0-9.]+)$", out, re.M)
    assert row, out
    assert float(row[4]) >= 0.75, out  # the ensemble mostly predicts the single model's class


@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices for the script")
@skip_on_alternate_days("benchmark_scripts")
def test_bayesian_lora_benchmark_times_samples_against_members():
    out = run_python(
        "import sys; sys.argv = ['bayesian_lora.py', '--samples', '4', '--batches', '2',"
        " '--repeats', '1'];"
        "import runpy; runpy.run_path('benchmarks/bayesian_lora.py', run_name='__main__')"
    )
    for system in ("LoRA-Ensemble 4", "Laplace-LoRA 4", "BLoB 4", "4 re-runs"):
        assert re.search(rf"^\s+2 {system}\s+[0-9.]+\s+[0-9.]+x$", out, re.M), (system, out)


@pytest.mark.skipif(BACKEND != "jax", reason="one backend suffices for the scripts")
@skip_on_alternate_days("benchmark_scripts")
def test_shared_trunk_benchmarks_train_score_and_time_each_variant():
    out = run_python(
        "import sys, runpy\n"
        "for name in ('shared_trunk_arithmetic', 'shared_trunk_forward'):\n"
        "    sys.argv = [name + '.py', '--quick']\n"
        "    runpy.run_path(f'benchmarks/{name}.py', run_name='__main__')"
    )
    # KV cache of 4 members over 4 blocks: 2 + 4 x 2 and 3 + 4 x 1 blocks' worth.
    for variant, cache in (("every block", "1.00"), ("upper 1/2", "0.62"), ("upper 1/4", "0.44")):
        assert re.search(rf"^{variant}\s+accuracy [0-9.]+ .* KV cache {cache}x$", out, re.M), out
    for variant, shared in (("every block", 0), ("upper 1/2", 2), ("upper 1/4", 3)):
        assert re.search(rf"^{variant}\s+forward .* shared blocks {shared}$", out, re.M), out
