"""Range partitions on the leading integer column of a composite primary key.

A table whose primary key is ``(a, b)`` has no one-column key, but ranges of ``a`` are
disjoint whatever ``b`` is, and follow the key's index (InnoDB's clustered index on
MySQL/MariaDB). auto takes them where no physical ranges apply (MySQL/MariaDB), and
``strategy="range"`` takes them without ``key=`` on every engine.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

import sqlfeed
from tests.conftest import get_engine

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
            assert plan.partitions[-1].sql.endswith("IS NULL"), plan.partitions[-1].sql
            got = Counter(r for p in plan.partitions for r in source.rows(p.sql))
        assert got == Counter(engine.rows(sql))
    finally:
        engine.execute(f"DROP TABLE {table}")
