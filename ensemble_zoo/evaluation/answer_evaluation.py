"""Evaluation of generated answers: accuracy, and how well each
uncertainty ranks wrong answers and out-of-distribution questions.

For a `LoRAEnsembleCausalLM` on a task with checkable answers (the
bundled `arithmetic`): greedy answers to the in-distribution `test` and
the `ood` questions, and per answer the mean over its generated tokens
(answer and end token) of the ensemble's epistemic and total
uncertainty, of the attached loss predictor's prediction, and of a single
model's entropy on its own answers (`single_model`, scored on its own
correctness, reported under the name the caller gives it: the presets'
evaluation names member 0 alone `member_0`, not the base model). Each
uncertainty gets the AUROC for wrong answers and the prediction
rejection ratio on `test` (`ez.metrics.answer_auroc`,
`prediction_rejection_ratio`), and the AUROC for telling `ood` from
`test` questions (`ez.metrics.ood_auroc`).
"""

import json
import os

import numpy as np

from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.tables import text_table
from ensemble_zoo.metrics.generation import answer_auroc
from ensemble_zoo.metrics.generation import prediction_rejection_ratio
from ensemble_zoo.metrics.ood import ood_auroc
from ensemble_zoo.utils.progress import progress_bar
from ensemble_zoo.utils.progress import progress_note

#: Per-answer uncertainty scores: the key of `generate`'s output whose
#: mean over the answer's tokens is the score.
SCORES = {
    "epistemic": "mean_epistemic",
    "total": "mean_total",
    "loss_prediction": "mean_loss_prediction",
}


_GREEDY = []


def _greedy_sampler():
    """One greedy sampler for every call: the decode engine compiles a
    loop per sampler object, so a new one per call would compile anew."""
    import keras_hub

    if not _GREEDY:
        _GREEDY.append(keras_hub.samplers.GreedySampler())
    return _GREEDY[0]


def answer_scores(model, questions, answers, max_length=12):
    """Greedy answers of `model` and their uncertainty scores.

    Args:
        model: a `LoRAEnsembleCausalLM` with its preprocessor (it answers
            greedily here; its compiled state is left as it was).
        questions, answers: lists of strings.
        max_length: int, the generation length (prompt included, in
            tokens).

    Returns:
        dict: `answers` (the parsed answers), `correct` (bool array) and
        one float array per available score of `SCORES`.
    """
    # Greedy answers, without `compile` (which would reset the caller's
    # optimizer and loss): the sampler is swapped and put back (the decode
    # engine compiles one loop per sampler object).
    previous = model.sampler
    model.sampler = _greedy_sampler()
    try:
        out = model.generate(list(questions), max_length=max_length, return_uncertainty=True)
    finally:
        model.sampler = previous
    given = [arithmetic.parse_answer(text) for text in out["output"]]
    result = {
        "answers": given,
        "correct": np.array([g == a for g, a in zip(given, answers)]),
    }
    for name, key in SCORES.items():
        if key in out:
            result[name] = np.asarray(out[key], "float64")
    return result


def _ranking(scores_test, correct, scores_ood=None):
    row = {}
    if 0 < correct.sum() < correct.size:
        row["wrong_answer_auroc"] = answer_auroc(scores_test, correct)
        row["prr"] = prediction_rejection_ratio(scores_test, correct)
    if scores_ood is not None:
        row["ood_auroc"] = ood_auroc(scores_test, scores_ood)
    return row


