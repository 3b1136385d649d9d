"""The metric and loss classes check the values they can see in eager use
(as scikit-learn does for arrays): NaN predictions, fractional and
out-of-range labels, and a 2-D `y_pred` that is not probabilities were
silently turned into numbers before."""

import numpy as np
import pytest

import ensemble_zoo as ez

LOGITS = np.random.default_rng(0).normal(size=(4, 3, 5)).astype("float32")
PROBS = np.full((4, 5), 0.2, "float32")
LABELS = np.array([0, 1, 4, 2])


def metric_classes():
    return [
        ez.metrics.EnsembleAccuracy(),
        ez.metrics.NegativeLogLikelihood(),
        ez.metrics.ExpectedCalibrationError(),
        ez.metrics.BrierScore(),
    ]


@pytest.mark.parametrize(
    "labels, predictions, match",
    [
        (LABELS, np.where(np.arange(60).reshape(4, 3, 5) == 7, np.nan, LOGITS), "NaN"),
        (LABELS + 0.5, LOGITS, "integer class labels; got 0.5"),
        (np.array([0, 1, 5, 2]), LOGITS, r"\[0, 5\).*got 5"),
        (np.array([0, -1, 4, 2]), LOGITS, r"\[0, 5\).*got -1"),
    ],
    ids=["nan", "fractional", "too_large", "negative"],
)
def test_metric_classes_and_the_loss_reject_bad_values(labels, predictions, match):
    for metric in metric_classes():
        with pytest.raises(ValueError, match=match):
            metric.update_state(labels, predictions)
    with pytest.raises(ValueError, match=match):
        ez.losses.EnsembleSparseCategoricalCrossentropy()(labels, predictions)


def test_two_d_logits_are_not_read_as_probabilities():
    logits = LOGITS[:, 0]
    for metric in (
        ez.metrics.NegativeLogLikelihood(),
        ez.metrics.BrierScore(),
        ez.metrics.ExpectedCalibrationError(),
    ):
        with pytest.raises(ValueError, match="from_logits=True"):
            metric.update_state(LABELS, logits)
    # Probabilities and from_logits=True are accepted, and exact.
    metric = ez.metrics.NegativeLogLikelihood()
    metric.update_state(LABELS, PROBS)
    assert float(metric.result()) == pytest.approx(np.log(5), rel=1e-6)
    metric = ez.metrics.NegativeLogLikelihood(from_logits=True)
    metric.update_state(LABELS, logits)
    z = logits - logits.max(-1, keepdims=True)
    expected = -np.mean((z - np.log(np.exp(z).sum(-1, keepdims=True)))[np.arange(4), LABELS])
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)


def test_ignore_class_is_allowed_and_empty_ranking_batches_are_refused():
    loss = ez.losses.EnsembleSparseCategoricalCrossentropy(ignore_class=-1)
    value = float(loss(np.array([0, -1, 4, 2]), LOGITS))
    assert np.isfinite(value)
    with pytest.raises(ValueError, match="empty"):
        ez.losses.pairwise_ranking_loss(np.zeros((0,), "float32"), np.zeros((0,), "float32"))


def _with(array, index, value, dtype=None):
    array = np.array(array, dtype=dtype or array.dtype)
    array[index] = value
    return array


BAD_Y_TRUE = {
    "fractional": LABELS + 0.5,
    "too_large": _with(LABELS, 2, 5),
    "negative": _with(LABELS, 1, -1),
    "nan": _with(LABELS, 0, np.nan, "float64"),
    "string": LABELS.astype(str),
    "complex": LABELS.astype(np.complex64),
    "short": LABELS[:-1],
    "empty": LABELS[:0],
    "none": None,
}
BAD_Y_PRED = {
    "nan": _with(LOGITS, (0, 0, 0), np.nan),
    "inf": _with(LOGITS, (0, 0, 0), np.inf),
    "string": np.full(LOGITS.shape, "a"),
    "complex": LOGITS.astype(np.complex64),
    "rank_1": LOGITS[0, 0],
    "rank_4": LOGITS[None],
    "zero_classes": LOGITS[..., :0],
    "zero_members": LOGITS[:, :0],
    "empty": LOGITS[:0],
    "none": None,
}


def test_fuzz_metric_and_loss_classes():
    """Every metric class and the loss, in eager use, with one bad argument
    at a time: a `ValueError` or `TypeError` naming `y_true` / `y_pred` (or
    a shape error), never a number (strings and complex labels were cast
    to numbers by Keras' `Loss.__call__`; no members gave NaN)."""
    makers = metric_classes() + [ez.losses.EnsembleSparseCategoricalCrossentropy()]
    problems = []
    for obj in makers:
        for argument, table in (("y_true", BAD_Y_TRUE), ("y_pred", BAD_Y_PRED)):
            for case, bad in table.items():
                y_true, y_pred = (bad, LOGITS) if argument == "y_true" else (LABELS, bad)
                fresh = type(obj)()
                try:
                    if isinstance(fresh, ez.losses.EnsembleSparseCategoricalCrossentropy):
                        fresh(y_true, y_pred)
                    else:
                        fresh.update_state(y_true, y_pred)
                except (ValueError, TypeError) as e:
                    if f"`{argument}`" not in str(e) and "batch" not in str(e):
                        problems.append(f"{type(obj).__name__} {argument}={case}: {e}")
                except Exception as e:
                    problems.append(
                        f"{type(obj).__name__} {argument}={case}: {type(e).__name__}: {e}"
                    )
                else:
                    problems.append(f"{type(obj).__name__} {argument}={case}: no error")
    assert not problems, "\n".join(problems)
