"""Epistemic uncertainty collapse and implicit ensemble extraction (Kirsch,
"(Implicit) Ensembles of Ensembles: Epistemic Uncertainty Collapse in Large
Models").

    KERAS_BACKEND=jax python benchmarks/implicit_ensembles.py
        [--seeds 0 1 2] [--epochs 30] [--output implicit_ensembles_results]

Three experiments on the bundled digits data (8x8 images, classes 0-7;
near-OOD = digits 8 and 9, far-OOD = photo patches), with MLPs
`64 -> 64w -> 32w -> 8` (ReLU, dropout 0.1), the paper's E3 shape scaled
to 8x8 inputs, trained with Adam:

(a) Ensembles of ensembles: a fixed pool of 24 width-x1 members, grouped
    into K groups of M (M = 1, 2, 3, 4, 6, 12). The flat ensemble, its
    accuracy and its total MI are the same for every grouping; the
    between-group MI I[Y; K] falls as M grows.
(b) Width: 10-member ensembles of widths x1 ... x16; mean MI per set.
(c) Mask extraction: 10 masked sub-networks of one frozen width-x16 MLP
    (`SubnetworkEnsembleClassifier`, diversity weight 2.0), against the same
    extraction without the diversity term, the wide model alone (MI = 0)
    and real 10-member ensembles of width x16 and x1.

Every number is averaged over `--seeds`; tables are printed and the plots
written as PNG files to `--output`.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import ensemble_zoo as ez  # noqa: E402

SETS = ("test", "near_ood", "far_ood")


def mlp(width, seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(64 * width, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    x = keras.layers.Dense(32 * width, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    return keras.Model(inputs, keras.layers.Dense(8)(x))


def jit():
    return keras.config.backend() != "torch"


def train_ensemble(width, members, seed, epochs):
    ensemble = ez.models.DeepEnsembleClassifier(
        [mlp(width, 1000 * seed + m) for m in range(members)]
    )
    ensemble.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit())
    x, y = ez.datasets.load_arrays("digits", "train")
    ensemble.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    return ensemble


def member_logits(model, data):
    return {name: model.predict(x, verbose=0, batch_size=512) for name, (x, _) in data.items()}


def mean_mi(logits):
    return {s: ez.metrics.mutual_information(v, from_logits=True) for s, v in logits.items()}


def accuracy(logits, labels):
    probs = ez.ops.predictive_probabilities(logits)
    return ez.metrics.accuracy(np.asarray(keras.ops.convert_to_numpy(probs)), labels)


def experiment_a(data, seeds, epochs):
    sizes = (1, 2, 3, 4, 6, 12)
    rows = {size: {s: [] for s in SETS} for size in sizes}
    for seed in seeds:
        logits = member_logits(train_ensemble(1, 24, seed, epochs), data)
        for size in sizes:
            for s in SETS:
                mi = ez.metrics.ensemble_of_ensembles_mutual_information(
                    logits[s], 24 // size, from_logits=True
                )
                rows[size][s].append(mi["between"])
    return {size: {s: float(np.mean(v)) for s, v in row.items()} for size, row in rows.items()}


def experiment_b_c(data, seeds, epochs, widths, wide, steps):
    width_rows = {w: {s: [] for s in SETS + ("accuracy",)} for w in widths}
    extraction = {
        k: {s: [] for s in SETS + ("accuracy",)}
        for k in (
            "single x%d (MI = 0)" % wide,
            "masks, lambda = 2",
            "masks, lambda = 0",
            "ensemble x%d" % wide,
            "ensemble x1",
        )
    }
    x_train, y_train = ez.datasets.load_arrays("digits", "train")
    labels = data["test"][1]
    for seed in seeds:
        ensembles = {}
        for w in widths:
            ensembles[w] = train_ensemble(w, 10, seed, epochs)
            logits = member_logits(ensembles[w], data)
            for s, value in mean_mi(logits).items():
                width_rows[w][s].append(value)
            width_rows[w]["accuracy"].append(accuracy(logits["test"], labels))
        single = ensembles[wide].members[0]
        results = {
            "ensemble x%d" % wide: member_logits(ensembles[wide], data),
            "ensemble x1": member_logits(ensembles[1], data),
            "single x%d (MI = 0)" % wide: member_logits(
                ez.models.DeepEnsembleClassifier([single]), data
            ),
        }
        for weight in (2.0, 0.0):
            masks = ez.models.SubnetworkEnsembleClassifier.from_model(
                single, num_members=10, diversity_weight=weight, seed=seed
            )
            masks.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=jit())
            masks.fit(x_train, y_train, epochs=steps, batch_size=64, verbose=0)
            results["masks, lambda = %g" % weight] = member_logits(masks, data)
        for name, logits in results.items():
            for s, value in mean_mi(logits).items():
                extraction[name][s].append(value)
            extraction[name]["accuracy"].append(accuracy(logits["test"], labels))
    average = lambda table: {
        k: {s: float(np.mean(v)) for s, v in row.items()} for k, row in table.items()
    }  # noqa: E731
    return average(width_rows), average(extraction)


def print_table(title, key_name, table, columns):
    print(f"\n{title}")
    header = f"{key_name:<22}" + "".join(f"{c:>12}" for c in columns)
    print(header + "\n" + "-" * len(header))
    for key, row in table.items():
        print(f"{str(key):<22}" + "".join(f"{row[c]:12.4f}" for c in columns))


def plot(path, x, series, xlabel, ylabel, title, log_x=False):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5, 4), dpi=100)
    FigureCanvasAgg(figure)
    axis = figure.add_subplot(1, 1, 1)
    for label, values in series.items():
        axis.plot(x, values, marker="o", label=label)
    if log_x:
        axis.set_xscale("log", base=2)
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)


def bar_plot(path, groups, series, ylabel, title):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    axis = figure.add_subplot(1, 1, 1)
    width = 0.8 / len(series)
    positions = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        axis.bar(positions + i * width, values, width, label=label)
    axis.set_xticks(positions + width * (len(series) - 1) / 2, groups)
    axis.set(ylabel=ylabel, title=title)
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--widths", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--mask-epochs", type=int, default=20)
    parser.add_argument("--output", default="implicit_ensembles_results")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    start = time.perf_counter()
    data = {s: ez.datasets.load_arrays("digits", s) for s in SETS}
    print(f"backend {keras.config.backend()}, seeds {args.seeds}, mean MI in nats")

    a = experiment_a(data, args.seeds, args.epochs)
    print_table("(a) between-group MI, pool of 24 x1 members", "group size M", a, SETS)
    plot(
        os.path.join(args.output, "ensembles_of_ensembles.png"),
        list(a),
        {s: [a[k][s] for k in a] for s in SETS},
        "sub-ensemble size M",
        "I[Y; K] (nats)",
        "Ensembles of ensembles: fixed pool of 24",
    )
    widths, extraction = experiment_b_c(
        data, args.seeds, args.epochs, args.widths, max(args.widths), args.mask_epochs
    )
    print_table("(b) 10-member ensembles by width", "width", widths, SETS + ("accuracy",))
    plot(
        os.path.join(args.output, "width.png"),
        list(widths),
        {s: [widths[w][s] for w in widths] for s in SETS},
        "width factor",
        "mean MI (nats)",
        "MI of 10-member ensembles by MLP width",
        log_x=True,
    )
    print_table("(c) implicit ensemble extraction", "model", extraction, SETS + ("accuracy",))
    bar_plot(
        os.path.join(args.output, "extraction.png"),
        SETS,
        {k: [row[s] for s in SETS] for k, row in extraction.items()},
        "mean MI (nats)",
        "Mask extraction vs ensembles",
    )
    print(f"\nplots in {args.output}/; total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
