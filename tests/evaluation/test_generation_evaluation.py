"""`evaluate_generation` against the pieces it is made of, computed here
independently: keras-hub's greedy answers, scikit-learn's AUROC and the
exact ranking metrics on the same scores."""

import json

import keras
import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.metrics import roc_auc_score
from zoo_testing import keras_hub_attention

import ensemble_zoo as ez
from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.evaluation.generation_evaluation import COCOA_ESTIMATORS
from ensemble_zoo.evaluation.generation_evaluation import GREEDY_NLI_ESTIMATORS
from ensemble_zoo.evaluation.generation_evaluation import NLI_ESTIMATORS
from ensemble_zoo.evaluation.generation_evaluation import SAMPLING_ESTIMATORS

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax",
    reason="once: the harness is NumPy over the decode engine, tested on every backend",
)


def checker(text, answer):
    return arithmetic.parse_answer(text) == answer


def nli(first, second):
    """A toy NLI model: entailment between answers with the same number."""
    same = arithmetic.parse_answer(first) == arithmetic.parse_answer(second)
    return (0.9, 0.05, 0.05) if same else (0.05, 0.15, 0.8)


@pytest.fixture(scope="module")
def evaluated():
    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    questions, answers = arithmetic.load_questions("test")
    ood, _ = arithmetic.load_questions("ood")
    data = questions[:60], answers[:60], ood[:20]
    report = ez.evaluation.evaluate_generation(
        model,
        data[0],
        data[1],
        checker=checker,
        ood_prompts=data[2],
        num_samples=3,
        max_length=12,
        progress=False,
        name="tiny",
        nli=nli,
    )
    return model, data, report


def test_rankings_equal_the_exact_metrics_on_independently_computed_scores(evaluated):
    model, (questions, answers, ood), report = evaluated
    model.compile(sampler="greedy")
    out = model.generate(questions, max_length=12, return_uncertainty=True)
    correct = np.array([checker(t, a) for t, a in zip(out["output"], answers)])
    assert report.metrics["accuracy"] == correct.mean()
    assert 0 < correct.sum() < correct.size
    scores = ez.metrics.sequence_uncertainty(out)
    ood_scores = ez.metrics.sequence_uncertainty(
        model.generate(ood, max_length=12, return_uncertainty=True)
    )
    probs = np.where(correct[:, None], [[0.9, 0.1]], [[0.1, 0.9]])
    for name in ("perplexity", "pe_mutual_information", "ep_mc_total"):
        row = report.metrics["estimators"][name]
        assert row["wrong_answer_auroc"] == pytest.approx(
            roc_auc_score(~correct, scores[name]), abs=1e-9
        )
        assert row["prr"] == pytest.approx(
            ez.metrics.prediction_rejection_ratio(scores[name], correct), abs=1e-9
        )
        assert row["aurc"] == pytest.approx(
            ez.metrics.aurc(probs, np.zeros(len(correct), int), confidence=-scores[name]), abs=1e-9
        )
        labels = np.r_[np.zeros(len(questions)), np.ones(len(ood))]
        assert row["ood_auroc"] == pytest.approx(
            roc_auc_score(labels, np.r_[scores[name], ood_scores[name]]), abs=1e-9
        )
    for name in (
        SAMPLING_ESTIMATORS + NLI_ESTIMATORS + tuple(COCOA_ESTIMATORS) + GREEDY_NLI_ESTIMATORS
    ):
        assert set(report.metrics["estimators"][name]) == {
            "wrong_answer_auroc",
            "prr",
            "aurc",
            "ood_auroc",
            "extra_ms_per_token",
        }
    # The frozen base model on its own answers (keras-hub's own generate).
    base = model.base_causal_lm()
    base.compile(sampler="greedy")
    base_correct = [checker(t, a) for t, a in zip(base.generate(questions, max_length=12), answers)]
    assert report.metrics["single_models"]["base_model"]["accuracy"] == np.mean(base_correct)
    assert "base_model: perplexity" in report.metrics["estimators"]


