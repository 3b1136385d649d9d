"""Evaluating shipped presets on a dataset, and the leaderboard of
`ensemble-zoo compare`."""

import json
import os

import numpy as np

from ensemble_zoo import datasets
from ensemble_zoo import presets as preset_registry
from ensemble_zoo.evaluation import plots
from ensemble_zoo.evaluation.evaluate import evaluate
from ensemble_zoo.evaluation.prediction import interleaved_timings
from ensemble_zoo.evaluation.prediction import timing_spread
from ensemble_zoo.evaluation.tables import markdown_table
from ensemble_zoo.evaluation.tables import text_table
from ensemble_zoo.presets.leaderboard import is_compared
from ensemble_zoo.presets.preset_io import did_you_mean
from ensemble_zoo.utils.output_dir import prepare_output_dir
from ensemble_zoo.utils.progress import progress_bar
from ensemble_zoo.utils.progress import progress_note

#: OOD and shift splits looked for in a dataset, with their report names.
OOD_SPLITS = {"near": "near_ood", "far": "far_ood"}
SHIFT_SPLITS = {"shifted": "test_shifted"}


ARITHMETIC = "arithmetic"


def trained_presets():
    """Names of the trained ensemble-classifier presets: those the
    leaderboard ranks (`ensemble_zoo.presets.leaderboard.is_compared`).

    A preset counts when its metadata says `kind: "trained"` and its task
    is an image or text classifier, except the loss-prediction head
    `loss_prediction_vit_tiny_digits` (whose classifier is
    `vit_tiny_digits` unchanged); every preset is in
    `ensemble_zoo.presets.list_presets()`.
    """
    return [
        name
        for name in preset_registry.list_presets()
        if is_compared(preset_registry.preset_metadata(name))
    ]


def _check_preset(name):
    valid = preset_registry.list_presets()
    if name not in valid:
        raise ValueError(
            f"Unknown preset {name!r}{did_you_mean(name, valid)}; valid presets: "
            f"{', '.join(valid)}."
        )


def _split_data(model, dataset, split, batch_size, data_dir):
    if dataset == "digits":
        # The trained presets' image converter takes the raw digits.
        raw = getattr(model, "preprocessor", None) is not None
        return datasets.load_arrays(dataset, split, raw=raw)
    try:
        return datasets.load(
            dataset,
            split,
            batch_size=batch_size,
            image_shape=getattr(model, "member_input_shape", None),
            data_dir=data_dir,
            download=False,
        )
    except ValueError:
        raise
    except Exception as error:  # tfds raises AssertionError and others
        raise ValueError(
            f"Cannot load split {split!r} of dataset {dataset!r} from "
            f"data_dir={data_dir!r} (nothing is downloaded here; prepare it "
            f"with tensorflow_datasets and pass --data-dir): "
            f"{type(error).__name__}: {error}"
        ) from error


def evaluate_preset(preset, dataset=None, batch_size=256, progress=True, data_dir=None, base=None):
    """Loads a preset and evaluates it on a dataset's splits.

    Uses `test` as in-distribution data, `validation` for temperature
    scaling, `near_ood` / `far_ood` as OOD sets and `test_shifted` as a
    shift set, where the dataset has them.

    A language-model preset of the bundled `"arithmetic"` task is
    evaluated on its answers instead
    (`ensemble_zoo.evaluation.answer_evaluation`, built on
    `evaluate_generation`): accuracy, and how well every estimator (5
    sampled answers per question for the sampling-based ones) ranks wrong
    answers and OOD questions, against member 0 alone and the frozen base
    model.

    Args:
        preset: str, a name from `ensemble_zoo.presets.list_presets()`.
        dataset: str, a name from `ensemble_zoo.datasets.list_datasets()`
            or `"arithmetic"`. Defaults to the preset's own (its
            metadata's `dataset`; the digits otherwise); tfds datasets
            must already be prepared in `data_dir` (nothing is
            downloaded).
        batch_size: int. Defaults to `256`.
        progress: bool, show progress: bars on a terminal, lines in a log
            (`ensemble_zoo.utils.progress`).
        data_dir: optional tfds data directory.
        base: an adapter preset's base model (a keras-hub causal LM or
            its preset name, directory or hub handle); `None` loads the
            one the preset's metadata names. Only for adapter presets.

    Returns:
        An `EvaluationReport` named after the preset (a
        `GenerationReport` for the arithmetic presets).
    """
    _check_preset(preset)
    own = preset_registry.preset_metadata(preset).get("dataset", "digits")
    dataset = own if dataset is None else dataset
    if ARITHMETIC in (own, dataset):
        if own != dataset:
            raise ValueError(f"Preset {preset!r} is evaluated on {own!r}, not {dataset!r}.")
        return _evaluate_answers_preset(preset, progress, base)
    return _evaluate_model(
        _load_model(preset, dataset, base), preset, dataset, batch_size, progress, data_dir
    )


