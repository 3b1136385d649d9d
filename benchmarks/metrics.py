"""Exact metrics on 1,000,000 samples: ensemble_zoo vs scikit-learn (and
torchmetrics when installed), same data, one run.

    python benchmarks/metrics.py [--samples 1000000] [--repeats 3]

For each metric it prints the best-of-`repeats` wall time of every
implementation, the speed-up of ensemble_zoo over the reference (>1 means
ensemble_zoo is faster) and the largest absolute difference of the results.
scikit-learn has no ECE function; its reference ECE is built from
`sklearn.calibration.calibration_curve` (per-bin accuracy and confidence)
weighted by the bin counts. Goal: no slower than scikit-learn, results
equal to 1e-6.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402
from sklearn.calibration import calibration_curve  # noqa: E402
from sklearn.metrics import average_precision_score  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402

from ensemble_zoo import metrics  # noqa: E402


def best_time(fn, repeats):
    result, times = None, []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), float(result)


def sklearn_ece(probs, labels, num_bins=15):
    confidence = probs.max(1)
    correct = (probs.argmax(1) == labels).astype(np.float64)
    prob_true, prob_pred = calibration_curve(
        correct, confidence, n_bins=num_bins, strategy="uniform"
    )
    bins = np.minimum((confidence * num_bins).astype(int), num_bins - 1)
    counts = np.bincount(bins, minlength=num_bins)
    counts = counts[counts > 0]
    return float(np.sum(counts * np.abs(prob_true - prob_pred)) / len(labels))


def sklearn_fpr95(y, scores):
    fpr, tpr, _ = roc_curve(y, scores, drop_intermediate=False)
    return fpr[np.searchsorted(tpr, 0.95, side="left")]


def torchmetrics_references(probs, labels, y, scores):
    try:
        import torch
        from torchmetrics.functional.classification import binary_auroc
        from torchmetrics.functional.classification import binary_average_precision
        from torchmetrics.functional.classification import multiclass_calibration_error
    except ImportError:
        return {}
    p, t = torch.from_numpy(probs), torch.from_numpy(labels)
    s, yy = torch.from_numpy(scores), torch.from_numpy(y.astype(np.int64))
    return {
        "ECE": lambda: multiclass_calibration_error(
            p, t, num_classes=probs.shape[1], n_bins=15, norm="l1"
        ),
        "AUROC": lambda: binary_auroc(s, yy, thresholds=None),
        "AUPR": lambda: binary_average_precision(s, yy, thresholds=None),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, rng = args.samples, np.random.default_rng(0)

    logits = rng.normal(size=(n, 10)) * 3
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    labels = rng.integers(0, 10, size=n)
    # OOD scores in float32: realistic ties, as scores coming off a model.
    id_scores = rng.normal(0.0, 1.0, n // 2).astype(np.float32).astype(np.float64)
    ood_scores = rng.normal(1.0, 1.2, n - n // 2).astype(np.float32).astype(np.float64)
    y = np.r_[np.zeros(len(id_scores)), np.ones(len(ood_scores))]
    scores = np.r_[id_scores, ood_scores]

    rows = [
        (
            "ECE (15 bins)",
            lambda: metrics.expected_calibration_error(probs, labels),
            lambda: sklearn_ece(probs, labels),
            "ECE",
        ),
        (
            "AUROC",
            lambda: metrics.ood_auroc(id_scores, ood_scores),
            lambda: roc_auc_score(y, scores),
            "AUROC",
        ),
        (
            "AUPR (OOD positive)",
            lambda: metrics.ood_aupr(id_scores, ood_scores),
            lambda: average_precision_score(y, scores),
            "AUPR",
        ),
        (
            "FPR95",
            lambda: metrics.fpr_at_95_tpr(id_scores, ood_scores),
            lambda: sklearn_fpr95(y, scores),
            None,
        ),
    ]
    torch_refs = torchmetrics_references(probs, labels, y, scores)
    header = (
        f"{'metric':<20} {'ours s':>8} {'sklearn s':>9} {'speed-up':>8} "
        f"{'|diff|':>8} {'torchm. s':>9} {'speed-up':>8} {'|diff|':>8}"
    )
    print(f"{n:,} samples, best of {args.repeats}\n{header}\n{'-' * len(header)}")
    for name, ours, reference, torch_key in rows:
        t_ours, v_ours = best_time(ours, args.repeats)
        t_ref, v_ref = best_time(reference, args.repeats)
        line = (
            f"{name:<20} {t_ours:8.3f} {t_ref:9.3f} {t_ref / t_ours:7.2f}x "
            f"{abs(v_ours - v_ref):8.1e}"
        )
        if torch_key in torch_refs:
            t_tm, v_tm = best_time(torch_refs[torch_key], args.repeats)
            line += f" {t_tm:9.3f} {t_tm / t_ours:7.2f}x {abs(v_ours - v_tm):8.1e}"
        else:
            line += f" {'-':>9} {'-':>8} {'-':>8}"
        print(line)


if __name__ == "__main__":
    main()
