"""Read throughput, peak memory and plan cost of sqlfeed against other readers, on TPC-H.

Two measurements of TPC-H ``lineitem`` at one scale factor, side by side in one run.

**A. Throughput and peak memory** (section ``throughput``). Every contender runs in its own
fresh Python subprocess, so its peak RSS is its own; the peak is ``VmHWM`` from
``/proc/self/status`` read in the child (``ru_maxrss`` is not used: it is inherited across
fork). The time runs from before connecting to after the last row was counted; imports
are excluded. Contenders (``--only`` ids):

* PostgreSQL ``SELECT * FROM lineitem_sf<tag>``:

  - ``pg-sqlfeed``: ``sqlfeed.plan(sql, source, strategy="auto")`` (default partition
    count; planning is timed and included) and a ``Feeder`` with ``--readers`` readers;
  - ``pg-connectorx``: ``connectorx.read_sql(url, sql, return_type="arrow",
    partition_on="l_orderkey", partition_num=2)``;
  - ``pg-adbc``: ``adbc_driver_postgresql.dbapi``, ``cursor.fetch_record_batch()``;
  - ``pg-pandas``: ``pandas.read_sql(sql, sqlalchemy_engine)`` (psycopg 3).

* DuckDB over the Parquet file (``SELECT * FROM read_parquet('<file>')``, in-memory DuckDB):

  - ``parquet-sqlfeed``: sqlfeed (auto) with ``--readers`` readers;
  - ``parquet-sqlfeed-key``: the same with ``key="l_orderkey"`` (auto then picks range);
  - ``parquet-duckdb``: ``duckdb.sql(sql).to_arrow_table()`` (``.arrow()`` before 2.0).

* DuckDB over the table ``lineitem_sf<tag>`` in the benchmark database (read-only):

  - ``duckdb-table-sqlfeed``: sqlfeed (auto, which picks rowid ranges);
  - ``duckdb-table-duckdb``: ``con.sql(sql).to_arrow_table()``.

**B. Cost of a plan** (section ``plans``): for M in ``--partitions`` and each strategy,

    read ratio  = (sum of the M partition reads) / (one read of the whole query)
    total ratio = (planning + sum of the M partition reads) / (one read of the whole query)

where every read is ``Source.read(sql, schema=...)`` drained to the end, one at a time in
sequence on one sqlfeed source. Planning includes whatever the planner runs on the
database: the bounds (quantile) query of ``range``, and for ``materialize`` the one-time
``CREATE TABLE ... AS`` (reported separately as the plan time and included in the total).
Two queries (ids ``plans-<engine>-<query>``): ``scan``, ``SELECT * FROM lineitem_sf<tag>``,
and ``agg``, a GROUP BY over ``lineitem`` (only ``lineitem`` is loaded)::

    SELECT l_orderkey, l_suppkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue,
           COUNT(*) AS n FROM lineitem_sf<tag> GROUP BY l_orderkey, l_suppkey

Strategies: ``auto`` (given a scratch schema, so it may materialize), ``ctid`` (scan only),
``range`` on ``l_orderkey``, ``hash`` (over all output columns) and ``materialize`` (agg
only). When ``auto`` chose the same strategy as an explicit row at the same M, that row is
not measured again but copied (marked ``= auto``). The plan of ``auto`` without a scratch
schema is printed too. PostgreSQL uses the scratch schema ``public``; DuckDB runs on a
temporary copy of the benchmark database with scratch schema ``main``; every scratch table
is dropped with :func:`sqlfeed.plans.drop_scratch`. The full read is the best of
``--repeat``. A cell whose partitions are predicted to take more than ``--max-cell-seconds``
(M x mean partition time so far) is cut short and estimated, marked ``~``.

The goals checked at the end: auto keeps every plan within 1.3x of one read (M <= 256);
sqlfeed from PostgreSQL >= 0.9x connectorx and >= 5x ``pandas.read_sql`` with at most half
its peak memory; sqlfeed from DuckDB >= 0.8x raw DuckDB. Nothing is asserted: the script
only reports.

Run from the repository root (PostgreSQL must be running; data is generated and loaded by
:mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.read_throughput --scale 1 --json /tmp/read.json
    .venv/bin/python -m benchmarks.read_throughput --scale 0.01 --only 'pg-*' 'plans-duckdb-*'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Outcome, Tally

__all__ = ["CONTENDERS", "Config", "Contender", "PlanCell", "main", "measure_plans"]


AGG_SQL = (
    "SELECT l_orderkey, l_suppkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, "
    "COUNT(*) AS n FROM {table} GROUP BY l_orderkey, l_suppkey"
)
SCAN_SQL = "SELECT * FROM {table}"
RANGE_KEY = "l_orderkey"

GOAL_AUTO_RATIO = 1.3
GOAL_VS_CONNECTORX = 0.9
GOAL_VS_PANDAS = 5.0
GOAL_MEMORY_VS_PANDAS = 0.5
GOAL_VS_DUCKDB = 0.8


# -- A: contenders, each run in a child process -------------------------------------------


@dataclass(frozen=True)
class Config:
    """What a child process needs to run a contender (passed as JSON on its command line).

    Attributes:
        pg_url: libpq URL, ``postgresql://...``.
        sa_url: the same as a SQLAlchemy URL, ``postgresql+psycopg://...``.
        pg_table: The PostgreSQL ``lineitem`` table.
        parquet: The ``lineitem`` Parquet file.
        duckdb_path: The DuckDB database file holding ``duckdb_table``.
        duckdb_table: The DuckDB ``lineitem`` table.
        readers: Feeder readers for sqlfeed.
    """

    pg_url: str
    sa_url: str
    pg_table: str
    parquet: str
    duckdb_path: str
    duckdb_table: str
    readers: int = 2

    def parquet_sql(self) -> str:
        """``SELECT * FROM read_parquet('<file>')``."""
        return "SELECT * FROM read_parquet('" + self.parquet.replace("'", "''") + "')"


Contender = harness.Contender[Config]
"""One way of reading the whole query; its group is the engine: ``postgres``,
``duckdb-parquet`` or ``duckdb-table``."""


def sqlfeed_read(
    source: Any, sql: str, readers: int, snapshot: bool = True, **plan_options: Any
) -> Outcome:
    """Plan ``sql`` (auto) on an open sqlfeed source and drain a Feeder; time both.

    ``snapshot``: the Feeder's (True, the default: one state of the tables for the read)."""
    import sqlfeed

    tally = Tally()
    start = time.perf_counter()
    plan = sqlfeed.plan(sql, source, strategy="auto", **plan_options)
    planned = time.perf_counter()
    for batch in sqlfeed.Feeder(plan, source, readers=readers, snapshot=snapshot):
        tally.add(batch)
    seconds = time.perf_counter() - start
    details = {
        "plan_seconds": planned - start,
        "strategy": plan.strategy,
        "reason": plan.reason,
        "partitions": plan.num_partitions,
        **tally.details(),
    }
    return tally.rows, seconds, details


