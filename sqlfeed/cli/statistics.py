"""The ``sqlfeed stats`` command: feature statistics of a query as JSON and an HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from sqlfeed import ParsedQuery, compute_stats, parse
from sqlfeed.cli.checks import (
    check_output_file,
)
from sqlfeed.cli.common import (
    names_known,
    positive,
    read_sql,
    write_json,
)
from sqlfeed.cli.progress import ProgressBar
from sqlfeed.cli.query import check_sample_method
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.stats.model import StatsSpec
from sqlfeed.stats.report import html_report

MAX_BUCKETS = 1000
"""The most quantile buckets ``sqlfeed stats --buckets`` computes."""


def _check_stats_args(args: argparse.Namespace) -> None:
    """The output paths and the sampling options, before anything runs.

    An output path that is a symbolic link is refused: the file it points to, elsewhere,
    would be replaced.
    """
    if args.out is None and args.html is None:
        raise InvalidArgumentError(
            "give --out PATH (the statistics JSON), --html PATH (the report), or both"
        )
    for flag, path in (("--out", args.out), ("--html", args.html)):
        if path is not None and Path(path).is_symlink():
            raise InvalidArgumentError(
                f"{flag} {path} is a symbolic link to {Path(path).readlink()}: writing it would "
                "replace that file; give the file's own path if you mean it, or another name"
            )
    if args.out is not None:
        check_output_file(args.out, "--out", overwrite=True)
    if args.html is not None:
        check_output_file(args.html, "--html", overwrite=True)
        if args.out is not None and Path(args.html).resolve() == Path(args.out).resolve():
            raise InvalidArgumentError("--html and --out name the same file: give two names")
    if args.sample is not None:
        positive(args.sample, "--sample")
    if not 2 <= args.buckets <= MAX_BUCKETS:
        raise InvalidArgumentError(
            f"--buckets must be between 2 and {MAX_BUCKETS}, got {args.buckets}"
        )
    positive(args.top_k, "--top-k")
    sampling = args.sample is not None or args.fraction is not None
    if args.accumulate and sampling:
        raise InvalidArgumentError("--accumulate reads every row; drop --sample/--fraction")
    if sampling and not (args.method == "limit" and args.fraction is None):
        check_sample_method(args.method, args.fraction)
    elif args.method != "limit" and not sampling:
        raise InvalidArgumentError(
            f"--method {args.method} samples: give --fraction F (and --sample N to cap the rows)"
        )


def _cmd_stats(args: argparse.Namespace, out: TextIO) -> None:
    sql = read_sql(args.sql)
    _check_stats_args(args)
    kinds = _kinds(args.kind)
    spec = StatsSpec(kinds=kinds, label=args.label, buckets=args.buckets, top_k=args.top_k)
    parsed = parse(sql, dialect_for(args.db), allow_side_effects=args.allow_side_effects)
    _check_named_columns(parsed, args.label, kinds)
    sampling = args.sample is not None or args.fraction is not None
    method = "accumulate" if args.accumulate else "sample" if sampling else "pushdown"
    steps = ProgressBar(0, what="steps")
    done = [0]

    def progress(step: str) -> None:
        done[0] += 1
        steps.update(done[0], 0)

    try:
        result = compute_stats(
            parsed,
            args.db,
            spec=spec,
            method=method,
            sample_rows=args.sample,
            sample_method=args.method,
            fraction=args.fraction,
            progress=progress,
        )
    finally:
        steps.close()
    report = html_report(result) if args.html else None  # before any file is written
    if args.out is not None:
        result.save(args.out)
    if args.html and report is not None:
        Path(args.html).write_text(report, encoding="utf-8")
    if args.format == "json":
        write_json(
            out,
            {
                "out": args.out,
                "html": args.html,
                "rows": result.rows,
                "method": result.method,
                "columns": list(result.columns),
            },
        )
    else:
        written = " and ".join(path for path in (args.out, args.html) if path is not None)
        out.write(
            f"statistics of {len(result.columns)} columns over {result.rows} rows "
            f"({result.method}) written to {written}\n"
        )


def _check_named_columns(parsed: ParsedQuery, label: str | None, kinds: dict[str, str]) -> None:
    """``--label`` and ``--kind`` name output columns.

    Checked before connecting when the SQL text names them all (case aside: the engine may
    fold the case of a name).
    """
    if not names_known(parsed):
        return
    names = [str(name) for name in parsed.output_names or []]
    known = {name.casefold() for name in names}
    for name, flag in [(label, "--label"), *((column, "--kind") for column in kinds)]:
        if name is not None and name.casefold() not in known:
            raise InvalidArgumentError(
                f"{flag} {name}: the query returns no column {name!r} (output columns: "
                f"{', '.join(names)})"
            )


def _kinds(items: list[str]) -> dict[str, str]:
    """The ``--kind COL=KIND`` values as a dict."""
    kinds = {}
    for item in items:
        name, sep, kind = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"--kind takes COL=KIND, not {item!r}")
        kinds[name] = kind
    return kinds
