"""Evaluation plots saved as PNG files (matplotlib, no pyplot state).

Each function draws one figure, writes it to `path` and returns the
numbers it drew, so tests (and users) can check the plot's data.
"""

import numpy as np

from ensemble_zoo.metrics.classification import calibration_bins
from ensemble_zoo.metrics.diversity import disagreement
from ensemble_zoo.metrics.selective import risk_coverage_curve


def _figure(width=5.0, height=4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def _save(figure, path):
    figure.tight_layout()
    figure.savefig(path, format="png")
    return str(path)


def reliability_diagram(probs, labels, path, num_bins=15, title=None):
    """Accuracy against confidence per equal-width bin, with the gap to the
    diagonal shaded and the sample share per bin as a second panel.

    Returns:
        the `calibration_bins` statistics that were drawn.
    """
    stats = calibration_bins(probs, labels, num_bins)
    figure, axis = _figure()
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    filled = stats["count"] > 0
    axis.bar(
        centers[filled],
        stats["accuracy"][filled],
        width=1.0 / num_bins,
        edgecolor="black",
        color="tab:blue",
        label="accuracy",
    )
    low = np.minimum(stats["accuracy"][filled], stats["confidence"][filled])
    high = np.maximum(stats["accuracy"][filled], stats["confidence"][filled])
    axis.bar(
        centers[filled],
        high - low,
        bottom=low,
        width=1.0 / num_bins,
        color="none",
        edgecolor="tab:red",
        hatch="//",
        label="gap to mean confidence",
    )
    axis.plot([0, 1], [0, 1], "k--", linewidth=1)
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1)
    axis.set_xlabel("confidence (max probability)")
    axis.set_ylabel("accuracy")
    share = stats["count"] / stats["count"].sum()
    twin = axis.twinx()
    twin.step(edges, np.append(share, share[-1]), where="post", color="gray")
    twin.set_ylabel("share of samples", color="gray")
    twin.set_ylim(0, 1)
    axis.legend(loc="upper left")
    axis.set_title(title or "Reliability diagram")
    _save(figure, path)
    return stats


def score_histograms(scores, path, score_name, title=None, bins=30):
    """Overlaid histograms of one OOD score for several sample sets.

    Args:
        scores: dict mapping a set name (`"id"`, `"near"`, `"far"`) to its
            `(samples,)` scores.
        path: output PNG path.
        score_name: x-axis label.

    Returns:
        dict of `(counts, edges)` per set (density-normalised counts).
    """
    values = np.concatenate([np.asarray(v, dtype=np.float64) for v in scores.values()])
    edges = np.histogram_bin_edges(values, bins=bins)
    figure, axis = _figure()
    drawn = {}
    for name, vals in scores.items():
        counts, _, _ = axis.hist(
            np.asarray(vals, dtype=np.float64),
            bins=edges,
            density=True,
            alpha=0.45,
            label=f"{name} (n={len(vals)})",
        )
        drawn[name] = (np.asarray(counts), edges)
    axis.set_xlabel(score_name)
    axis.set_ylabel("density")
    axis.legend()
    axis.set_title(title or f"OOD score: {score_name}")
    _save(figure, path)
    return drawn


def accuracy_rejection_curves(curves, path, title=None):
    """Accuracy of the kept samples against the rejected fraction.

    Args:
        curves: dict mapping a label (e.g. a preset name) to
            `(probs, labels)`; samples are rejected by increasing maximum
            softmax probability.
        path: output PNG path.

    Returns:
        dict mapping each label to `(rejection_rate, accuracy)` arrays.
    """
    figure, axis = _figure()
    drawn = {}
    for label, (probs, labels) in curves.items():
        coverage, risk = risk_coverage_curve(probs, labels)
        rejection, accuracy = 1.0 - coverage, 1.0 - risk
        axis.plot(rejection, accuracy, label=label)
        drawn[label] = (rejection, accuracy)
    axis.set_xlabel("rejected fraction (least confident first)")
    axis.set_ylabel("accuracy of kept samples")
    axis.set_xlim(0, 1)
    axis.legend()
    axis.set_title(title or "Accuracy vs. rejection")
    _save(figure, path)
    return drawn


def disagreement_histograms(member_logits, path, title=None):
    """Distribution of per-sample member disagreement for several sets.

    Args:
        member_logits: dict mapping a set name to `(samples, members,
            classes)` member logits (at least 2 members).
        path: output PNG path.

    Returns:
        dict mapping each set to its per-sample disagreement values.
    """
    figure, axis = _figure()
    drawn = {}
    for name, logits in member_logits.items():
        values = disagreement(logits, reduction="none")
        drawn[name] = values
    levels = np.unique(np.concatenate(list(drawn.values())))
    width = 0.8 / max(len(drawn), 1)
    for i, (name, values) in enumerate(drawn.items()):
        shares = [np.mean(np.isclose(values, level)) for level in levels]
        axis.bar(np.arange(len(levels)) + i * width, shares, width=width, label=name)
    axis.set_xticks(np.arange(len(levels)) + 0.4 - width / 2)
    axis.set_xticklabels([f"{level:.2f}" for level in levels])
    axis.set_xlabel("fraction of member pairs that disagree")
    axis.set_ylabel("share of samples")
    axis.legend()
    axis.set_title(title or "Member disagreement")
    _save(figure, path)
    return drawn
