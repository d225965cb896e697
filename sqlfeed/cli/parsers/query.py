"""The parsers of ``sqlfeed plan``, ``count`` and ``sample``.

Their handlers are in :mod:`sqlfeed.cli.query`.
"""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import (
    SAMPLE_METHODS,
    add_allow_side_effects,
    add_plan_options,
    add_sql,
    add_target,
    later,
    name_flags,
)
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

DEFAULT_SAMPLE_ROWS = 10_000
"""The default of ``sqlfeed plan --sample-rows``."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``plan``, ``count`` and ``sample`` commands."""
    plan = commands.add_parser(
        "plan",
        help="split a SELECT into partition queries (count, sample, partitions)",
        description=(
            "Split a SELECT into M partition queries whose results add up to exactly the "
            "query's result, plus its COUNT and sample queries. Without --db nothing is run: "
            "the SQL is only rewritten for --dialect. With --db the output column names are "
            "read from the database (a LIMIT 0 query), and --target-rows counts the rows."
        ),
    )
    add_target(plan, dialect=True)
    add_plan_options(plan, sample_rows=DEFAULT_SAMPLE_ROWS)
    plan.add_argument(
        "--format",
        choices=("json", "sql"),
        default="json",
        help="json (default): the whole plan; sql: the partition queries, one "
        "per line, each ending with ';'",
    )
    add_sql(plan)
    plan.set_defaults(handler=later("query:_cmd_plan"), precheck="stable_unless_allowed")
    name_flags(plan)

    count = commands.add_parser(
        "count",
        help="count the rows a SELECT returns",
        description="Run SELECT COUNT(*) over the query on the database and print the number.",
    )
    add_target(count, dialect=False)
    count.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help='text (default): the number; json: {"count": N, "sql": ...}',
    )
    add_allow_side_effects(count)
    add_sql(count)
    count.set_defaults(handler=later("query:_cmd_count"), precheck="select")
    name_flags(count)

    sample = commands.add_parser(
        "sample",
        help="print a sample of a SELECT's rows",
        description=(
            "Run the query's sample query (see 'plan') and print the rows. Durations are "
            "ISO 8601 text (P1DT2H), binary values \\x and hex digits; in CSV, lists, "
            "structs and maps are JSON text. Repeated column names are made unique (id_1)."
        ),
    )
    add_target(sample, dialect=False)
    sample.add_argument("--rows", type=int, default=10, metavar="N", help="at most N rows")
    sample.add_argument(
        "--method",
        choices=SAMPLE_METHODS,
        default="limit",
        help="limit: the first rows; bernoulli: the engine's TABLESAMPLE; hash: a "
        "deterministic share of the rows (bernoulli and hash need --fraction)",
    )
    sample.add_argument("--fraction", type=float, help="share of rows to keep, in (0, 1]")
    sample.add_argument("--seed", type=int, default=0, help="seed of a bernoulli sample")
    sample.add_argument("--format", choices=("table", "csv", "json"), default="table")
    add_allow_side_effects(sample)
    add_sql(sample)
    sample.set_defaults(handler=later("query:_cmd_sample"), precheck="select")
    name_flags(sample, **{"the sample size n": "--rows", "n": "--rows"})
