import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import average_precision_score
from sklearn.metrics import roc_auc_score

import ensemble_zoo as ez
from ensemble_zoo.calibration import TemperatureScaling
from ensemble_zoo.models import DeepEnsembleClassifier


def member(seed, classes=8):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x))


@pytest.fixture(scope="module")
def ensemble():
    """Three briefly trained MLP members: different, imperfect, fast."""
    x, y = ez.datasets.load_arrays("digits", "train")
    members = []
    for seed in range(3):
        m = member(seed)
        m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(x, y, epochs=3, batch_size=64, verbose=0)
        members.append(m)
    return DeepEnsembleClassifier(members)


@pytest.fixture(scope="module")
def digits():
    return {
        s: ez.datasets.load_arrays("digits", s)
        for s in ("validation", "test", "near_ood", "far_ood", "test_shifted")
    }


def reference_probs(model, x):
    """Members run one by one, softmax in float64, averaged."""
    logits = np.stack([np.asarray(m.predict(x, verbose=0), np.float64) for m in model.members], 1)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    member_probs = e / e.sum(-1, keepdims=True)
    return logits, member_probs


def entropy(p):
    return -np.sum(p * np.log(np.maximum(p, 1e-300)), -1)


@pytest.fixture(scope="module")
def report(ensemble, digits):
    return ez.evaluation.evaluate(
        ensemble,
        digits["test"],
        ood_data={"near": digits["near_ood"][0], "far": digits["far_ood"]},
        shift_data={"noise": digits["test_shifted"]},
        validation_data=digits["validation"],
        batch_size=100,  # 289 test samples: a padded last batch
        name="mlp3",
        progress=False,
    )