def _pg_sqlfeed(cfg: Config) -> Outcome:
    """sqlfeed from PostgreSQL: connect, plan (auto), Feeder."""
    import sqlfeed

    start = harness.start()
    source = sqlfeed.connect(cfg.sa_url)
    connected = time.perf_counter() - start
    try:
        rows, seconds, details = sqlfeed_read(
            source, SCAN_SQL.format(table=cfg.pg_table), cfg.readers
        )
    finally:
        source.close()
    return rows, seconds + connected, details


def _pg_connectorx(cfg: Config) -> Outcome:
    """connectorx into one Arrow table, 2 partitions on ``l_orderkey``."""
    import connectorx

    start = harness.start()
    table: Any = connectorx.read_sql(
        cfg.pg_url,
        SCAN_SQL.format(table=cfg.pg_table),
        return_type="arrow",
        partition_on=RANGE_KEY,
        partition_num=2,
    )
    seconds = time.perf_counter() - start
    tally = Tally()
    tally.add(table)
    return tally.rows, seconds, {"version": connectorx.__version__, **tally.details()}


def _pg_adbc(cfg: Config) -> Outcome:
    """ADBC PostgreSQL driver, streamed with ``fetch_record_batch``."""
    import adbc_driver_postgresql
    import adbc_driver_postgresql.dbapi as dbapi

    start = harness.start()
    tally = Tally()
    with dbapi.connect(cfg.pg_url) as connection, connection.cursor() as cursor:
        cursor.execute(SCAN_SQL.format(table=cfg.pg_table))
        for batch in cursor.fetch_record_batch():
            tally.add(batch)
    details = {"version": adbc_driver_postgresql.__version__, **tally.details()}
    return tally.rows, time.perf_counter() - start, details


def _pg_pandas(cfg: Config) -> Outcome:
    """``pandas.read_sql`` through a SQLAlchemy engine (psycopg 3)."""
    import pandas
    import sqlalchemy

    start = harness.start()
    engine = sqlalchemy.create_engine(cfg.sa_url)
    try:
        frame = pandas.read_sql(SCAN_SQL.format(table=cfg.pg_table), engine)
    finally:
        engine.dispose()
    seconds = time.perf_counter() - start
    tally = Tally()
    tally.add_frame(frame)
    return tally.rows, seconds, {"version": pandas.__version__, **tally.details()}


def _parquet_sqlfeed(cfg: Config) -> Outcome:
    """sqlfeed over ``read_parquet`` in an in-memory DuckDB (auto, no key)."""
    import duckdb

    import sqlfeed

    start = harness.start()
    source = sqlfeed.connect(duckdb.connect())
    rows, _, details = sqlfeed_read(source, cfg.parquet_sql(), cfg.readers)
    return rows, time.perf_counter() - start, details


def _parquet_sqlfeed_key(cfg: Config) -> Outcome:
    """sqlfeed over ``read_parquet`` in an in-memory DuckDB, auto with ``key=l_orderkey``."""
    import duckdb

    import sqlfeed

    start = harness.start()
    source = sqlfeed.connect(duckdb.connect())
    rows, _, details = sqlfeed_read(source, cfg.parquet_sql(), cfg.readers, key=RANGE_KEY)
    return rows, time.perf_counter() - start, details


