"""The parsers of ``sqlfeed predict`` (handlers in :mod:`sqlfeed.cli.predict`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import add_target, db_url, later, name_flags
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

HELP = "write a model's predictions for a SELECT into a table, exactly once, on elastic workers"


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``predict`` command."""
    parser = commands.add_parser(
        "predict",
        help=HELP,
        description=(
            "Score the SELECT's rows with a model folder of sqlfeed train and write "
            "predicted_<label> (binary: also predicted_<label>_prob; --proba: a probability "
            "per class) with the --key and --keep columns into --into TABLE. Partitions are "
            "leased to workers: threads here (--readers), or the same command started on "
            "several machines with one --queue URL and --job NAME (the first creates the job "
            "and the output, the others join; workers may die or join at any time). Each "
            "batch's rows commit in one transaction with a record of the batch, so every "
            "input row gets exactly one output row. Rows go to a staging table; the worker "
            "that sees the job complete (or predict --finish) checks the counts and renames "
            "it into place (--mode replace: an atomic swap). --out DIR writes Parquet files "
            "instead (a DuckDB file cannot be written by several processes: give the workers "
            "--out, then load it with --finish --out DIR --into TABLE --into-db duckdb:///f)."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument(
        "--model", metavar="DIR", help="the model folder (not needed with --finish)"
    )
    parser.add_argument("--into", metavar="TABLE", help="the output table (name or schema.name)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="a Parquet folder instead of a table (with --finish and --into: the folder to load)",
    )
    parser.add_argument(
        "--into-db", metavar="URL", type=db_url, help="the output database (default: --db)"
    )
    parser.add_argument(
        "--mode",
        choices=("create", "replace", "append"),
        default="create",
        help="create (refused if the table exists; default), replace (swapped in atomically "
        "at the end), append",
    )
    parser.add_argument(
        "--key",
        metavar="COL,...",
        help="columns identifying a row: passed through; the output's primary key when the "
        "catalog proves them unique, else checked by distinct count. Without: the output "
        "gets _sqlfeed_partition, _sqlfeed_row",
    )
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", metavar="COL,...", help="input columns passed through")
    keep.add_argument("--keep-all", action="store_true", help="pass every input column through")
    parser.add_argument(
        "--proba", action="store_true", help="classification: a probability column per class"
    )
    parser.add_argument(
        "--queue", metavar="URL", type=db_url, help="a lease queue shared by every process"
    )
    parser.add_argument("--job", metavar="NAME", help="the job's name in --queue")
    parser.add_argument("--readers", type=int, metavar="N", help="worker threads here")
    parser.add_argument(
        "--batch-size", type=int, metavar="N", help="rows per committed batch (default 8192)"
    )
    parser.add_argument("--partitions", type=int, metavar="M", help="partitions of the plan")
    parser.add_argument(
        "--lease-ttl", type=float, default=60.0, metavar="S", help="seconds a lease lives"
    )
    parser.add_argument(
        "--finish",
        action="store_true",
        help="only finish the job's output (check counts, put it in place): idempotent",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "sql",
        metavar="SQL",
        nargs="?",
        help="the SELECT (none with --finish); '-' reads it from stdin, '@file.sql' from a file",
    )
    parser.set_defaults(handler=later("predict:_cmd_predict"), precheck="select")
    name_flags(parser)  # the sink's errors name mode='replace', key: --mode replace, --key
