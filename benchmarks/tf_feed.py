"""tf.data feed throughput: sqlfeed against what users do today, on TPC-H ``lineitem``.

Rows per second consumed by the same loop over a ``tf.data.Dataset``
(``for batch in ds: rows += batch["l_orderkey"].shape[0]``) of the numeric columns of
``lineitem`` (``l_orderkey, l_partkey, l_suppkey, l_linenumber`` as int64, ``l_quantity,
l_extendedprice, l_discount, l_tax`` as float64), in batches of ``--batch-size`` (1024),
side by side in one run. Every contender runs in a fresh Python subprocess; the clock
starts after the imports (TensorFlow's included) and covers everything else: connecting,
planning, reading, converting, batching and the loop. Contenders (``--only`` ids):

* ``sqlfeed-duckdb``: ``sqlfeed.tf.dataset(sql, source, batch_size=1024)`` over the
  DuckDB benchmark database (read-only), default plan, ``--readers`` readers;
* ``sqlfeed-postgres``: the same over PostgreSQL;
* ``memory-generator``: the in-process upper bound of a Python generator:
  ``from_generator`` yielding dicts of 1024-row NumPy slices of columns already in
  memory (loaded before the clock starts);
* ``memory-slices``: ``from_tensor_slices(columns).batch(1024)`` over the same in-memory
  columns (what most tutorials do; building the dataset is timed);
* ``pandas-postgres``: ``pandas.read_sql(sql, engine)`` then
  ``from_tensor_slices(dict(frame)).batch(1024)`` (what users do today), read time
  included;
* ``row-generator``: a per-row generator (``from_generator`` yielding one row's dict,
  then ``.batch(1024)``) over the first ``--row-rows`` rows only: never feed row by row.

Goals (reported, not asserted): sqlfeed from DuckDB >= 0.5x the in-memory batch
generator; sqlfeed from PostgreSQL >= 3x the pandas path. The machine may be shared and
noisy: compare the ratios of one run.

Run from the repository root (PostgreSQL must be running; the data is generated and loaded
by :mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.tf_feed --scale 1
    .venv/bin/python -m benchmarks.tf_feed --scale 0.1 --only 'sqlfeed-*' memory-generator
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Contender, Outcome, Tally

__all__ = ["CONTENDERS", "Config", "main"]
"""Prefix of the one stdout line on which a child process reports its result."""

INT_COLUMNS = ("l_orderkey", "l_partkey", "l_suppkey", "l_linenumber")
FLOAT_COLUMNS = ("l_quantity", "l_extendedprice", "l_discount", "l_tax")
COLUMNS = INT_COLUMNS + FLOAT_COLUMNS
GOAL_DUCKDB_VS_GENERATOR = 0.5
GOAL_POSTGRES_VS_PANDAS = 3.0


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line)."""

    pg_url: str
    sa_url: str
    pg_table: str
    duckdb_path: str
    duckdb_table: str
    batch_size: int = 1024
    readers: int = 2
    row_rows: int = 50_000

    def scan_sql(self, table: str) -> str:
        """The numeric columns of ``table``."""
        return f"SELECT {', '.join(COLUMNS)} FROM {table}"

    def typed_sql(self, table: str) -> str:
        """The same with the NUMERIC columns cast to double (for in-memory contenders)."""
        casts = [f"CAST({c} AS BIGINT) AS {c}" for c in INT_COLUMNS]
        casts += [f"CAST({c} AS DOUBLE) AS {c}" for c in FLOAT_COLUMNS]
        return f"SELECT {', '.join(casts)} FROM {table}"


def _tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    return tf


def _consume(dataset: Any) -> int:
    """The loop every contender is measured with: rows seen (and, when checking, the sum
    of ``l_orderkey`` kept for :func:`_checked`)."""
    tally = Tally()
    for batch in dataset:
        features = batch[0] if isinstance(batch, tuple) else batch
        keys = features["l_orderkey"]
        if tally.checksum is None:
            tally.rows += int(keys.shape[0])
        else:
            tally.add_values(int(keys.shape[0]), keys)
    _TALLY.append(tally)
    return tally.rows


_TALLY: list[Tally] = []
"""The last loop's tally (one per child process)."""


def _checked(outcome: Outcome) -> Outcome:
    """``outcome`` with the loop's checksum in its details (when checking)."""
    rows, seconds, details = outcome
    if _TALLY:
        details.update(_TALLY[-1].details())
    return rows, seconds, details


def _in_memory(cfg: Config, limit: int | None = None) -> dict[str, Any]:
    """The columns as NumPy arrays, read from DuckDB (before the clock starts)."""
    import duckdb

    sql = cfg.typed_sql(cfg.duckdb_table) + (f" LIMIT {limit}" if limit else "")
    with duckdb.connect(cfg.duckdb_path, read_only=True) as con:
        arrays: dict[str, Any] = con.sql(sql).fetchnumpy()
    return {name: arrays[name] for name in COLUMNS}