def _to_arrow_table(relation: Any) -> Any:
    """A DuckDB relation as an Arrow table (``to_arrow_table`` in 2.0, ``arrow`` before)."""
    to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
    return to_table()


def _parquet_duckdb(cfg: Config) -> Outcome:
    """Raw DuckDB: ``duckdb.sql(...)`` over ``read_parquet`` into one Arrow table."""
    import duckdb

    start = harness.start()
    table = _to_arrow_table(duckdb.sql(cfg.parquet_sql()))
    seconds = time.perf_counter() - start
    tally = Tally()
    tally.add(table)
    return tally.rows, seconds, {"version": duckdb.__version__, **tally.details()}


def _duckdb_table_sqlfeed(cfg: Config) -> Outcome:
    """sqlfeed over the DuckDB table (read-only connection; auto picks rowid ranges)."""
    import duckdb

    import sqlfeed

    start = harness.start()
    source = sqlfeed.connect(duckdb.connect(cfg.duckdb_path, read_only=True))
    sql = SCAN_SQL.format(table=cfg.duckdb_table)
    rows, _, details = sqlfeed_read(source, sql, cfg.readers)
    return rows, time.perf_counter() - start, details


def _duckdb_table_duckdb(cfg: Config) -> Outcome:
    """Raw DuckDB: the table into one Arrow table (read-only connection)."""
    import duckdb

    start = harness.start()
    with duckdb.connect(cfg.duckdb_path, read_only=True) as con:
        table = _to_arrow_table(con.sql(SCAN_SQL.format(table=cfg.duckdb_table)))
    seconds = time.perf_counter() - start
    tally = Tally()
    tally.add(table)
    return tally.rows, seconds, {"version": duckdb.__version__, **tally.details()}


CONTENDERS: dict[str, Contender] = {
    c.id: c
    for c in (
        harness.Contender(
            "pg-sqlfeed", "sqlfeed plan(auto) + Feeder", _pg_sqlfeed, group="postgres"
        ),
        harness.Contender(
            "pg-connectorx",
            "connectorx arrow, 2 partitions",
            _pg_connectorx,
            group="postgres",
            requires=("connectorx",),
        ),
        harness.Contender(
            "pg-adbc",
            "ADBC fetch_record_batch",
            _pg_adbc,
            group="postgres",
            requires=("adbc_driver_postgresql",),
        ),
        harness.Contender(
            "pg-pandas", "pandas.read_sql (SQLAlchemy)", _pg_pandas, group="postgres"
        ),
        harness.Contender(
            "parquet-sqlfeed", "sqlfeed auto + Feeder", _parquet_sqlfeed, group="duckdb-parquet"
        ),
        harness.Contender(
            "parquet-sqlfeed-key",
            "sqlfeed auto key=l_orderkey + Feeder",
            _parquet_sqlfeed_key,
            group="duckdb-parquet",
        ),
        harness.Contender(
            "parquet-duckdb",
            "duckdb.sql().to_arrow_table()",
            _parquet_duckdb,
            group="duckdb-parquet",
        ),
        harness.Contender(
            "duckdb-table-sqlfeed",
            "sqlfeed auto + Feeder",
            _duckdb_table_sqlfeed,
            group="duckdb-table",
        ),
        harness.Contender(
            "duckdb-table-duckdb",
            "con.sql().to_arrow_table()",
            _duckdb_table_duckdb,
            group="duckdb-table",
        ),
    )
}


@dataclass
class Throughput:
    """The result of one contender.

    Attributes:
        id: The contender's id.
        engine: Its engine group.
        label: What it runs.
        rows: Rows read (-1 on error).
        seconds: Best wall time (connect + plan + read; imports excluded).
        rows_per_second: ``rows / seconds``.
        peak_rss_bytes: ``VmHWM`` of the child process of the best run.
        rss_after_imports_bytes: Its ``VmRSS`` when the clock started (after imports).
        runs: Seconds of every run.
        details: What the contender reported (sqlfeed: strategy, partitions, plan seconds).
        error: The error, if it failed.
    """

    id: str
    engine: str
    label: str
    rows: int = -1
    seconds: float = 0.0
    rows_per_second: float = 0.0
    peak_rss_bytes: int = -1
    rss_after_imports_bytes: int = -1
    runs: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def measure_throughput(
    contenders: Sequence[Contender],
    cfg: Config,
    repeat: int,
    timeout: float,
    check: bool = False,
) -> tuple[list[Throughput], list[str]]:
    """Run every contender ``repeat`` times (interleaved), each run in its own subprocess.

    Args:
        contenders: What to run.
        cfg: Connection details and files.
        repeat: Runs per contender; the fastest is kept (with its peak RSS).
        timeout: Seconds after which a child is killed.
        check: Whether the children compute checksums.

    Returns:
        One :class:`Throughput` per contender, and the disagreements between the
        contenders of one engine (rows; checksums when ``check``).
    """
    measured = harness.measure(
        "read_throughput", [(c, cfg) for c in contenders], repeat, timeout, check=check
    )
    results = []
    for contender, got in zip(contenders, measured, strict=True):
        best = Throughput(contender.id, contender.group, contender.label)
        best.error = got.error or got.skipped
        best.runs = [round(r.seconds, 3) for r in got.runs]
        run = got.best_run
        if run is not None:
            best.rows, best.seconds = run.rows, run.seconds
            best.rows_per_second = run.rows / run.seconds if run.seconds > 0 else 0.0
            best.peak_rss_bytes = run.peak_rss_bytes
            best.rss_after_imports_bytes = run.rss_after_imports_bytes
            best.details = dict(run.details)
        results.append(best)
    return results, harness.agreement(measured)


