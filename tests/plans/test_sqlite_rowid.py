"""SQLite rowid-range partitions (strategy ``ctid``): exact, sized without a COUNT(*)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlglot import exp

import sqlfeed
from sqlfeed import Feeder, InvalidArgumentError
from sqlfeed.plans.physical import address_conditions
from sqlfeed.sql import physical_partition_sqls

QUERIES = {
    "scan": "SELECT * FROM t",
    "filter": "SELECT id, v, s FROM t WHERE v > 10 OR s IS NULL",
    "aliased": "SELECT x.s, x.v * 2 AS w FROM main.t AS x WHERE x.s IS NOT NULL",
    "gaps": "SELECT * FROM gaps",
    "negative": "SELECT * FROM negative",
    "shadowed": "SELECT * FROM shadowed",
    "empty": "SELECT * FROM empty",
}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite file with rowid tables of every shape the ranges must cover."""
    path = tmp_path_factory.mktemp("rowid") / "rowid.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, v REAL, s TEXT)")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?)",
            [
                (i if i % 11 else None, None if i % 7 == 0 else i % 30, None if i % 5 else "x")
                for i in range(1000)
            ],
        )
        conn.execute("CREATE TABLE gaps (k INTEGER PRIMARY KEY, s TEXT)")  # k is the rowid
        conn.executemany("INSERT INTO gaps VALUES (?, ?)", [(i * i, str(i)) for i in range(300)])
        conn.execute("DELETE FROM gaps WHERE k % 3 = 0")
        conn.execute("CREATE TABLE negative (a INTEGER, b TEXT)")
        conn.executemany(
            "INSERT INTO negative (rowid, a, b) VALUES (?, ?, ?)",
            [(r, r, None) for r in range(-500, 500, 3)],
        )
        conn.execute("CREATE TABLE shadowed (rowid TEXT, a INTEGER)")  # hides the rowid
        conn.executemany("INSERT INTO shadowed VALUES (?, ?)", [("r", i % 4) for i in range(50)])
        conn.execute("CREATE TABLE empty (a INTEGER)")
        conn.execute("CREATE TABLE nr (k INTEGER PRIMARY KEY, a INTEGER) WITHOUT ROWID")
        conn.executemany("INSERT INTO nr VALUES (?, ?)", [(i, i) for i in range(20)])
        conn.execute("CREATE VIEW tv AS SELECT * FROM t")
    return f"sqlite:///{path}"


def _rows(url: str, sql: str) -> Counter[tuple[Any, ...]]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return Counter(conn.execute(sql).fetchall())


@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_rowid_partitions_add_up_to_exactly_the_query(database: str, name: str, m: int) -> None:
    sql = QUERIES[name]
    plan = sqlfeed.plan(sql, database, strategy="ctid", partitions=m)
    assert plan.strategy == "ctid"
    assert 1 <= plan.num_partitions <= m
    parts: Counter[tuple[Any, ...]] = Counter()
    for partition in plan.partitions:  # each partition alone, run by SQLite itself
        parts.update(_rows(database, partition.sql))
    assert parts == _rows(database, sql)
    fed = Counter(
        tuple(r.values()) for b in Feeder(plan, database, batch_size=50) for r in b.to_pylist()
    )
    assert sum(fed.values()) == sum(parts.values())


def test_auto_picks_rowid_ranges_sized_from_the_rowid_span(database: str) -> None:
    plan = sqlfeed.plan("SELECT * FROM t", database, target_rows=100)
    assert plan.strategy == "ctid"
    assert plan.reason.startswith("auto: a plain scan of table t")
    assert "rowid span" in plan.reason
    assert plan.rows is None
    assert plan.rows_estimated
    assert plan.estimated_rows == 1000
    assert plan.num_partitions == 10
    assert "rowid >= " in plan.partitions[1].sql
    assert "rowid < " in plan.partitions[1].sql
    # The partitions search the rowid b-tree rather than scan the table.
    with sqlite3.connect(database.removeprefix("sqlite:///")) as conn:
        steps = conn.execute("EXPLAIN QUERY PLAN " + plan.partitions[1].sql).fetchall()
    assert "SEARCH t USING INTEGER PRIMARY KEY" in " ".join(str(s[-1]) for s in steps)


def test_a_column_named_rowid_makes_the_ranges_use_another_alias(database: str) -> None:
    plan = sqlfeed.plan("SELECT * FROM shadowed", database, strategy="ctid", partitions=3)
    assert "_rowid_" in plan.partitions[1].sql


def test_without_rowid_tables_and_views_are_refused_with_the_reason(database: str) -> None:
    with pytest.raises(InvalidArgumentError, match="WITHOUT ROWID table"):
        sqlfeed.plan("SELECT * FROM nr", database, strategy="ctid", partitions=3)
    with pytest.raises(InvalidArgumentError, match="not a base table"):
        sqlfeed.plan("SELECT * FROM tv", database, strategy="ctid", partitions=3)
    # auto goes on to the next strategy: the integer primary key's ranges.
    auto = sqlfeed.plan("SELECT * FROM nr", database, partitions=3)
    assert auto.strategy == "range"
    assert sum(_rows(database, p.sql).total() for p in auto.partitions) == 20


def test_a_join_is_not_split_by_rowid(database: str) -> None:
    sql = "SELECT t.id, g.s FROM t JOIN gaps AS g ON g.k = t.id"
    with pytest.raises(InvalidArgumentError, match="plain filter over one table"):
        sqlfeed.plan(sql, database, strategy="ctid", partitions=3)


def test_a_new_sqlite_file_plans_too(tmp_path: Path) -> None:
    path = tmp_path / "one.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE one (a INTEGER)")
        conn.execute("INSERT INTO one VALUES (1)")
    plan = sqlfeed.plan("SELECT a FROM one", f"sqlite:///{path}", partitions=7)
    assert plan.strategy == "ctid"
    assert plan.num_partitions == 1


def test_the_partition_sql_filled_as_text_is_the_rendered_sql(database: str) -> None:
    plan = sqlfeed.plan(QUERIES["aliased"], database, strategy="ctid", partitions=64)
    cuts = [int(p.description.split("[")[1].split(",")[0]) for p in plan.partitions[1:]]
    address = exp.column("rowid", table="x")
    rendered = physical_partition_sqls(
        QUERIES["aliased"], address_conditions("sqlite", address, cuts), dialect="sqlite"
    )
    assert [p.sql for p in plan.partitions] == rendered
