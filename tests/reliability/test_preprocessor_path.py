"""Issue 33: a shipped preset given raw images through `predict`,
`evaluate` and `fit` (its preprocessor path) checks labels, images and
arguments before anything is compiled, and stays usable after the error."""

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
    [(lambda y: y * 0 + 8, r"\[0, 7\].*got 8"), (lambda y: y + 0.5, "fractional"),
     (lambda y: y * 0 - 1, "got -1")],
    ids=["num_classes", "fractional", "negative"],
)
def test_evaluate_and_fit_reject_bad_labels_and_stay_usable(preset, labels, match):
    model, raw, y = preset
    for method in (model.evaluate, model.fit):
        with pytest.raises(ValueError, match=match):
            method(raw, labels(y), verbose=0)
    probs = model.predict_uncertainty(raw)["probabilities"]  # still usable
    assert ez.metrics.accuracy(probs, y) > 0.8


@pytest.mark.parametrize(
    "images, error, match",
    [
        (lambda x: np.where(np.arange(x.size).reshape(x.shape) == 5, np.nan, x), ValueError, "NaN"),
        (lambda x: np.repeat(x, 3, axis=-1), ValueError, "1 channel"),
        (lambda x: x[:0], ValueError, "non-empty"),
        (lambda x: x[..., 0], ValueError, r"\(batch, height, width, 1\)"),
    ],
    ids=["nan", "channels", "empty", "rank"],
)
def test_predict_rejects_bad_raw_images_and_stays_usable(preset, images, error, match):
    model, raw, y = preset
    with pytest.raises(error, match=match):
        model.predict(images(raw.astype("float32")), verbose=0)
    probs = model.predict_uncertainty(raw)["probabilities"]
    assert ez.metrics.accuracy(probs, y) > 0.8


def test_bad_arguments_are_named(preset):
    model, raw, y = preset
    with pytest.raises(TypeError, match="batch_size"):
        model.predict_uncertainty(raw, batch_size="8")
    with pytest.raises(TypeError, match="batch_size"):
        model.evaluate(raw, y, batch_size=0, verbose=0)
    with pytest.raises(TypeError, match="load_weights"):
        ez.models.EnsembleClassifier.from_preset("vit_tiny_digits", load_weights="no")
