"""Measure what a tie-breaker costs: queries as written against their ORDER BYs completed.

sqlfeed completes an ORDER BY that may cut between tied rows (a top-N's, a window's) with
the remaining output columns (:func:`sqlfeed.sql.complete_orders`), so every partition
sees the same rows. This script measures the price of the extra sort keys on TPC-H
``lineitem`` at one scale factor, side by side in one run, for each query of
:data:`QUERIES` (each ties at its cut: ``l_shipdate`` has ~2,500 rows a day at SF 1):

* ``postgres``: the planner's estimated total cost (``EXPLAIN``) of the query as written and
  as completed, and the best of ``--repeat`` run times (``lineitem_sf<tag>``, loaded by
  :mod:`benchmarks.tpch`; PostgreSQL must be running);
* ``duckdb``: the best of ``--repeat`` run times over the Parquet file (an in-memory
  DuckDB with its default thread count; DuckDB shows no cost estimate).

Each result is fetched whole by the client. The completed query's rows are checked to be
a valid result of the original (same row count; for a top-N, the same sort keys).

Run from the repository root (data are generated and loaded when missing)::

    .venv/bin/python -m benchmarks.tiebreak --scale 1
    .venv/bin/python -m benchmarks.tiebreak --scale 0.01 --repeat 1 --json /tmp/tiebreak.json
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import psycopg

from benchmarks.common import progress
from benchmarks.harness import add_smoke_flag
from benchmarks.tpch import DEFAULT_CACHE_DIR, DEFAULT_PG_URL, lineitem_parquet, load_postgres
from sqlfeed.sql import complete_orders, parse, schema_sql

__all__ = ["QUERIES", "Result", "main", "measure"]

QUERIES = {
    "topn_narrow": (
        "SELECT l_orderkey, l_linenumber, l_shipdate, l_extendedprice FROM {t} "
        "ORDER BY l_shipdate LIMIT 1000"
    ),
    "topn_star": "SELECT * FROM {t} ORDER BY l_shipdate DESC LIMIT 1000",
    "topn_offset": (
        "SELECT l_returnflag, l_linestatus, l_quantity, l_orderkey FROM {t} "
        "ORDER BY l_returnflag, l_linestatus LIMIT 100 OFFSET 10000"
    ),
    "window_top3": (
        "SELECT * FROM (SELECT l_suppkey, l_orderkey, l_shipdate, ROW_NUMBER() OVER "
        "(PARTITION BY l_suppkey ORDER BY l_shipdate) AS rn FROM {t}) x WHERE rn <= 3"
    ),
}
"""The queries, ``{t}`` standing for the lineitem table; each ORDER BY ties at its cut."""


@dataclass
class Result:
    """One query on one engine: as written, and completed."""

    engine: str
    query: str
    completed_with: str
    seconds: float
    seconds_completed: float
    cost: float | None = None
    cost_completed: float | None = None
    rows: int = 0
    valid: bool = True

    @property
    def time_ratio(self) -> float:
        return self.seconds_completed / self.seconds if self.seconds else float("nan")


def _best(run: Callable[[], list[tuple[Any, ...]]], repeat: int) -> tuple[float, list[Any]]:
    best, rows = float("inf"), []
    for _ in range(repeat):
        started = time.perf_counter()
        rows = run()
        best = min(best, time.perf_counter() - started)
    return best, rows


def _same_cut(original: list[tuple[Any, ...]], completed: list[tuple[Any, ...]], name: str) -> bool:
    """Whether the completed query's rows could be the original's: as many, and for a top-N
    the same sort key values (the first ORDER BY column's) in the same multiset."""
    if len(original) != len(completed):
        return False
    if not name.startswith("topn"):
        return True
    position = {"topn_narrow": 2, "topn_star": 10, "topn_offset": 0}[name]
    return sorted(r[position] for r in original) == sorted(r[position] for r in completed)


def measure(
    engine: str,
    rows_of: Callable[[str], list[tuple[Any, ...]]],
    columns_of: Callable[[str], list[str]],
    table: str,
    repeat: int,
    cost_of: Callable[[str], float] | None = None,
) -> list[Result]:
    """Every query of :data:`QUERIES` as written and completed, on one engine."""
    results = []
    for name, template in QUERIES.items():
        sql = template.format(t=table)
        parsed = parse(sql, engine)
        completion = complete_orders(parsed, columns=columns_of(schema_sql(parsed)))
        tie_broken = parsed.dialect.sql(completion.parsed.tree)
        seconds, original = _best(functools.partial(rows_of, sql), repeat)
        seconds_completed, completed = _best(functools.partial(rows_of, tie_broken), repeat)
        result = Result(
            engine,
            name,
            "; ".join(completion.completed),
            seconds,
            seconds_completed,
            rows=len(original),
            valid=_same_cut(original, completed, name),
        )
        if cost_of is not None:
            result.cost, result.cost_completed = cost_of(sql), cost_of(tie_broken)
        progress(
            f"[{engine}] {name}: {seconds:.3f}s -> {seconds_completed:.3f}s "
            f"({result.time_ratio:.2f}x){'' if result.valid else '  INVALID'}"
        )
        results.append(result)
    return results


def _duckdb(parquet: Path, repeat: int) -> list[Result]:
    connection = duckdb.connect()
    try:
        path = str(parquet).replace("'", "''")
        connection.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{path}')")
        return measure(
            "duckdb",
            lambda q: connection.execute(q).fetchall(),
            lambda q: [d[0] for d in connection.execute(q).description],
            "lineitem",
            repeat,
        )
    finally:
        connection.close()


def _postgres(url: str, parquet: Path, scale: float, repeat: int) -> list[Result]:
    table = load_postgres(url, parquet, scale=scale)
    with psycopg.connect(url, autocommit=True) as connection:

        def rows_of(query: str) -> list[tuple[Any, ...]]:
            with connection.cursor() as cursor:
                cursor.execute(query)
                return cursor.fetchall()

        def columns_of(query: str) -> list[str]:
            with connection.cursor() as cursor:
                cursor.execute(query)
                return [d.name for d in cursor.description or []]

        def cost_of(query: str) -> float:
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (FORMAT JSON) {query}")
                (plan,) = cursor.fetchone() or (None,)
                return float(plan[0]["Plan"]["Total Cost"])

        return measure("postgres", rows_of, columns_of, table, repeat, cost_of)


def format_table(results: list[Result]) -> str:
    """The results as an aligned text table."""
    lines = [
        f"{'engine':9} {'query':12} {'rows':>6} {'time':>8} {'tie-broken':>10} {'ratio':>6} "
        f"{'cost':>12} {'tie-broken':>12} {'ratio':>6}  valid",
    ]
    for r in results:
        cost = "" if r.cost is None else f"{r.cost:12.0f}"
        cost_completed = "" if r.cost_completed is None else f"{r.cost_completed:12.0f}"
        cost_ratio = f"{r.cost_completed / r.cost:6.3f}" if r.cost and r.cost_completed else ""
        lines.append(
            f"{r.engine:9} {r.query:12} {r.rows:6d} {r.seconds:8.3f} {r.seconds_completed:10.3f} "
            f"{r.time_ratio:6.2f} {cost:>12} {cost_completed:>12} {cost_ratio:>6}  {r.valid}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table; 1 when a completed query's rows are invalid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1)")
    parser.add_argument(
        "--engines", nargs="+", choices=("duckdb", "postgres"), default=["duckdb", "postgres"]
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (3)")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--json", type=Path, help="also write the results here")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat = 0.01, 1
    started = time.perf_counter()
    parquet = lineitem_parquet(args.scale, args.cache_dir)
    results: list[Result] = []
    if "duckdb" in args.engines:
        results += _duckdb(parquet, args.repeat)
    if "postgres" in args.engines:
        results += _postgres(args.pg_url, parquet, args.scale, args.repeat)
    print(
        f"Tie-breakers, TPC-H lineitem SF {args.scale:g} ({platform.node()}, "
        f"{time.perf_counter() - started:.0f}s)"
    )
    print(format_table(results))
    for r in results:
        print(f"  {r.engine}/{r.query}: {r.completed_with}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    return 0 if all(r.valid for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
