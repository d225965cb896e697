"""Range partitions on the leading integer column of a composite primary key.

A table whose primary key is ``(a, b)`` has no one-column key, but ranges of ``a`` are
disjoint whatever ``b`` is, and follow the key's index (InnoDB's clustered index on
MySQL/MariaDB). auto takes them where no physical ranges apply (MySQL/MariaDB), and
``strategy="range"`` takes them without ``key=`` on every engine.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed import Feeder
from sqlfeed.plans import spans
from tests.conftest import get_engine
from tests.helpers.engines import Engine

pytestmark = pytest.mark.engine

ENGINES = ["duckdb", "sqlite", "postgres", "mysql"]


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("m", [1, 7, 64])
def test_range_on_the_leading_key_column_adds_up_to_the_query(name: str, m: int) -> None:
    engine = get_engine(name)
    table = engine.qualify(f"ck_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (a INTEGER NOT NULL, b INTEGER NOT NULL, "
        "v VARCHAR(8), PRIMARY KEY (a, b))"
    )
    try:
        values = ", ".join(
            f"({a}, {b}, {'NULL' if (a + b) % 5 == 0 else repr(f'v{a}_{b}')})"
            for a in range(-40, 60, 3)
            for b in range(4)
        )
        engine.execute(f"INSERT INTO {table} VALUES {values}")
        engine.commit()
        sql = f"SELECT a, b, v FROM {table} WHERE b <> 2"
        with engine.source() as source:
            plan = sqlfeed.plan(sql, source, partitions=m, strategy="range")
            assert "ranges of a" in plan.reason
            got = Counter(r for p in plan.partitions for r in source.rows(p.sql))
        assert got == Counter(engine.rows(sql))
    finally:
        engine.execute(f"DROP TABLE {table}")
        engine.commit()


def test_auto_takes_the_leading_key_on_mysql() -> None:
    engine = get_engine("mysql")
    table = engine.qualify(f"ck_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b))"
    )
    try:
        engine.execute(f"INSERT INTO {table} VALUES (1, 1), (1, 2), (5, 1), (-3, 7)")
        with engine.source() as source:
            plan = sqlfeed.plan(f"SELECT b, a FROM {table}", source, partitions=2)
        assert plan.strategy == "range"
        assert "ranges of the ordered key a" in plan.reason
    finally:
        engine.execute(f"DROP TABLE {table}")
        engine.commit()


def test_a_leading_text_key_column_is_not_taken() -> None:
    engine = get_engine("sqlite")
    table = engine.qualify(f"ck_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (s TEXT NOT NULL, a INTEGER NOT NULL, PRIMARY KEY (s, a))"
    )
    engine.commit()
    try:
        with engine.source() as source, pytest.raises(sqlfeed.InvalidArgumentError, match="key="):
            sqlfeed.plan(f"SELECT s, a FROM {table}", source, partitions=2, strategy="range")
    finally:
        engine.execute(f"DROP TABLE {table}")
        engine.commit()


def test_mysql_ranges_of_an_analyzed_key_read_its_index_not_every_row() -> None:
    """With the catalog's row estimate, the bounds are the key index's MIN and MAX (no
    COUNT(*) scan); the partitions still add up to the query, filter included."""
    engine = get_engine("mysql")
    table = engine.qualify(f"ck_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b))"
    )
    try:
        values = ", ".join(f"({a}, {b})" for a in range(-300, 900, 7) for b in range(3))
        engine.execute(f"INSERT INTO {table} VALUES {values}")
        engine.execute(f"ANALYZE TABLE {table}")
        sql = f"SELECT a, b FROM {table} WHERE b <> 1"
        with engine.source() as source:
            sized = sqlfeed.plan(sql, source, target_rows=300)
            assert sized.rows_estimated, sized.reason  # sized from the catalog, not counted
            plan = sqlfeed.plan(sql, source, partitions=7)
            assert plan.strategy == "range", plan.reason
            assert "IS NULL ORDER BY" in plan.partitions[-1].sql, plan.partitions[-1].sql
            got = Counter(r for p in plan.partitions for r in source.rows(p.sql))
        assert got == Counter(engine.rows(sql))
    finally:
        engine.execute(f"DROP TABLE {table}")


@pytest.fixture(scope="module")
def mysql_keyed() -> Iterator[tuple[Engine, str]]:
    """A MariaDB/MySQL table with primary key (a, b), 6,000 rows inserted out of key order."""
    engine = get_engine("mysql")
    table = engine.qualify(f"mk_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (a INTEGER NOT NULL, b INTEGER NOT NULL, s VARCHAR(40), "
        "PRIMARY KEY (a, b))"
    )
    values = ", ".join(
        f"({(i * 7919) % 1500 - 200}, {3 - i // 1500}, "
        f"{'NULL' if i % 9 == 0 else repr('v' * (i % 30))})"
        for i in range(6000)
    )
    engine.execute(f"INSERT INTO {table} VALUES {values}")
    engine.execute(f"ANALYZE TABLE {table}")
    yield engine, table
    engine.execute(f"DROP TABLE {table}")


def _feed(plan: Any, source: Any, **options: Any) -> tuple[list[tuple[Any, ...]], int]:
    """The rows a static Feeder delivers, in order, and the queries it ran."""
    feeder = Feeder(plan, source, **options)
    table = pa.Table.from_batches(list(feeder), schema=feeder.schema)
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True)), feeder.queries


def test_mysql_leading_key_ranges_merge_between_their_open_ends(
    mysql_keyed: tuple[Engine, str],
) -> None:
    engine, table = mysql_keyed
    sql = f"SELECT s, b, a FROM {table} WHERE b <> 1"
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=16)
        assert plan.strategy == "range", plan.reason
        assert "ordered by the primary key (a, b)" in plan.reason
        parts = plan.partitions
        order = f"ORDER BY {table.split('.')[-1]}.`a`, {table.split('.')[-1]}.`b`"
        assert all(p.sql.endswith(order) for p in parts), parts[0].sql
        assert parts[-1].description == "a IS NULL"
        assert [p.span is None for p in parts] == [True] + [False] * (len(parts) - 3) + [True] * 2
        for part in parts[1:-2]:  # the template filled in is the partition's own SQL
            assert part.span is not None
            assert spans.fill(*part.span) == part.sql
        merged, queries = _feed(plan, source, readers=2, batch_size=64)
        one_each, single = _feed(plan, source, readers=2, batch_size=64, merge_reads=False)
        # on several connections (no consistent snapshot) each reader's share merges apart
        shared, apart = _feed(plan, source, readers=2, batch_size=64, snapshot=False)
        # One merged query reads what its partitions read, in their order.
        middle = spans.merge(parts[3:9])
        assert engine.rows(middle.sql) == [r for p in parts[3:9] for r in engine.rows(p.sql)]
    assert merged == one_each == shared  # same rows, same order
    assert Counter(merged) == Counter(engine.rows(sql))
    # one consistent session reads the epoch (one reader): [first] [middles] [last] [NULL]
    assert queries == 4
    assert apart == 5  # [first] [middles] | [middles] [last] [NULL]
    assert single == plan.num_partitions


def test_mysql_ranges_stay_unmerged_where_the_order_is_not_the_key_order(
    mysql_keyed: tuple[Engine, str],
) -> None:
    engine, table = mysql_keyed
    with engine.source() as source:
        ordered = sqlfeed.plan(f"SELECT a, b, s FROM {table} ORDER BY s", source, partitions=8)
        grouped = sqlfeed.plan(
            f"SELECT a, COUNT(*) AS n FROM {table} GROUP BY a", source, partitions=8
        )
    for plan in (ordered, grouped):
        assert plan.strategy == "range", plan.reason
        assert all(p.span is None for p in plan.partitions)
        assert "ordered by the primary key" not in plan.reason
    assert all(p.sql.endswith("ORDER BY s") for p in ordered.partitions)


@pytest.mark.parametrize("merge_after", [True, False])
def test_a_state_inside_a_merged_mysql_range_read_resumes_exactly(
    mysql_keyed: tuple[Engine, str], merge_after: bool
) -> None:
    engine, table = mysql_keyed
    options = {"readers": 2, "batch_size": 100, "shuffle_buffer": 300, "shuffle": False, "seed": 3}
    with engine.source() as source:
        plan = sqlfeed.plan(f"SELECT * FROM {table}", source, partitions=16)
        feeder = Feeder(plan, source, **options)
        batches = iter(feeder)
        first = [next(batches) for _ in range(12)]
        state = feeder.state_dict()
        rest = list(batches)
        # Inside the first merged query (partitions 1.., after the open first range), past
        # the end of its first partition: told from that partition, by an offset.
        assert state["partitions_done"] == 1
        assert state["offset"] > len(engine.rows(plan.partitions[1].sql))
        resumed = Feeder(plan, source, state=state, merge_reads=merge_after, **options)
        again = list(resumed)
    assert [b.to_pylist() for b in again] == [b.to_pylist() for b in rest]
    keys = Counter((r["a"], r["b"]) for b in [*first, *rest] for r in b.to_pylist())
    assert keys == Counter((r[0], r[1]) for r in engine.rows(f"SELECT a, b FROM {table}"))
