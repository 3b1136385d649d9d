"""The `ensemble-zoo` command.

    ensemble-zoo list                  the shipped presets: method, members,
                                       parameters and recorded test metrics
    ensemble-zoo evaluate --preset P   evaluate one preset on a dataset
        [--dataset digits] [--output DIR]
    ensemble-zoo compare               evaluate every trained preset on the
        [--presets P ...] [--output DIR]  bundled data and print the
                                       leaderboard; write JSON, Markdown and
                                       plots to DIR
"""

import argparse
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


def _parser():
    from ensemble_zoo import datasets
    from ensemble_zoo import presets

    parser = argparse.ArgumentParser(
        prog="ensemble-zoo",
        description="Efficient ensembles and uncertainty for Keras 3.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped presets").set_defaults(
        func=cmd_list
    )

    def common(p):
        p.add_argument(
            "--dataset",
            default="digits",
            choices=datasets.list_datasets(),
            metavar="NAME",
            help="dataset (default: the bundled digits); one of: "
            + ", ".join(datasets.list_datasets()),
        )
        p.add_argument("--batch-size", type=_positive_int, default=256)
        p.add_argument("--data-dir", default=None, help="tfds data directory")
        p.add_argument(
            "--no-progress", action="store_true", help="hide progress bars"
        )

    names = presets.list_presets()
    evaluate = sub.add_parser("evaluate", help="evaluate one preset")
    evaluate.add_argument(
        "--preset", required=True, choices=names, metavar="NAME",
        help="one of: " + ", ".join(names),
    )
    evaluate.add_argument(
        "--output", default=None, metavar="DIR",
        help="write report.json, report.md and plots here",
    )
    common(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    compare = sub.add_parser(
        "compare", help="evaluate every trained preset and print a leaderboard"
    )
    compare.add_argument(
        "--presets", nargs="+", default=None, choices=names, metavar="NAME",
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
