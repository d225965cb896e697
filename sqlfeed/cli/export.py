"""The ``sqlfeed export`` command: a query's rows to Parquet, CSV or JSONL files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from dialects import InvalidArgumentError, dialect_for
from sqlfeed import connect
from sqlfeed.cli.common import (
    CommandParser,
    add_plan_options,
    add_sql,
    add_target,
    plan_on_db,
    positive,
    validated_query,
    write_json,
)
from sqlfeed.cli.progress import ProgressBar
from sqlfeed.feed import EXPORT_FORMATS, export


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``export`` command."""
    parser = commands.add_parser(
        "export",
        help="write a SELECT's rows to Parquet, CSV or JSONL, in parallel",
        description=(
            "Plan the query, read its partitions in parallel and write them to --out: a "
            "file (.parquet, .csv, .jsonl) or a folder of part files, one per partition. "
            "The output appears atomically: written aside, renamed into place when done."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument("--out", required=True, metavar="PATH", help="output file or folder")
    parser.add_argument(
        "--as",
        dest="file_format",
        choices=EXPORT_FORMATS,
        help="file format (default: from the file name, else parquet)",
    )
    add_plan_options(parser)
    parser.add_argument("--readers", type=int, default=2, help="partitions read at once")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="how to print the summary"
    )
    add_sql(parser)
    parser.set_defaults(handler=_cmd_export)


def _cmd_export(args: argparse.Namespace, out: TextIO) -> None:
    positive(args.readers, "--readers")
    parsed = validated_query(args, dialect_for(args.db))
    target = Path(args.out)
    if target.exists() and not args.overwrite:
        raise InvalidArgumentError(f"{target} exists; pass --overwrite to replace it")
    plan = plan_on_db(args, parsed)
    with connect(args.db) as source:
        bar = ProgressBar(plan.num_partitions)
        try:
            summary = export(
                plan,
                source,
                target,
                format=args.file_format,
                readers=args.readers,
                overwrite=args.overwrite,
                on_partition=bar.update,
            )
        finally:
            bar.close()
    summary.update(strategy=plan.strategy, partitions=plan.num_partitions)
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(
            f"wrote {summary['rows']} rows to {summary['path']} ({summary['format']}, "
            f"{summary['files']} file(s), {plan.num_partitions} {plan.strategy} partitions)\n"
        )