def _evaluate_answers_preset(preset, progress=True, base=None):
    """The answer evaluation of an arithmetic preset: an ensemble (with
    its loss predictor preset attached, member 0 as the single model), or
    one keras-hub causal LM (its entropy)."""
    import keras_hub

    from ensemble_zoo.evaluation.answer_evaluation import evaluate_answers
    from ensemble_zoo.models import LoRAEnsembleCausalLM
    from ensemble_zoo.models import TokenLossPredictor

    metadata = preset_registry.preset_metadata(preset)
    model = _load_model(preset, ARITHMETIC, base)
    if isinstance(model, TokenLossPredictor):
        # A loss predictor ranks the answers of the model it was trained on.
        predictor, model = model, _load_model(metadata["base_preset"], ARITHMETIC)
    elif metadata.get("loss_predictor_preset"):
        predictor = preset_registry.load_preset(metadata["loss_predictor_preset"])
    else:
        predictor = None
    if isinstance(model, LoRAEnsembleCausalLM):
        single = model.member_causal_lm(0)
    elif isinstance(model, keras_hub.models.CausalLM):
        # One model: a one-member ensemble with zero adapters is the model.
        model = LoRAEnsembleCausalLM.from_keras_hub(model, num_members=1, rank=1, seed=0)
        single = None
    else:
        raise ValueError(f"Preset {preset!r} ({type(model).__name__}) generates no answers.")
    model.attach_loss_predictor(predictor)
    report = evaluate_answers(
        model,
        single_model=single,
        single_model_name="member_0",
        progress=progress,
        base_model=single is not None,
        num_samples=5,
    )
    report.name = preset
    return report


#: Preset kinds with trained weights: whole models and adapters alone.
TRAINED_KINDS = ("trained", "adapters")


def _load_model(preset, dataset, base=None):
    """The preset's model (an adapter preset on `base`). On the bundled
    digits it keeps its image converter (raw images in, as a user calls
    `predict`); elsewhere the tfds pipeline resizes and scales to [0, 1],
    and the model is loaded without it."""
    _check_preset(preset)
    if preset_registry.preset_metadata(preset).get("kind") not in TRAINED_KINDS:
        trained = [
            p
            for p in preset_registry.list_presets()
            if preset_registry.preset_metadata(p).get("kind") in TRAINED_KINDS
        ]
        raise ValueError(
            f"Preset {preset!r} is an architecture preset (random weights); "
            f"only trained presets are evaluated. Trained presets: {', '.join(trained)}."
        )
    return preset_registry.load_preset(
        preset, preprocessor="auto" if dataset in ("digits", ARITHMETIC) else None, base=base
    )


def _evaluate_model(model, preset, dataset, batch_size, progress, data_dir, time_latency=True):
    if dataset not in datasets.list_datasets():
        raise ValueError(
            f"Unknown dataset {dataset!r}; valid datasets: {', '.join(datasets.list_datasets())}."
        )
    if datasets.num_classes(dataset) != model.num_classes:
        raise ValueError(
            f"Preset {preset!r} predicts {model.num_classes} classes but "
            f"dataset {dataset!r} has {datasets.num_classes(dataset)}."
        )
    available = datasets.splits(dataset)

    def load(split):
        return _split_data(model, dataset, split, batch_size, data_dir)

    return evaluate(
        model,
        load("test"),
        ood_data={k: load(s) for k, s in OOD_SPLITS.items() if s in available},
        shift_data={k: load(s) for k, s in SHIFT_SPLITS.items() if s in available},
        validation_data=load("validation") if "validation" in available else None,
        batch_size=batch_size,
        name=preset,
        progress=progress,
        time_latency=time_latency,
    )


