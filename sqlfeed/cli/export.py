"""The ``sqlfeed export`` command: a query's rows to files or into a database table.

To Parquet, CSV or JSONL files, or into a database table (``--into``) exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TextIO

from sqlfeed import connect
from sqlfeed.cli.checks import (
    check_output_file,
    check_output_folder,
)
from sqlfeed.cli.common import (
    plan_on_db,
    positive,
    validated_query,
    warn,
    write_json,
)
from sqlfeed.cli.jobs import check_queue_url
from sqlfeed.cli.progress import ProgressBar, RowsBar
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.dispatch import open_queue
from sqlfeed.feed import EXPORT_FORMATS, export
from sqlfeed.io.arrow import renamed_columns
from sqlfeed.plans.materialize import drop_scratch
from sqlfeed.sink import WriteReport, copy_into, finish_job
from sqlfeed.sql.names import table_name

MAX_READERS = 256
"""The most partitions ``sqlfeed export`` reads at once (each holds a connection)."""


def _check_out(args: argparse.Namespace) -> Path:
    """``--out`` and ``--as``, checked before anything runs.

    A file named ``.parquet``, ``.csv`` or ``.jsonl`` of that format, or a folder (a name
    without one of those extensions; one with another extension only with ``--as``).
    """
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


INTO_ONLY = ("into_db", "mode", "queue", "job", "finish")
"""The options of ``--into`` (refused with ``--out``)."""

OUT_ONLY = {"file_format": "--as", "overwrite": "--overwrite", "plan": "--plan"}
"""The options of ``--out`` (refused with ``--into``)."""

INTO_PLANNING = {
    "target_rows": "--target-rows",
    "scratch": "--scratch",
    "strict": "--strict",
}
"""Planning options ``--into`` does not take (it plans with --partitions alone)."""


def _check_into(args: argparse.Namespace) -> None:
    """The options of ``--into``, checked before anything runs.

    Raises:
        InvalidArgumentError: a bad combination.
    """
    if not args.into.strip():
        raise InvalidArgumentError("--into needs a table name (name or schema.name)")
    for dest, flag in OUT_ONLY.items():
        if getattr(args, dest):
            raise InvalidArgumentError(f"{flag} goes with --out PATH, not --into: drop it")
    given = [flag for dest, flag in INTO_PLANNING.items() if getattr(args, dest)]
    if args.strategy != "auto":
        given.append("--strategy")
    if args.workers != 1:
        given.append("--workers")
    if given:
        raise InvalidArgumentError(
            f"{given[0]} does not apply to --into (it plans with --partitions alone): drop it"
        )
    if (args.queue is None) != (args.job is None):
        raise InvalidArgumentError(
            "--queue and --job go together: give both to share the work among processes, or neither"
        )
    if args.queue is not None:
        check_queue_url(args.queue, must_exist=args.finish)
    if args.finish:
        if args.queue is None:
            raise InvalidArgumentError(
                "--finish puts a job's table in place: give the job's --queue and --job"
            )
        if args.sql is not None:
            raise InvalidArgumentError(
                "--finish only puts the job's table in place: drop the SQL (or drop --finish "
                "to work on the job)"
            )
        return
    if args.sql is None:
        raise InvalidArgumentError("the SQL argument is required")
    if args.readers is not None:
        positive(args.readers, "--readers", most=MAX_READERS)


def _cmd_export(args: argparse.Namespace, out: TextIO) -> None:
    if args.into is None and args.out is None:
        raise InvalidArgumentError("give --out PATH (files) or --into TABLE (a table of --into-db)")
    if args.into is not None:
        _cmd_into(args, out)
        return
    given = [dest for dest in INTO_ONLY if getattr(args, dest) not in (None, False)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise InvalidArgumentError(f"{flag} goes with --into TABLE, not --out: drop it")
    args.readers = 2 if args.readers is None else args.readers
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


def _cmd_into(args: argparse.Namespace, out: TextIO) -> None:
    """``export --into``: the query's rows into a table (or ``--finish``: a job's)."""
    _check_into(args)
    into_db = args.into_db or args.db
    report: WriteReport | None
    if args.finish:
        _check_job_table(args, into_db)
        report = finish_job(args.queue, args.job, into_db)
    else:
        parsed = validated_query(args, dialect_for(args.db))
        bar = progress = RowsBar()

        with connect(args.db) as source:
            _check_key(args.key, source.schema(parsed).names)
            try:
                report = copy_into(
                    parsed.sql,
                    source,
                    into_db,
                    args.into,
                    mode=args.mode or "create",
                    key=args.key,
                    queue=args.queue,
                    job=args.job,
                    readers=args.readers,
                    partitions=args.partitions,
                    progress=progress,
                )
            finally:
                bar.close()
    _print_report(args, out, report)


def _check_job_table(args: argparse.Namespace, into_db: str) -> None:
    """``--finish``: the job writes ``--into``.

    Raises:
        InvalidArgumentError: no such job, a job that writes no table, or another table.
    """
    spec = open_queue(args.queue).job(args.job)
    engine = dialect_for(into_db)
    wanted = table_name(args.into, engine, "--into").sql(dialect=engine.sqlglot_dialect)
    table = (spec.sink or {}).get("table")
    if table is not None and table != wanted:
        raise InvalidArgumentError(
            f"the job {args.job!r} writes {table}, not {args.into}: give --into {table}, or "
            "the --job that writes it"
        )


def _check_key(key: list[str] | None, columns: list[str]) -> None:
    """``--key``'s columns are among the SELECT's ``columns``.

    Raises:
        InvalidArgumentError: one is not.
    """
    missing = [name for name in key or [] if name not in columns]
    if missing:
        raise InvalidArgumentError(
            f"--key {missing[0]} is not a column of the SELECT (it has {', '.join(columns)}): "
            "select it, or give another --key"
        )


def _print_report(args: argparse.Namespace, out: TextIO, report: WriteReport | None) -> None:
    if report is None:  # another process of the job puts the table in place
        if args.format == "json":
            write_json(out, {"table": args.into, "finished_by": "another process"})
        else:
            out.write(f"wrote this process's rows; another process finishes {args.into}\n")
        return
    if args.format == "json":
        write_json(out, report.to_dict())
        return
    how = "already in place" if report.finished_by == "before" else f"{report.mode}"
    out.write(f"wrote {report.rows} rows into {report.table} ({how}, {report.seconds:.1f} s)\n")
