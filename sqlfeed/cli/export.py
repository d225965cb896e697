"""The ``sqlfeed export`` command: a query's rows to Parquet, CSV or JSONL files."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TextIO

from dialects import InvalidArgumentError, dialect_for
from sqlfeed import connect
from sqlfeed.cli.checks import (
    check_output_file,
    check_output_folder,
    name_flags,
)
from sqlfeed.cli.common import (
    CommandParser,
    add_plan_options,
    add_sql,
    add_target,
    plan_on_db,
    positive,
    validated_query,
    warn,
    write_json,
)
from sqlfeed.cli.progress import ProgressBar
from sqlfeed.feed import EXPORT_FORMATS, export
from sqlfeed.io.arrow import renamed_columns
from sqlfeed.plans.materialize import drop_scratch

MAX_READERS = 256
"""The most partitions ``sqlfeed export`` reads at once (each holds a connection)."""


def _check_out(args: argparse.Namespace) -> Path:
    """``--out`` and ``--as``, checked before anything runs: a file named ``.parquet``,
    ``.csv`` or ``.jsonl`` of that format, or a folder (a name without one of those
    extensions; one with another extension only with ``--as``)."""
    if not args.out.strip():
        raise InvalidArgumentError("--out needs a file or folder name")
    target = Path(args.out)
    suffix = target.suffix.lstrip(".").lower()
    formats = ", ".join(f".{f}" for f in EXPORT_FORMATS)
    if suffix in EXPORT_FORMATS:
        if args.file_format not in (None, suffix):
            raise InvalidArgumentError(
                f"--as {args.file_format} does not match the file name {target.name}: "
                f"name it .{args.file_format}, or drop --as"
            )
        return check_output_file(args.out, "--out", overwrite=args.overwrite)
    if suffix and args.file_format is None:
        raise InvalidArgumentError(
            f"--out {args.out}: sqlfeed does not write .{suffix} files; give a {formats} "
            "file, or a folder (pass --as FORMAT to name a folder with a dot)"
        )
    if target.exists() and not args.overwrite:
        raise InvalidArgumentError(f"--out {args.out} exists; pass --overwrite to replace it")
    if target.exists() and not target.is_dir():
        raise InvalidArgumentError(
            f"--out {args.out} is a file; a folder of part files needs another name"
        )
    if not target.parent.is_dir():
        raise InvalidArgumentError(
            f"--out {args.out}: the folder {target.parent} does not exist; create it first"
        )
    check_output_folder(args.out, "--out")
    return target


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``export`` command."""
    parser = commands.add_parser(
        "export",
        help="write a SELECT's rows to Parquet, CSV or JSONL, in parallel",
        description=(
            "Plan the query, read its partitions in parallel and write them to --out: a "
            "file (.parquet, .csv, .jsonl) or a folder of part files, one per partition "
            "(a name without an extension; other extensions are refused unless --as is "
            "given). The output appears atomically: written aside, renamed into place when "
            "done. A --strategy materialize scratch table is dropped when the export ends. "
            "Repeated column names (SELECT * over a join) are made unique as DuckDB does "
            "(id, id_1). CSV and JSONL show durations as ISO 8601 text (P1DT2H), binary "
            "values as \\x and hex digits, and CSV lists, structs and maps as JSON text."
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
    name_flags(parser, format="--as", file_format="--as")


def _cmd_export(args: argparse.Namespace, out: TextIO) -> None:
    positive(args.readers, "--readers", most=MAX_READERS)
    target = _check_out(args)
    parsed = validated_query(args, dialect_for(args.db))
    with connect(args.db) as source:
        plan = plan_on_db(args, parsed, source)
        if renamed := renamed_columns(plan.columns, plan.arrow_schema()):
            warn(renamed)
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
        except BaseException:
            bar.close()
            with contextlib.suppress(Exception):  # the first error is the one to report
                drop_scratch(plan, source)
            raise
        bar.close()
        drop_scratch(plan, source)  # the rows are written: the scratch table has done its job
    summary.update(strategy=plan.strategy, partitions=plan.num_partitions)
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(
            f"wrote {summary['rows']} rows to {summary['path']} ({summary['format']}, "
            f"{summary['files']} file(s), {plan.num_partitions} {plan.strategy} partitions)\n"
        )
