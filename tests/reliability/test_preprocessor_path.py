"""A shipped preset given raw images through `predict`, `evaluate` and `fit`
(its preprocessor path) checks labels, images and arguments before anything
is compiled, and stays usable after the error.

The fuzz tests cross every loop entry point with bad images, bad labels
and bad arguments, for the three kinds of loops the image tasks have
(`EnsembleClassifier`'s, `LossPredictionImageClassifier`'s and MIMO's own
`fit`), with and without a preprocessor: each bad call must raise a
`ValueError` or `TypeError` that names the argument, and the model must
predict as before afterwards (under JAX a compiled step that raised left
it unusable).
"""

import warnings

import keras
import numpy as np
import pytest

import ensemble_zoo as ez


@pytest.fixture(scope="module")
def preset():
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    raw, y = ez.datasets.load_arrays("digits", "test", raw=True)
    return model, raw[:16], y[:16]


@pytest.mark.parametrize(
    "labels, match",
    [
        (lambda y: y * 0 + 8, r"\[0, 7\].*got 8"),
        (lambda y: y + 0.5, "fractional"),
        (lambda y: y * 0 - 1, "got -1"),
    ],
    ids=["num_classes", "fractional", "negative"],
)
def test_evaluate_and_fit_reject_bad_labels_and_stay_usable(preset, labels, match):
    model, raw, y = preset
    for method in (model.evaluate, model.fit):
        with pytest.raises(ValueError, match=match):
            method(raw, labels(y), verbose=0)
    probs = model.predict_uncertainty(raw)["probabilities"]  # still usable
    assert ez.metrics.accuracy(probs, y) > 0.8


def test_bad_arguments_are_named(preset):
    model, raw, y = preset
    with pytest.raises(TypeError, match="batch_size"):
        model.predict_uncertainty(raw, batch_size="8")
    with pytest.raises(TypeError, match="batch_size"):
        model.evaluate(raw, y, batch_size=0, verbose=0)
    with pytest.raises(TypeError, match="load_weights"):
        ez.models.EnsembleClassifier.from_preset("vit_tiny_digits", load_weights="no")


def _mark(x, value):
    x = np.array(x, "float32")
    x.reshape(-1)[5] = value
    return x


def bad_images(x):
    return {
        "nan": _mark(x, np.nan),
        "inf": _mark(x, np.inf),
        "three_channels": np.repeat(x, 3, axis=-1),
        "empty": x[:0],
        "rank_3": x[..., 0],
        "rank_5": x[None],
        "string": x.astype(str),
        "complex": x.astype(np.complex64),
        "bool": x > 0.5,
        "none": None,
    }


def bad_labels(y):
    return {
        "num_classes": y * 0 + 8,
        "fractional": y + 0.5,
        "negative": y * 0 - 1,
        "nan": np.where(np.arange(len(y)) == 2, np.nan, y),
        "short": y[:-1],
        "two_columns": np.stack([y, y], 1),
        "one_hot": np.eye(8)[y],
        "string": y.astype(str),
    }


IMAGE_ENTRIES = {
    "predict": lambda m, x, y: m.predict(x, verbose=0),
    "predict_uncertainty": lambda m, x, y: m.predict_uncertainty(x),
    "predict_on_batch": lambda m, x, y: m.predict_on_batch(x),
    "evaluate": lambda m, x, y: m.evaluate(x, y, verbose=0),
    "fit": lambda m, x, y: m.fit(x, y, epochs=1, verbose=0),
    "test_on_batch": lambda m, x, y: m.test_on_batch(x, y),
    "train_on_batch": lambda m, x, y: m.train_on_batch(x, y),
}
LABEL_ENTRIES = ("evaluate", "fit", "test_on_batch", "train_on_batch")


def argument_cases(x, y):
    """(id, call, argument) for bad loop arguments."""
    cases = []
    for value in ("8", 0, 2.5, -1, True):
        cases += [
            (
                f"predict-batch_size-{value!r}",
                lambda m, v=value: m.predict(x, batch_size=v, verbose=0),
                "batch_size",
            ),
            (
                f"fit-batch_size-{value!r}",
                lambda m, v=value: m.fit(x, y, batch_size=v, verbose=0),
                "batch_size",
            ),
        ]
    for value in ("1", -1, 1.5):
        cases.append(
            (f"fit-epochs-{value!r}", lambda m, v=value: m.fit(x, y, epochs=v, verbose=0), "epochs")
        )
    weights = {
        "nan": np.where(np.arange(len(y)) == 1, np.nan, 1.0),
        "negative": -np.ones(len(y)),
        "short": np.ones(len(y) - 1),
    }
    for name, w in weights.items():
        cases += [
            (
                f"fit-sample_weight-{name}",
                lambda m, w=w: m.fit(x, y, sample_weight=w, verbose=0),
                "sample_weight",
            ),
            (
                f"evaluate-sample_weight-{name}",
                lambda m, w=w: m.evaluate(x, y, sample_weight=w, verbose=0),
                "sample_weight",
            ),
        ]
    cases.append(("evaluate-x_y_lengths", lambda m: m.evaluate(x, y[:8], verbose=0), "y"))
    return cases