def test_numbers_equal_an_independent_computation(ensemble, digits, report):
    m = report.metrics
    x, y = digits["test"]
    logits, member_probs = reference_probs(ensemble, x)
    p = member_probs.mean(1)
    ind = m["in_distribution"]
    assert ind["num_samples"] == 289
    assert ind["accuracy"] == pytest.approx(np.mean(p.argmax(1) == y))
    assert ind["nll"] == pytest.approx(-np.mean(np.log(p[np.arange(289), y])), abs=1e-5)
    assert ind["brier"] == pytest.approx(np.mean(np.sum((p - np.eye(8)[y]) ** 2, 1)), abs=1e-5)
    id_msp = 1 - p.max(1)
    id_mi = entropy(p) - entropy(member_probs).mean(1)
    for set_name, x_ood in (("near", digits["near_ood"][0]), ("far", digits["far_ood"][0])):
        _, mp = reference_probs(ensemble, x_ood)
        ood_msp = 1 - mp.mean(1).max(1)
        ood_mi = entropy(mp.mean(1)) - entropy(mp).mean(1)
        labels = np.r_[np.zeros(289), np.ones(len(x_ood))]
        entry = m["ood"][set_name]
        assert entry["num_samples"] == len(x_ood)
        for key, ids, oods in (("msp", id_msp, ood_msp), ("mutual_information", id_mi, ood_mi)):
            scores = np.r_[ids, oods]
            assert entry[key]["auroc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-4)
            assert entry[key]["aupr"] == pytest.approx(
                average_precision_score(labels, scores), abs=1e-4
            )
            assert 0.0 <= entry[key]["fpr95"] <= 1.0
    assert m["diversity"]["id"]["mutual_information"] == pytest.approx(np.mean(id_mi), abs=1e-5)
    votes = logits.argmax(-1)
    pairs = [(0, 1), (0, 2), (1, 2)]
    assert m["diversity"]["id"]["disagreement"] == pytest.approx(
        np.mean([np.mean(votes[:, i] != votes[:, j]) for i, j in pairs])
    )
    # Temperature fitted on validation logits computed independently.
    val_logits, _ = reference_probs(ensemble, digits["validation"][0])
    t = TemperatureScaling().fit(val_logits, digits["validation"][1]).temperature
    assert m["temperature_scaled"]["temperature"] == pytest.approx(t, rel=1e-3)
    xs, ys = digits["test_shifted"]
    ps = reference_probs(ensemble, xs)[1].mean(1)
    assert m["shift"]["noise"]["accuracy"] == pytest.approx(np.mean(ps.argmax(1) == ys))
    cost = m["cost"]
    assert cost["parameters"] == sum(mm.count_params() for mm in ensemble.members)
    assert cost["latency_ms"] > 0 and cost["throughput"] > 0
    assert m["num_members"] == 3 and m["name"] == "mlp3"


def test_tf_data_gives_the_same_numbers(ensemble, digits, report):
    x, y = digits["test"]
    batched = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    unbatched_ood = tf.data.Dataset.from_tensor_slices(digits["near_ood"][0])
    other = ez.evaluation.evaluate(
        ensemble, batched, ood_data={"near": unbatched_ood}, batch_size=50, progress=False
    )
    for key in ("accuracy", "nll", "ece", "aece", "aurc"):
        assert other.metrics["in_distribution"][key] == pytest.approx(
            report.metrics["in_distribution"][key], abs=1e-6
        )
    assert other.metrics["ood"]["near"]["msp"]["auroc"] == pytest.approx(
        report.metrics["ood"]["near"]["msp"]["auroc"], abs=1e-6
    )
    assert other.metrics["temperature_scaled"] is None


def test_single_member_has_no_mutual_information_score(digits, tmp_path):
    model = DeepEnsembleClassifier([member(5)])
    rep = ez.evaluation.evaluate(
        model, digits["test"], ood_data={"far": digits["far_ood"][0]}, progress=False
    )
    assert rep.metrics["ood"]["far"]["mutual_information"] is None
    assert rep.metrics["diversity"]["id"]["disagreement"] == 0.0
    paths = rep.plot(tmp_path)
    assert "disagreement" not in paths and "ood_scores_mutual_information" not in paths


def test_report_json_markdown_text_and_plots(report, digits, tmp_path):
    paths = report.save(tmp_path / "out")
    loaded = json.loads(open(paths["json"]).read())
    assert loaded == report.to_dict()
    assert ez.evaluation.EvaluationReport.from_json(paths["json"]).metrics == loaded
    acc = f"{report.metrics['in_distribution']['accuracy']:.4f}"
    assert acc in open(paths["markdown"]).read() and acc in str(report)
    assert "| OOD set | n | score | AUROC | AUPR | FPR95 |" in report.to_markdown()
    import matplotlib.image

    for key in (
        "reliability",
        "accuracy_rejection",
        "ood_scores_msp",
        "ood_scores_mutual_information",
        "disagreement",
    ):
        image = matplotlib.image.imread(paths[key])
        assert image.shape[0] >= 300 and image.shape[1] >= 400, key
    with pytest.raises(ValueError, match="no arrays"):
        ez.evaluation.EvaluationReport.from_json(paths["json"]).plot(tmp_path)


def test_plot_functions_return_what_they_drew(report, tmp_path):
    a = report.arrays
    stats = ez.evaluation.plots.reliability_diagram(
        a["id_probabilities"], a["id_labels"], tmp_path / "r.png"
    )
    expected = ez.metrics.calibration_bins(a["id_probabilities"], a["id_labels"])
    np.testing.assert_array_equal(stats["count"], expected["count"])
    drawn = ez.evaluation.plots.accuracy_rejection_curves(
        {"m": (a["id_probabilities"], a["id_labels"])}, tmp_path / "a.png"
    )
    rejection, accuracy = drawn["m"]
    assert rejection[-1] == 0.0
    assert accuracy[-1] == pytest.approx(report.metrics["in_distribution"]["accuracy"])
    values = ez.evaluation.plots.disagreement_histograms(
        {"id": a["member_logits"]["id"]}, tmp_path / "d.png"
    )["id"]
    assert values.mean() == pytest.approx(report.metrics["diversity"]["id"]["disagreement"])
    points = {
        "deep_ensemble": {"cost": 3.0, "accuracy": 0.99, "ece": 0.02, "ood_auroc": 0.9},
        "no_ood": {"cost": 1.0, "accuracy": 0.98, "ece": 0.05, "ood_auroc": None},
    }
    drawn = ez.evaluation.plots.leaderboard_panels(points, tmp_path / "l.png")
    assert drawn["ece"] == {"deep_ensemble": (3.0, 0.02), "no_ood": (1.0, 0.05)}
    assert drawn["ood_auroc"] == {"deep_ensemble": (3.0, 0.9)}


def test_clear_errors(ensemble, digits, tmp_path):
    x, y = digits["test"]
    with pytest.raises(ValueError, match="`id_data` needs labels"):
        ez.evaluation.evaluate(ensemble, x, progress=False)
    with pytest.raises(ValueError, match=r"`ood_data\['near'\]` is empty"):
        ez.evaluation.evaluate(ensemble, (x, y), ood_data={"near": x[:0]}, progress=False)
    with pytest.raises(ValueError, match="must be a dict"):
        ez.evaluation.evaluate(ensemble, (x, y), ood_data=x, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        ez.evaluation.evaluate(ensemble, (x, y), batch_size=0, progress=False)
    with pytest.raises(ValueError, match="x has 289 samples but y has 10"):
        ez.evaluation.evaluate(ensemble, (x, y[:10]), progress=False)
    with pytest.raises(ValueError, match="rank 4"):
        ez.evaluation.evaluate(ensemble, (x[:, :, :, 0], y), progress=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        ez.evaluation.EvaluationReport({"name": "x"}, {"a": 1}).save(blocker)


def test_datasets_are_rebatched_and_bad_inputs_are_clear(ensemble, digits, report):
    x, y = digits["test"]
    small = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    calls = []
    original = ensemble.predict_on_batch

    def counting(batch):
        calls.append(len(batch))
        return original(batch)

    ensemble.predict_on_batch = counting
    try:
        rep = ez.evaluation.evaluate(ensemble, small, batch_size=100, progress=False)
    finally:
        del ensemble.predict_on_batch
    assert calls[:3] == [100, 100, 100]  # 289 samples: 3 prediction calls
    assert rep.metrics["in_distribution"]["num_samples"] == 289
    assert rep.metrics["in_distribution"]["nll"] == pytest.approx(
        report.metrics["in_distribution"]["nll"], abs=1e-6
    )
    with pytest.raises(ValueError, match="got generator"):
        ez.evaluation.evaluate(ensemble, (b for b in [x]), progress=False)
    weighted = tf.data.Dataset.from_tensor_slices((x, y, np.ones(289))).batch(8)
    with pytest.raises(ValueError, match="sample weights are not supported"):
        ez.evaluation.evaluate(ensemble, weighted, progress=False)


def test_a_model_with_its_own_uncertainty_output_gets_that_ood_score(digits):
    """A model returning {"logits", "uncertainty"} (the loss-prediction
    model's outputs) is evaluated on its logits, and its uncertainty is a
    third OOD score, equal to scikit-learn's AUROC on that output."""
    inputs = keras.Input((8, 8, 1))
    flat = keras.layers.Flatten()(inputs)
    logits = keras.layers.Dense(8)(flat)
    uncertainty = keras.ops.sum(flat * flat, axis=-1)
    model = keras.Model(inputs, {"logits": logits, "uncertainty": uncertainty})
    (x, y), far = digits["test"], digits["far_ood"][0]
    report = ez.evaluation.evaluate(
        model, (x, y), ood_data={"far": far}, batch_size=128, progress=False
    )
    u = lambda a: np.sum(a.reshape(len(a), -1).astype(np.float64) ** 2, axis=1)
    expected = roc_auc_score(np.r_[np.zeros(len(x)), np.ones(len(far))], np.r_[u(x), u(far)])
    far_entry = report.metrics["ood"]["far"]
    assert far_entry["predicted_loss"]["auroc"] == pytest.approx(expected, abs=1e-6)
    probs = keras.ops.convert_to_numpy(keras.ops.softmax(model(x)["logits"]))
    assert report.metrics["in_distribution"]["accuracy"] == pytest.approx(
        np.mean(probs.argmax(1) == y)
    )
    assert "predicted loss" in str(report)


@pytest.mark.skipif(keras.config.backend() != "jax", reason="NumPy and matplotlib only; runs once")
def test_plots_keep_legends_inside_the_figure_and_curves_distinct(tmp_path, monkeypatch):
    """The leaderboard's accuracy-rejection plot had a 17-entry legend over
    two thirds of the axes and running off the bottom, with 10 colours
    repeating over 17 lines; the reliability diagram's legend covered bars.
    Every legend lies inside the figure (outside the axes when long), and
    every curve differs from the others by colour or line style."""
    figures = []
    save = ez.evaluation.plots._save
    monkeypatch.setattr(
        ez.evaluation.plots, "_save", lambda f, p: (figures.append(f), save(f, p))[1]
    )
    rng = np.random.default_rng(0)
    curves = {}
    for i in range(17):
        probs = rng.dirichlet(np.ones(8) * 0.3, size=60)
        curves[f"preset_{i:02d}_with_a_long_name"] = (
            probs,
            probs.argmax(1) ^ (rng.random(60) < 0.2),
        )
    ez.evaluation.plots.accuracy_rejection_curves(curves, tmp_path / "a.png")
    probs, labels = curves["preset_00_with_a_long_name"]
    ez.evaluation.plots.reliability_diagram(probs, labels, tmp_path / "r.png")
    ez.evaluation.plots.score_histograms(
        {"id": probs.max(1), "far": probs.min(1)}, tmp_path / "s.png", "msp"
    )
    for figure in figures:
        renderer = figure.canvas.get_renderer()
        figure.canvas.draw()
        legends = figure.legends + [a.get_legend() for a in figure.axes if a.get_legend()]
        assert legends
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert box.x0 >= -1 and box.y0 >= -1, box
            assert box.x1 <= figure.bbox.x1 + 1 and box.y1 <= figure.bbox.y1 + 1, box
            for axis in figure.axes if len(legend.texts) > 4 else []:
                assert not box.overlaps(axis.get_window_extent(renderer)), (
                    "a long legend covers the axes"
                )
    lines = [l for l in figures[0].axes[0].get_lines()]
    assert len(lines) == 17
    assert len({(l.get_color(), l.get_linestyle()) for l in lines}) == 17
