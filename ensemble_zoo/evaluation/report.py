"""`EvaluationReport`: the numbers of one evaluation, as table, JSON,
Markdown and plots."""

import copy
import json
import os

from ensemble_zoo.evaluation import plots
from ensemble_zoo.evaluation.tables import markdown_table
from ensemble_zoo.evaluation.tables import text_table
from ensemble_zoo.utils.output_dir import prepare_output_dir

_CLASSIFICATION = [
    ("accuracy", "accuracy"),
    ("nll", "NLL"),
    ("brier", "Brier"),
    ("ece", "ECE"),
    ("aece", "aECE"),
    ("mce", "MCE"),
    ("aurc", "AURC"),
]
_SCORES = [("msp", "1 - MSP"), ("mutual_information", "MI"), ("predicted_loss", "predicted loss")]


class EvaluationReport:
    """The result of `ensemble_zoo.evaluation.evaluate`.

    Attributes:
        metrics: nested dict of plain Python numbers (what `to_json`
            writes): `name`, `num_members`, `num_classes`,
            `in_distribution`, `temperature_scaled` (or None), `ood`
            (per set, per score: `auroc`, `aupr`, `fpr95`), `shift`,
            `diversity` (per set: `mutual_information`, `disagreement`) and
            `cost` (`parameters`, `latency_ms`, `throughput`, ...).
        arrays: NumPy arrays behind the plots (labels, probabilities,
            member logits and OOD scores per set).

    `print(report)` shows the tables; `save(directory)` writes
    `report.json`, `report.md` and the PNG plots.
    """

    def __init__(self, metrics, arrays=None, num_bins=15):
        self.metrics = metrics
        self.arrays = arrays or {}
        self.num_bins = num_bins

    @property
    def name(self):
        return self.metrics["name"]

    def to_dict(self):
        """A deep copy of `metrics`."""
        return copy.deepcopy(self.metrics)

    def to_json(self, path=None):
        """The metrics as JSON text; also written to `path` if given."""
        text = json.dumps(self.metrics, indent=2) + "\n"
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    @classmethod
    def from_json(cls, path):
        """Reads a report written by `to_json` (metrics only, no arrays)."""
        with open(path) as f:
            return cls(json.load(f))

    def sections(self):
        """`(title, headers, rows)` for every table of the report."""
        m = self.metrics
        out = []
        headers = ["split", "n"] + [label for _, label in _CLASSIFICATION]
        rows = [
            ["test (ID)", m["in_distribution"]["num_samples"]]
            + [m["in_distribution"].get(key) for key, _ in _CLASSIFICATION]
        ]
        ts = m.get("temperature_scaled")
        if ts:
            rows.append(
                [f"test, T={ts['temperature']:.3f}", m["in_distribution"]["num_samples"]]
                + [ts.get(key) for key, _ in _CLASSIFICATION]
            )
        for set_name, entry in m.get("shift", {}).items():
            rows.append(
                [f"shift: {set_name}", entry["num_samples"]]
                + [entry.get(key) for key, _ in _CLASSIFICATION]
            )
        out.append(("Classification and calibration", headers, rows))
        if m.get("ood"):
            rows = []
            for set_name, entry in m["ood"].items():
                for score, label in _SCORES:
                    if score not in entry:
                        continue  # predicted_loss: models with that output
                    values = entry.get(score) or {}
                    rows.append(
                        [set_name, entry["num_samples"], label]
                        + [values.get(k) for k in ("auroc", "aupr", "fpr95")]
                    )
            out.append(
                (
                    "OOD detection (OOD = positive class)",
                    ["OOD set", "n", "score", "AUROC", "AUPR", "FPR95"],
                    rows,
                )
            )
        rows = [
            [set_name, d["mutual_information"], d["disagreement"]]
            for set_name, d in m.get("diversity", {}).items()
        ]
        out.append(("Diversity (means)", ["set", "MI (nats)", "disagreement"], rows))
        c = m["cost"]
        out.append(
            (
                "Cost",
                [
                    "members",
                    "parameters",
                    f"latency ms (batch {c['latency_batch_size']})",
                    f"throughput /s (batch {c['throughput_batch_size']})",
                    "backend",
                ],
                [
                    [
                        m["num_members"],
                        c["parameters"],
                        "-" if c["latency_ms"] is None else f"{c['latency_ms']:.2f}",
                        f"{c['throughput']:,.0f}",
                        c["backend"],
                    ]
                ],
            )
        )
        return out

    def __str__(self):
        parts = [f"Evaluation of {self.name}"]
        for title, headers, rows in self.sections():
            parts.append(f"\n{title}\n{text_table(rows, headers)}")
        return "\n".join(parts)

    def to_markdown(self, path=None):
        """The tables as Markdown; also written to `path` if given."""
        parts = [f"# Evaluation of `{self.name}`"]
        for title, headers, rows in self.sections():
            parts.append(f"\n## {title}\n\n{markdown_table(rows, headers)}")
        text = "\n".join(parts) + "\n"
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def plot(self, directory):
        """Writes the PNG plots into `directory`; returns their paths.

        Reliability diagram, accuracy-vs-rejection curve, OOD score
        histograms (ID vs every OOD set, one per score) and, for
        ensembles, the distribution of member disagreement.
        """
        if not self.arrays:
            raise ValueError(
                "This report has no arrays (it was read from JSON); plots "
                "need the report returned by `evaluate`."
            )
        prepare_output_dir(directory)
        a = self.arrays
        paths = {}
        paths["reliability"] = os.path.join(directory, "reliability.png")
        plots.reliability_diagram(
            a["id_probabilities"],
            a["id_labels"],
            paths["reliability"],
            self.num_bins,
            title=f"Reliability: {self.name}",
        )
        paths["accuracy_rejection"] = os.path.join(directory, "accuracy_rejection.png")
        plots.accuracy_rejection_curves(
            {self.name: (a["id_probabilities"], a["id_labels"])}, paths["accuracy_rejection"]
        )
        for score, label in _SCORES:
            if not a["ood_scores"] or score not in a["id_scores"]:
                continue
            sets = {"id": a["id_scores"][score]}
            sets.update({k: v[score] for k, v in a["ood_scores"].items()})
            key = f"ood_scores_{score}"
            paths[key] = os.path.join(directory, f"{key}.png")
            plots.score_histograms(sets, paths[key], label, title=f"{label}: {self.name}")
        logits = a["member_logits"]
        if next(iter(logits.values())).shape[1] > 1:
            paths["disagreement"] = os.path.join(directory, "disagreement.png")
            plots.disagreement_histograms(
                logits, paths["disagreement"], title=f"Disagreement: {self.name}"
            )
        return paths

    def save(self, directory, plots=True):
        """Writes `report.json`, `report.md` and (optionally) the plots.

        Returns:
            dict mapping what was written to its path.
        """
        prepare_output_dir(directory)
        paths = {
            "json": os.path.join(directory, "report.json"),
            "markdown": os.path.join(directory, "report.md"),
        }
        self.to_json(paths["json"])
        self.to_markdown(paths["markdown"])
        if plots:
            paths.update(self.plot(directory))
        return paths
