"""Which uncertainty finds the wrong answers: one harness for generation.

`evaluate_generation(model, prompts, references)` answers every prompt
once, greedily, checks each answer against its reference, scores it with
every estimator the zoo has and reports, per estimator, how well it ranks
the wrong answers (and, given OOD prompts, the OOD ones):

- the ensemble's sequence estimators, `ez.metrics.sequence_uncertainty`
  on the greedy decode's own figures (no second pass): the single-model
  baselines of its predictive distribution and Malinin & Gales' ensemble
  measures (left out for a one-member model, where they are 0), and
  RAUQ and the attention score where the decode records attention
  weights (`ATTENTION_ESTIMATORS`, and the ensemble's
  `rauq_mutual_information`); the attached loss predictor's mean
  prediction (`loss_prediction`);
- the pointwise mutual information and its conditional form
  (`PROMPT_FREE_ESTIMATORS`), from one more teacher-forced pass of the
  greedy answers without their prompts (`prompt_free_log_probs`);
- lm-polygraph's TokenSAR of the greedy answer (`RELEVANCE_ESTIMATORS`):
  each token's relevance, the ROUGE-L dissimilarity of the answer without
  it to the whole answer (`sample_uncertainty`'s default similarity), one
  comparison per token;
- CSL (`ELICITED_ESTIMATORS`), where the decode records attention: one
  more pass of an eliciting prompt around each greedy answer
  (`eliciting_attention`, its default template);
- with `num_samples >= 2`, the sampling-based estimators of
  `LoRAEnsembleCausalLM.sample_uncertainty` (`SAMPLING_ESTIMATORS`, and
  with an `nli` model `NLI_ESTIMATORS`) over that many answers drawn per
  prompt (with a seeded random sampler, so the report repeats), and
  CoCoA (`COCOA_ESTIMATORS`) and, with an `nli` model, semantic density
  (`GREEDY_NLI_ESTIMATORS`) on the greedy answer against them;
- with an `nli` model, lm-polygraph's claim-conditioned probability
  (`ALTERNATIVES_NLI_ESTIMATORS`) of the greedy answer, from each token's
  top alternatives (`greedy_alternatives`);
- for each single model (by default the frozen model the ensemble was
  built on, `base_model`), its own greedy answers, their correctness and
  its single-model, attention, prompt-free, TokenSAR and CSL estimators,
  prefixed with its name (`base_model: perplexity`, ...): a single
  model's uncertainty ranks its own answers.

Per estimator: `wrong_answer_auroc` (`ez.metrics.answer_auroc`), `prr`
(`prediction_rejection_ratio`, lm-polygraph's), `aurc`
(`answer_aurc`) and, with OOD prompts, `ood_auroc`
(`ez.metrics.ood_auroc`, OOD prompts' scores against the in-distribution
ones). Every estimator is oriented higher = more uncertain. With
`measure_cost` (the default), each also gets its cost,
`extra_ms_per_token` over a plain greedy decode (`estimator_cost`).
"""

import keras_hub
import numpy as np

from ensemble_zoo.evaluation.estimator_cost import estimator_costs
from ensemble_zoo.evaluation.estimator_cost import generated_tokens
from ensemble_zoo.evaluation.estimator_cost import timed
from ensemble_zoo.evaluation.generation_report import GenerationReport
from ensemble_zoo.evaluation.greedy_alternatives import ccp_of_answers
from ensemble_zoo.evaluation.greedy_answer_scores import RELEVANCE_ESTIMATORS
from ensemble_zoo.evaluation.greedy_answer_scores import elicited_scores
from ensemble_zoo.evaluation.greedy_answer_scores import prompt_free_scores
from ensemble_zoo.evaluation.greedy_answer_scores import relevance_scores
from ensemble_zoo.evaluation.greedy_answer_scores import semantic_density_scores
from ensemble_zoo.metrics.generation import answer_aurc
from ensemble_zoo.metrics.generation import answer_auroc
from ensemble_zoo.metrics.generation import prediction_rejection_ratio
from ensemble_zoo.metrics.lexical_similarity import rouge_l
from ensemble_zoo.metrics.ood import ood_auroc
from ensemble_zoo.metrics.sampled_answer_estimators import cocoa
from ensemble_zoo.metrics.sequence_uncertainty import ATTENTION_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import ELICITED_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import PROMPT_FREE_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import SINGLE_MODEL_ESTIMATORS
from ensemble_zoo.metrics.sequence_uncertainty import sequence_uncertainty
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import answers_of
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import default_sampler
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import normalize_answer
from ensemble_zoo.utils.progress import progress_note