def test_report_prints_and_saves_table_json_and_plot(evaluated, tmp_path):
    _, _, report = evaluated
    printed = str(report)
    assert printed.startswith("tiny: accuracy ") and "wrong-answer AUROC" in printed
    paths = report.save(tmp_path)
    assert [p.split("/")[-1] for p in paths] == [
        "report.json",
        "report.md",
        "accuracy_rejection.png",
    ]
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["metrics"]["estimators"] == json.loads(json.dumps(report.metrics["estimators"]))
    markdown = (tmp_path / "report.md").read_text()
    assert "| estimator | wrong-answer AUROC | PRR | AURC | OOD AUROC | extra ms / token |" in (
        markdown
    )
    best = report.rows()[0]
    assert best[1] == max(r[1] for r in report.rows() if r[1] is not None)


def test_each_estimator_costs_the_work_it_reads(evaluated):
    """The cost column (`estimator_cost`): over keras-hub's plain greedy
    decode, every ensemble estimator costs the ensemble's decode with its
    figures; the sampling-based ones and CoCoA add the draws, semantic
    density its NLI calls, CCP its alternatives' pass."""
    from ensemble_zoo.evaluation.estimator_cost import estimator_costs

    _, _, report = evaluated
    costs = {k: row["extra_ms_per_token"] for k, row in report.metrics["estimators"].items()}
    assert report.metrics["plain_ms_per_token"] > 0
    figures, draws = costs["perplexity"], costs["semantic_entropy"]
    assert {costs[k] for k in ("pe_mutual_information", "mean_token_entropy")} == {figures}
    names = SAMPLING_ESTIMATORS + NLI_ESTIMATORS + tuple(COCOA_ESTIMATORS)
    assert {costs[k] for k in names} == {draws} and draws > figures
    assert costs["semantic_density"] >= draws
    assert costs["claim_conditioned_probability"] > figures
    assert costs["pointwise_mutual_information"] > figures
    times = {"plain": 1.0, "figures": 1.5, "sampling": 4.0, "greedy_nli": 0.5}
    times.update(alternatives=2.0, prompt_free=1.0, eliciting=3.0, relevance=0.5)
    assert estimator_costs(
        times,
        100,
        ["a", "b", "c", "d", "e", "f", "g"],
        sampling=("b",),
        greedy_nli=("c",),
        alternatives=("d",),
        prompt_free=("e",),
        eliciting=("f",),
        relevance=("g",),
    ) == pytest.approx({"a": 5.0, "b": 45.0, "c": 50.0, "d": 25.0, "e": 15.0, "f": 35.0, "g": 10.0})


def test_pointwise_mutual_information_scores_the_answers_without_their_prompt(evaluated):
    """The prompt-free log-likelihoods equal each member's merged keras-hub
    model on the start token followed by the answer, and the ensemble's
    their mean probability; the PMI estimators are lm-polygraph's on them."""
    model, (questions, _, _), report = evaluated
    model.compile(sampler="greedy")
    out = model.generate(questions[:6], max_length=12, return_uncertainty=True)
    free = ez.evaluation.prompt_free_log_probs(model, out)
    mask = out["generated_mask"]
    start = model.preprocessor.tokenizer.start_token_id
    reference = np.zeros((model.num_members,) + mask.shape)
    for m in range(model.num_members):
        member = model.member_causal_lm(m)
        for row in range(len(mask)):
            ids = np.r_[start, out["token_ids"][row, mask[row]]][None].astype("int32")
            logits = member({"token_ids": ids, "padding_mask": np.ones_like(ids, bool)})
            logits = np.asarray(keras.ops.convert_to_numpy(logits), np.float64)[0, :-1]
            log_p = log_softmax(logits, axis=-1)
            reference[m, row, mask[row]] = log_p[np.arange(len(ids[0]) - 1), ids[0, 1:]]
    np.testing.assert_allclose(
        free["member_prompt_free_log_probs"], np.moveaxis(reference, 0, 1), atol=2e-4
    )
    ensemble = np.log(np.exp(reference).mean(axis=0))
    np.testing.assert_allclose(free["prompt_free_log_prob"], ensemble, atol=2e-4)
    scores = ez.metrics.sequence_uncertainty({**out, **free})
    np.testing.assert_allclose(
        scores["pointwise_mutual_information"],
        ez.metrics.pointwise_mutual_information(out["log_prob"], ensemble, mask),
        atol=1e-4,
    )
    np.testing.assert_allclose(
        scores["conditional_pointwise_mutual_information"],
        ez.metrics.conditional_pointwise_mutual_information(
            out["log_prob"], ensemble, out["total"], mask
        ),
        atol=1e-3,
    )
    for name in ("pointwise_mutual_information", "base_model: rauq_entropy"):
        assert "wrong_answer_auroc" in report.metrics["estimators"][name]
    with pytest.raises(ValueError, match="generated_mask"):
        ez.evaluation.prompt_free_log_probs(model, {"token_ids": out["token_ids"]})
    with pytest.raises(ValueError, match="both"):
        ez.metrics.sequence_uncertainty(
            {**out, "prompt_free_log_prob": free["prompt_free_log_prob"]}
        )


