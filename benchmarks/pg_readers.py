"""The PostgreSQL readers side by side: rows per second over M ctid partitions.

For TPC-H ``lineitem_sf<tag>`` (``SELECT * FROM ...``), one run measures, one after
another, each reader of :data:`sqlfeed.io.postgres.READERS` (``copy``, ``connectorx``,
``adbc``, ``psycopg``) reading a ``ctid`` plan of M partitions with ``--threads``
threads (the Feeder's readers), every partition drained through
``Source.read(sql, schema=plan schema)`` on one source, so readers that keep their
connections reuse them across partitions. The baseline is connectorx's own parallel read,
``connectorx.read_sql(url, sql, return_type="arrow", partition_on="l_orderkey",
partition_num=<threads>)``. Each cell is the best of ``--repeat`` runs; the ratio is the
cell's rows/s over the baseline's (above 1: faster than connectorx partition_on). The
last column counts the batches of partition 0 (read once more, untimed) whose types
differ from the plan's schema, which ``conform`` then casts (0: the reader returns the
plan's types). Run from the repository root::

    .venv/bin/python -m benchmarks.pg_readers --scale 0.1
    .venv/bin/python -m benchmarks.pg_readers --scale 0.01 --partitions 2 8 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

import sqlfeed
from benchmarks.harness import add_smoke_flag
from sqlfeed.io import PostgresSource, ReadRequest
from sqlfeed.io.postgres import READERS

PG_URL = os.environ.get("SQLFEED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
"""The tests' PostgreSQL (``SQLFEED_TEST_POSTGRES_URL``)."""


def _table(scale: float) -> str:
    return "lineitem_sf" + f"{scale:g}".replace(".", "_")


def _baseline(url: str, sql: str, threads: int) -> tuple[int, float]:
    import connectorx

    start = time.perf_counter()
    table: Any = connectorx.read_sql(
        url, sql, return_type="arrow", partition_on="l_orderkey", partition_num=threads
    )
    return int(table.num_rows), time.perf_counter() - start


def _drain(source: PostgresSource, sql: str, schema: pa.Schema) -> int:
    return sum(batch.num_rows for batch in source.read(sql, schema=schema))


def _casts(source: PostgresSource, sql: str, schema: pa.Schema) -> int:
    """Batches of one partition whose types differ from the plan's (untimed)."""
    batches = source.batches(ReadRequest(sql, schema, 65_536))  # before conform
    return sum(not batch.schema.equals(schema) for batch in batches)


def _read_plan(
    source: PostgresSource, sqls: Sequence[str], schema: pa.Schema, threads: int
) -> tuple[int, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        rows = sum(pool.map(lambda sql: _drain(source, sql, schema), sqls))
    return rows, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--partitions", type=int, nargs="+", default=[2, 8, 61])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", nargs="+", default=list(READERS))
    parser.add_argument("--url", default=PG_URL)
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        from benchmarks.tpch import lineitem_parquet, load_postgres

        args.scale, args.partitions, args.repeat = 0.01, [2], 1
        load_postgres(args.url, lineitem_parquet(args.scale), "lineitem", args.scale)
    sql = f"SELECT * FROM {_table(args.scale)}"
    rows, seconds = min(
        (_baseline(args.url, sql, args.threads) for _ in range(args.repeat)), key=lambda r: r[1]
    )
    base = rows / seconds
    print(f"{sql}: {rows} rows; connectorx partition_on x{args.threads}: {base:,.0f} rows/s")
    print(f"{'reader':<11} {'M':>3} {'seconds':>8} {'rows/s':>11} {'ratio':>6} {'casts':>6}")
    source = sqlfeed.connect(args.url.replace("postgresql://", "postgresql+psycopg://", 1))
    assert isinstance(source, PostgresSource)
    try:
        for m in args.partitions:
            plan = sqlfeed.plan(sql, source, strategy="ctid", partitions=m)
            schema = plan.arrow_schema()
            sqls = [p.sql for p in plan.partitions]
            for reader in args.readers:
                source.readers = (reader,)
                got, best = min(
                    (_read_plan(source, sqls, schema, args.threads) for _ in range(args.repeat)),
                    key=lambda r: r[1],
                )
                casts = _casts(source, sqls[0], schema)
                assert got == rows, (reader, m, got, rows)
                speed = got / best
                print(
                    f"{reader:<11} {m:>3} {best:>8.3f} {speed:>11,.0f} "
                    f"{speed / base:>6.2f} {casts:>6}"
                )
    finally:
        source.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
