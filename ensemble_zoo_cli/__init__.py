"""The `ensemble-zoo` command.

    ensemble-zoo list                  the shipped presets: method, members,
                                       parameters and recorded test metrics
    ensemble-zoo evaluate --preset P   evaluate one preset on a dataset
        [--dataset digits] [--output DIR]
    ensemble-zoo compare               evaluate every trained preset on the
        [--presets P ...] [--output DIR]  bundled data and print the
                                       leaderboard; write JSON, Markdown and
                                       plots to DIR

This module lives outside the `ensemble_zoo` package on purpose: importing
the package imports Keras, keras-hub and TensorFlow (10-60 s on a small
machine), so `--help` and argument errors, which need none of them, are
answered before anything heavy loads (under 2 s). Commands import
`ensemble_zoo` when they run. `ensemble_zoo.cli` re-exports `main`.
"""

import argparse
import importlib.util
import os
import sys

DEFAULT_OUTPUT = "ensemble_zoo_results"


def cmd_list(args):
    from ensemble_zoo import presets
    from ensemble_zoo.evaluation.tables import text_table

    rows = []
    for name in presets.list_presets():
        meta = presets.preset_metadata(name)
        metrics = meta.get("metrics", {})
        rows.append(
            [
                name,
                meta.get("kind", "-"),
                meta.get("method", "-"),
                meta.get("num_members"),
                meta.get("parameter_count"),
                metrics.get("test_accuracy"),
                metrics.get("test_nll"),
                metrics.get("test_ece"),
            ]
        )
    print(
        text_table(
            rows,
            ["preset", "kind", "method", "members", "params", "test acc",
             "test NLL", "test ECE"],
        )
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
    )
    print(report)
    if args.output is not None:
        paths = report.save(args.output)
        print(f"\nWrote {len(paths)} files to {args.output}/")
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
        f"{first['cost']['backend']}, relative to the single base model.\n"
    )
    print(leaderboard)
    if args.output is not None:
        print(
            f"\nWrote leaderboard.json, leaderboard.md, plots and one report "
            f"per preset to {args.output}/"
        )
    return 0


def _positive_int(text):
    """argparse type: a positive int, checked before anything loads."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {value}")
    return value


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


def trained_preset_names():
    """The presets with trained weights: those `evaluate` accepts (an
    architecture preset has random weights)."""
    import json

    registry = _static_module("presets/registry.py").PRESETS
    root = _static_module("presets/paths.py").preset_root()
    names = []
    for name in sorted(registry):
        try:
            with open(root / registry[name]["path"] / "metadata.json") as f:
                kind = json.load(f).get("kind")
        except (OSError, ValueError):
            kind = None  # a damaged preset: `list` and loading report it
        if kind == "trained":
            names.append(name)
    return names


def dataset_names():
    """The dataset names (`ensemble_zoo.datasets.list_datasets()`)."""
    digits = _static_module("datasets/digits.py").NAME
    arithmetic = _static_module("datasets/arithmetic.py").NAME
    tfds = list(_static_module("datasets/tfds_datasets.py").TFDS_SPLITS)
    return [digits, arithmetic] + tfds


def _parser():
    parser = argparse.ArgumentParser(
        prog="ensemble-zoo",
        description="Efficient ensembles and uncertainty for Keras 3.",
    )
    datasets = dataset_names()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped presets").set_defaults(
        func=cmd_list
    )

    def common(p, dataset_help="the bundled digits", default="digits"):
        p.add_argument(
            "--dataset",
            default=default,
            choices=datasets,
            metavar="NAME",
            help=f"dataset (default: {dataset_help}); one of: "
            + ", ".join(datasets),
        )
        p.add_argument("--batch-size", type=_positive_int, default=256)
        p.add_argument("--data-dir", default=None, help="tfds data directory")
        p.add_argument(
            "--no-progress", action="store_true", help="hide progress bars"
        )

    trained = trained_preset_names()
    evaluate = sub.add_parser("evaluate", help="evaluate one trained preset")
    evaluate.add_argument(
        "--preset", required=True, choices=trained, metavar="NAME",
        help="a trained preset, one of: " + ", ".join(trained),
    )
    evaluate.add_argument(
        "--output", default=None, metavar="DIR",
        help="write report.json, report.md and plots here",
    )
    common(evaluate, dataset_help="the preset's own", default=None)
    evaluate.set_defaults(func=cmd_evaluate)

    compare = sub.add_parser(
        "compare", help="evaluate every trained preset and print a leaderboard"
    )
    compare.add_argument(
        "--presets", nargs="+", default=None, choices=trained, metavar="NAME",
        help="presets to compare (default: every trained preset)",
    )
    compare.add_argument(
        "--output", default=DEFAULT_OUTPUT, metavar="DIR",
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


if __name__ == "__main__":
    sys.exit(main())
