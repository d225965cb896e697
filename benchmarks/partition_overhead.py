"""Measure what hash partitioning costs: the M partition queries against the one full query.

sqlfeed splits a SELECT into M partition queries, each of which re-runs the query with a
``hash(...) % M = k`` predicate. Each partition therefore scans (and hashes) the whole input
and returns 1/M of the rows. This script measures, for TPC-H ``lineitem`` at one scale
factor and side by side in one run::

    ratio = (sum of the M partition query times) / (time of the full query)

for each ``--partitions`` M, each engine and each hashing variant:

* ``columns``: all output columns (``columns=`` passed from the engine's schema),
* ``key``: the single key ``l_orderkey``,
* ``pk``: the composite primary key ``(l_orderkey, l_linenumber)``,
* ``wholerow``: PostgreSQL only, ``columns=None``, the whole row's text form is hashed.

``columns``, ``key`` and ``pk`` pass ``columns=`` so the predicate is pushed into the
query's own WHERE, as it is when sqlfeed knows the output columns.

Engines and how every result is consumed (the same way for the full query and the
partitions, one query at a time, on one connection):

* ``duckdb``: ``SELECT * FROM read_parquet('<file>')`` in an in-memory DuckDB with its
  default thread count, read as an Arrow record batch stream
  (``con.sql(q).to_arrow_reader()``) until exhausted.
* ``postgres``: ``SELECT * FROM lineitem_sf<tag>`` through psycopg 3 as
  ``COPY (<q>) TO STDOUT (FORMAT binary)``; the client only drains the bytes, so the time
  is the server's. COPY plans its query like a plain SELECT, so parallel workers may be
  used (the ``plan`` column shows what the planner chose for partition 0).

The full query takes the best of ``--repeat`` runs; the sum of partitions the best of
``--partition-repeat`` runs (default 1). Every partition's row count is recorded and their
sum is checked against the full query's count (the script exits with status 1 on a
mismatch). Hashing every column is slow in PostgreSQL, so a cell whose first partition
predicts more than ``--max-cell-seconds`` for all M partitions is not run to the end: its
sum is estimated as M x (time of partition 0) and marked ``est.`` (``0`` disables this).

Run from the repository root (PostgreSQL must be running; data is generated and loaded by
:mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.partition_overhead --scale 1
    .venv/bin/python -m benchmarks.partition_overhead --scale 0.01 --partitions 4 16 \\
        --engines duckdb postgres --variants key pk --json /tmp/overhead.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb
import psycopg
from psycopg import sql as pgsql

from benchmarks.common import progress as _progress
from benchmarks.harness import add_smoke_flag
from benchmarks.tpch import (
    DEFAULT_CACHE_DIR,
    DEFAULT_PG_URL,
    lineitem_parquet,
    load_postgres,
)
from sqlfeed.sql import partition_sqls

__all__ = ["VARIANTS", "Cell", "Variant", "main", "measure_engine"]

ENGINES = ("duckdb", "postgres")


@dataclass(frozen=True)
class Variant:
    """One way of choosing what the partition hash is computed over.

    Attributes:
        name: Short name used on the command line and in the table.
        key: The ``key=`` argument for :func:`partition_sqls` (None: all columns).
        pass_columns: Whether to pass the output column names as ``columns=``.
        description: What is hashed, for the JSON output.
    """

    name: str
    key: str | tuple[str, ...] | None
    pass_columns: bool
    description: str


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("columns", None, True, "all output columns"),
        Variant("key", "l_orderkey", True, "single key l_orderkey"),
        Variant("pk", ("l_orderkey", "l_linenumber"), True, "key (l_orderkey, l_linenumber)"),
        Variant("wholerow", None, False, "whole row, columns unknown (columns=None)"),
    )
}


@dataclass
class Cell:
    """The measurement for one engine, variant and partition count.

    Attributes:
        engine: ``duckdb`` or ``postgres``.
        variant: A key of :data:`VARIANTS`.
        m: Number of partitions.
        full_seconds: Best time of the full query.
        partitions_seconds: Sum of the M partition times (best repeat), or the estimate.
        ratio: ``partitions_seconds / full_seconds``.
        estimated: True when the cell was cut short and ``partitions_seconds`` is
            M x (time of partition 0).
        rows_ok: Whether the partitions' row counts add up to the full count (None when
            not all partitions ran).
        full_rows: Rows returned by the full query.
        partition_rows: Rows per partition (of the last complete run).
        partition_times: Seconds per partition (of the best complete run).
        plan: What the engine planned for partition 0 (PostgreSQL: Gather/workers).
        sql: Partition 0's SQL.
    """

    engine: str
    variant: str
    m: int
    full_seconds: float
    partitions_seconds: float
    ratio: float
    estimated: bool
    rows_ok: bool | None
    full_rows: int
    partition_rows: list[int] = field(default_factory=list)
    partition_times: list[float] = field(default_factory=list)
    plan: str = ""
    sql: str = ""


class Runner(Protocol):
    """An engine connection that runs a query and drains its whole result."""

    name: str
    dialect: str
    query: str
    columns: list[str]

    def run(self, sql: str) -> tuple[float, int]:
        """Run ``sql``, consume every row; return (seconds, row count)."""
        ...

    def plan(self, sql: str) -> str:
        """A short description of the engine's plan for ``sql``."""
        ...

    def info(self) -> dict[str, Any]:
        """Engine version and settings, for the JSON output."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class DuckDBRunner:
    """DuckDB in memory, reading the Parquet file; results drained as Arrow batches."""

    name = "duckdb"
    dialect = "duckdb"

    def __init__(self, parquet: Path) -> None:
        """Open an in-memory DuckDB (default threads) over ``parquet``.

        Args:
            parquet: The ``lineitem`` Parquet file.
        """
        self.con = duckdb.connect()
        path = str(Path(parquet).resolve()).replace("'", "''")
        self.query = f"SELECT * FROM read_parquet('{path}')"
        self.columns = [str(c) for c in self.con.sql(self.query).columns]

    def run(self, sql: str) -> tuple[float, int]:
        """Run ``sql`` and read every record batch.

        Args:
            sql: The query.

        Returns:
            (wall seconds, rows read).
        """
        start = time.perf_counter()
        rows = 0
        for batch in self.con.sql(sql).to_arrow_reader():
            rows += batch.num_rows
        return time.perf_counter() - start, rows

    def plan(self, sql: str) -> str:
        """DuckDB plans are not summarised; returns ``threads=<n>``.

        Args:
            sql: The query (unused).
        """
        del sql
        return f"threads={self._threads()}"

    def _threads(self) -> int:
        rows = self.con.execute("SELECT current_setting('threads')").fetchall()
        return int(rows[0][0]) if rows else 0

    def info(self) -> dict[str, Any]:
        """DuckDB version and thread count."""
        return {"version": duckdb.__version__, "threads": self._threads()}

    def close(self) -> None:
        """Close the connection."""
        self.con.close()


class PostgresRunner:
    """PostgreSQL through psycopg 3; results drained with binary COPY TO STDOUT."""

    name = "postgres"
    dialect = "postgres"

    def __init__(self, url: str, table: str) -> None:
        """Connect (autocommit) and read the table's column names.

        Args:
            url: libpq connection URL.
            table: The loaded ``lineitem`` table.
        """
        self.conn = psycopg.connect(url, autocommit=True)
        self.query = (
            pgsql.SQL("SELECT * FROM {}").format(pgsql.Identifier(table)).as_string(self.conn)
        )
        with self.conn.cursor() as cur:
            cur.execute(f"{self.query} LIMIT 0")
            self.columns = [d.name for d in cur.description or ()]

    def run(self, sql: str) -> tuple[float, int]:
        """Run ``COPY (sql) TO STDOUT (FORMAT binary)`` and drain it.

        Args:
            sql: The query.

        Returns:
            (wall seconds, rows copied as reported by the server).
        """
        copy_sql = f"COPY ({sql}) TO STDOUT (FORMAT binary)"
        with self.conn.cursor() as cur:
            start = time.perf_counter()
            with cur.copy(copy_sql) as copy:
                while copy.read():
                    pass
            elapsed = time.perf_counter() - start
            rows = cur.rowcount
        if rows < 0:
            raise RuntimeError("the server did not report how many rows COPY sent")
        return elapsed, rows

    def plan(self, sql: str) -> str:
        """Summarise ``EXPLAIN`` of ``sql``: top node and parallel workers planned.

        Args:
            sql: The query.

        Returns:
            E.g. ``"Gather, 2 workers"`` or ``"Seq Scan, serial"``.
        """
        with self.conn.cursor() as cur:
            cur.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            row = cur.fetchone()
        if row is None:
            return "?"
        doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        top = doc[0]["Plan"]
        workers = max((n.get("Workers Planned", 0) for n in _plan_nodes(top)), default=0)
        return f"{top['Node Type']}, " + (f"{workers} workers" if workers else "serial")

    def info(self) -> dict[str, Any]:
        """Server version and the settings that shape the plans."""
        settings = ("server_version", "max_parallel_workers_per_gather", "jit", "work_mem")
        values: dict[str, Any] = {}
        with self.conn.cursor() as cur:
            for setting in settings:
                row = cur.execute(f"SHOW {setting}").fetchone()
                values[setting] = row[0] if row else None
        return values

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield ``node`` and all its descendants in an EXPLAIN (FORMAT JSON) plan."""
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _run_partitions(
    runner: Runner, sqls: Sequence[str], budget: float, label: str
) -> tuple[list[float], list[int], float | None]:
    """Run every partition query once, in order.

    Args:
        runner: The engine.
        sqls: The M partition queries.
        budget: Stop after partition 0 when M x its time exceeds this (0: never stop).
        label: Prefix for progress lines.

    Returns:
        (seconds per partition, rows per partition, estimate): ``estimate`` is None when
        all partitions ran, else M x (seconds of partition 0) and the lists hold one entry.
    """
    m = len(sqls)
    times: list[float] = []
    rows: list[int] = []
    step = max(1, m // 4)
    for k, sql in enumerate(sqls):
        seconds, count = runner.run(sql)
        times.append(seconds)
        rows.append(count)
        if k == 0:
            predicted = seconds * m
            if budget and predicted > budget and m > 1:
                _progress(
                    f"{label}: partition 0 took {seconds:.2f}s, all {m} would take "
                    f"~{predicted:.0f}s > --max-cell-seconds {budget:g}: estimating"
                )
                return times, rows, predicted
            _progress(f"{label}: partition 0 took {seconds:.2f}s, expect ~{predicted:.1f}s")
        elif (k + 1) % step == 0 and k + 1 < m:
            _progress(f"{label}: {k + 1}/{m} partitions, {sum(times):.1f}s so far")
    return times, rows, None


def measure_engine(
    runner: Runner,
    variants: Sequence[Variant],
    partitions: Sequence[int],
    repeat: int,
    partition_repeat: int,
    budget: float,
) -> list[Cell]:
    """Time the full query and every (variant, M) partitioning of it on one engine.

    Args:
        runner: The engine connection.
        variants: The hashing variants to measure.
        partitions: The partition counts M.
        repeat: Runs of the full query (the best is kept).
        partition_repeat: Runs of each complete set of partitions (the best sum is kept).
        budget: ``--max-cell-seconds`` (0: run every cell to the end).

    Returns:
        One :class:`Cell` per (variant, M) measured.
    """
    full_times: list[float] = []
    full_rows = -1
    for i in range(repeat):
        seconds, full_rows = runner.run(runner.query)
        full_times.append(seconds)
        _progress(f"[{runner.name}] full query {i + 1}/{repeat}: {seconds:.2f}s, {full_rows} rows")
    full = min(full_times)
    _progress(f"[{runner.name}] full query plan: {runner.plan(runner.query)}")

    cells: list[Cell] = []
    for variant in variants:
        if variant.name == "wholerow" and runner.dialect != "postgres":
            _progress(f"[{runner.name}] {variant.name}: not supported by this engine, skipped")
            continue
        columns = runner.columns if variant.pass_columns else None
        key = list(variant.key) if isinstance(variant.key, tuple) else variant.key
        for m in partitions:
            label = f"[{runner.name} {variant.name} M={m}]"
            sqls = partition_sqls(runner.query, m, dialect=runner.dialect, key=key, columns=columns)
            plan = runner.plan(sqls[0])
            _progress(f"{label} plan: {plan}; partition 0: {sqls[0]}")
            best: tuple[list[float], list[int]] | None = None
            rows: list[int] = []
            estimate: float | None = None
            for r in range(partition_repeat):
                times, rows, estimate = _run_partitions(
                    runner, sqls, budget if r == 0 else 0, label
                )
                if estimate is not None:
                    break
                ok = sum(rows) == full_rows
                _progress(
                    f"{label} run {r + 1}/{partition_repeat}: sum {sum(times):.2f}s, "
                    f"rows {sum(rows)} {'== full ✓' if ok else f'!= full {full_rows} ✗ FAIL'}"
                )
                if best is None or sum(times) < sum(best[0]):
                    best = (times, rows)
            if estimate is not None:
                total, rows_ok, kept = estimate, None, (times, rows)
            else:
                assert best is not None
                kept = best
                total = sum(best[0])
                rows_ok = sum(rows) == full_rows
            cells.append(
                Cell(
                    engine=runner.name,
                    variant=variant.name,
                    m=m,
                    full_seconds=full,
                    partitions_seconds=total,
                    ratio=total / full if full > 0 else float("inf"),
                    estimated=estimate is not None,
                    rows_ok=rows_ok,
                    full_rows=full_rows,
                    partition_rows=kept[1],
                    partition_times=[round(t, 4) for t in kept[0]],
                    plan=plan,
                    sql=sqls[0],
                )
            )
    return cells


def format_table(cells: Sequence[Cell]) -> str:
    """Render the results as an aligned text table.

    Args:
        cells: The measurements.

    Returns:
        The table, one line per cell, with a header.
    """
    header = ("engine", "variant", "M", "full s", "sum parts s", "ratio", "s/part", "rows", "plan")
    lines = [header]
    for c in cells:
        check = "est." if c.estimated else ("✓" if c.rows_ok else "✗ FAIL")
        mark = "~" if c.estimated else ""
        lines.append(
            (
                c.engine,
                c.variant,
                str(c.m),
                f"{c.full_seconds:.2f}",
                f"{mark}{c.partitions_seconds:.2f}",
                f"{mark}{c.ratio:.1f}x",
                f"{c.partitions_seconds / c.m:.3f}",
                check,
                c.plan,
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    right = {2, 3, 4, 5, 6}
    out = []
    for n, row in enumerate(lines):
        cells_text = [
            text.rjust(widths[i]) if i in right else text.ljust(widths[i])
            for i, text in enumerate(row)
        ]
        out.append("  ".join(cells_text).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _make_runner(engine: str, args: argparse.Namespace, parquet: Path) -> Runner:
    """Open the runner for ``engine`` (loading the PostgreSQL table if it is missing)."""
    if engine == "duckdb":
        return DuckDBRunner(parquet)
    table = load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    return PostgresRunner(args.pg_url, table)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Cost of hash partitioning: sum of M partition queries / one full query."
    )
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[16, 64],
        metavar="M",
        help="partition counts (default: 16 64)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of the full query, best kept (default 3)"
    )
    parser.add_argument(
        "--partition-repeat",
        type=int,
        default=1,
        help="runs of each set of M partitions, best sum kept (default 1)",
    )
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=list(VARIANTS),
        help="hashing variants (default: all; wholerow is PostgreSQL only)",
    )
    parser.add_argument(
        "--max-cell-seconds",
        type=float,
        default=150.0,
        help="estimate a cell from its first partition when M x that exceeds this "
        "(default 150; 0 runs everything)",
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.partitions, args.repeat = 0.01, [4], 1
    if args.repeat < 1 or args.partition_repeat < 1:
        parser.error("--repeat and --partition-repeat must be >= 1")
    if any(m < 1 for m in args.partitions):
        parser.error("--partitions must be >= 1")
    if args.max_cell_seconds < 0:
        parser.error("--max-cell-seconds must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, optionally write JSON.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        0, or 1 when some partitions' row counts do not add up to the full count.
    """
    args = _parse_args(argv)
    variants = [VARIANTS[name] for name in dict.fromkeys(args.variants)]
    partitions = sorted(dict.fromkeys(args.partitions))
    started = time.perf_counter()
    parquet = lineitem_parquet(args.scale, args.cache_dir)
    _progress(f"TPC-H lineitem SF {args.scale:g}: {parquet}")

    cells: list[Cell] = []
    engines_info: dict[str, dict[str, Any]] = {}
    for engine in dict.fromkeys(args.engines):
        runner = _make_runner(engine, args, parquet)
        try:
            engines_info[engine] = {"query": runner.query, **runner.info()}
            _progress(f"[{engine}] {engines_info[engine]}")
            cells += measure_engine(
                runner,
                variants,
                partitions,
                args.repeat,
                args.partition_repeat,
                args.max_cell_seconds,
            )
        finally:
            runner.close()
    elapsed = time.perf_counter() - started

    print(
        f"Hash partitioning overhead, TPC-H lineitem SF {args.scale:g} "
        f"({platform.node()}, total {elapsed:.0f}s)"
    )
    print(format_table(cells))
    if any(c.estimated for c in cells):
        print("~ / est.: estimated as M x (time of partition 0), see --max-cell-seconds")
    failed = [c for c in cells if c.rows_ok is False]
    for c in failed:
        print(
            f"FAIL: {c.engine} {c.variant} M={c.m}: partitions hold {sum(c.partition_rows)} "
            f"rows, the full query {c.full_rows}",
            file=sys.stderr,
        )
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "parquet": str(parquet),
            "partitions": partitions,
            "repeat": args.repeat,
            "partition_repeat": args.partition_repeat,
            "max_cell_seconds": args.max_cell_seconds,
            "elapsed_seconds": round(elapsed, 2),
            "host": {"node": platform.node(), "python": platform.python_version()},
            "engines": engines_info,
            "variants": {v.name: asdict(v) for v in variants},
            "results": [asdict(c) for c in cells],
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        _progress(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