#: The sampling-based estimators (`sample_uncertainty`'s per-prompt keys).
SAMPLING_ESTIMATORS = (
    "semantic_entropy",
    "number_of_semantic_sets",
    "lexical_similarity",
    "sentence_sar",
    "sar",
    "monte_carlo_sequence_entropy",
    "monte_carlo_normalized_sequence_entropy",
    "eigenscore",
)
#: lm-polygraph's CoCoA estimators (`ez.metrics.cocoa`): the greedy
#: answer's sequence estimator of each name, times its mean ROUGE-L
#: dissimilarity to the sampled answers.
COCOA_ESTIMATORS = {
    "cocoa_msp": "maximum_sequence_probability",
    "cocoa_ppl": "perplexity",
    "cocoa_mte": "mean_token_entropy",
}
#: Those that need an NLI model (`sample_uncertainty(nli=...)`).
NLI_ESTIMATORS = (
    "degree_matrix",
    "eccentricity",
    "laplacian_eigenvalue_sum",
    "kernel_language_entropy",
    "luq",
)

#: The greedy answer against the sampled ones with an NLI model:
#: lm-polygraph's `SemanticDensity` (`ez.metrics.semantic_density`), its
#: NLI model called as lm-polygraph's default calls it, on the prompt
#: followed by the greedy answer and by each distinct sampled answer.
GREEDY_NLI_ESTIMATORS = ("semantic_density",)
#: With an NLI model, lm-polygraph's CCP of the greedy answer from each
#: token's top alternatives (`greedy_alternatives`): no samples needed.
ALTERNATIVES_NLI_ESTIMATORS = ("claim_conditioned_probability",)


_GREEDY = []


def greedy_sampler():
    """One greedy sampler for every evaluation: the decode engine compiles
    a loop per sampler object."""
    if not _GREEDY:
        _GREEDY.append(keras_hub.samplers.GreedySampler())
    return _GREEDY[0]


def exact_match(answer, reference):
    """The default checker: equal after SQuAD's normalisation."""
    return normalize_answer(answer) == normalize_answer(reference)


def _checked(prompts, name):
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"`{name}` must be a non-empty list of strings; got {prompts!r}.")
    bad = [p for p in prompts if not isinstance(p, str)]
    if bad:
        raise TypeError(
            f"`{name}` must hold strings (the model's preprocessor tokenises "
            f"them); got {type(bad[0]).__name__}."
        )
    return list(prompts)


def _correctness(answers, references, checker, name):
    if len(references) != len(answers):
        raise ValueError(
            f"`{name}` must hold one reference per prompt ({len(answers)}); got {len(references)}."
        )
    values = np.array([float(checker(a, r)) for a, r in zip(answers, references)])
    if ((values < 0) | (values > 1)).any() or np.isnan(values).any():
        raise ValueError(
            "`checker` must return a bool or a quality in [0, 1]; got "
            f"{values[(values < 0) | (values > 1) | np.isnan(values)][0]!r}."
        )
    return values


def greedy_answers(model, prompts, max_length):
    """Greedy answers and their per-sequence estimators.

    Returns:
        `(answers, scores, outputs)`: the stripped answers (strings), a
        dict of `(prompts,)` float64 arrays (`sequence_uncertainty`'s
        estimators, and `loss_prediction` with a loss predictor attached)
        and the decode's `generate(..., return_uncertainty=True)` dict.
    """
    out = model._generate(list(prompts), max_length, "auto", True, True, sampler=greedy_sampler())
    scores = dict(sequence_uncertainty(out))
    if model.num_members == 1:  # the ensemble measures are 0 for one model
        single = SINGLE_MODEL_ESTIMATORS + ATTENTION_ESTIMATORS
        scores = {k: scores[k] for k in single if k in scores}
    if "mean_loss_prediction" in out:
        scores["loss_prediction"] = np.asarray(out["mean_loss_prediction"], np.float64)
    return answers_of(out, None), scores, out


