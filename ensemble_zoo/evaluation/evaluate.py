"""`evaluate`: one honest measurement of any zoo classifier."""

import keras

from ensemble_zoo import metrics
from ensemble_zoo.calibration import TemperatureScaling
from ensemble_zoo.evaluation.prediction import example_rank_of
from ensemble_zoo.evaluation.prediction import iterate_batches
from ensemble_zoo.evaluation.prediction import measure_speed
from ensemble_zoo.evaluation.prediction import predict_member_logits
from ensemble_zoo.evaluation.prediction import predict_outputs
from ensemble_zoo.evaluation.report import EvaluationReport
from ensemble_zoo.metrics.diversity import as_member_probabilities
from ensemble_zoo.utils.parameters import parameter_count
from ensemble_zoo.utils.validation import is_integer


def _check_positive_int(value, name):
    if not is_integer(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive int; got {value!r}.")


def _check_named(data, name):
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(
            f"`{name}` must be a dict mapping a set name to its data, e.g. "
            f'{{"near": x_near, "far": x_far}}; got {type(data).__name__}.'
        )
    return data


def _labelled(model, data, batch_size, name, progress, num_classes):
    logits, labels = predict_member_logits(model, data, batch_size, name, progress)
    if labels is None:
        raise ValueError(f"`{name}` needs labels: pass `(x, y)`.")
    if logits.shape[2] != num_classes:
        raise ValueError(
            f"`{name}`: the model returned {logits.shape[2]} classes, expected {num_classes}."
        )
    return logits, labels


def _classification(probs, labels, num_bins):
    return {
        "accuracy": metrics.accuracy(probs, labels),
        "nll": metrics.negative_log_likelihood(probs, labels),
        "brier": metrics.brier_score(probs, labels),
        "ece": metrics.expected_calibration_error(probs, labels, num_bins),
        "aece": metrics.adaptive_calibration_error(probs, labels, num_bins),
    }


#: OOD scores, higher = more likely OOD: 1 - max softmax probability, the
#: ensemble's mutual information (more than one member) and the model's own
#: uncertainty output where it has one (loss prediction's predicted loss).
OOD_SCORES = ("msp", "mutual_information", "predicted_loss")


def _ood_scores(member_logits, model_scores=None):
    probs = as_member_probabilities(member_logits, from_logits=True)
    scores = {"msp": 1.0 - probs.mean(axis=1).max(axis=1)}
    if member_logits.shape[1] > 1:
        scores["mutual_information"] = metrics.mutual_information(
            member_logits, from_logits=True, reduction="none"
        )
    if model_scores and "uncertainty" in model_scores:
        scores["predicted_loss"] = model_scores["uncertainty"]
    return scores


def evaluate(
    model,
    id_data,
    ood_data=None,
    shift_data=None,
    validation_data=None,
    batch_size=256,
    num_bins=15,
    latency_batch_size=4,
    name=None,
    progress=True,
    time_latency=True,
):
    """Measures a classifier's accuracy, calibration, OOD detection and cost.

    Everything is computed from the model's member logits with the
    functions of `ensemble_zoo.metrics`; nothing is model-specific.

    - In-distribution (`id_data`): accuracy, NLL, Brier, ECE, adaptive ECE
      and MCE (`num_bins` bins), AURC.
    - Temperature scaling: when `validation_data` is given, one temperature
      is fitted on it (`ensemble_zoo.calibration.TemperatureScaling`) and
      accuracy / NLL / Brier / ECE / aECE on `id_data` are reported again.
    - OOD (`ood_data`): AUROC, AUPR (OOD positive) and FPR95 of two scores,
      `1 - max softmax probability` ("msp") and the mutual information
      ("mutual_information"; left out, `None`, for a single member, for
      which it is identically 0), and for a model that predicts its own
      uncertainty (`LossPredictionImageClassifier`, whose outputs are a
      dict with `"logits"` and `"uncertainty"`) also that uncertainty
      ("predicted_loss").
    - Shift (`shift_data`): accuracy, NLL, Brier and ECE per set.
    - Diversity: mean mutual information and member disagreement on every
      set.
    - Cost: parameter count, median latency of a batch of
      `latency_batch_size` and throughput at `batch_size` (samples/s),
      both timed on the first `id_data` batch.

    Args:
        model: a zoo classifier (or any Keras model) returning member
            logits `(batch, members, classes)` or logits `(batch, classes)`.
        id_data: labelled in-distribution test data: `(x, y)` arrays or a
            `tf.data.Dataset` of `(x, y)`.
        ood_data: optional dict mapping a name (e.g. `"near"`, `"far"`) to
            OOD inputs: `x`, `(x, y)` (labels ignored) or a dataset.
        shift_data: optional dict mapping a name to labelled shifted data.
        validation_data: optional labelled data for temperature scaling.
        batch_size: int, prediction batch size. Defaults to `256`.
        num_bins: int, calibration bins. Defaults to `15`.
        latency_batch_size: int, batch size of the latency timing.
        time_latency: bool; `False` leaves `cost.latency_ms` `None`, for a
            caller that times the latency itself (`compare_presets` times
            every preset in alternation). Defaults to `True`.
            Defaults to `4` (the Hydra paper's).
        name: optional str naming the model in the report.
        progress: bool, show tqdm progress bars. Defaults to `True`.

    Returns:
        An `EvaluationReport`.

    Example:

    ```python
    import ensemble_zoo

    model = ensemble_zoo.models.EnsembleClassifier.from_preset(
        "deep_ensemble_vit_tiny_digits"
    )
    # The preset's image converter takes the raw digits (0-16).
    data = {
        s: ensemble_zoo.datasets.load_arrays("digits", s, raw=True)
        for s in ("validation", "test", "near_ood", "far_ood")
    }
    report = ensemble_zoo.evaluation.evaluate(
        model,
        data["test"],
        ood_data={"near": data["near_ood"][0], "far": data["far_ood"][0]},
        validation_data=data["validation"],
        progress=False,
    )
    print(report)
    report.metrics["ood"]["far"]["msp"]["auroc"]
    ```
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"`model` must be a keras.Model; got {type(model).__name__}.")
    _check_positive_int(batch_size, "batch_size")
    _check_positive_int(num_bins, "num_bins")
    _check_positive_int(latency_batch_size, "latency_batch_size")
    ood_data = _check_named(ood_data, "ood_data")
    shift_data = _check_named(shift_data, "shift_data")

    id_logits, id_labels, id_model_scores = predict_outputs(
        model, id_data, batch_size, "id_data", progress
    )
    if id_labels is None:
        raise ValueError("`id_data` needs labels: pass `(x, y)`.")
    num_members, num_classes = id_logits.shape[1], id_logits.shape[2]
    id_probs = as_member_probabilities(id_logits, from_logits=True).mean(axis=1)
    in_distribution = {"num_samples": int(id_labels.shape[0])}
    in_distribution.update(_classification(id_probs, id_labels, num_bins))
    in_distribution["mce"] = metrics.maximum_calibration_error(id_probs, id_labels, num_bins)
    in_distribution["aurc"] = metrics.aurc(id_probs, id_labels)

    member_logits = {"id": id_logits}
    temperature_scaled = None
    if validation_data is not None:
        val_logits, val_labels = _labelled(
            model, validation_data, batch_size, "validation_data", progress, num_classes
        )
        scaler = TemperatureScaling().fit(val_logits, val_labels)
        scaled = scaler.predict_probabilities(id_logits)
        temperature_scaled = {"temperature": scaler.temperature}
        temperature_scaled.update(_classification(scaled, id_labels, num_bins))

    id_scores = _ood_scores(id_logits, id_model_scores)
    ood = {}
    ood_scores = {}
    for set_name, data in ood_data.items():
        logits, _, model_scores = predict_outputs(
            model, data, batch_size, f"ood_data['{set_name}']", progress
        )
        member_logits[set_name] = logits
        scores = _ood_scores(logits, model_scores)
        ood_scores[set_name] = scores
        entry = {"num_samples": int(logits.shape[0])}
        for score in OOD_SCORES:
            if score not in scores:
                if score == "predicted_loss":
                    continue  # only models with an uncertainty output
                entry[score] = None
                continue
            entry[score] = {
                "auroc": metrics.ood_auroc(id_scores[score], scores[score]),
                "aupr": metrics.ood_aupr(id_scores[score], scores[score]),
                "fpr95": metrics.fpr_at_95_tpr(id_scores[score], scores[score]),
            }
        ood[set_name] = entry

    shift = {}
    for set_name, data in shift_data.items():
        logits, labels = _labelled(
            model, data, batch_size, f"shift_data['{set_name}']", progress, num_classes
        )
        member_logits[set_name] = logits
        probs = as_member_probabilities(logits, from_logits=True).mean(axis=1)
        entry = {"num_samples": int(labels.shape[0])}
        entry.update(_classification(probs, labels, num_bins))
        del entry["aece"]
        shift[set_name] = entry

    diversity = {
        set_name: {
            "mutual_information": metrics.mutual_information(logits, from_logits=True),
            "disagreement": metrics.disagreement(logits),
        }
        for set_name, logits in member_logits.items()
    }

    first_batch, _ = next(iterate_batches(id_data, batch_size, "id_data", example_rank_of(model)))
    cost = {"parameters": parameter_count(model)}
    cost.update(
        measure_speed(model, first_batch, batch_size, latency_batch_size, latency=time_latency)
    )
    cost["backend"] = keras.config.backend()

    report_metrics = {
        "name": name or model.name,
        "num_members": int(num_members),
        "num_classes": int(num_classes),
        "in_distribution": in_distribution,
        "temperature_scaled": temperature_scaled,
        "ood": ood,
        "shift": shift,
        "diversity": diversity,
        "cost": cost,
    }
    arrays = {
        "id_labels": id_labels,
        "id_probabilities": id_probs,
        "member_logits": member_logits,
        "id_scores": id_scores,
        "ood_scores": ood_scores,
        "timing_inputs": first_batch[:latency_batch_size],
    }
    return EvaluationReport(report_metrics, arrays, num_bins=num_bins)
