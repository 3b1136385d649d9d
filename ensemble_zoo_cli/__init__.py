"""The `ensemble-zoo` command.

    ensemble-zoo list                  the shipped presets: method, members,
                                       parameters and recorded test metrics
    ensemble-zoo evaluate --preset P   evaluate one preset on a dataset
        [--dataset digits] [--output DIR] [--base MODEL]
    ensemble-zoo compare               evaluate the trained ensemble
        [--presets P ...] [--output DIR]  classifiers on the bundled data
                                       and print the leaderboard; write
                                       JSON, Markdown and plots to DIR
    ensemble-zoo --version

This module lives outside the `ensemble_zoo` package on purpose: importing
the package imports Keras, keras-hub and TensorFlow (10-60 s on a small
machine), so `--help`, `--version`, `list` and argument errors, which
need none of them, are answered before anything heavy loads (under 2 s):
they read the package's import-free modules by file path. Commands import
`ensemble_zoo` when they run. `ensemble_zoo.cli` re-exports `main`.
"""

import argparse
import difflib
import functools
import importlib.util
import os
import sys

DEFAULT_OUTPUT = "ensemble_zoo_results"


def cmd_list(args):
    # Read from the preset directories' metadata.json files alone: no
    # Keras, no backend (under a second).
    text_table = _static_module("evaluation/tables.py").text_table
    ranked = set(compared_preset_names())
    rows = []
    for name in preset_names():
        meta = _preset_metadata(name) or {}
        metrics = meta.get("metrics", {})
        rows.append(
            [
                name,
                meta.get("kind", "trained") if meta else "damaged",
                meta.get("method", "-"),
                meta.get("dataset", "-"),
                meta.get("num_members"),
                meta.get("parameter_count"),
                metrics.get("test_accuracy"),
                metrics.get("test_nll"),
                metrics.get("test_ece"),
                "yes" if name in ranked else "-",
            ]
        )
    print(
        text_table(
            rows,
            [
                "preset",
                "kind",
                "method",
                "dataset",
                "members",
                "params",
                "test acc",
                "test NLL",
                "test ECE",
                "in compare",
            ],
        )
    )
    print(
        f"\n{len(rows)} presets, {len(trained_preset_names())} trained; "
        f"`compare` ranks the {len(ranked)} trained ensemble classifiers "
        "(`in compare`). Test metrics as recorded when each preset was "
        "saved, by the same evaluation `evaluate` runs."
    )
    return 0


def cmd_evaluate(args):
    from ensemble_zoo import evaluation
    from ensemble_zoo.utils.output_dir import prepare_output_dir

    if args.output is not None:
        prepare_output_dir(args.output)
    report = evaluation.evaluate_preset(
        args.preset,
        args.dataset,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        data_dir=args.data_dir,
        base=args.base,
    )
    print(report)
    if args.output is not None:
        paths = report.save(args.output)
        print(f"\nWrote {len(paths)} files to {args.output}/")
    else:
        print("\nNothing saved: pass --output DIR to write the report and plots.")
    return 0


def cmd_compare(args):
    from ensemble_zoo import evaluation

    leaderboard = evaluation.compare_presets(
        presets=args.presets,
        dataset=args.dataset,
        output_dir=args.output,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        data_dir=args.data_dir,
    )
    first = leaderboard.reports[0].metrics
    print(
        f"Leaderboard on {args.dataset}: {first['in_distribution']['num_samples']} "
        "in-distribution test samples; OOD score 1 - max softmax probability; "
        "ECE (TS) after temperature scaling on the validation split; latency "
        f"per batch of {first['cost']['latency_batch_size']} under "
        f"{first['cost']['backend']}, relative to the single base model"
        f"{_noise(leaderboard.latency_spread)}.\n"
    )
    print(leaderboard)
    if args.output is not None:
        print(
            f"\nWrote leaderboard.json, leaderboard.md, plots and one report "
            f"per preset to {args.output}/"
        )
    return 0


def _noise(spread):
    if spread is None:
        return ""
    return (
        f" (timed in alternation; the round-to-round noise is +-{spread:.0%}, "
        "so ratios that close to 1.00x, below it included, are noise: on "
        "these tiny models a call is mostly dispatch)"
    )


def _one_of(names):
    """An argparse `type` taking one of `names`; a mistyped name's error
    suggests the closest (`choices=` would list them all without one)."""

    def check(text):
        if text in names:
            return text
        close = difflib.get_close_matches(text, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r}{hint} (choose from {', '.join(names)})"
        )

    return check


