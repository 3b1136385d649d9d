"""Fuzz sweep of the public functions: every bad input is a `ValueError` or
`TypeError` whose message names the argument, never a number and never a
backend traceback.

Each case corrupts one argument of an otherwise valid call. The table is
built from a few generators of bad values (bad probabilities, bad labels,
bad scores, ...) crossed with every function that takes that kind of
argument, so a new public function joins the sweep with one line.
"""

import numpy as np
import pytest

import ensemble_zoo as ez

RNG = np.random.default_rng(0)
N, M, C = 6, 4, 3
LOGITS = RNG.normal(size=(N, M, C)).astype("float32")
PROBS = np.exp(LOGITS[:, 0]) / np.exp(LOGITS[:, 0]).sum(-1, keepdims=True)
MEMBER_PROBS = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
LABELS = np.array([0, 1, 2, 0, 1, 2])
SCORES = RNG.normal(size=N)
EMBEDDINGS = RNG.normal(size=(N, 5))


def _with(array, index, value, dtype=None):
    array = np.array(array, dtype=dtype or np.asarray(array).dtype)
    array[index] = value
    return array


def bad_probabilities(probs):
    """Arrays that are not `(samples, classes)` probability rows."""
    return {
        "nan": _with(probs, (0, 0), np.nan),
        "inf": _with(probs, (0, 0), np.inf),
        "empty": probs[:0],
        "zero_classes": probs[:, :0],
        "not_normalised": probs * 0.5,
        "negative": _with(probs, (0, 0), -0.1),
        "above_one": probs * 2.0,
        "complex": probs.astype(np.complex64),
        "rank_1": probs[0],
        "string": np.full(probs.shape, "a"),
        "none": None,
    }


def bad_labels(labels, num_classes):
    return {
        "fractional": _with(labels, 0, 1.5, "float64"),
        "out_of_range": _with(labels, 0, num_classes),
        "negative": _with(labels, 0, -1),
        "too_long": np.concatenate([labels, labels[:1]]),
        "too_short": labels[:-1],
        "nan": _with(labels, 0, np.nan, "float64"),
        "complex": labels.astype(np.complex64),
        "string": labels.astype(str),
        "two_columns": np.stack([labels, labels], axis=1),
        "none": None,
    }


def bad_scores(scores):
    return {
        "nan": _with(scores, 0, np.nan),
        "inf": _with(scores, 0, np.inf),
        "empty": scores[:0],
        "rank_2": np.stack([scores, scores], axis=1),
        "complex": scores.astype(np.complex64),
        "string": scores.astype(str),
        "none": None,
    }


def bad_member_logits(logits):
    return {
        "nan": _with(logits, (0, 0, 0), np.nan),
        "inf": _with(logits, (0, 0, 0), np.inf),
        "all_masked": _with(logits, (0, 0), -np.inf),  # every class -inf
        "rank_2": logits[:, 0],
        "zero_members": logits[:, :0],
        "zero_classes": logits[:, :, :0],
        "complex": logits.astype(np.complex64),
        "string": np.full(logits.shape, "a"),
        "none": None,
    }


def bad_member_probabilities(probs):
    cases = bad_member_logits(probs)
    cases.update(negative=_with(probs, (0, 0, 0), -0.1), not_normalised=probs * 0.5)
    return cases


def bad_counts():
    return {"zero": 0, "negative": -2, "float": 2.5, "string": "3", "bool": True, "none": None}


def bad_flags():
    return {"string": "yes", "int": 2, "none": None}


def bad_reductions():
    return {"sum": "sum", "none_value": None, "int": 1}


