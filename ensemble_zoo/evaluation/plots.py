"""Evaluation plots saved as PNG files (matplotlib, no pyplot state).

Each function draws one figure, writes it to `path` and returns the
numbers it drew, so tests (and users) can check the plot's data. Every
legend lies inside the figure and, beyond a few entries, outside the axes;
curves differ by colour and line style (`curve_style`).
"""

import numpy as np

from ensemble_zoo.metrics.classification import calibration_bins
from ensemble_zoo.metrics.diversity import disagreement
from ensemble_zoo.metrics.generation import accuracy_rejection_curve
from ensemble_zoo.metrics.selective import risk_coverage_curve

#: Line styles combined with the 10 default colours: curve `i` gets colour
#: `C{i % 10}` and style `LINE_STYLES[i // 10]`, so up to 40 curves differ.
LINE_STYLES = ("-", "--", ":", "-.")

#: Above this many entries a legend goes outside the axes (right).
LEGEND_INSIDE_MAX = 4


def _figure(width=5.0, height=4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Constrained layout keeps every legend, label and title inside the
    # figure, also a legend placed outside the axes.
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def curve_style(index):
    """`(colour, line style)` of the `index`-th curve of a plot."""
    return f"C{index % 10}", LINE_STYLES[(index // 10) % len(LINE_STYLES)]


def _legend(figure, axis, count, **kwargs):
    """A legend inside the axes for a few entries, outside on the right
    (within the figure) for more, so it never covers the data."""
    if count <= LEGEND_INSIDE_MAX:
        return axis.legend(**kwargs)
    handles, labels = axis.get_legend_handles_labels()
    return figure.legend(handles, labels, loc="outside right upper", fontsize="small", **kwargs)


def _save(figure, path):
    figure.savefig(path, format="png")
    return str(path)


def reliability_diagram(probs, labels, path, num_bins=15, title=None):
    """Accuracy against confidence per equal-width bin, with the gap to the
    diagonal hatched, and the share of samples per bin in a second panel
    below (same confidence axis).

    Returns:
        the `calibration_bins` statistics that were drawn.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    stats = calibration_bins(probs, labels, num_bins)
    figure = Figure(figsize=(5.0, 5.0), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axis, below = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
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
        label="gap to confidence",
    )
    axis.plot([0, 1], [0, 1], "k--", linewidth=1, label="calibrated")
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1)
    axis.set_ylabel("accuracy")
    share = stats["count"] / stats["count"].sum()
    below.bar(centers, share, width=1.0 / num_bins, color="0.45", edgecolor="black")
    below.set_ylim(0, 1)
    below.set_ylabel("share")
    below.set_xlabel("confidence (max probability)")
    figure.legend(loc="outside upper center", ncol=3, fontsize="small")
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
    _legend(figure, axis, len(scores))
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
    drawn = {}
    for label, (probs, labels) in curves.items():
        coverage, risk = risk_coverage_curve(probs, labels)
        drawn[label] = (1.0 - coverage, 1.0 - risk)
    _rejection_plot(
        drawn, path, title, "rejected fraction (least confident first)", "accuracy of kept samples"
    )
    return drawn


def answer_rejection_curves(curves, path, title=None):
    """Accuracy of the kept answers as the most uncertain are rejected.

    Args:
        curves: dict mapping a label (an estimator) to `(uncertainty,
            correct)`, `(answers,)` each
            (`ez.metrics.accuracy_rejection_curve`).
        path: output PNG path.

    Returns:
        dict mapping each label to `(rejection_rate, accuracy)` arrays.
    """
    drawn = {
        label: accuracy_rejection_curve(uncertainty, correct)
        for label, (uncertainty, correct) in curves.items()
    }
    _rejection_plot(
        drawn, path, title, "rejected fraction (most uncertain first)", "accuracy of kept answers"
    )
    return drawn


def _rejection_plot(drawn, path, title, xlabel, ylabel):
    many = len(drawn) > LEGEND_INSIDE_MAX
    figure, axis = _figure(width=8.0 if many else 5.0, height=4.5 if many else 4.0)
    for index, (label, (rejection, accuracy)) in enumerate(drawn.items()):
        color, style = curve_style(index)
        axis.plot(rejection, accuracy, label=label, color=color, linestyle=style)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_xlim(0, 1)
    _legend(figure, axis, len(drawn))
    axis.set_title(title or "Accuracy vs. rejection")
    _save(figure, path)


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
    _legend(figure, axis, len(drawn))
    axis.set_title(title or "Member disagreement")
    _save(figure, path)
    return drawn


def leaderboard_panels(points, path, cost_label="latency, ms", title=None):
    """Accuracy, ECE and OOD AUROC against cost, one labelled point per
    model, in three panels side by side: where each model lies in quality
    for what it costs.

    Args:
        points: dict mapping a label (a preset name) to a dict with
            `cost`, `accuracy`, `ece` and `ood_auroc` (floats; a `None`
            leaves the point out of its panel).
        path: output PNG path.
        cost_label: the cost axis' label.

    Returns:
        dict mapping each panel's metric to `{label: (cost, value)}`.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = (
        ("accuracy", "accuracy"),
        ("ece", "ECE (lower is better)"),
        ("ood_auroc", "OOD AUROC"),
    )
    figure = Figure(figsize=(15.0, 5.0), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    drawn = {}
    for i, (key, name) in enumerate(panels):
        axis = figure.add_subplot(1, len(panels), i + 1)
        drawn[key] = {}
        for j, (label, p) in enumerate(points.items()):  # one colour per label
            if p["cost"] is None or p[key] is None:
                continue
            x, y = drawn[key][label] = (p["cost"], p[key])
            axis.scatter([x], [y], color=f"C{j % 10}", marker="os^D"[(j // 10) % 4])
            axis.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        axis.set_xlabel(cost_label)
        axis.set_ylabel(name)
        axis.set_title(name)
    figure.suptitle(title or "Quality against cost")
    _save(figure, path)
    return drawn
