"""The ``sqlfeed predict`` command: a model's predictions written back, exactly once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from sqlfeed.cli.checks import check_output_folder
from sqlfeed.cli.common import read_sql, write_json
from sqlfeed.cli.parsers.predict import HELP
from sqlfeed.cli.progress import RowsBar
from sqlfeed.dialects import EngineError, InvalidArgumentError, dialect_for
from sqlfeed.errors import JobIncompleteError
from sqlfeed.ml.scoring import finish, predict
from sqlfeed.sink import WriteReport
from sqlfeed.sink.folder import check_out_folder

__all__ = ["HELP"]


def _columns(text: str | list[str] | None) -> list[str]:
    if isinstance(text, list):  # read as names already (sqlfeed.cli.names)
        return text
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
        if args.out is not None:
            check_out_folder(args.out, args.job, what="--out")
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
        check_out_folder(args.out, what="--out")


def _cmd_predict(args: argparse.Namespace, out: TextIO) -> None:
    _check(args)
    report = _finish(args) if args.finish else _run(args, read_sql(args.sql))
    if report is None:
        return
    if args.format == "json":
        write_json(out, report, indent=1)
        return
    out.write(f"{_summary(args, report)}\n")


def _summary(args: argparse.Namespace, report: dict[str, Any]) -> str:
    """The run in one line: where its rows are, and what this process did.

    A table: put in place by this process, or found in place (another worker or an
    earlier finish did it). A folder: the rows this process wrote, and whether the job's
    rows are all there (each worker says so for itself: a folder is finished by loading it).
    """
    rows, where = report["rows"], report["table"]
    if report["mode"] != "folder":
        by = "put in place by this process"
        if report["finished_by"] == "before":
            by = "already in place: put there by another process or an earlier finish"
        return f"{rows:,} rows in {where} ({report['mode']}, {by})"
    if args.finish:
        return f"{where} holds all {rows:,} rows of the job {args.job}"
    if args.queue is None:
        return f"{rows:,} rows in {where} (Parquet files)"
    if report["complete"] is None:
        return (
            f"{rows:,} rows written into {where} by this process; whether the job is complete "
            f"is unknown ({report['unknown_because']}): predict --finish --out {where} tells"
        )
    if not report["complete"]:
        return (
            f"{rows:,} rows written into {where} by this process; the job is not complete "
            "(its other workers write the rest)"
        )
    return (
        f"{rows:,} rows written into {where} by this process; all {report['job_rows']:,} rows "
        f"of the job are there (predict --finish --out {where} --into TABLE loads them)"
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
    if result is None:
        return None
    return _folder_report(args, result) if args.out is not None else result.to_dict()


def _folder_report(args: argparse.Namespace, result: WriteReport) -> dict[str, Any]:
    """A worker's report on a folder: its own rows, and whether the job's are all there."""
    report = {"table": result.table, "rows": result.rows, "mode": "folder"}
    report["seconds"] = result.seconds
    if args.queue is None:  # this process ran the whole job
        return report | {"complete": True, "job_rows": result.rows}
    try:
        held = finish(args.queue, args.job, out=args.out).rows
    except JobIncompleteError:  # not every partition is committed yet
        return report | {"complete": False, "job_rows": None}
    except EngineError as err:  # this process's rows are written: only the check failed
        return report | {"complete": None, "job_rows": None, "unknown_because": str(err)}
    return report | {"complete": True, "job_rows": held}


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
