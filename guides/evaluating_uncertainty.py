"""
Title: Measuring uncertainty: calibration, OOD detection and a leaderboard
Author: ensemble_zoo developers
Date created: 2026/11/22
Last modified: 2026/11/22
Description: Evaluate any ensemble_zoo model with one harness, calibrate it with temperature scaling, and compare presets.
"""

"""
## Introduction

An uncertainty method is chosen by its numbers, so every model in
`ensemble_zoo` is measured the same way. This guide:

1. computes the individual metrics on arrays (calibration, OOD detection,
   selective prediction, diversity),
2. runs the evaluation harness `ez.evaluation.evaluate` on a shipped ensemble
   and reads its report,
3. fits a temperature on the validation split,
4. tracks calibration during `fit` with Keras metrics,
5. compares presets in a leaderboard, as `ensemble-zoo compare` does.

It runs in about a minute on a laptop CPU with any Keras backend.
"""

"""
## Setup
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np

import ensemble_zoo as ez

"""
## Metrics are functions on arrays

Every metric takes NumPy arrays (or anything array-like) and returns a
float. Ensembles are combined first: `ez.ops.predictive_probabilities` turns
member logits `(samples, members, classes)` into the mean of the member
softmaxes. Here we use the shipped 3-member deep ensemble of tiny ViTs.
Like every keras-hub task it carries its preprocessor, so `predict`,
`evaluate` and the harness take raw images: the digits on their raw pixel
scale (ink counts 0-16, `raw=True`), which its image converter divides by
16.
"""

model = ez.models.EnsembleClassifier.from_preset("deep_ensemble_vit_tiny_digits")
x_val, y_val = ez.datasets.load_arrays("digits", "validation", raw=True)
x_test, y_test = ez.datasets.load_arrays("digits", "test", raw=True)
x_near, _ = ez.datasets.load_arrays("digits", "near_ood", raw=True)  # digits 8 and 9
x_far, _ = ez.datasets.load_arrays("digits", "far_ood", raw=True)  # photo patches

test_logits = model.predict(x_test, verbose=0)  # (289, 3, 8)
probs = np.asarray(ez.ops.predictive_probabilities(test_logits))

print(f"accuracy {ez.metrics.accuracy(probs, y_test):.4f}")
print(f"NLL      {ez.metrics.negative_log_likelihood(probs, y_test):.4f}")
print(f"Brier    {ez.metrics.brier_score(probs, y_test):.4f}")
print(f"ECE      {ez.metrics.expected_calibration_error(probs, y_test):.4f}")
print(f"aECE     {ez.metrics.adaptive_calibration_error(probs, y_test):.4f}")
print(f"AURC     {ez.metrics.aurc(probs, y_test):.4f}")

"""
OOD metrics take two score vectors, in-distribution and OOD, where a higher
score means "more likely OOD". OOD is the positive class, as in
torch-uncertainty and the Hydra paper. Two common scores are
`1 - max softmax probability` and, for ensembles, the mutual information
between the prediction and the member (the epistemic uncertainty).
"""


def scores(x):
    logits = model.predict(x, verbose=0)
    p = np.asarray(ez.ops.predictive_probabilities(logits))
    return {
        "1 - MSP": 1.0 - p.max(1),
        "MI": ez.metrics.mutual_information(logits, from_logits=True, reduction="none"),
    }


id_scores, far_scores = scores(x_test), scores(x_far)
for score in ("1 - MSP", "MI"):
    print(
        f"far-OOD with {score}: "
        f"AUROC {ez.metrics.ood_auroc(id_scores[score], far_scores[score]):.4f}  "
        f"AUPR {ez.metrics.ood_aupr(id_scores[score], far_scores[score]):.4f}  "
        f"FPR95 {ez.metrics.fpr_at_95_tpr(id_scores[score], far_scores[score]):.4f}"
    )
print(f"member disagreement on test {ez.metrics.disagreement(test_logits):.4f}")

"""
## The evaluation harness

`ez.evaluation.evaluate` computes all of this at once from the member
logits. It adds temperature scaling when it gets validation data, shift
sets, diversity on every set, and the cost: parameters, latency and
throughput, measured on the same data. The report prints as tables and
saves as JSON, Markdown and PNG plots.
"""

report = ez.evaluation.evaluate(
    model,
    (x_test, y_test),
    ood_data={"near": x_near, "far": x_far},
    shift_data={"noise": ez.datasets.load_arrays("digits", "test_shifted", raw=True)},
    validation_data=(x_val, y_val),
    name="deep ensemble",
    progress=False,
)
print(report)
paths = report.save("deep_ensemble_report")
print(sorted(os.path.basename(p) for p in paths.values()))

"""
The numbers are in `report.metrics`, a nested dict of plain floats, which
is also what `report.json` holds:
"""

far = report.metrics["ood"]["far"]
print("far AUROC, MSP vs MI:", far["msp"]["auroc"], far["mutual_information"]["auroc"])

"""
## Temperature scaling

`TemperatureScaling` fits one temperature shared by every member. It
minimises the NLL on held-out data, which must never be the test split.
Dividing every member's logits by the same `T` keeps the ensemble an
ensemble.
"""

scaler = ez.calibration.TemperatureScaling()
scaler.fit(model.predict(x_val, verbose=0), y_val)
scaled = scaler.predict_probabilities(test_logits)
print(
    f"T = {scaler.temperature:.3f}: ECE "
    f"{ez.metrics.expected_calibration_error(probs, y_test):.4f} -> "
    f"{ez.metrics.expected_calibration_error(scaled, y_test):.4f}"
)

"""
## Calibration during training

`ExpectedCalibrationError`, `NegativeLogLikelihood` and `BrierScore` are
`keras.metrics.Metric`s. They accept the member logits of every zoo
classifier and accumulate exact sums over batches, so `evaluate` gives the
same numbers as the array functions.
"""

model.compile(
    metrics=[
        ez.metrics.EnsembleAccuracy(),
        ez.metrics.NegativeLogLikelihood(),
        ez.metrics.ExpectedCalibrationError(),
    ]
)
logs = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
print({k: round(float(v), 4) for k, v in logs.items()})

"""
## The leaderboard

`ez.evaluation.compare_presets` evaluates presets on the same bundled
data and times them in alternation, so that the latency ratios share one
machine state. Here four of them: the single model, the deep ensemble and
two fused ensembles. Called with no names, it evaluates every trained
preset, which is what `ensemble-zoo compare` prints (the leaderboard in the
README) before it writes the reports, plots and `leaderboard.json` to its
output directory.
"""

leaderboard = ez.evaluation.compare_presets(
    [
        "vit_tiny_digits",
        "deep_ensemble_vit_tiny_digits",
        "hydra_circuit_vit_tiny_digits",
        "lora_ensemble_vit_tiny_digits",
    ],
    progress=False,
)
print(leaderboard)