def _short(name):
    """A preset's name without the digits ViT suffix: a plot's label."""
    return name.removesuffix("_tiny_digits").removesuffix("_vit")


def _ood(m, set_name, key):
    entry = m["ood"].get(set_name)
    return entry["msp"][key] if entry else None


#: Leaderboard columns: (header, function of (report metrics, base metrics)).
LEADERBOARD_COLUMNS = [
    ("preset", lambda m, b: m["name"]),
    ("members", lambda m, b: m["num_members"]),
    ("accuracy", lambda m, b: m["in_distribution"]["accuracy"]),
    ("NLL", lambda m, b: m["in_distribution"]["nll"]),
    ("ECE", lambda m, b: m["in_distribution"]["ece"]),
    ("ECE (TS)", lambda m, b: (m["temperature_scaled"] or {}).get("ece")),
    ("AUROC near", lambda m, b: _ood(m, "near", "auroc")),
    ("AUROC far", lambda m, b: _ood(m, "far", "auroc")),
    ("FPR95 near", lambda m, b: _ood(m, "near", "fpr95")),
    ("FPR95 far", lambda m, b: _ood(m, "far", "fpr95")),
    ("params", lambda m, b: m["cost"]["parameters"]),
    (
        "latency x base",
        lambda m, b: (
            None if b is None else f"{m['cost']['latency_ms'] / b['cost']['latency_ms']:.2f}x"
        ),
    ),
]


def _with_latency(metrics, latencies):
    """`metrics` with `cost.latency_ms` replaced by the interleaved timing."""
    if metrics is None or metrics["name"] not in latencies:
        return metrics
    cost = dict(metrics["cost"], latency_ms=latencies[metrics["name"]])
    return dict(metrics, cost=cost)


