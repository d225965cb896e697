"""The parsers of ``sqlfeed stats`` (handlers in :mod:`sqlfeed.cli.statistics`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import (
    DEFAULT_TOP_K,
    SAMPLE_METHODS,
    add_allow_side_effects,
    add_sql,
    add_target,
    later,
    name_flags,
)
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]


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
    add_allow_side_effects(parser)
    add_sql(parser)
    parser.set_defaults(handler=later("statistics:_cmd_stats"), precheck="select")
    name_flags(
        parser,
        sample_rows="--sample",
        sample_method="--method",
        **{"the sample size n": "--sample"},
    )