def test_batches_of_prompts_give_the_same_report(evaluated):
    model, (questions, answers, ood), report = evaluated
    batched = ez.evaluation.evaluate_generation(
        model,
        questions,
        answers,
        checker=checker,
        ood_prompts=ood,
        num_samples=0,
        max_length=12,
        progress=False,
        batch_size=25,
        single_models=None,
        measure_cost=False,
    )
    for name, row in batched.metrics["estimators"].items():
        for measure, value in row.items():
            assert value == pytest.approx(report.metrics["estimators"][name][measure], abs=1e-6)
    assert batched.answers == report.answers


def test_bad_input_names_the_argument(evaluated):
    model, (questions, answers, _), _ = evaluated
    evaluate = ez.evaluation.evaluate_generation
    with pytest.raises(TypeError, match="prompts"):
        evaluate(model, "12+7=", ["19"])
    with pytest.raises(ValueError, match="one reference per prompt"):
        evaluate(model, questions[:3], answers[:2], single_models=None, num_samples=0)
    with pytest.raises(ValueError, match=r"quality in \[0, 1\]"):
        evaluate(
            model,
            questions[:3],
            answers[:3],
            checker=lambda a, r: 2.0,
            single_models=None,
            num_samples=0,
            max_length=12,
        )
    with pytest.raises(ValueError, match="num_samples"):
        evaluate(model, questions[:3], answers[:3], num_samples=1)
    with pytest.raises(TypeError, match="LoRAEnsembleCausalLM"):
        evaluate(model.base_causal_lm(), questions[:3], answers[:3])
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, questions[:3], answers[:3], batch_size=0)
    with pytest.raises(TypeError, match="single_models"):
        evaluate(model, questions[:3], answers[:3], single_models=["base"])


def test_claim_conditioned_probability_reads_each_tokens_top_alternatives(evaluated):
    """CCP of the greedy answers (`greedy_alternatives`): at each generated
    token, the token and the 9 most probable others under the members'
    mean probability, read here from the member logits in NumPy, their
    words decoded alone and stripped as lm-polygraph strips them, classed
    by the NLI model both ways; the report ranks that score."""
    import string

    from ensemble_zoo.evaluation.greedy_alternatives import ccp_of_answers

    model, (questions, answers, _), report = evaluated
    model.compile(sampler="greedy")
    out = model.generate(questions, max_length=12, return_uncertainty=True)
    ids, mask = out["token_ids"], out["generated_mask"]
    logits = keras.ops.convert_to_numpy(
        model({"token_ids": ids, "padding_mask": out["padding_mask"]})
    )
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).mean(1)  # (batch, length, vocabulary)
    tokenizer = model.preprocessor.tokenizer

    def word(token):
        text = keras.ops.convert_to_numpy(tokenizer.detokenize([int(token)])).item()
        text = text.decode() if isinstance(text, bytes) else str(text)
        return text.strip(string.punctuation + " \n")

    log_p = np.full(mask.shape + (10,), -np.inf)
    forward = np.zeros(mask.shape + (10,), int)
    backward = np.zeros(mask.shape + (10,), int)
    for b, t in zip(*np.nonzero(mask)):
        dist = p[b, t - 1]
        others = [int(i) for i in np.argsort(-dist, kind="stable") if i != ids[b, t]][:9]
        chosen = [int(ids[b, t])] + others
        log_p[b, t] = np.log(dist[chosen])
        for a in range(1, 10):
            w0, wa = word(chosen[0]), word(chosen[a])
            forward[b, t, a] = np.argmax(nli(w0, wa))
            backward[b, t, a] = np.argmax(nli(wa, w0))
    expected = ez.metrics.claim_conditioned_probability(log_p, forward, backward, mask)
    np.testing.assert_allclose(ccp_of_answers(model, out, nli), expected, atol=1e-6)
    correct = np.array([checker(t, a) for t, a in zip(out["output"], answers)])
    row = report.metrics["estimators"]["claim_conditioned_probability"]
    assert row["wrong_answer_auroc"] == pytest.approx(roc_auc_score(~correct, expected), abs=1e-9)