def format_throughput(results: Sequence[Throughput]) -> str:
    """Render the throughput results as an aligned text table."""
    header = (
        "contender",
        "engine",
        "what",
        "rows",
        "seconds",
        "rows/s",
        "peak RSS MB",
        "RSS at start MB",
        "notes",
    )
    rows: list[tuple[str, ...]] = []
    for r in results:
        if r.error:
            rows.append((r.id, r.engine, r.label, "-", "-", "-", "-", "-", f"ERROR {r.error}"))
            continue
        notes = ""
        if "strategy" in r.details:
            notes = (
                f"{r.details['strategy']}, {r.details['partitions']} partitions, "
                f"plan {r.details['plan_seconds']:.2f}s"
            )
        rows.append(
            (
                r.id,
                r.engine,
                r.label,
                str(r.rows),
                f"{r.seconds:.2f}",
                f"{r.rows_per_second:,.0f}",
                f"{r.peak_rss_bytes / 2**20:,.0f}",
                f"{r.rss_after_imports_bytes / 2**20:,.0f}",
                notes,
            )
        )
    return harness.table(header, rows, right={3, 4, 5, 6, 7})


# -- B: the cost of a plan ----------------------------------------------------------------


@dataclass
class PlanCell:
    """The cost of one plan: one engine, query, strategy and partition count.

    Attributes:
        engine: ``postgres`` or ``duckdb``.
        query: ``scan`` or ``agg``.
        requested: The strategy asked for.
        strategy: The strategy the planner chose.
        m: Partitions asked for.
        partitions: Partitions the plan has.
        full_seconds: Best time of one read of the whole query.
        plan_seconds: Time of ``sqlfeed.plan`` (for materialize: the one-time materialization).
        parts_seconds: Sum of the partition reads (or the estimate).
        read_ratio: ``parts_seconds / full_seconds``.
        total_ratio: ``(plan_seconds + parts_seconds) / full_seconds``.
        estimated: Whether the partitions were cut short and their sum estimated.
        rows_ok: Whether the partitions' rows add up to the full read's (None: not all read).
        full_rows: Rows of the full read.
        partition_rows: Rows per partition read.
        partition_times: Seconds per partition read.
        reason: The planner's reason.
        same_as: Set when the row copies the measurement of another (``auto``).
        first_sql: Partition 0's SQL.
    """

    engine: str
    query: str
    requested: str
    strategy: str
    m: int
    partitions: int
    full_seconds: float
    plan_seconds: float
    parts_seconds: float
    read_ratio: float
    total_ratio: float
    estimated: bool
    rows_ok: bool | None
    full_rows: int
    partition_rows: list[int] = field(default_factory=list)
    partition_times: list[float] = field(default_factory=list)
    reason: str = ""
    same_as: str | None = None
    first_sql: str = ""


STRATEGY_OPTIONS: dict[str, dict[str, Any]] = {
    "auto": {"strategy": "auto"},
    "ctid": {"strategy": "ctid"},
    "range": {"strategy": "range", "key": RANGE_KEY},
    "hash": {"strategy": "hash"},
    "materialize": {"strategy": "materialize"},
}
"""``sqlfeed.plan`` options per strategy row (auto and materialize also get ``scratch``)."""

QUERY_STRATEGIES = {
    "scan": ("auto", "ctid", "range", "hash"),
    "agg": ("auto", "materialize", "range", "hash"),
}


def _drain(source: Any, sql: str, schema: Any, estimate: int | None = None) -> tuple[float, int]:
    """Read every batch of ``sql`` through ``Source.read`` (with the plan's row ``estimate``,
    as a Feeder, a job worker or a Ray/Dask task passes it); return (seconds, rows)."""
    start = time.perf_counter()
    rows = 0
    for batch in source.read(sql, schema=schema, rows=estimate):
        rows += batch.num_rows
    return time.perf_counter() - start, rows