def _signature(tf: Any, columns: dict[str, Any], rank: int = 1) -> dict[str, Any]:
    shape = [None] if rank else []
    return {k: tf.TensorSpec(shape, tf.as_dtype(v.dtype)) for k, v in columns.items()}


def _sqlfeed(cfg: Config, source_target: Any, sql: str) -> Outcome:
    _tensorflow()
    import sqlfeed
    import sqlfeed.tf

    start = time.perf_counter()
    source = sqlfeed.connect(source_target)
    feed = sqlfeed.tf.Feed(sql, source, batch_size=cfg.batch_size, readers=cfg.readers)
    planned = time.perf_counter() - start
    rows = _consume(feed.dataset)
    seconds = time.perf_counter() - start
    plan = feed.plan
    return (
        rows,
        seconds,
        {
            "strategy": plan.strategy,
            "partitions": plan.num_partitions,
            "plan_seconds": round(planned, 3),
        },
    )


def _sqlfeed_duckdb(cfg: Config) -> Outcome:
    import duckdb

    connection = duckdb.connect(cfg.duckdb_path, read_only=True)
    return _sqlfeed(cfg, connection, cfg.scan_sql(cfg.duckdb_table))


def _sqlfeed_postgres(cfg: Config) -> Outcome:
    return _sqlfeed(cfg, cfg.sa_url, cfg.scan_sql(cfg.pg_table))


def _memory_generator(cfg: Config) -> Outcome:
    tf = _tensorflow()
    columns = _in_memory(cfg)
    total = len(columns["l_orderkey"])
    size = cfg.batch_size
    start = time.perf_counter()

    def batches() -> Iterator[dict[str, Any]]:
        for at in range(0, total, size):
            yield {k: v[at : at + size] for k, v in columns.items()}

    ds = tf.data.Dataset.from_generator(batches, output_signature=_signature(tf, columns))
    rows = _consume(ds.prefetch(tf.data.AUTOTUNE))
    return rows, time.perf_counter() - start, {}


def _memory_slices(cfg: Config) -> Outcome:
    tf = _tensorflow()
    columns = _in_memory(cfg)
    start = time.perf_counter()
    ds = tf.data.Dataset.from_tensor_slices(columns).batch(cfg.batch_size)
    rows = _consume(ds.prefetch(tf.data.AUTOTUNE))
    return rows, time.perf_counter() - start, {}


def _pandas_postgres(cfg: Config) -> Outcome:
    tf = _tensorflow()
    import pandas
    import sqlalchemy

    start = time.perf_counter()
    engine = sqlalchemy.create_engine(cfg.sa_url)
    frame = pandas.read_sql(cfg.scan_sql(cfg.pg_table), engine)
    read = time.perf_counter() - start
    ds = tf.data.Dataset.from_tensor_slices(dict(frame)).batch(cfg.batch_size)
    rows = _consume(ds.prefetch(tf.data.AUTOTUNE))
    engine.dispose()
    return rows, time.perf_counter() - start, {"read_seconds": round(read, 3)}


def _row_generator(cfg: Config) -> Outcome:
    tf = _tensorflow()
    columns = _in_memory(cfg, limit=cfg.row_rows)
    total = len(columns["l_orderkey"])
    start = time.perf_counter()

    def rows_of() -> Iterator[dict[str, Any]]:
        for i in range(total):
            yield {k: v[i] for k, v in columns.items()}

    ds = tf.data.Dataset.from_generator(rows_of, output_signature=_signature(tf, columns, 0))
    rows = _consume(ds.batch(cfg.batch_size).prefetch(tf.data.AUTOTUNE))
    return rows, time.perf_counter() - start, {"subset_rows": total}


def _contender(
    id: str, label: str, run: Callable[[Config], Outcome], partial: bool = False
) -> Contender[Config]:
    return Contender(
        id, label, lambda cfg: _checked(run(cfg)), requires=("tensorflow",), partial=partial
    )


CONTENDERS: dict[str, Contender[Config]] = {
    c.id: c
    for c in (
        _contender("sqlfeed-duckdb", "sqlfeed.tf.dataset, DuckDB table", _sqlfeed_duckdb),
        _contender("sqlfeed-postgres", "sqlfeed.tf.dataset, PostgreSQL", _sqlfeed_postgres),
        _contender(
            "memory-generator", "from_generator of in-memory 1024-row batches", _memory_generator
        ),
        _contender("memory-slices", "from_tensor_slices(columns).batch(1024)", _memory_slices),
        _contender(
            "pandas-postgres", "pandas.read_sql + from_tensor_slices, PostgreSQL", _pandas_postgres
        ),
        _contender(
            "row-generator",
            "per-row from_generator + batch (subset)",
            _row_generator,
            partial=True,
        ),
    )
}


