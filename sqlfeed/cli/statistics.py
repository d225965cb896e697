"""The ``sqlfeed stats`` command: feature statistics of a query as JSON and an HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from dialects import InvalidArgumentError, dialect_for
from sqlfeed import ParsedQuery, compute_stats, parse
from sqlfeed.cli.checks import (
    check_output_file,
    name_flags,
)
from sqlfeed.cli.common import (
    CommandParser,
    add_sql,
    add_target,
    names_known,
    positive,
    read_sql,
    write_json,
)
from sqlfeed.cli.progress import ProgressBar
from sqlfeed.cli.query import check_sample_method
from sqlfeed.sql import SAMPLE_METHODS
from stats.model import DEFAULT_TOP_K, StatsSpec
from stats.report import html_report

MAX_BUCKETS = 1000
"""The most quantile buckets ``sqlfeed stats --buckets`` computes."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``stats`` command."""
    parser = commands.add_parser(
        "stats",
        help="feature statistics of a SELECT's columns, as JSON and/or an HTML report",
        description=(
            "Per column: row and NULL counts, distinct count, min, max, mean, variance and "
            "quantile boundaries (numeric), top-k vocabulary with counts (categorical). "
            "Computed by the engine (pushdown), over a sample (--sample / --fraction), or "
            "by mergeable accumulators over the streamed rows (--accumulate)."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument("--out", metavar="PATH", help="write the statistics JSON here")
    parser.add_argument(
        "--html", metavar="PATH", help="write an HTML report here (with or without --out)"
    )
    parser.add_argument("--sample", type=int, metavar="N", help="compute over N sampled rows")
    parser.add_argument(
        "--method",
        choices=SAMPLE_METHODS,
        default="limit",
        help="how to sample (with --sample or --fraction)",
    )
    parser.add_argument("--fraction", type=float, help="share of rows to sample, in (0, 1]")
    parser.add_argument(
        "--accumulate",
        action="store_true",
        help="stream the rows and accumulate (mergeable, partition by partition)",
    )
    parser.add_argument("--label", metavar="COL", help="the label column")
    parser.add_argument("--buckets", type=int, default=10, help="quantile buckets (default 10)")
    parser.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        help=f"vocabulary size (default {DEFAULT_TOP_K}; to_keras warns when it leaves values out)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        default=[],
        metavar="COL=KIND",
        help="numeric, categorical or skip for a column (repeatable)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    add_sql(parser)
    parser.set_defaults(handler=_cmd_stats)
    name_flags(
        parser,
        sample_rows="--sample",
        sample_method="--method",
        **{"the sample size n": "--sample"},
    )


def _check_stats_args(args: argparse.Namespace) -> None:
    """The output paths and the sampling options, before anything runs."""
    if args.out is None and args.html is None:
        raise InvalidArgumentError(
            "give --out PATH (the statistics JSON), --html PATH (the report), or both"
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
    parsed = parse(sql, dialect_for(args.db))
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