def _read_partitions(
    source: Any, partitions: Sequence[Any], schema: Any, budget: float, label: str
) -> tuple[list[float], list[int], float | None]:
    """Read the partitions one after another.

    Args:
        source: The sqlfeed source.
        partitions: The plan's partitions.
        schema: The plan's Arrow schema.
        budget: Stop once M x (mean partition time so far) exceeds this (0: never).
        label: Prefix of the progress lines.

    Returns:
        (seconds per partition read, rows per partition read, estimate): ``estimate`` is
        None when all were read, else M x the mean time of those read.
    """
    m = len(partitions)
    times: list[float] = []
    rows: list[int] = []
    step = max(1, m // 4)
    for k, partition in enumerate(partitions):
        seconds, count = _drain(source, partition.sql, schema, partition.estimated_rows)
        times.append(seconds)
        rows.append(count)
        predicted = sum(times) / len(times) * m
        if budget and k + 1 < m and predicted > budget and (k == 0 or sum(times) > budget / 2):
            _progress(
                f"{label}: {k + 1} partition(s) took {sum(times):.2f}s, all {m} would take "
                f"~{predicted:.0f}s > --max-cell-seconds {budget:g}: estimating"
            )
            return times, rows, predicted
        if k == 0:
            _progress(f"{label}: partition 0 took {seconds:.2f}s, expect ~{predicted:.1f}s")
        elif (k + 1) % step == 0 and k + 1 < m:
            _progress(f"{label}: {k + 1}/{m} partitions, {sum(times):.1f}s so far")
    return times, rows, None


def measure_plans(
    engine: str,
    source: Any,
    query_name: str,
    sql: str,
    strategies: Sequence[str],
    partitions: Sequence[int],
    repeat: int,
    budget: float,
    scratch: str,
) -> tuple[list[PlanCell], dict[str, Any]]:
    """Measure the plan cost of ``sql`` for every strategy and partition count.

    Args:
        engine: Engine name for the table.
        source: An open sqlfeed source.
        query_name: ``scan`` or ``agg``.
        sql: The query.
        strategies: Keys of :data:`STRATEGY_OPTIONS`, ``auto`` first.
        partitions: The partition counts M.
        repeat: Reads of the whole query (the best is kept).
        budget: ``--max-cell-seconds`` (0: read every partition).
        scratch: The scratch schema for ``auto`` and ``materialize``.

    Returns:
        (the cells, notes: the full read's times and auto's choice without scratch).
    """
    import sqlfeed
    from sqlfeed.plans import drop_scratch

    tag = f"[{engine} {query_name}]"
    schema = source.schema(sql)
    full_times = []
    full_rows = -1
    for i in range(repeat):
        seconds, full_rows = _drain(source, sql, schema)
        full_times.append(seconds)
        _progress(f"{tag} full read {i + 1}/{repeat}: {seconds:.2f}s, {full_rows} rows")
    full = min(full_times)
    plain_auto = sqlfeed.plan(sql, source, partitions=min(partitions), strategy="auto")
    drop_scratch(plain_auto, source)  # auto may materialize into sqlfeed_scratch: ours to drop
    notes = {
        "full_read_seconds": [round(t, 3) for t in full_times],
        "auto_without_scratch": {"strategy": plain_auto.strategy, "reason": plain_auto.reason},
    }
    _progress(f"{tag} auto without scratch: {plain_auto.strategy} ({plain_auto.reason})")

    cells: list[PlanCell] = []
    for m in partitions:
        auto_cell: PlanCell | None = None
        auto_key: tuple[str, ...] | None = None
        for requested in strategies:
            label = f"{tag} {requested} M={m}"
            options = dict(STRATEGY_OPTIONS[requested])
            key = (options["key"],) if "key" in options else None
            if auto_cell is not None and auto_cell.strategy == requested and auto_key == key:
                copy = PlanCell(**{**asdict(auto_cell), "requested": requested, "same_as": "auto"})
                cells.append(copy)
                _progress(f"{label}: same plan as auto, not measured again")
                continue
            if requested in ("auto", "materialize"):
                options["scratch"] = scratch
            start = time.perf_counter()
            plan = sqlfeed.plan(sql, source, partitions=m, **options)
            plan_seconds = time.perf_counter() - start
            try:
                _progress(
                    f"{label}: planned {plan.strategy}, {plan.num_partitions} partitions in "
                    f"{plan_seconds:.2f}s; partition 0: {plan.partitions[0].sql}"
                )
                times, rows, estimate = _read_partitions(
                    source, plan.partitions, plan.arrow_schema(), budget, label
                )
            finally:
                drop_scratch(plan, source)
            parts = estimate if estimate is not None else sum(times)
            rows_ok = None if estimate is not None else sum(rows) == full_rows
            cell = PlanCell(
                engine=engine,
                query=query_name,
                requested=requested,
                strategy=plan.strategy,
                m=m,
                partitions=plan.num_partitions,
                full_seconds=full,
                plan_seconds=plan_seconds,
                parts_seconds=parts,
                read_ratio=parts / full,
                total_ratio=(plan_seconds + parts) / full,
                estimated=estimate is not None,
                rows_ok=rows_ok,
                full_rows=full_rows,
                partition_rows=rows,
                partition_times=[round(t, 4) for t in times],
                reason=plan.reason,
                first_sql=plan.partitions[0].sql,
            )
            check = "est." if rows_ok is None else ("rows ok" if rows_ok else "ROWS MISMATCH")
            _progress(
                f"{label}: plan {plan_seconds:.2f}s + parts {'~' * cell.estimated}{parts:.2f}s "
                f"= {cell.total_ratio:.2f}x one read ({check})"
            )
            cells.append(cell)
            if requested == "auto":
                auto_cell, auto_key = cell, plan.key
    return cells, notes


def format_plans(cells: Sequence[PlanCell]) -> str:
    """Render the plan-cost results as an aligned text table."""
    header = (
        "engine",
        "query",
        "strategy",
        "M",
        "parts",
        "full s",
        "plan s",
        "parts s",
        "read x",
        "total x",
        "rows",
        "note",
    )
    rows = []
    for c in cells:
        mark = "~" if c.estimated else ""
        chosen = c.requested if c.requested == c.strategy else f"{c.requested}->{c.strategy}"
        check = "est." if c.rows_ok is None else ("ok" if c.rows_ok else "MISMATCH")
        rows.append(
            (
                c.engine,
                c.query,
                chosen,
                str(c.m),
                str(c.partitions),
                f"{c.full_seconds:.2f}",
                f"{c.plan_seconds:.2f}",
                f"{mark}{c.parts_seconds:.2f}",
                f"{mark}{c.read_ratio:.2f}",
                f"{mark}{c.total_ratio:.2f}",
                check,
                f"= {c.same_as} row" if c.same_as else "",
            )
        )
    return harness.table(header, rows, right=set(range(3, 10)))


# -- goals --------------------------------------------------------------------------------


@dataclass
class Goal:
    """One of the product owner's goals and whether this run meets it.

    Attributes:
        goal: The goal, in words.
        measured: What was measured.
        met: True/False, or None when not measured in this run.
    """

    goal: str
    measured: str
    met: bool | None


def _ratio(a: Throughput | None, b: Throughput | None) -> float | None:
    """``a``'s throughput over ``b``'s, None when either is missing or failed."""
    if a is None or b is None or a.error or b.error or b.rows_per_second <= 0:
        return None
    return a.rows_per_second / b.rows_per_second


def ratios(results: Sequence[Throughput]) -> dict[str, float | None]:
    """The throughput and memory ratios of sqlfeed against the others."""
    by_id = {r.id: r for r in results}
    get = by_id.get
    pandas, sqlfeed_pg = get("pg-pandas"), get("pg-sqlfeed")
    memory = None
    if pandas and sqlfeed_pg and not pandas.error and not sqlfeed_pg.error:
        memory = sqlfeed_pg.peak_rss_bytes / pandas.peak_rss_bytes
    return {
        "pg sqlfeed/connectorx": _ratio(sqlfeed_pg, get("pg-connectorx")),
        "pg sqlfeed/adbc": _ratio(sqlfeed_pg, get("pg-adbc")),
        "pg sqlfeed/pandas": _ratio(sqlfeed_pg, pandas),
        "pg peak RSS sqlfeed/pandas": memory,
        "parquet sqlfeed/duckdb": _ratio(get("parquet-sqlfeed"), get("parquet-duckdb")),
        "parquet sqlfeed(key)/duckdb": _ratio(get("parquet-sqlfeed-key"), get("parquet-duckdb")),
        "table sqlfeed/duckdb": _ratio(get("duckdb-table-sqlfeed"), get("duckdb-table-duckdb")),
    }


def evaluate_goals(results: Sequence[Throughput], cells: Sequence[PlanCell]) -> list[Goal]:
    """Check the product owner's goals against this run's measurements."""
    r = ratios(results)
    goals: list[Goal] = []

    def at_least(name: str, key: str, floor: float) -> None:
        value = r[key]
        shown = "not measured" if value is None else f"{key} = {value:.2f}x"
        goals.append(Goal(name, shown, None if value is None else value >= floor))

    groups: dict[tuple[str, str], list[PlanCell]] = {}
    for c in cells:
        if c.requested == "auto" and c.m <= 256:
            groups.setdefault((c.engine, c.query), []).append(c)
    for (engine, query), group in groups.items():
        worst = max(group, key=lambda c: c.total_ratio)
        goals.append(
            Goal(
                f"auto within {GOAL_AUTO_RATIO}x of one read, M <= 256 ({engine} {query})",
                f"worst {'~' * worst.estimated}{worst.total_ratio:.2f}x at M={worst.m} "
                f"({worst.strategy}, plan {worst.plan_seconds:.1f}s incl.)",
                worst.total_ratio <= GOAL_AUTO_RATIO,
            )
        )
    at_least(
        f"PostgreSQL: sqlfeed >= {GOAL_VS_CONNECTORX}x connectorx",
        "pg sqlfeed/connectorx",
        GOAL_VS_CONNECTORX,
    )
    at_least(
        f"PostgreSQL: sqlfeed >= {GOAL_VS_PANDAS:g}x pandas.read_sql",
        "pg sqlfeed/pandas",
        GOAL_VS_PANDAS,
    )
    memory = r["pg peak RSS sqlfeed/pandas"]
    goals.append(
        Goal(
            f"PostgreSQL: sqlfeed peak RSS <= {GOAL_MEMORY_VS_PANDAS}x pandas' ('a fraction')",
            "not measured" if memory is None else f"peak RSS sqlfeed/pandas = {memory:.2f}",
            None if memory is None else memory <= GOAL_MEMORY_VS_PANDAS,
        )
    )
    at_least(
        f"DuckDB Parquet: sqlfeed >= {GOAL_VS_DUCKDB}x raw DuckDB",
        "parquet sqlfeed/duckdb",
        GOAL_VS_DUCKDB,
    )
    at_least(
        f"DuckDB table: sqlfeed >= {GOAL_VS_DUCKDB}x raw DuckDB",
        "table sqlfeed/duckdb",
        GOAL_VS_DUCKDB,
    )
    return goals


# -- main ---------------------------------------------------------------------------------


def _selected(item_id: str, section: str, only: Sequence[str] | None) -> bool:
    """Whether ``--only`` (glob patterns over ids, or a section name) selects ``item_id``."""
    if not only:
        return True
    return any(pattern == section or fnmatch.fnmatchcase(item_id, pattern) for pattern in only)


def _warm_caches(cfg: Config, need_pg: bool) -> None:
    """Read the Parquet and DuckDB files and scan the PostgreSQL table once (OS page cache)."""
    for path in (cfg.parquet, cfg.duckdb_path):
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
    if need_pg:
        import psycopg
        from psycopg import sql

        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(cfg.pg_table))
        with psycopg.connect(cfg.pg_url) as conn:
            conn.execute(query).fetchone()