def test_semantic_density_asks_nli_about_the_prompt_and_distinct_samples():
    """The greedy answer's semantic density: NLI on prompt + greedy answer
    against prompt + each distinct sample (lm-polygraph's default pairs),
    weighed as the formula in NumPy."""
    from ensemble_zoo.evaluation.greedy_answer_scores import semantic_density_scores

    calls = []

    def nli(first, second):
        calls.append((first, second))
        return (0.2, 0.3, 0.5) if second.endswith("7") else (0.9, 0.1, 0.0)

    greedy = {
        "log_prob": np.array([[-0.1, -0.3, 0.0]]),
        "generated_mask": np.array([[1, 1, 0]], bool),
    }
    sampled = {
        "answers": [["7", "5", "7"]],
        "log_likelihoods": np.array([[-0.5, -1.0, -0.5]]),
        "generated_mask": np.array([[[1, 0], [1, 1], [1, 0]]], bool),
    }
    ours = semantic_density_scores(["2+5="], ["7"], greedy, sampled, nli)
    assert calls == [("2+5=7", "2+5=7"), ("2+5=7", "2+5=5")]
    q = np.exp([-0.5, -1.0 / 2])  # distinct samples: length-normalised probabilities
    k = np.array([1 - 0.5 - 0.3 / 2, 1 - 0.0 - 0.1 / 2])
    g = np.exp((-0.1 - 0.3) / 2)
    np.testing.assert_allclose(ours, [-(q @ k + g) / (q.sum() + g)])


def test_csl_reads_the_eliciting_prompts_last_token_attention(evaluated, monkeypatch):
    """The eliciting prompt's last token's weights on the answer equal the
    softmax of keras-hub's own attention layers in each member's merged
    model, over the start token, the template, the answer and the suffix;
    CSL is lm-polygraph's on them (the ensemble's: the members' mean)."""
    from ensemble_zoo.evaluation import eliciting_prompt
    from ensemble_zoo.evaluation.eliciting_prompt import CSL_SUFFIX
    from ensemble_zoo.evaluation.eliciting_prompt import CSL_TEMPLATE

    model, (questions, _, _), report = evaluated
    model.compile(sampler="greedy")
    prompts = questions[:3]
    out = model.generate(prompts, max_length=12, return_uncertainty=True)
    # Two sequences a pass: two passes, the second with a filler row.
    monkeypatch.setattr(eliciting_prompt, "ROWS_PER_PASS", 2)
    got = ez.evaluation.eliciting_attention(model, prompts, out)["member_eliciting_attention"]
    monkeypatch.undo()
    mask = out["generated_mask"]
    tokenizer = model.preprocessor.tokenizer

    def tokens(text):
        return list(np.ravel(keras.ops.convert_to_numpy(tokenizer(text))))

    expected = np.zeros(got.shape)
    for m in range(model.num_members):
        member = model.member_causal_lm(m)
        for row, prompt in enumerate(prompts):
            before = [tokenizer.start_token_id] + tokens(CSL_TEMPLATE.format(q=prompt))
            answer = list(out["token_ids"][row, mask[row]])
            ids = np.array([before + answer + tokens(CSL_SUFFIX)], "int32")
            weights = keras_hub_attention(member, ids, monkeypatch)[0, :, :, -1]  # last query
            weights = weights.reshape(-1, ids.shape[1])[:, len(before) : len(before) + len(answer)]
            expected[row, m][:, mask[row]] = weights
    np.testing.assert_allclose(got, expected, atol=2e-5)
    scores = ez.metrics.sequence_uncertainty({**out, "member_eliciting_attention": got})
    np.testing.assert_allclose(
        scores["contextualized_sequence_likelihood"],
        ez.metrics.contextualized_sequence_likelihood(out["log_prob"], expected.mean(1), mask),
        rtol=1e-4,
    )
    assert (
        "wrong_answer_auroc" in report.metrics["estimators"]["contextualized_sequence_likelihood"]
    )
    with pytest.raises(ValueError, match="template"):
        ez.evaluation.eliciting_attention(model, prompts, out, template="no question")
    with pytest.raises(ValueError, match="other braces"):
        ez.evaluation.eliciting_attention(model, prompts, out, template="{q} {a}")
    with pytest.raises(ValueError, match="one string per row"):
        ez.evaluation.eliciting_attention(model, prompts[:2], out)


