"""Plan the 22 TPC-H and 99 TPC-DS queries, run every partition, compare with each query.

For each query, on an in-memory DuckDB loaded with the benchmarks' data: its own rows,
then its partitions (M = 7, and M = 3 for a second plan), planned two ways: ``text``
(:func:`sqlfeed.partition_sqls` from the SQL alone, as ``sqlfeed plan --dialect duckdb``)
and ``source`` (:func:`sqlfeed.plan` on the connection). A query is

* ``exact``: the partitions add up to the query's own rows;
* ``consistent``: to another result (ties at a LIMIT's cut), the same for both plans;
* ``refused`` (with the reason), ``wrong``, or ``does not run`` on this DuckDB.

The data and query texts come from DuckDB's ``tpch``/``tpcds`` extensions (``dbgen``,
``dsdgen``, ``tpch_queries()``, ``tpcds_queries()``). They cannot be downloaded here, but
PyPI has them for DuckDB 1.5.5, so ``--generate-with PYTHON`` runs the generator in an
interpreter that has them, writing Parquet files and the queries to ``--data``::

    python3.11 -m venv /tmp/tpcvenv
    /tmp/tpcvenv/bin/pip install duckdb==1.5.5 duckdb-extension-tpch==1.5.5 \\
        duckdb-extension-tpcds==1.5.5
    .venv/bin/python -m benchmarks.tpc_queries --generate-with /tmp/tpcvenv/bin/python \\
        --scale 0.01 --data /tmp/tpc
"""

from __future__ import annotations

import argparse
import collections
import decimal
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

import sqlfeed
from benchmarks.common import progress
from sqlfeed.dialects import SqlfeedError
from sqlfeed.sql import partition_sqls

__all__ = ["evaluate", "main"]

_GENERATE = """
import duckdb, glob, json, os, site, sys
data, scale = sys.argv[1], float(sys.argv[2])
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
for ext in ("tpch", "tpcds"):
    found = [p for d in site.getsitepackages() for p in
             glob.glob(f"{d}/duckdb_extension_{ext}/extensions/*/{ext}.duckdb_extension")]
    con.execute(f"LOAD '{found[0]}'")
for bench, gen, queries in (("tpch", "dbgen", "tpch_queries()"),
                            ("tpcds", "dsdgen", "tpcds_queries()")):
    os.makedirs(f"{data}/{bench}", exist_ok=True)
    con.execute(f"CREATE SCHEMA {bench}; USE {bench}; CALL {gen}(sf={scale})")
    tables = con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE schema_name = '{bench}'").fetchall()
    for (table,) in tables:
        con.execute(f"COPY {bench}.{table} TO '{data}/{bench}/{table}.parquet' (FORMAT parquet)")
    rows = con.execute(f"SELECT query_nr, query FROM {queries}").fetchall()
    json.dump(rows, open(f"{data}/{bench}/queries.json", "w"))
    con.execute("USE memory")
"""


SMOKE_QUERIES = (
    (
        1,
        "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, "
        "sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, avg(l_discount) AS avg_disc, "
        "count(*) AS count_order FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' "
        "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    ),
    (
        6,
        "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem "
        "WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
        "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    ),
)
"""``--smoke``: TPC-H Q1 and Q6 (``lineitem`` only) over :mod:`benchmarks.tpch`'s SF 0.01
``lineitem``, for a machine without the TPC data: the same evaluation, two queries."""


def _smoke_data(data: Path) -> None:
    """Write :data:`SMOKE_QUERIES` and ``lineitem`` (SF 0.01) where ``--data`` expects them."""
    import shutil

    from benchmarks.tpch import lineitem_parquet

    (data / "tpch").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lineitem_parquet(0.01), data / "tpch" / "lineitem.parquet")
    (data / "tpch" / "queries.json").write_text(json.dumps(SMOKE_QUERIES))


def _rows(connection: Any, sql: str) -> collections.Counter[tuple[Any, ...]]:
    def norm(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 6)  # parallel float sums differ in the last bits
        return value.normalize() if isinstance(value, decimal.Decimal) else value

    return collections.Counter(
        tuple(norm(v) for v in r) for r in connection.execute(sql).fetchall()
    )


def _partitions(connection: Any, sql: str, mode: str, m: int) -> list[str]:
    if mode == "text":
        return partition_sqls(sql, m, dialect="duckdb")
    return [p.sql for p in sqlfeed.plan(sql, connection, partitions=m, strategy="hash").partitions]


def evaluate(connection: Any, sql: str, mode: str) -> tuple[str, str]:
    """(status, detail) of one query; see the module."""
    try:
        expected = _rows(connection, sql)
    except duckdb.Error as err:
        return "does not run", str(err).splitlines()[0]
    try:
        first, second = (_partitions(connection, sql, mode, m) for m in (7, 3))
    except SqlfeedError as err:
        return "refused", str(err)
    union: collections.Counter[tuple[Any, ...]] = collections.Counter()
    again: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for query in first:
        union.update(_rows(connection, query))
    for query in second:
        again.update(_rows(connection, query))
    if union == expected:
        return "exact", ""
    if union == again and union.total() == expected.total():
        return "consistent", "another result of a query with ties"
    return "wrong", ""


def main(argv: list[str] | None = None) -> int:
    """Evaluate every query in both modes; print the counts (1 if any is wrong)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/tpc"))
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--generate-with", metavar="PYTHON", help="generate the data first")
    parser.add_argument("--json", type=Path, help="write every query's status here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="TPC-H Q1 and Q6 over lineitem SF 0.01 only (no TPC data needed)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.data = Path(tempfile.mkdtemp(prefix="tpc-smoke-"))
        _smoke_data(args.data)
    if args.generate_with:
        subprocess.run(
            [args.generate_with, "-c", _GENERATE, str(args.data), str(args.scale)], check=True
        )
    connection = duckdb.connect()
    statuses: dict[str, dict[str, tuple[str, str]]] = {"text": {}, "source": {}}
    for bench in ("tpch", "tpcds"):
        if args.smoke and bench == "tpcds":
            progress("tpcds: not in the smoke run")
            continue
        for parquet in sorted((args.data / bench).glob("*.parquet")):
            connection.execute(
                f"CREATE OR REPLACE TABLE {parquet.stem} AS SELECT * FROM read_parquet(?)",
                [str(parquet)],
            )
        for number, sql in json.loads((args.data / bench / "queries.json").read_text()):
            for mode, found in statuses.items():
                found[f"{bench}-{number}"] = evaluate(connection, sql, mode)
            progress(f"{bench} {number}: {statuses['text'][f'{bench}-{number}'][0]}")
    for mode, found in statuses.items():
        counts = collections.Counter(status for status, _ in found.values())
        print(f"{mode:6} {len(found)} queries: {dict(counts)}")
    if args.json is not None:
        args.json.write_text(json.dumps(statuses, indent=1))
    wrong = any(s == "wrong" for found in statuses.values() for s, _ in found.values())
    if args.smoke:
        import shutil

        shutil.rmtree(args.data, ignore_errors=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