def _prepare(args: argparse.Namespace) -> Config:
    from benchmarks import tpch

    _progress(f"preparing TPC-H lineitem SF {args.scale} (cached under {args.cache_dir})")
    parquet = tpch.lineitem_parquet(args.scale, args.cache_dir)
    duckdb_path = args.cache_dir / "tpch.duckdb"
    duckdb_table = tpch.load_duckdb(duckdb_path, parquet, tpch.table_name("lineitem", args.scale))
    pg_table = ""
    if any(_selected(i, args.only) for i in ("sqlfeed-postgres", "pandas-postgres")):
        pg_table = tpch.load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    return Config(
        pg_url=args.pg_url,
        sa_url=args.pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
        pg_table=pg_table,
        duckdb_path=str(duckdb_path),
        duckdb_table=duckdb_table,
        batch_size=args.batch_size,
        readers=args.readers,
        row_rows=args.row_rows,
    )


def _selected(name: str, only: Sequence[str] | None) -> bool:
    return not only or any(fnmatch.fnmatch(name, pattern) for pattern in only)


def _ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    first, second = results.get(a), results.get(b)
    if not first or not second or "error" in first or "error" in second:
        return None
    return float(first["rows_per_second"]) / float(second["rows_per_second"])


def _report(results: dict[str, dict[str, Any]], cfg: Config, scale: float) -> str:
    lines = [
        f"tf.data feed of TPC-H lineitem SF {scale:g} ({len(COLUMNS)} numeric columns, "
        f"batch {cfg.batch_size}), {os.cpu_count()} CPUs, Python {platform.python_version()}",
        harness.load_line(),
        "",
        f"{'contender':<18} {'what':<50} {'rows':>9} {'seconds':>8} {'rows/s':>11} {'peak RSS':>9}",
    ]
    for name, contender in CONTENDERS.items():
        result = results.get(name)
        if result is None:
            continue
        if "error" in result:
            lines.append(f"{name:<18} {contender.label:<50} ERROR {result['error']}")
            continue
        details = result.get("details") or {}
        extra = ", ".join(f"{k}={v}" for k, v in details.items())
        lines.append(
            f"{name:<18} {contender.label:<50} {result['rows']:>9} {result['seconds']:>8.2f} "
            f"{result['rows_per_second']:>11,.0f} {result['peak_rss_bytes'] / 2**20:>6.0f} MB"
            + (f"   ({extra})" if extra else "")
        )
    lines.append("")
    checks = [
        (
            "sqlfeed-duckdb",
            "memory-generator",
            GOAL_DUCKDB_VS_GENERATOR,
            "sqlfeed from DuckDB vs the in-memory batch generator",
        ),
        (
            "sqlfeed-postgres",
            "pandas-postgres",
            GOAL_POSTGRES_VS_PANDAS,
            "sqlfeed from PostgreSQL vs pandas.read_sql + from_tensor_slices",
        ),
        (
            "sqlfeed-duckdb",
            "memory-slices",
            None,
            "sqlfeed from DuckDB vs from_tensor_slices(...).batch over in-memory columns",
        ),
        (
            "memory-generator",
            "row-generator",
            None,
            "in-memory batch generator vs a per-row generator",
        ),
    ]
    for a, b, goal, what in checks:
        ratio = _ratio(results, a, b)
        if ratio is None:
            continue
        verdict = ""
        if goal is not None:
            verdict = f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"
        lines.append(f"{what}: {ratio:.2f}x{verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the contenders (each in a subprocess) and print the table and the goals."""
    from benchmarks import tpch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1: 6M rows)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--readers", type=int, default=2, help="sqlfeed Feeder readers")
    parser.add_argument(
        "--row-rows", type=int, default=50_000, help="rows for the per-row generator"
    )
    parser.add_argument("--only", nargs="+", metavar="ID", help="contender ids (globs)")
    parser.add_argument("--cache-dir", type=Path, default=tpch.DEFAULT_CACHE_DIR)
    parser.add_argument("--pg-url", default=tpch.DEFAULT_PG_URL)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per contender")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best kept)")
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config)
    if args.smoke:
        args.scale, args.repeat, args.row_rows = 0.01, 1, 5_000
    cfg = _prepare(args)
    entries = [(c, cfg) for name, c in CONTENDERS.items() if _selected(name, args.only)]
    measured = harness.measure("tf_feed", entries, args.repeat, args.timeout, check=args.smoke)
    results = harness.summaries(measured)
    disagreements = harness.agreement(measured)
    print(_report(results, cfg, args.scale))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json:
        args.json.write_text(json.dumps({"config": asdict(cfg), "results": results}, indent=2))
    failed = [r.id for r in measured if r.error]
    return 1 if failed or disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