def _positive_int(text):
    """argparse type: a positive int, checked before anything loads."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {value}")
    return value


@functools.lru_cache(maxsize=None)
def _static_module(relative_path):
    """Runs one of ensemble_zoo's import-free modules (a preset or dataset
    name table) by file path, without importing the `ensemble_zoo` package:
    importing it imports Keras and every backend, 10-60 s."""
    spec = importlib.util.find_spec("ensemble_zoo")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("ensemble-zoo: the ensemble_zoo package is not installed")
    path = os.path.join(spec.submodule_search_locations[0], *relative_path.split("/"))
    module_spec = importlib.util.spec_from_file_location(
        "_ensemble_zoo_cli_" + relative_path.replace("/", "_")[:-3], path
    )
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def preset_names():
    """The shipped preset names (`ensemble_zoo.presets.list_presets()`)."""
    return sorted(_static_module("presets/registry.py").PRESETS)


@functools.lru_cache(maxsize=None)
def _preset_metadata(name):
    """A shipped preset's metadata.json, read without importing the
    package; None for a damaged preset (loading it reports why)."""
    import json

    registry = _static_module("presets/registry.py").PRESETS
    root = _static_module("presets/paths.py").preset_root()
    try:
        with open(root / registry[name]["path"] / "metadata.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def trained_preset_names():
    """The presets with trained weights, whole models or adapters alone:
    those `evaluate` accepts (an architecture preset has random weights)."""
    return [
        name
        for name in preset_names()
        if _preset_metadata(name) is not None
        and _preset_metadata(name).get("kind", "trained") in ("trained", "adapters")
    ]


def compared_preset_names():
    """The presets `compare` ranks by default
    (`ensemble_zoo.evaluation.trained_presets()`, which reads the same
    rule): the trained ensemble classifiers."""
    rule = _static_module("presets/leaderboard.py").is_compared
    return [name for name in preset_names() if rule(_preset_metadata(name) or {})]


def _version():
    return _static_module("version.py").__version__


def dataset_names():
    """The dataset names (`ensemble_zoo.datasets.list_datasets()`)."""
    digits = _static_module("datasets/digits.py").NAME
    arithmetic = _static_module("datasets/arithmetic.py").NAME
    tfds = list(_static_module("datasets/tfds_datasets.py").TFDS_SPLITS)
    return [digits, arithmetic] + tfds


def _parser():
    parser = argparse.ArgumentParser(
        prog="ensemble-zoo", description="Efficient ensembles and uncertainty for Keras 3."
    )
    parser.add_argument("--version", action="version", version=f"ensemble-zoo {_version()}")
    datasets = dataset_names()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped presets").set_defaults(func=cmd_list)

    def common(p, dataset_help="the bundled digits", default="digits"):
        p.add_argument(
            "--dataset",
            default=default,
            type=_one_of(datasets),
            metavar="NAME",
            help=f"dataset (default: {dataset_help}); one of: " + ", ".join(datasets),
        )
        p.add_argument("--batch-size", type=_positive_int, default=256)
        p.add_argument("--data-dir", default=None, help="tfds data directory")
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    trained = trained_preset_names()
    evaluate = sub.add_parser("evaluate", help="evaluate one trained preset")
    evaluate.add_argument(
        "--preset",
        required=True,
        type=_one_of(trained),
        metavar="NAME",
        help="a trained preset, one of: " + ", ".join(trained),
    )
    evaluate.add_argument(
        "--output", default=None, metavar="DIR", help="write report.json, report.md and plots here"
    )
    evaluate.add_argument(
        "--base",
        default=None,
        metavar="MODEL",
        help="an adapter preset's base model: a keras-hub preset name, "
        "directory or hub handle (default: the one its metadata names)",
    )
    common(evaluate, dataset_help="the preset's own", default=None)
    evaluate.set_defaults(func=cmd_evaluate)

    compare = sub.add_parser(
        "compare",
        help="evaluate the trained ensemble classifiers and print a "
        "leaderboard (about 3 minutes on 2 CPU cores)",
    )
    compare.add_argument(
        "--presets",
        nargs="+",
        default=None,
        type=_one_of(compared_preset_names()),
        metavar="NAME",
        help="presets to compare (default: the "
        f"{len(compared_preset_names())} trained ensemble classifiers, "
        "those `list` marks `in compare`)",
    )
    compare.add_argument(
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="DIR",
        help=f"output directory (default: {DEFAULT_OUTPUT})",
    )
    common(compare)
    compare.set_defaults(func=cmd_compare)
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:
        parser.exit(2, f"ensemble-zoo {args.command}: error: {error}\n")
    except ImportError as error:
        # ensemble_zoo.utils.quiet_import.MissingBackendError, by name:
        # this module imports nothing from the package.
        if type(error).__name__ != "MissingBackendError":
            raise
        parser.exit(2, f"ensemble-zoo {args.command}: error: {error}\n")


if __name__ == "__main__":
    sys.exit(main())