def _cases():
    """(id, function, kwargs, corrupted argument) for every bad call."""
    table = []

    def add(name, fn, good, argument, bad_values):
        for case, value in bad_values.items():
            table.append(
                (f"{name}-{argument}-{case}", fn, dict(good, **{argument: value}), argument)
            )

    met = ez.metrics
    with_labels = {
        "accuracy": met.accuracy,
        "negative_log_likelihood": met.negative_log_likelihood,
        "brier_score": met.brier_score,
        "expected_calibration_error": met.expected_calibration_error,
        "adaptive_calibration_error": met.adaptive_calibration_error,
        "maximum_calibration_error": met.maximum_calibration_error,
        "calibration_bins": met.calibration_bins,
        "aurc": met.aurc,
        "risk_coverage_curve": met.risk_coverage_curve,
    }
    for name, fn in with_labels.items():
        good = dict(probs=PROBS, labels=LABELS)
        add(name, fn, good, "probs", bad_probabilities(PROBS))
        add(name, fn, good, "labels", bad_labels(LABELS, C))
    for name in (
        "expected_calibration_error",
        "adaptive_calibration_error",
        "maximum_calibration_error",
        "calibration_bins",
    ):
        add(name, with_labels[name], dict(probs=PROBS, labels=LABELS), "num_bins", bad_counts())
    add(
        "calibration_bins",
        met.calibration_bins,
        dict(probs=PROBS, labels=LABELS),
        "binning",
        {"unknown": "log", "none": None},
    )
    for name in ("aurc", "risk_coverage_curve"):
        confidences = bad_scores(SCORES)
        del confidences["none"]  # the default: the maximum probability
        add(name, with_labels[name], dict(probs=PROBS, labels=LABELS), "confidence", confidences)

    add("entropy", met.entropy, dict(probs=PROBS), "probs", bad_probabilities(PROBS))
    add("entropy", met.entropy, dict(probs=PROBS), "reduction", bad_reductions())
    for name, fn in (
        ("mutual_information", met.mutual_information),
        ("ensemble_of_ensembles_mutual_information", met.ensemble_of_ensembles_mutual_information),
    ):
        good = dict(member_probs=MEMBER_PROBS)
        if "ensemble_of" in name:
            good["num_groups"] = 2
            add(name, fn, good, "num_groups", dict(bad_counts(), not_dividing=3))
        add(name, fn, good, "member_probs", bad_member_probabilities(MEMBER_PROBS))
        add(
            f"{name}.logits",
            fn,
            dict(good, member_probs=LOGITS, from_logits=True),
            "member_probs",
            bad_member_logits(LOGITS),
        )
        add(name, fn, good, "from_logits", bad_flags())
        add(name, fn, good, "reduction", bad_reductions())
    add(
        "weighted_mutual_information",
        met.weighted_mutual_information,
        dict(member_logits=LOGITS),
        "member_logits",
        bad_member_logits(LOGITS),
    )
    add(
        "disagreement",
        met.disagreement,
        dict(member_outputs=LOGITS),
        "member_outputs",
        bad_member_logits(LOGITS),
    )
    add(
        "disagreement", met.disagreement, dict(member_outputs=LOGITS), "reduction", bad_reductions()
    )

    for name in ("ood_auroc", "ood_aupr", "fpr_at_95_tpr"):
        fn = getattr(met, name)
        good = dict(id_scores=SCORES, ood_scores=SCORES + 1)
        add(name, fn, good, "id_scores", bad_scores(SCORES))
        add(name, fn, good, "ood_scores", bad_scores(SCORES))
    add(
        "fpr_at_95_tpr",
        met.fpr_at_95_tpr,
        dict(id_scores=SCORES, ood_scores=SCORES + 1),
        "tpr",
        {"zero": 0.0, "above_one": 1.5, "string": "0.95", "nan": float("nan")},
    )

    bad_embeddings = {
        "nan": _with(EMBEDDINGS, (0, 0), np.nan),
        "inf": _with(EMBEDDINGS, (0, 0), np.inf),
        "empty": EMBEDDINGS[:0],
        "one_sample": EMBEDDINGS[:1],
        "rank_1": EMBEDDINGS[:, 0],
        "zero_row": _with(EMBEDDINGS, 0, 0.0),
        "complex": EMBEDDINGS.astype(np.complex64),
        "string": EMBEDDINGS.astype(str),
        "none": None,
    }
    retrieval_labels = {
        "too_long": np.concatenate([LABELS, LABELS[:1]]),
        "too_short": LABELS[:-1],
        "two_columns": np.stack([LABELS, LABELS], axis=1),
        "nan": _with(LABELS, 0, np.nan, "float64"),
        "none": None,
    }
    for name in (
        "recall_at_one",
        "nearest_neighbour_correct",
        "r_auroc",
        "recall_at_one_with_rejection",
    ):
        fn = getattr(met, name)
        good = dict(embeddings=EMBEDDINGS, labels=LABELS)
        if name in ("r_auroc", "recall_at_one_with_rejection"):
            good["uncertainties"] = SCORES
            uncertainties = bad_scores(SCORES)
            uncertainties["too_short"] = SCORES[:-1]
            add(name, fn, good, "uncertainties", uncertainties)
        add(name, fn, good, "embeddings", bad_embeddings)
        add(name, fn, good, "labels", retrieval_labels)
    add(
        "recall_at_one_with_rejection",
        met.recall_at_one_with_rejection,
        dict(embeddings=EMBEDDINGS, labels=LABELS, uncertainties=SCORES),
        "rejection_rates",
        {
            "one": (1.0,),
            "negative": (-0.1,),
            "string": "0.1",
            "nan": (float("nan"),),
            "scalar": 0.1,
        },
    )

    ops = ez.ops
    for name in (
        "predictive_probabilities",
        "predictive_log_probabilities",
        "uncertainty_decomposition",
        "mutual_information",
    ):
        fn = getattr(ops, name)
        add(
            f"ops.{name}",
            fn,
            dict(member_logits=LOGITS),
            "member_logits",
            dict(bad_member_logits(LOGITS), integers=np.ones((N, M, C), "int32")),
        )
        add(
            f"ops.{name}.probabilities",
            fn,
            dict(member_logits=MEMBER_PROBS, from_logits=False),
            "member_logits",
            bad_member_probabilities(MEMBER_PROBS),
        )
        add(f"ops.{name}", fn, dict(member_logits=LOGITS), "from_logits", bad_flags())
    add(
        "ops.entropy",
        ops.entropy,
        dict(probabilities=PROBS),
        "probabilities",
        {k: v for k, v in bad_probabilities(PROBS).items() if k not in ("empty", "rank_1")},
    )
    add(
        "ops.entropy",
        ops.entropy,
        dict(probabilities=PROBS),
        "axis",
        {"out_of_range": 2, "string": "x", "float": 1.0},
    )
    add(
        "ops.entropy_from_logits",
        ops.entropy_from_logits,
        dict(logits=LOGITS[:, 0]),
        "logits",
        {
            "nan": _with(LOGITS[:, 0], (0, 0), np.nan),
            "zero_classes": LOGITS[:, 0, :0],
            "complex": LOGITS[:, 0].astype(np.complex64),
            "string": np.full((N, C), "a"),
            "none": None,
            "scalar": np.float32(1.0),
        },
    )
    add(
        "ops.entropy_from_logits",
        ops.entropy_from_logits,
        dict(logits=LOGITS[:, 0]),
        "axis",
        {"out_of_range": 2, "string": "x"},
    )
    x = RNG.normal(size=(N, 5)).astype("float32")
    for name in ("tile_members", "untile_members"):
        fn = getattr(ops, name)
        add(f"ops.{name}", fn, dict(x=x, num_members=2), "num_members", bad_counts())
        add(
            f"ops.{name}",
            fn,
            dict(x=x, num_members=2),
            "x",
            {"scalar": np.float32(1.0), "string": np.full((N, 5), "a"), "none": None},
        )
    add(
        "ops.untile_members",
        ops.untile_members,
        dict(x=x, num_members=2),
        "x",
        {"not_divisible": x[:5]},
    )

    los = ez.losses
    target, predicted = np.abs(SCORES).astype("float32"), SCORES.astype("float32")
    for name in ("pairwise_ranking_loss", "squared_error_loss"):
        fn = getattr(los, name)
        good = dict(target_losses=target, predicted=predicted)
        for argument in ("target_losses", "predicted"):
            add(
                f"losses.{name}",
                fn,
                good,
                argument,
                {
                    "too_short": target[:-1],
                    "rank_3": target.reshape(1, 2, 3),
                    "string": target.astype(str),
                    "none": None,
                    "complex": target.astype(np.complex64),
                },
            )
    add(
        "losses.pairwise_ranking_loss",
        los.pairwise_ranking_loss,
        dict(target_losses=target, predicted=predicted),
        "margin",
        {"negative": -0.1, "string": "0.1", "nan": float("nan")},
    )
    return table


CASES = _cases()


@pytest.mark.parametrize("fn, kwargs, argument", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_a_clear_error(fn, kwargs, argument):
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**kwargs)
    assert f"`{argument}`" in str(info.value), (
        f"The message does not name `{argument}`: {type(info.value).__name__}: {info.value}"
    )