def _plan_sections(
    args: argparse.Namespace, cfg: Config, only: Sequence[str] | None
) -> tuple[list[PlanCell], dict[str, Any]]:
    """Run part B on the selected engines and queries."""
    import duckdb

    import sqlfeed

    cells: list[PlanCell] = []
    notes: dict[str, Any] = {}
    queries = {"scan": SCAN_SQL, "agg": AGG_SQL}
    wanted = {
        (engine, query)
        for engine in ("pg", "duckdb")
        for query in queries
        if _selected(f"plans-{engine}-{query}", "plans", only)
    }
    common = (args.partitions, args.repeat, args.max_cell_seconds)
    if any(engine == "pg" for engine, _ in wanted):
        source = sqlfeed.connect(cfg.sa_url)
        try:
            for query, text in queries.items():
                if ("pg", query) in wanted:
                    got, note = measure_plans(
                        "postgres",
                        source,
                        query,
                        text.format(table=cfg.pg_table),
                        _strategies(query, args.strategies),
                        *common,
                        scratch="public",
                    )
                    cells += got
                    notes[f"postgres {query}"] = note
        finally:
            source.close()
    if any(engine == "duckdb" for engine, _ in wanted):
        with tempfile.TemporaryDirectory(prefix="read-throughput-") as tmp:
            copy = Path(tmp) / "tpch.duckdb"
            shutil.copyfile(cfg.duckdb_path, copy)
            _progress(f"[duckdb] plans run on a copy of {cfg.duckdb_path}: {copy}")
            with duckdb.connect(str(copy)) as con:
                source = sqlfeed.connect(con)
                for query, text in queries.items():
                    if ("duckdb", query) in wanted:
                        got, note = measure_plans(
                            "duckdb",
                            source,
                            query,
                            text.format(table=cfg.duckdb_table),
                            _strategies(query, args.strategies),
                            *common,
                            scratch="main",
                        )
                        cells += got
                        notes[f"duckdb {query}"] = note
    return cells, notes