class Leaderboard:
    """Reports of several presets on the same data, as one table.

    Rows are presets; columns are accuracy, NLL, ECE (raw and after
    temperature scaling), OOD AUROC near / far and FPR95 near / far (score
    `1 - max softmax probability`), parameters, and latency relative to the
    preset's single base model (the preset's `base_preset` metadata, or
    itself for a single model).

    Args:
        reports: list of `EvaluationReport`s.
        base_presets: dict mapping a report name to the name of its base
            model's report.
        latencies_ms: optional dict mapping a report name to a latency
            measured for all presets together (`interleaved_timings`);
            used for the relative latency instead of the reports' own.
        latency_spread: optional float, the timing noise of
            `latencies_ms` (`timing_spread`, e.g. 0.05 for +-5%): a
            `latency x base` within about this much of 1.00x is noise
            (on the tiny digits models a call is mostly dispatch, and a
            fused ensemble can time below its base).
    """

    def __init__(self, reports, base_presets=None, latencies_ms=None, latency_spread=None):
        self.reports = list(reports)
        self.base_presets = dict(base_presets or {})
        self.latencies_ms = dict(latencies_ms or {})
        self.latency_spread = latency_spread

    def rows(self):
        by_name = {r.name: _with_latency(r.metrics, self.latencies_ms) for r in self.reports}
        rows = []
        for report in self.reports:
            metrics = by_name[report.name]
            base = by_name.get(self.base_presets.get(report.name))
            rows.append([fn(metrics, base) for _, fn in LEADERBOARD_COLUMNS])
        return rows

    @property
    def headers(self):
        return [h for h, _ in LEADERBOARD_COLUMNS]

    def __str__(self):
        return text_table(self.rows(), self.headers)

    def to_markdown(self):
        return markdown_table(self.rows(), self.headers) + "\n"

    def to_dict(self):
        return {
            "columns": self.headers,
            "rows": self.rows(),
            "base_presets": self.base_presets,
            "latencies_ms": self.latencies_ms,
            "latency_spread": self.latency_spread,
            "reports": {r.name: r.to_dict() for r in self.reports},
        }

    def save(self, directory, plots_too=True):
        """Writes `leaderboard.json`, `leaderboard.md`, `leaderboard.png`
        (accuracy, ECE and far-OOD AUROC against latency, one labelled
        point per preset) and one sub-directory per preset with its report
        and plots. Returns the paths written."""
        prepare_output_dir(directory)
        paths = {
            "json": os.path.join(directory, "leaderboard.json"),
            "markdown": os.path.join(directory, "leaderboard.md"),
        }
        with open(paths["json"], "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
        with open(paths["markdown"], "w") as f:
            f.write(self.to_markdown())
        if plots_too:
            paths["leaderboard_plot"] = os.path.join(directory, "leaderboard.png")
            plots.leaderboard_panels(
                {
                    _short(r.name): {
                        "cost": _with_latency(r.metrics, self.latencies_ms)["cost"]["latency_ms"],
                        "accuracy": r.metrics["in_distribution"]["accuracy"],
                        "ece": r.metrics["in_distribution"]["ece"],
                        "ood_auroc": _ood(r.metrics, "far", "auroc"),
                    }
                    for r in self.reports
                },
                paths["leaderboard_plot"],
                cost_label="latency of a batch of 4, ms (timed together)",
                title="Presets: quality against cost (far-OOD AUROC, score 1 - max probability)",
            )
        for report in self.reports:
            paths[report.name] = report.save(os.path.join(directory, report.name), plots=plots_too)
        return paths


def compare_presets(
    presets=None, dataset="digits", output_dir=None, batch_size=256, progress=True, data_dir=None
):
    """Evaluates presets on the same data and returns a `Leaderboard`.

    Args:
        presets: optional list of preset names; defaults to the trained
            ensemble classifiers (`trained_presets()`).
        dataset: str, see `evaluate_preset`. Defaults to `"digits"`.
        output_dir: optional directory; when given, the leaderboard, the
            per-preset reports and the plots are written there (checked for
            writability before anything is evaluated).
        batch_size: int. Defaults to `256`.
        progress: bool, show progress: bars on a terminal, lines in a log
            (`ensemble_zoo.utils.progress`).
        data_dir: optional tfds data directory.

    The latencies come from one timing of all presets in alternation
    (`interleaved_timings`, medians of 21 rounds at a batch of 4), so
    machine drift affects every preset alike; each report's
    `cost.latency_ms` is its preset's (the reports are not timed one by
    one as well), and the leaderboard's `latency_spread` says how much of
    a ratio is noise.
    """
    names = trained_presets() if presets is None else list(presets)
    if not names:
        raise ValueError("`presets` is empty; nothing to compare.")
    for name in names:
        _check_preset(name)
    if output_dir is not None:
        prepare_output_dir(output_dir)
    models, reports = {}, []
    for name in progress_bar(names, desc="compare", enable=progress, name_steps=True):
        models[name] = _load_model(name, dataset)
        reports.append(
            _evaluate_model(
                models[name], name, dataset, batch_size, progress, data_dir, time_latency=False
            )
        )
    x_timing = reports[0].arrays["timing_inputs"]
    progress_note(f"compare: timing the {len(models)} presets in alternation", progress)
    times = interleaved_timings(models, x_timing, reports[0].metrics["cost"]["latency_batch_size"])
    latencies = {name: float(np.median(t)) for name, t in times.items()}
    for report in reports:
        report.metrics["cost"]["latency_ms"] = latencies[report.name]
    base_presets = {}
    for name in names:
        meta = preset_registry.preset_metadata(name)
        base = meta.get("base_preset", name if meta.get("num_members") == 1 else None)
        if base is not None:
            base_presets[name] = base
    leaderboard = Leaderboard(reports, base_presets, latencies, timing_spread(times))
    if output_dir is not None:
        leaderboard.save(output_dir)
    return leaderboard
