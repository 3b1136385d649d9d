"""What `evaluate_generation` returns: its metrics, printable and
savable."""

import json
import os

from ensemble_zoo.evaluation.tables import markdown_table
from ensemble_zoo.evaluation.tables import text_table

#: Ranking measures per estimator, in report order.
MEASURES = ("wrong_answer_auroc", "prr", "aurc", "ood_auroc")


class GenerationReport:
    """The result of `evaluate_generation`: printable, savable.

    Attributes:
        metrics: dict: `num_prompts`, `accuracy` (share of right answers),
            `num_ood` and `ood_accuracy` when given, `single_models`
            (`{name: {"accuracy", "ood_accuracy"}}`) and `estimators`
            (`{estimator: {"wrong_answer_auroc", "prr", "aurc",
            "ood_auroc"}}`, each measure where it is defined).
        answers: the ensemble's greedy answers to the prompts.
        curves: `{estimator: (uncertainty, correct)}` for the
            accuracy-rejection plot.
    """

    def __init__(self, metrics, name="generation", answers=None, curves=None):
        self.metrics = metrics
        self.name = name
        self.answers = answers
        self.curves = curves or {}

    def rows(self):
        """`[estimator, AUROC, PRR, AURC, OOD AUROC]` per estimator, best
        wrong-answer AUROC first."""
        rows = [
            [estimator] + [row.get(k) for k in MEASURES + ("extra_ms_per_token",)]
            for estimator, row in self.metrics["estimators"].items()
        ]
        return sorted(rows, key=lambda r: -(r[1] if r[1] is not None else -1.0))

    HEADERS = ["estimator", "wrong-answer AUROC", "PRR", "AURC", "OOD AUROC", "extra ms / token"]

    def _summary(self):
        m = self.metrics
        line = f"{self.name}: accuracy {m['accuracy']:.4f} ({m['num_prompts']} prompts)"
        if "ood_accuracy" in m:
            line += f", OOD accuracy {m['ood_accuracy']:.4f} ({m['num_ood']} prompts)"
        if "plain_ms_per_token" in m:
            line += f"; plain greedy decode {m['plain_ms_per_token']:.2f} ms per token"
        lines = [line]
        for single, row in m["single_models"].items():
            text = f"{single} alone: accuracy {row['accuracy']:.4f}"
            if "ood_accuracy" in row:
                text += f", OOD accuracy {row['ood_accuracy']:.4f}"
            lines.append(text)
        return lines

    def __str__(self):
        return "\n".join(self._summary() + [text_table(self.rows(), self.HEADERS)])

    def to_markdown(self):
        """The report as Markdown: the accuracies and the estimator table."""
        summary = "\n\n".join(self._summary())
        return f"# {self.name}\n\n{summary}\n\n{markdown_table(self.rows(), self.HEADERS)}\n"

    def save(self, directory):
        """Writes `report.json`, `report.md` and, with curves,
        `accuracy_rejection.png` (the four ensemble estimators with the
        best wrong-answer AUROC and the best single-model one) to
        `directory`; returns their paths."""
        from ensemble_zoo.evaluation.plots import answer_rejection_curves

        os.makedirs(directory, exist_ok=True)
        paths = [os.path.join(directory, "report.json"), os.path.join(directory, "report.md")]
        with open(paths[0], "w", encoding="utf-8") as f:
            json.dump({"name": self.name, "metrics": self.metrics}, f, indent=2, sort_keys=True)
        with open(paths[1], "w", encoding="utf-8") as f:
            f.write(self.to_markdown())
        ranked = [r[0] for r in self.rows() if r[0] in self.curves]
        best = [k for k in ranked if ":" not in k][:4]
        best += [k for k in ranked if ":" in k][:1]  # the best single-model one
        if best:
            path = os.path.join(directory, "accuracy_rejection.png")
            answer_rejection_curves(
                {k: self.curves[k] for k in best}, path, title="Accuracy vs. rejection"
            )
            paths.append(path)
        return paths