def _ranking(scores, quality, ood_scores=None):
    """The ranking measures of one estimator (those defined for the data:
    AUROC and AURC need right and wrong answers, PRR unequal qualities)."""
    row = {}
    right = quality >= 0.5
    finite = np.isfinite(scores)
    scores, quality, right = scores[finite], quality[finite], right[finite]
    if 0 < right.sum() < right.size:
        row["wrong_answer_auroc"] = answer_auroc(scores, right)
        row["aurc"] = answer_aurc(scores, right)
    if quality.size and not np.all(quality == quality[0]):
        row["prr"] = prediction_rejection_ratio(scores, quality)
    if ood_scores is not None:
        ood_scores = ood_scores[np.isfinite(ood_scores)]
        if scores.size and ood_scores.size:
            row["ood_auroc"] = ood_auroc(scores, ood_scores)
    return row


def evaluate_generation(
    model,
    prompts,
    references,
    checker=None,
    ood_prompts=None,
    ood_references=None,
    single_models="base",
    num_samples=5,
    max_length=None,
    equivalence="exact",
    seed=0,
    batch_size=None,
    progress=True,
    name="generation",
    nli=None,
    measure_cost=True,
):
    """Accuracy and every estimator's ranking of wrong and OOD answers.

    See the module docstring for the estimators and measures.

    Args:
        model: a `LoRAEnsembleCausalLM` with a preprocessor (with a loss
            predictor attached, its prediction is one more estimator).
        prompts: list of strings.
        references: one reference answer per prompt (anything `checker`
            takes).
        checker: `callable(answer, reference) -> bool` or a quality in
            `[0, 1]` (e.g. ROUGE): PRR uses the quality, AUROC and AURC
            count quality >= 0.5 as right. Defaults to exact match after
            SQuAD's normalisation.
        ood_prompts: optional list of strings, out-of-distribution prompts:
            each estimator's OOD AUROC (OOD = positive).
        ood_references: optional references of `ood_prompts`, for the OOD
            accuracy.
        single_models: `"base"` (default: the frozen model the ensemble
            was built on, `model.base_causal_lm()`, named `base_model`), a
            dict `{name: keras-hub CausalLM}`, or `None`.
        num_samples: int, answers drawn per prompt for the sampling-based
            estimators (0: none; otherwise >= 2).
        max_length: int, the generation length in tokens (prompt
            included); defaults to the preprocessor's.
        equivalence: as for `sample_uncertainty`.
        seed: int, the sampling seed.
        batch_size: optional int, prompts per generation call (default:
            all at once); with `num_samples`, a call decodes
            `batch_size * num_samples` rows.
        progress: bool, a line per stage where stderr is not a terminal.
        name: str, the report's title.
        nli: optional NLI model for the sampling-based estimators, as for
            `sample_uncertainty`.
        measure_cost: bool, time each estimator's work on the first batch
            of prompts once more, after the evaluation (`estimator_cost`:
            its extra milliseconds per generated token over keras-hub's
            plain greedy decode of the base model, `extra_ms_per_token`).
            Defaults to `True`.

    Returns:
        A `GenerationReport`.

    Example:

    ```python
    import ensemble_zoo as ez
    from ensemble_zoo.datasets import arithmetic

    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    questions, answers = arithmetic.load_questions("test")
    report = ez.evaluation.evaluate_generation(
        model, questions[:40], answers[:40], num_samples=0, max_length=12,
        checker=lambda text, answer: arithmetic.parse_answer(text) == answer,
    )
    print(report)
    ```
    """
    from ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm import (
        LoRAEnsembleCausalLM,
    )

    if not isinstance(model, LoRAEnsembleCausalLM):
        raise TypeError(
            "`model` must be a LoRAEnsembleCausalLM (wrap one keras-hub model with "
            "`LoRAEnsembleCausalLM.from_keras_hub(model, num_members=1)`); got "
            f"{type(model).__name__}."
        )
    if model.preprocessor is None:
        raise ValueError("`model` needs a preprocessor: the prompts are strings.")
    prompts = _checked(prompts, "prompts")
    references = list(references)
    checker = exact_match if checker is None else checker
    if not callable(checker):
        raise TypeError(f"`checker` must be callable(answer, reference); got {checker!r}.")
    if ood_prompts is not None:
        ood_prompts = _checked(ood_prompts, "ood_prompts")
    if ood_references is not None and ood_prompts is None:
        raise ValueError("`ood_references` needs `ood_prompts`.")
    if (
        isinstance(num_samples, bool)
        or not isinstance(num_samples, (int, np.integer))
        or (num_samples < 0 or num_samples == 1)
    ):
        raise ValueError(f"`num_samples` must be 0 or an int >= 2; got {num_samples!r}.")
    if batch_size is not None and (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"`batch_size` must be a positive int or None; got {batch_size!r}.")
    if single_models == "base":
        single_models = {"base_model": model.base_causal_lm()}
    elif single_models is None:
        single_models = {}
    elif not isinstance(single_models, dict) or not all(
        isinstance(k, str) and isinstance(v, keras_hub.models.CausalLM)
        for k, v in single_models.items()
    ):
        raise TypeError(
            '`single_models` must be "base", None or a dict {name: keras-hub '
            f"CausalLM}}; got {single_models!r}."
        )

    def draw(m, chunk):
        return m.sample_uncertainty(
            chunk,
            num_samples,
            equivalence=equivalence,
            max_length=max_length,
            sampler=default_sampler(m, seed),
            nli=nli,
        )

    def _costs(who, m, chunk, estimators):
        """`({estimator: extra ms per token}, plain decode ms per token)`
        on `chunk` (`estimator_cost`), after the evaluation's own calls
        (so that the sampler's state they advance is theirs)."""
        plain_model = m.base_causal_lm()
        plain_model.compile(sampler="greedy")

        def plain():
            return plain_model.generate(list(chunk), max_length=max_length)

        plain()  # compiles keras-hub's own generation
        times = {"plain": timed(plain)[1]}
        (answers, _, greedy), times["figures"] = timed(lambda: greedy_answers(m, chunk, max_length))
        if who == "ensemble" and num_samples:
            sampled, times["sampling"] = timed(lambda: draw(m, chunk))
            if nli is not None:
                times["greedy_nli"] = timed(
                    lambda: semantic_density_scores(chunk, answers, greedy, sampled, nli)
                )[1]
        if who == "ensemble" and nli is not None:
            times["alternatives"] = timed(lambda: ccp_of_answers(m, greedy, nli))[1]
        times["prompt_free"] = timed(lambda: prompt_free_scores(m, greedy))[1]
        times["relevance"] = timed(lambda: relevance_scores(m, greedy))[1]
        times["eliciting"] = timed(lambda: elicited_scores(m, chunk, greedy))[1]
        tokens = generated_tokens(greedy)
        costs = estimator_costs(
            times,
            tokens,
            estimators,
            SAMPLING_ESTIMATORS + NLI_ESTIMATORS + tuple(COCOA_ESTIMATORS),
            GREEDY_NLI_ESTIMATORS,
            ALTERNATIVES_NLI_ESTIMATORS,
            PROMPT_FREE_ESTIMATORS,
            ELICITED_ESTIMATORS,
            RELEVANCE_ESTIMATORS,
        )
        return costs, 1000.0 * times["plain"] / max(tokens, 1)

    def answer(who, m, name_of_stage):
        progress_note(f"{name}: {name_of_stage}", progress)
        result = {"answers": {}, "scores": {}, "quality": {}}
        for split, split_prompts, split_refs in (
            ("test", prompts, references),
            ("ood", ood_prompts, ood_references),
        ):
            if split_prompts is None:
                continue
            answers, parts = [], []
            for start in range(0, len(split_prompts), batch_size or len(split_prompts)):
                chunk = split_prompts[start : start + (batch_size or len(split_prompts))]
                chunk_answers, scores, greedy = greedy_answers(m, chunk, max_length)
                scores.update(prompt_free_scores(m, greedy))
                scores.update(relevance_scores(m, greedy))
                scores.update(elicited_scores(m, chunk, greedy))
                if who == "ensemble" and nli is not None:
                    scores["claim_conditioned_probability"] = ccp_of_answers(m, greedy, nli)
                if who == "ensemble" and num_samples:
                    sampled = draw(m, chunk)
                    names = SAMPLING_ESTIMATORS + (NLI_ESTIMATORS if nli is not None else ())
                    scores.update({k: np.asarray(sampled[k], np.float64) for k in names})
                    similar = [
                        [rouge_l(g, a) for a in row]
                        for g, row in zip(chunk_answers, sampled["answers"])
                    ]
                    for cocoa_name, base in COCOA_ESTIMATORS.items():
                        scores[cocoa_name] = cocoa(scores[base], similar)
                    if nli is not None:
                        scores["semantic_density"] = semantic_density_scores(
                            chunk, chunk_answers, greedy, sampled, nli
                        )
                answers += chunk_answers
                parts.append(scores)
            scores = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            result["answers"][split] = answers
            result["scores"][split] = scores
            if split_refs is not None:
                ref_name = "references" if split == "test" else "ood_references"
                result["quality"][split] = _correctness(answers, split_refs, checker, ref_name)
        if measure_cost:
            chunk = prompts[: batch_size or len(prompts)]
            estimators = list(result["scores"]["test"])
            result["costs"], result["plain_ms"] = _costs(who, m, chunk, estimators)
        return result

    ensemble = answer(
        "ensemble",
        model,
        "the ensemble's answers" if model.num_members > 1 else "the model's answers",
    )
    metrics = {
        "num_prompts": len(prompts),
        "accuracy": float(np.mean(ensemble["quality"]["test"] >= 0.5)),
        "estimators": {},
        "single_models": {},
    }
    if ood_prompts is not None:
        metrics["num_ood"] = len(ood_prompts)
        if ood_references is not None:
            metrics["ood_accuracy"] = float(np.mean(ensemble["quality"]["ood"] >= 0.5))
    curves = {}
    if measure_cost:
        metrics["plain_ms_per_token"] = ensemble["plain_ms"]
    for estimator, values in ensemble["scores"]["test"].items():
        ood = ensemble["scores"].get("ood", {}).get(estimator)
        metrics["estimators"][estimator] = _ranking(values, ensemble["quality"]["test"], ood)
        if measure_cost:
            metrics["estimators"][estimator]["extra_ms_per_token"] = ensemble["costs"][estimator]
        curves[estimator] = (values, ensemble["quality"]["test"] >= 0.5)
    for single_name, single in single_models.items():
        one = LoRAEnsembleCausalLM.from_keras_hub(single, num_members=1, rank=1, seed=0)
        result = answer(single_name, one, f"{single_name} alone")
        metrics["single_models"][single_name] = {
            "accuracy": float(np.mean(result["quality"]["test"] >= 0.5))
        }
        if "ood" in result["quality"]:
            metrics["single_models"][single_name]["ood_accuracy"] = float(
                np.mean(result["quality"]["ood"] >= 0.5)
            )
        for estimator in (
            SINGLE_MODEL_ESTIMATORS
            + ATTENTION_ESTIMATORS
            + PROMPT_FREE_ESTIMATORS
            + ELICITED_ESTIMATORS
            + RELEVANCE_ESTIMATORS
        ):
            if estimator not in result["scores"]["test"]:
                continue  # the attention estimators, where not recorded
            values = result["scores"]["test"][estimator]
            ood = result["scores"].get("ood", {}).get(estimator)
            label = f"{single_name}: {estimator}"
            metrics["estimators"][label] = _ranking(values, result["quality"]["test"], ood)
            if measure_cost:
                metrics["estimators"][label]["extra_ms_per_token"] = result["costs"][estimator]
            curves[label] = (values, result["quality"]["test"] >= 0.5)
    return GenerationReport(metrics, name=name, answers=ensemble["answers"]["test"], curves=curves)