def _strategies(query: str, wanted: Sequence[str] | None) -> tuple[str, ...]:
    """The strategies measured for ``query``: all of :data:`QUERY_STRATEGIES`, or those
    of ``wanted`` (``auto`` always first)."""
    names = QUERY_STRATEGIES[query]
    return names if wanted is None else tuple(n for n in names if n == "auto" or n in wanted)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description="sqlfeed read throughput and memory against connectorx, ADBC, pandas and "
        "DuckDB, and the cost of its plans, on TPC-H lineitem."
    )
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="PATTERN",
        help="run only these: 'throughput', 'plans', or glob patterns over the ids ("
        + ", ".join(CONTENDERS)
        + ", plans-{pg,duckdb}-{scan,agg})",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[16, 64, 256],
        metavar="M",
        help="partition counts for the plan costs (default: 16 64 256)",
    )
    parser.add_argument("--readers", type=int, default=2, help="sqlfeed Feeder readers (default 2)")
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=None,
        metavar="NAME",
        help="plan costs: measure auto and only these (default: every strategy of the query)",
    )
    parser.add_argument(
        "--throughput-repeat",
        type=int,
        default=1,
        help="runs of each throughput contender, fastest kept (default 1)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="full reads per query in the plan costs, best kept (default 2)",
    )
    parser.add_argument(
        "--max-cell-seconds",
        type=float,
        default=100.0,
        help="estimate a plan's partition reads as M x (mean so far) when that exceeds this "
        "(default 100; 0 reads everything)",
    )
    parser.add_argument(
        "--child-timeout",
        type=float,
        default=900.0,
        help="seconds after which a throughput child is killed (default 900)",
    )
    parser.add_argument("--pg-url", default=None, help="libpq URL (default: benchmarks.tpch's)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--duckdb", type=Path, default=None, help="DuckDB database file")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default=None, help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat, args.throughput_repeat = 0.01, 1, 1
        args.partitions, args.strategies = [4], ["range"]
    if args.child is None:
        if args.repeat < 1 or args.throughput_repeat < 1 or args.readers < 1:
            parser.error("--repeat, --throughput-repeat and --readers must be >= 1")
        if any(m < 1 for m in args.partitions):
            parser.error("--partitions must be >= 1")
        if args.max_cell_seconds < 0:
            parser.error("--max-cell-seconds must be >= 0")
        args.partitions = sorted(dict.fromkeys(args.partitions))
    return args