def _fuzz(model, x, y):
    """Every bad call; returns the calls that did not raise a clear error
    (a `ValueError` / `TypeError` naming the argument)."""
    calls = []
    for case, images in bad_images(x).items():
        labels = y if images is None or len(images) == len(y) else y[: len(images)]
        for entry, call in IMAGE_ENTRIES.items():
            calls.append(
                (f"{entry}-x-{case}", lambda m, c=call, i=images, l=labels: c(m, i, l), "x")
            )
    for case, labels in bad_labels(y).items():
        for entry in LABEL_ENTRIES:
            calls.append(
                (f"{entry}-y-{case}", lambda m, c=IMAGE_ENTRIES[entry], l=labels: c(m, x, l), "y")
            )
    calls += argument_cases(x, y)
    problems = []
    for case, call, argument in calls:
        try:
            call(model)
        except (ValueError, TypeError) as e:
            # Shape errors of the plain path name what the model expects.
            if f"`{argument}`" not in str(e) and "expects" not in str(e):
                problems.append(f"{case}: message names no `{argument}`: {e}")
        except Exception as e:  # an obscure error
            problems.append(f"{case}: {type(e).__name__}: {str(e)[:200]}")
        else:
            problems.append(f"{case}: no error")
    return problems


@pytest.mark.parametrize(
    "name, plain",
    [
        ("vit_tiny_digits", False),
        ("vit_tiny_digits", True),
        ("loss_prediction_vit_tiny_digits", False),
        ("mimo_vit_tiny_digits", False),
    ],
    ids=["ensemble", "ensemble-no_preprocessor", "loss_prediction", "mimo"],
)
def test_fuzz_task_loops(name, plain):
    model = ez.presets.load_preset(name, **({"preprocessor": None} if plain else {}))
    raw, y = ez.datasets.load_arrays("digits", "test", raw=True)
    x, y = raw[:16].astype("float32") / (16.0 if plain else 1.0), y[:16]
    before = model.predict(x, verbose=0)
    problems = _fuzz(model, x, y)
    assert not problems, "\n".join(problems)
    after = model.predict(x, verbose=0)  # still usable, unchanged
    for a, b in zip(keras.tree.flatten(after), keras.tree.flatten(before)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_wrong_channels_after_a_retrace_and_no_layout_warning(preset):
    """Under TensorFlow, after a retrace (new batch sizes and image sizes),
    raw (4, 8, 8, 3) images went through `predict` without an error;
    `load_preset(name, preprocessor=None)` warned that every shipped preset
    was in the old layout."""
    model, raw, y = preset
    for images in (raw[:5], raw[:7], np.repeat(np.repeat(raw[:3], 2, 1), 2, 2)):
        model.predict(images, verbose=0)
    with pytest.raises(ValueError, match="1 channel"):
        model.predict(np.repeat(raw[:4], 3, axis=-1), verbose=0)
    probs = model.predict_uncertainty(raw)["probabilities"]
    assert ez.metrics.accuracy(probs, y) > 0.8
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = ez.presets.load_preset("vit_tiny_digits", preprocessor=None)
    assert plain.preprocessor is None
    assert not [w for w in caught if "layout" in str(w.message)]


def test_fuzz_text_task_loops():
    """A text task, with a BERT preprocessor (raw strings) and without
    (token dicts): numbers or an empty list for texts failed in the
    tokenizer's pipeline ("in user code"); out-of-range token and segment
    ids were gathered silently (NaN for a segment id) and an empty batch
    left the JAX model unusable."""
    import keras_hub
    import zoo_testing

    vocabulary = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "the",
        "quick",
        "brown",
        "fox",
        ".",
        "slow",
    ]
    bert = zoo_testing.tiny_bert(vocabulary_size=len(vocabulary))
    model = ez.models.LoRAEnsembleTextClassifier.from_keras_hub(bert, num_members=2, rank=2, seed=0)
    texts, y = ["the quick brown fox.", "the slow brown fox."], np.array([0, 2])
    ids = zoo_testing.text_inputs(4, length=6, vocabulary_size=len(vocabulary))
    before = model.predict(ids, verbose=0)

    def replaced(name, value):
        return {**ids, name: value}

    plain_cases = [
        ("token_ids", replaced("token_ids", ids["token_ids"] + 100)),
        ("token_ids", replaced("token_ids", ids["token_ids"] * 0 - 1)),
        ("token_ids", replaced("token_ids", ids["token_ids"].astype("float32") + 0.5)),
        ("segment_ids", replaced("segment_ids", ids["segment_ids"] + 5)),
        ("padding_mask", replaced("padding_mask", ids["padding_mask"] * 3)),
        ("token_ids", {k: v[:0] for k, v in ids.items()}),
    ]
    problems = []
    for argument, inputs in plain_cases:
        try:
            model.predict(inputs, verbose=0)
            problems.append(f"plain {argument}: no error")
        except (ValueError, TypeError) as e:
            if f"`{argument}`" not in str(e):
                problems.append(f"plain {argument}: {e}")
    model.preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub.models.BertTokenizer(vocabulary=vocabulary), sequence_length=6
    )
    raw_cases = [
        ("x", lambda: model.predict(np.array([1.0, 2.0]), verbose=0)),
        ("x", lambda: model.predict([], verbose=0)),
        ("x", lambda: model.predict([1, 2], verbose=0)),
        ("y", lambda: model.evaluate(texts, np.array([0, 3]), verbose=0)),
        ("y", lambda: model.fit(texts, np.array([0, 1.5]), verbose=0)),
        ("y", lambda: model.evaluate(texts, np.array([0, 1, 2]), verbose=0)),
    ]
    for argument, call in raw_cases:
        try:
            call()
            problems.append(f"raw {argument}: no error")
        except (ValueError, TypeError) as e:
            if f"`{argument}`" not in str(e):
                problems.append(f"raw {argument}: {e}")
    assert not problems, "\n".join(problems)
    model.preprocessor = None
    np.testing.assert_allclose(model.predict(ids, verbose=0), before, atol=1e-6)