def evaluate_answers(
    model, single_model=None, max_length=12, single_model_name="single_model",
    progress=True,
):
    """Answers and uncertainty rankings on the arithmetic task.

    Args:
        model: a `LoRAEnsembleCausalLM` with the task's preprocessor
            (optionally with a loss predictor attached).
        single_model: optional keras-hub `CausalLM` (one model) whose
            entropy on its own answers is the baseline.
        max_length: int, generation length in tokens.
        single_model_name: str, what `single_model` is (an identifier):
            its metrics are `f"{single_model_name}_test_accuracy"` and the
            uncertainty `f"{single_model_name}_entropy"`. Defaults to
            `"single_model"`; `ensemble_zoo.evaluation.evaluate_preset`
            passes `"member_0"` for an ensemble's first member alone.
        progress: bool, print a line per stage where stderr is not a
            terminal (`ensemble_zoo.utils.progress`). Defaults to `True`.

    Returns:
        An `AnswerReport`.
    """
    from ensemble_zoo.models.causal_lm.lora_ensemble_causal_lm import LoRAEnsembleCausalLM

    if single_model is not None and not str(single_model_name).isidentifier():
        raise ValueError(
            "`single_model_name` must be an identifier such as "
            f"'member_0'; got {single_model_name!r}."
        )
    test_q, test_a = arithmetic.load_questions("test")
    ood_q, ood_a = arithmetic.load_questions("ood")
    splits = {"test": (test_q, test_a), "ood": (ood_q, ood_a)}
    scored = {}
    for split in progress_bar(
        list(splits), desc="answers", enable=progress, name_steps=True,
        unit="splits",
    ):
        scored[split] = answer_scores(model, *splits[split], max_length)
    test, ood = scored["test"], scored["ood"]
    metrics = {
        "num_test": len(test_q),
        "num_ood": len(ood_q),
        "test_accuracy": float(test["correct"].mean()),
        "ood_accuracy": float(ood["correct"].mean()),
        "uncertainty": {},
    }
    for name in SCORES:
        if name == "epistemic" and model.num_members == 1:
            continue  # zero for one model
        if name in test:
            metrics["uncertainty"][name] = _ranking(test[name], test["correct"], ood[name])
    if single_model is not None:
        # One model as a one-member ensemble with zero adapters (its own
        # generate, bit for bit): its total uncertainty is its entropy.
        single = LoRAEnsembleCausalLM.from_keras_hub(single_model, num_members=1, rank=1, seed=0)
        progress_note(f"answers: {single_model_name} alone", progress)
        single_test = answer_scores(single, test_q, test_a, max_length)
        single_ood = answer_scores(single, ood_q, ood_a, max_length)
        metrics["single_model"] = single_model_name
        metrics[f"{single_model_name}_test_accuracy"] = float(
            single_test["correct"].mean()
        )
        metrics["uncertainty"][f"{single_model_name}_entropy"] = _ranking(
            single_test["total"], single_test["correct"], single_ood["total"]
        )
    return AnswerReport(metrics)


class AnswerReport:
    """The metrics of `evaluate_answers`, printable and savable.

    Attributes:
        metrics: dict (`test_accuracy`, `ood_accuracy`, and per
            uncertainty `wrong_answer_auroc`, `prr`, `ood_auroc`; with a
            single model, `single_model` naming it, its
            `{name}_test_accuracy` and the uncertainty `{name}_entropy`).
    """

    def __init__(self, metrics, name="answers"):
        self.metrics = metrics
        self.name = name

    def __str__(self):
        m = self.metrics
        lines = [
            f"{self.name}: test accuracy {m['test_accuracy']:.3f} "
            f"({m['num_test']} questions), OOD accuracy {m['ood_accuracy']:.3f} "
            f"({m['num_ood']} questions)",
        ]
        if "single_model" in m:
            name = m["single_model"]
            lines.append(
                f"{name} alone: test accuracy {m[f'{name}_test_accuracy']:.3f}"
            )
        rows = [
            [name, row.get("wrong_answer_auroc"), row.get("prr"), row.get("ood_auroc")]
            for name, row in m["uncertainty"].items()
        ]
        lines.append(text_table(rows, ["uncertainty", "wrong-answer AUROC", "PRR", "OOD AUROC"]))
        return "\n".join(lines)

    def save(self, directory):
        """Writes `report.json` to `directory`; returns its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "report.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"name": self.name, "metrics": self.metrics}, f, indent=2, sort_keys=True)
        return [path]