def test_token_sar_weighs_each_token_by_its_rouge_relevance(evaluated):
    """TokenSAR of the greedy answers: each token's relevance is one minus
    the ROUGE-L of the answer without it against the whole answer."""
    from ensemble_zoo.evaluation.greedy_answer_scores import relevance_scores

    model, (questions, _, _), report = evaluated
    model.compile(sampler="greedy")
    out = model.generate(questions[:8], max_length=12, return_uncertainty=True)
    tokenizer = model.preprocessor.tokenizer
    mask = out["generated_mask"]
    similarity = np.zeros(mask.shape)
    for row in range(len(mask)):
        tokens = [int(t) for t in out["token_ids"][row, mask[row]]]
        kept = [t for t in tokens if t != tokenizer.end_token_id]
        whole = str(tokenizer.detokenize(kept))
        for k, position in enumerate(np.flatnonzero(mask[row])):
            if tokens[k] == tokenizer.end_token_id:
                similarity[row, position] = 1.0
                continue
            variant = [t for j, t in enumerate(tokens) if j != k and t != tokenizer.end_token_id]
            similarity[row, position] = ez.metrics.rouge_l(
                str(tokenizer.detokenize(variant)), whole
            )
    np.testing.assert_allclose(
        relevance_scores(model, out)["token_sar"],
        ez.metrics.token_sar(out["log_prob"], similarity, mask),
        rtol=1e-6,
    )
    assert "wrong_answer_auroc" in report.metrics["estimators"]["token_sar"]


def test_eigenscore_embeds_each_sample_where_keras_hub_enters_the_middle_block(evaluated):
    """`answer_embeddings`: the members' mean input of block `L // 2` of
    their merged keras-hub models, at the position before each answer's
    last token; `sample_uncertainty`'s `eigenscore` is lm-polygraph's on
    them."""
    from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import answer_embeddings

    model, (questions, _, _), report = evaluated
    model.compile(sampler="greedy")
    out = model.generate(questions[:4], max_length=12, return_uncertainty=True)
    got = answer_embeddings(model, out)
    expected = 0.0
    for m in range(model.num_members):
        backbone = model.member_causal_lm(m).backbone
        block = backbone.transformer_layers[len(backbone.transformer_layers) // 2]
        middle = keras.Model(backbone.input, block.input[0])
        hidden = keras.ops.convert_to_numpy(
            middle({"token_ids": out["token_ids"], "padding_mask": out["padding_mask"]})
        )
        expected = expected + np.asarray(hidden, np.float64) / model.num_members
    last = out["padding_mask"].sum(axis=1) - 2  # right-padded rows
    np.testing.assert_allclose(got, expected[np.arange(len(last)), last], atol=1e-4)
    assert "wrong_answer_auroc" in report.metrics["estimators"]["eigenscore"]
