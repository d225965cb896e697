"""The ``sqlfeed predict`` command: a model's predictions written back, exactly once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from dialects import InvalidArgumentError, dialect_for
from sqlfeed.cli.checks import check_output_folder
from sqlfeed.cli.common import CommandParser, add_target, read_sql, write_json
from sqlfeed.cli.progress import RowsBar
from sqlfeed.ml.scoring import finish, predict
from sqlfeed.sink import WriteReport

__all__ = ["HELP", "register"]

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
    parser.add_argument("--into-db", metavar="URL", help="the output database (default: --db)")
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
    parser.add_argument("--queue", metavar="URL", help="a lease queue shared by every process")
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
    parser.set_defaults(handler=_cmd_predict)


def _columns(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def _check(args: argparse.Namespace) -> None:
    if (args.queue is None) != (args.job is None):
        raise InvalidArgumentError("--queue and --job go together: give both, or neither")
    if args.finish and args.queue is None:
        raise InvalidArgumentError("--finish finishes a job: give its --queue and --job")
    if not args.finish and (args.into is None) == (args.out is None):
        raise InvalidArgumentError("give one of --into TABLE or --out DIR")
    if args.finish and args.into is None and args.out is None:
        raise InvalidArgumentError("--finish needs the job's --into TABLE or --out DIR")
    if not args.finish and args.sql is None:
        raise InvalidArgumentError("give the SELECT to score (or --finish with --queue and --job)")
    for flag, value in (("--readers", args.readers), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise InvalidArgumentError(f"{flag} must be >= 1, not {value}")
    if args.finish:
        return
    if args.model is None:
        raise InvalidArgumentError("give the model folder: --model DIR")
    if not Path(args.model, "manifest.json").is_file():
        raise InvalidArgumentError(
            f"--model {args.model} is not a model folder (no manifest.json): give a folder "
            "sqlfeed train wrote"
        )
    if args.out is not None:
        check_output_folder(args.out, "--out")


def _cmd_predict(args: argparse.Namespace, out: TextIO) -> None:
    _check(args)
    report = _finish(args) if args.finish else _run(args, read_sql(args.sql))
    if report is None:
        return
    if args.format == "json":
        write_json(out, report, indent=1)
        return
    out.write(
        f"{report['rows']:,} rows in {report['table']} ({report['mode']}, finished by "
        f"{report['finished_by']})\n"
    )


def _run(args: argparse.Namespace, sql: str) -> dict[str, Any] | None:
    dialect_for(args.db)  # a bad URL is refused before anything runs
    bar = progress = RowsBar()

    common = dict(
        mode=args.mode,
        key=_columns(args.key) or None,
        keep=_columns(args.keep),
        keep_all=args.keep_all,
        proba=args.proba,
        queue=args.queue,
        job=args.job,
        readers=args.readers,
        batch_size=args.batch_size,
        partitions=args.partitions,
        lease_ttl=args.lease_ttl,
        progress=progress,
    )
    result: WriteReport | None
    try:
        result = predict(
            sql, args.db, args.model, into=args.into, into_db=args.into_db, out=args.out, **common
        )
    finally:
        bar.close()
    return None if result is None else result.to_dict()


def _finish(args: argparse.Namespace) -> dict[str, Any]:
    report = finish(
        args.queue,
        args.job,
        into=args.into,
        into_db=args.into_db or args.db,
        out=args.out,
        mode=args.mode,
    )
    return report.to_dict()