def _prepare(args: argparse.Namespace) -> Config:
    """Generate/load the data (when missing) and return the child configuration."""
    from benchmarks.tpch import (
        DEFAULT_CACHE_DIR,
        DEFAULT_PG_URL,
        lineitem_parquet,
        load_duckdb,
        load_postgres,
        table_name,
    )

    cache_dir: Path = args.cache_dir or DEFAULT_CACHE_DIR
    pg_url: str = args.pg_url or DEFAULT_PG_URL
    db_path: Path = args.duckdb or cache_dir / "tpch.duckdb"
    parquet = lineitem_parquet(args.scale, cache_dir)
    pg_table = load_postgres(pg_url, parquet, "lineitem", args.scale)
    duck_table = load_duckdb(db_path, parquet, table_name("lineitem", args.scale))
    scheme, sep, rest = pg_url.partition("://")
    sa_url = (
        f"postgresql+psycopg://{rest}" if sep and scheme in ("postgresql", "postgres") else pg_url
    )
    return Config(
        pg_url=pg_url,
        sa_url=sa_url,
        pg_table=pg_table,
        parquet=str(parquet.resolve()),
        duckdb_path=str(db_path.resolve()),
        duckdb_table=duck_table,
        readers=args.readers,
    )


def _print_report(
    results: Sequence[Throughput],
    cells: Sequence[PlanCell],
    notes: dict[str, Any],
    goals: Sequence[Goal],
) -> None:
    """Print the tables, the ratios and the goals to stdout."""
    if results:
        print("\nA. Throughput and peak memory (each contender in a fresh process)")
        print(format_throughput(results))
        for name, value in ratios(results).items():
            if value is not None:
                print(f"  {name}: {value:.2f}")
        for r in results:
            if "reason" in r.details:
                print(f"  {r.id} plan: {r.details['reason']}")
    if cells:
        print("\nB. Cost of a plan: partitions read one by one vs one read of the query")
        print(format_plans(cells))
        print("  read x = sum of partition reads / one read; total x = (plan + reads) / one read")
        if any(c.estimated for c in cells):
            print("  ~ = estimated as M x mean partition time (cut short, --max-cell-seconds)")
        for name, note in notes.items():
            plain = note["auto_without_scratch"]
            print(f"  {name}: auto without scratch picks {plain['strategy']} ({plain['reason']})")
    print("\nGoals")
    for g in goals:
        verdict = {True: "MET", False: "MISSED", None: "n/a"}[g.met]
        print(f"  [{verdict:>6}] {g.goal}: {g.measured}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and goals, optionally write JSON.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        0; 1 when a contender failed or a plan's partitions did not add up to the query.
    """
    args = _parse_args(argv)
    if args.child is not None:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config or "{}")
    started = time.perf_counter()
    load_before = os.getloadavg()
    _progress(
        f"load average at start: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}"
    )
    cfg = _prepare(args)
    _progress(f"TPC-H lineitem SF {args.scale:g}: {cfg.parquet}, {cfg.pg_table}, {cfg.duckdb_path}")
    only = args.only
    contenders = [c for c in CONTENDERS.values() if _selected(c.id, "throughput", only)]
    need_pg = any(c.group == "postgres" for c in contenders) or any(
        _selected(f"plans-pg-{q}", "plans", only) for q in ("scan", "agg")
    )
    _warm_caches(cfg, need_pg)

    results, disagreements = measure_throughput(
        contenders, cfg, args.throughput_repeat, args.child_timeout, check=args.smoke
    )
    cells, notes = _plan_sections(args, cfg, only)
    goals = evaluate_goals(results, cells)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    print(
        f"sqlfeed read throughput, TPC-H lineitem SF {args.scale:g} ({platform.node()}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} at start, "
        f"{load_after[0]:.2f} at end; total {elapsed:.0f}s)"
    )
    _print_report(results, cells, notes, goals)
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "config": asdict(cfg),
            "partitions": args.partitions,
            "repeat": args.repeat,
            "throughput_repeat": args.throughput_repeat,
            "max_cell_seconds": args.max_cell_seconds,
            "elapsed_seconds": round(elapsed, 1),
            "host": {
                "node": platform.node(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_average_start": load_before,
                "load_average_end": load_after,
            },
            "throughput": [asdict(r) for r in results],
            "ratios": ratios(results),
            "plans": [asdict(c) for c in cells],
            "plan_notes": notes,
            "goals": [asdict(g) for g in goals],
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        _progress(f"wrote {args.json}")
    failed = any(r.error and not r.error.startswith("not installed") for r in results)
    failed = failed or any(c.rows_ok is False for c in cells)
    failed = failed or bool(disagreements)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
