"""The arithmetic task's answer evaluation: `evaluate_generation` on the
bundled `arithmetic` questions, with the names its presets record.

For a `LoRAEnsembleCausalLM` with the task's preprocessor: greedy answers
to the 500 in-distribution `test` and 500 `ood` questions, checked by
`arithmetic.parse_answer`, and every estimator's ranking of the wrong
answers and of the OOD questions (`evaluate_generation`). The presets'
metadata records, and `ensemble-zoo list` shows, the report's
`test_accuracy`, `ood_accuracy` and, under `uncertainty`, the rankings of
four of those estimators by their historical names: `epistemic` (the
mean over the answer's tokens of the ensemble's mutual information,
`pe_mutual_information`), `total` (`mean_token_entropy`, the mean
entropy of the predictive distribution, `pe_total`), `loss_prediction`, and
`{name}_entropy` for a single model given as `single_model`
(`{name}: mean_token_entropy`, its entropy on its own answers; the
presets' evaluation names member 0 alone `member_0`, not the base model).
"""

from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.generation_evaluation import evaluate_generation

#: The recorded names: `uncertainty` key -> `evaluate_generation` estimator.
RECORDED = {
    "epistemic": "pe_mutual_information",
    "total": "mean_token_entropy",  # = pe_total, also for one model
    "loss_prediction": "loss_prediction",
}


def arithmetic_checker(text, answer):
    """Whether a generated text answers the sum `answer`."""
    return arithmetic.parse_answer(text) == answer


def evaluate_answers(
    model,
    single_model=None,
    max_length=12,
    single_model_name="single_model",
    progress=True,
    base_model=False,
    num_samples=0,
):
    """Answers and uncertainty rankings on the arithmetic task.

    Args:
        model: a `LoRAEnsembleCausalLM` with the task's preprocessor
            (optionally with a loss predictor attached).
        single_model: optional keras-hub `CausalLM` (one model) whose
            estimators on its own answers are baselines.
        max_length: int, generation length in tokens.
        single_model_name: str, what `single_model` is (an identifier):
            its metrics are `f"{single_model_name}_test_accuracy"` and the
            uncertainty `f"{single_model_name}_entropy"`. Defaults to
            `"single_model"`; `ensemble_zoo.evaluation.evaluate_preset`
            passes `"member_0"` for an ensemble's first member alone.
        progress: bool, print a line per stage where stderr is not a
            terminal (`ensemble_zoo.utils.progress`). Defaults to `True`.
        base_model: bool, also the frozen model the ensemble was built on
            as a single model (`base_model`). Defaults to `False`.
        num_samples: int, answers drawn per question for the
            sampling-based estimators (0, the default: none).

    Returns:
        A `GenerationReport` named `"answers"`, whose metrics add to
        `evaluate_generation`'s the recorded names (module docstring):
        `num_test`, `test_accuracy`, `num_ood`, `ood_accuracy`,
        `uncertainty`, and with a single model `single_model` (its name)
        and `{name}_test_accuracy`.
    """
    if single_model is not None and not str(single_model_name).isidentifier():
        raise ValueError(
            "`single_model_name` must be an identifier such as "
            f"'member_0'; got {single_model_name!r}."
        )
    singles = {} if single_model is None else {single_model_name: single_model}
    if base_model:
        singles["base_model"] = model.base_causal_lm()
    test_q, test_a = arithmetic.load_questions("test")
    ood_q, ood_a = arithmetic.load_questions("ood")
    report = evaluate_generation(
        model,
        test_q,
        test_a,
        checker=arithmetic_checker,
        ood_prompts=ood_q,
        ood_references=ood_a,
        single_models=singles,
        num_samples=num_samples,
        max_length=max_length,
        progress=progress,
        name="answers",
        # The preset reports record quality; the leaderboard has its own
        # cost column.
        measure_cost=False,
    )
    m = report.metrics
    estimators = m["estimators"]
    m.update(num_test=m["num_prompts"], test_accuracy=m["accuracy"], uncertainty={})
    for name, estimator in RECORDED.items():
        if name == "epistemic" and model.num_members == 1:
            continue  # zero for one model
        if estimator in estimators:
            m["uncertainty"][name] = estimators[estimator]
    if single_model is not None:
        m["single_model"] = single_model_name
        m[f"{single_model_name}_test_accuracy"] = m["single_models"][single_model_name]["accuracy"]
        m["uncertainty"][f"{single_model_name}_entropy"] = estimators[
            f"{single_model_name}: mean_token_entropy"
        ]
    return report
