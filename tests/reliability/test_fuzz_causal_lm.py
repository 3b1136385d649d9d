"""The causal-LM entry points (`generate`, `score_uncertainty`,
`fit`, `evaluate`, with and without a preprocessor, and the token loss
predictor) reject bad generation arguments, token ids outside the
vocabulary, empty prompts and prompts longer than `max_length` with a
`ValueError` or `TypeError` that names the argument, and the model
generates as before afterwards. Before, out-of-vocabulary ids and stop
tokens were used silently, over-long prompts were truncated, and
`max_length=0` or `-3` generated."""

import numpy as np
import pytest

import ensemble_zoo as ez

PROMPT = "17+25="


@pytest.fixture(scope="module")
def ensemble():
    model = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
    model.compile(sampler="greedy")
    return model, model.generate([PROMPT], max_length=12)


def token_batch(vocabulary_size):
    ids = np.zeros((1, 12), "int32")
    ids[0, :3] = [2, 5, 6]
    mask = np.zeros((1, 12), bool)
    mask[0, :3] = True
    return ids, mask


def generate_cases(vocabulary_size):
    cases = []
    for value in (0, -3, 1, "12", 12.5, True):
        cases.append(
            (f"max_length={value!r}", dict(inputs=[PROMPT], max_length=value), "max_length")
        )
    for value in ("x", [vocabulary_size + 5], [-1], [1.5]):
        cases.append(
            (
                f"stop_token_ids={value!r}",
                dict(inputs=[PROMPT], max_length=12, stop_token_ids=value),
                "stop_token_ids",
            )
        )
    for value in ("yes", 2):
        cases.append(
            (
                f"strip_prompt={value!r}",
                dict(inputs=[PROMPT], max_length=12, strip_prompt=value),
                "strip_prompt",
            )
        )
    cases += [
        (
            "return_uncertainty='yes'",
            dict(inputs=[PROMPT], return_uncertainty="yes"),
            "return_uncertainty",
        ),
        ("no prompt", dict(inputs=[], max_length=12), "inputs"),
        ("a number", dict(inputs=[17], max_length=12), "inputs"),
        ("None", dict(inputs=None, max_length=12), "inputs"),
        ("nested list", dict(inputs=[[PROMPT]], max_length=12), "inputs"),
        ("an id array", dict(inputs=np.zeros((1, 4), "int32"), max_length=12), "inputs"),
        ("over-long prompt", dict(inputs=["1+2=" * 20], max_length=12), "max_length"),
        ("prompt over max_length", dict(inputs=["12345678901="], max_length=12), "max_length"),
        (
            "over-long prompt, uncertainty",
            dict(inputs=["1+2=" * 20], max_length=12, return_uncertainty=True),
            "max_length",
        ),
    ]
    ids, mask = token_batch(vocabulary_size)
    bad_dicts = {
        "out-of-vocabulary id": dict(
            token_ids=np.where(np.arange(12) == 1, vocabulary_size + 3, ids), padding_mask=mask
        ),
        "negative id": dict(token_ids=np.where(np.arange(12) == 1, -2, ids), padding_mask=mask),
        "fractional ids": dict(token_ids=ids + 0.5, padding_mask=mask),
        "mask shape": dict(token_ids=ids, padding_mask=mask[:, :5]),
        "empty prompt": dict(token_ids=ids, padding_mask=np.zeros_like(mask)),
        "no mask": dict(token_ids=ids),
        "1-D": dict(token_ids=ids[0], padding_mask=mask[0]),
    }
    for case, inputs in bad_dicts.items():
        argument = "padding_mask" if case in ("mask shape", "empty prompt") else "token_ids"
        if case == "no mask":
            argument = "inputs"
        cases.append((f"dict: {case}", dict(inputs=inputs, stop_token_ids=None), argument))
    return cases


def _check(call, argument, problems, case):
    try:
        call()
    except (ValueError, TypeError) as e:
        if f"`{argument}`" not in str(e):
            problems.append(f"{case}: message names no `{argument}`: {e}")
    except Exception as e:
        problems.append(f"{case}: {type(e).__name__}: {str(e)[:200]}")
    else:
        problems.append(f"{case}: no error")


def test_fuzz_generate_score_and_loops(ensemble):
    model, expected = ensemble
    vocabulary_size = model.backbone.vocabulary_size
    problems = []
    for case, kwargs, argument in generate_cases(vocabulary_size):
        _check(lambda k=kwargs: model.generate(**k), argument, problems, f"generate {case}")
    ids, mask = token_batch(vocabulary_size)
    oov = np.where(np.arange(12) == 1, vocabulary_size + 3, ids)
    loops = {
        "score_uncertainty oov": (lambda: model.score_uncertainty(oov[:, :3]), "token_ids"),
        "score_uncertainty chunk_size": (
            lambda: model.score_uncertainty(ids[:, :3], chunk_size=0),
            "chunk_size",
        ),
        "fit no prompt": (lambda: model.fit([], verbose=0), "x"),
        "fit oov": (
            lambda: model.fit({"token_ids": oov, "padding_mask": mask}, ids, verbose=0),
            "token_ids",
        ),
        "fit labels oov": (
            lambda: model.fit({"token_ids": ids, "padding_mask": mask}, oov, verbose=0),
            "y",
        ),
        "fit epochs": (lambda: model.fit([PROMPT], epochs=-1, verbose=0), "epochs"),
        "fit batch_size": (lambda: model.fit([PROMPT], batch_size="2", verbose=0), "batch_size"),
        "evaluate sample_weight": (
            lambda: model.evaluate(
                [PROMPT, PROMPT], sample_weight=np.array([1.0, np.nan]), verbose=0
            ),
            "sample_weight",
        ),
        "predict None": (lambda: model.predict(None, verbose=0), "x"),
    }
    for case, (call, argument) in loops.items():
        _check(call, argument, problems, case)
    assert not problems, "\n".join(problems)
    # Still usable: the same greedy answer; an empty prompt (a start token
    # alone) is a valid prompt.
    assert model.generate([PROMPT], max_length=12) == expected
    out = model.generate([""], max_length=12, return_uncertainty=True)
    assert np.all(out["total"] >= 0) and out["generated_mask"].sum() >= 1


def test_fuzz_token_loss_predictor_loops():
    predictor = ez.presets.load_preset("loss_prediction_gemma_tiny_arithmetic")
    vocabulary_size = predictor.backbone.vocabulary_size
    ids, mask = token_batch(vocabulary_size)
    oov = np.where(np.arange(12) == 1, vocabulary_size + 3, ids)
    problems = []
    for case, call, argument in [
        (
            "fit oov",
            lambda: predictor.fit({"token_ids": oov, "padding_mask": mask}, verbose=0),
            "token_ids",
        ),
        ("fit no prompt", lambda: predictor.fit([], verbose=0), "x"),
        (
            "predict oov",
            lambda: predictor.predict({"token_ids": oov, "padding_mask": mask}, verbose=0),
            "token_ids",
        ),
        (
            "predict batch_size",
            lambda: predictor.predict([PROMPT], batch_size=0, verbose=0),
            "batch_size",
        ),
    ]:
        _check(call, argument, problems, case)
    assert not problems, "\n".join(problems)
