"""Grouped ranges: range partitions of a GROUP BY put into its own WHERE, before it groups.

A range of a grouping column that the query outputs unchanged keeps or drops whole groups
(the proof is in :mod:`sqlfeed.sql.grouped`), so ``auto`` reads an aggregate over a table
with an integer primary key by ranges of its leading column, each row once, instead of
materializing or hashing it. These tests check that the partitions add up to exactly the
query's rows on every engine (HAVING, WHERE, an aliased key, NULL keys, expression
outputs), that auto takes it for a lineitem-like aggregate (an index range scan per
partition on PostgreSQL), and that the shapes the proof does not cover are wrapped.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

import sqlfeed
from sqlfeed.sql import range_partition_sqls, range_pushdown
from tests.conftest import get_engine
from tests.helpers.engines import Engine, assert_engine_refuses

ENGINES = ["duckdb", "sqlite", "postgres", "mysql"]

QUERIES = {
    # The primary key's leading column, HAVING, a WHERE with OR, expression outputs.
    "having": (
        "SELECT a, SUM(v * (3 - w)) AS s, COUNT(*) AS n, a * 2 AS a2, MAX(v) - MIN(v) AS d "
        "FROM {t} WHERE w <> 1 OR v > 50 GROUP BY a HAVING COUNT(*) > 1"
    ),
    # The key aliased, grouped by its output position and another column.
    "aliased": "SELECT a AS ak, w, SUM(v) AS total FROM {t} GROUP BY 1, w",
    # Grouped by an expression too (the key stays a plain grouping column).
    "expression_group": (
        "SELECT t.a, v % 3 AS r, COUNT(*) AS n FROM {t} AS t WHERE t.b <> 2 GROUP BY t.a, v % 3"
    ),
}
KEYED = {
    # A user key with NULLs: the NULL group is the inner ``g IS NULL`` partition.
    "nulls": ("SELECT g, COUNT(*) AS n, SUM(v) AS total FROM {t} GROUP BY g", "g"),
    "nulls_having": (
        "SELECT w, g AS gk, SUM(v) AS total FROM {t} WHERE v <> 7 GROUP BY g, w HAVING SUM(v) > 40",
        "gk",
    ),
}


@pytest.fixture(scope="module", params=ENGINES)
def keyed_table(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    """A table with a composite integer primary key (a, b) and a nullable column g."""
    engine = get_engine(request.param)
    table = engine.qualify(f"gr_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (a INTEGER NOT NULL, b INTEGER NOT NULL, g INTEGER, "
        "v INTEGER NOT NULL, w INTEGER NOT NULL, PRIMARY KEY (a, b))"
    )
    values = ", ".join(
        f"({a}, {b}, {'NULL' if (a + b) % 7 == 0 else (a * b) % 23 - 5}, {(a * 13 + b) % 101}, "
        f"{b % 3})"
        for a in range(-60, 240)
        for b in range(4)
    )
    engine.execute(f"INSERT INTO {table} VALUES {values}")
    engine.commit()
    _analyze(engine, table)
    yield engine, table
    engine.execute(f"DROP TABLE {table}")
    engine.commit()


def _analyze(engine: Engine, table: str) -> None:
    if engine.name == "postgres":
        engine.execute(f"ANALYZE {table}")
    elif engine.name == "mysql":
        engine.execute(f"ANALYZE TABLE {table}")


def _rows_of(engine: Engine, plan: sqlfeed.Plan) -> Counter[tuple[object, ...]]:
    return Counter(r for p in plan.partitions for r in engine.rows(p.sql))


def _pushed_into_groups(plan: sqlfeed.Plan) -> bool:
    """Every partition is the query itself, its range in the WHERE before GROUP BY."""
    return all(
        "_sqlfeed_q" not in p.sql and p.sql.index("WHERE") < p.sql.index("GROUP BY")
        for p in plan.partitions
    )


@pytest.mark.engine
@pytest.mark.parametrize("shape", sorted(QUERIES))
@pytest.mark.parametrize("m", [1, 7, 64])
def test_auto_ranges_of_the_grouping_key_add_up_to_the_query(
    keyed_table: tuple[Engine, str], shape: str, m: int
) -> None:
    engine, table = keyed_table
    sql = QUERIES[shape].format(t=table)
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=m)
    assert plan.strategy == "range", plan.reason
    assert "before its GROUP BY" in plan.reason
    assert plan.cost == 1
    assert _pushed_into_groups(plan), plan.partitions[0].sql
    assert _rows_of(engine, plan) == Counter(engine.rows(sql))


@pytest.mark.engine
@pytest.mark.parametrize("shape", sorted(KEYED))
@pytest.mark.parametrize("m", [1, 7, 64])
def test_a_given_key_with_nulls_is_pushed_down_and_adds_up(
    keyed_table: tuple[Engine, str], shape: str, m: int
) -> None:
    engine, table = keyed_table
    sql, key = KEYED[shape]
    sql = sql.format(t=table)
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=m, strategy="range", key=key)
    assert "before its GROUP BY" in plan.reason
    assert _pushed_into_groups(plan), plan.partitions[0].sql
    null_partition = plan.partitions[-1].sql
    assert "g IS NULL" in null_partition.split("GROUP BY")[0], null_partition
    expected = Counter(engine.rows(sql))
    assert any(None in row for row in expected)  # the NULL group is there to be found
    assert _rows_of(engine, plan) == expected


REFUSED = {
    "rollup": {
        "duckdb": "SELECT a, COUNT(*) AS n FROM {t} GROUP BY ROLLUP (a)",
        "postgres": "SELECT a, COUNT(*) AS n FROM {t} GROUP BY ROLLUP (a)",
        "mysql": "SELECT a, COUNT(*) AS n FROM {t} GROUP BY a WITH ROLLUP",
    },
    "window": "SELECT a, COUNT(*) AS n, SUM(COUNT(*)) OVER () AS total FROM {t} GROUP BY a",
    "expression_key": "SELECT a + 1 AS a, COUNT(*) AS n FROM {t} GROUP BY a + 1",
    "limit": "SELECT a, COUNT(*) AS n FROM {t} GROUP BY a ORDER BY a LIMIT 50",
    "alias_named_like_the_key": "SELECT a AS k, SUM(v) AS a FROM {t} GROUP BY a",
}


def _refused(shape: str, engine: str) -> str | None:
    sql = REFUSED[shape]
    return sql.get(engine) if isinstance(sql, dict) else sql


@pytest.mark.engine
@pytest.mark.parametrize("shape", sorted(REFUSED))
def test_shapes_the_proof_does_not_cover_are_wrapped_and_not_auto_ranged(
    keyed_table: tuple[Engine, str], shape: str
) -> None:
    engine, table = keyed_table
    text = _refused(shape, engine.name)
    if text is None:  # not a gap: SQLite has no ROLLUP (the standard text is refused)
        standard = _refused(shape, "duckdb")
        assert standard is not None
        assert_engine_refuses(engine, standard.format(t=table))
        return
    sql = text.format(t=table)
    key = engine.columns(sql)[0]
    with engine.source() as source:
        auto = sqlfeed.plan(sql, source, partitions=7)
        sqlfeed.plans.drop_scratch(auto, source)
        plan = sqlfeed.plan(sql, source, partitions=7, strategy="range", key=key)
    assert auto.strategy != "range", auto.reason
    assert "before its GROUP BY" not in plan.reason
    assert all("_sqlfeed_q" in p.sql for p in plan.partitions), plan.partitions[0].sql
    assert _rows_of(engine, plan) == Counter(engine.rows(sql))


@pytest.mark.engine
def test_auto_does_not_range_on_a_key_the_query_does_not_output(
    keyed_table: tuple[Engine, str],
) -> None:
    engine, table = keyed_table
    sql = f"SELECT w, COUNT(*) AS n FROM {table} GROUP BY a, w"
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=4)
        sqlfeed.plans.drop_scratch(plan, source)
    assert plan.strategy != "range", plan.reason


@pytest.mark.parametrize(
    ("sql", "key", "dialect"),
    [
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY ROLLUP (a)", "a", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a WITH ROLLUP", "a", "mysql"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY CUBE (a)", "a", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY GROUPING SETS ((a), ())", "a", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY ALL", "a", "duckdb"),
        (
            "SELECT a, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*)) AS r FROM t GROUP BY a",
            "a",
            "postgres",
        ),
        ("SELECT a + 1 AS k, COUNT(*) AS n FROM t GROUP BY a + 1", "k", "postgres"),
        ("SELECT CAST(a AS TEXT) AS k, COUNT(*) AS n FROM t GROUP BY a", "n", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a LIMIT 5", "a", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a OFFSET 5", "a", "postgres"),
        ("SELECT DISTINCT ON (n) a, COUNT(*) AS n FROM t GROUP BY a", "a", "postgres"),
        ("SELECT DISTINCT a, COUNT(*) AS n FROM t GROUP BY a", "a", "postgres"),
        ("SELECT t.a, COUNT(*) AS n FROM t JOIN u ON u.a = t.a GROUP BY t.a", "a", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t WHERE b IN (SELECT b FROM u) GROUP BY a", "a", "postgres"),
        ("WITH c AS (SELECT * FROM t) SELECT a, COUNT(*) AS n FROM c GROUP BY a", "a", "postgres"),
        ("SELECT a AS k, COUNT(*) AS n FROM t GROUP BY k", "k", "postgres"),  # an alias
        ("SELECT a AS k, b AS a, COUNT(*) AS n FROM t GROUP BY a, b", "k", "postgres"),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a QUALIFY n > 1", "a", "duckdb"),
        ("SELECT x.a, COUNT(*) AS n FROM t AS y GROUP BY x.a", "a", "postgres"),
        ('SELECT "A", COUNT(*) AS n FROM t GROUP BY a', "A", "postgres"),  # quoted alike?
        ("SELECT a, b, COUNT(*) AS n FROM t GROUP BY b", "a", "mysql"),  # a not grouped
    ],
)
def test_refused_shapes_are_not_pushed_down(sql: str, key: str, dialect: str) -> None:
    assert range_pushdown(sql, key, dialect=dialect) == ""


@pytest.mark.parametrize(
    ("sql", "key", "dialect"),
    [
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a", "a", "postgres"),
        ("SELECT a AS k, COUNT(*) AS n FROM t GROUP BY 1", "k", "mysql"),
        (
            "SELECT x.a AS k, COUNT(*) AS n FROM s.t AS x GROUP BY a HAVING COUNT(*) > 2",
            "k",
            "postgres",
        ),
        ("SELECT a, COUNT(*) AS n FROM t GROUP BY a, b + 1 ORDER BY n", "a", "duckdb"),
        ('SELECT "a", COUNT(*) AS n FROM t GROUP BY "a"', "a", "postgres"),
        ("SELECT a, a AS a2, COUNT(*) AS n FROM t GROUP BY a", "a2", "sqlite"),
    ],
)
def test_provable_shapes_are_pushed_down(sql: str, key: str, dialect: str) -> None:
    assert range_pushdown(sql, key, dialect=dialect) == "groups"


def test_the_range_is_precedence_safe_and_before_the_grouping() -> None:
    sql = "SELECT a, COUNT(*) AS n FROM t WHERE b = 1 OR c = 2 GROUP BY a HAVING COUNT(*) > 1"
    parts = range_partition_sqls(sql, "a", [10, 20], dialect="postgres")
    assert parts == [
        "SELECT a, COUNT(*) AS n FROM t WHERE (b = 1 OR c = 2) AND a < 10 GROUP BY a "
        "HAVING COUNT(*) > 1",
        "SELECT a, COUNT(*) AS n FROM t WHERE (b = 1 OR c = 2) AND a >= 10 AND a < 20 "
        "GROUP BY a HAVING COUNT(*) > 1",
        "SELECT a, COUNT(*) AS n FROM t WHERE (b = 1 OR c = 2) AND a >= 20 GROUP BY a "
        "HAVING COUNT(*) > 1",
        "SELECT a, COUNT(*) AS n FROM t WHERE (b = 1 OR c = 2) AND a IS NULL GROUP BY a "
        "HAVING COUNT(*) > 1",
    ]


LINEITEM = (
    "SELECT l_orderkey, l_suppkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, "
    "COUNT(*) AS n FROM {t} GROUP BY l_orderkey, l_suppkey"
)


@pytest.fixture(scope="module", params=["postgres", "mysql"])
def lineitem(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    """A lineitem-like table: primary key (l_orderkey, l_linenumber), 40,000 rows."""
    engine = get_engine(request.param)
    table = engine.qualify(f"li_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} (l_orderkey BIGINT NOT NULL, l_linenumber INTEGER NOT NULL, "
        "l_suppkey INTEGER NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, "
        "l_discount DECIMAL(15,2) NOT NULL, PRIMARY KEY (l_orderkey, l_linenumber))"
    )
    if engine.name == "postgres":
        engine.execute(
            f"INSERT INTO {table} SELECT i / 4 * 32 + i % 3, i % 4, (i * 7) % 13, "
            "(i % 1000) * 1.25, (i % 10) / 100.0 FROM generate_series(0, 39999) AS i"
        )
    else:
        values = ", ".join(
            f"({i // 4 * 32 + i % 3}, {i % 4}, {(i * 7) % 13}, {(i % 1000) * 1.25}, "
            f"{(i % 10) / 100})"
            for i in range(40_000)
        )
        engine.execute(f"INSERT INTO {table} VALUES {values}")
    engine.commit()
    _analyze(engine, table)
    yield engine, table
    engine.execute(f"DROP TABLE {table}")
    engine.commit()


@pytest.mark.engine
@pytest.mark.parametrize("m", [16, 64])
def test_auto_reads_a_lineitem_aggregate_by_index_ranges_once(
    lineitem: tuple[Engine, str], m: int
) -> None:
    engine, table = lineitem
    sql = LINEITEM.format(t=table)
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=m)
        sized = sqlfeed.plan(sql, source, target_rows=5_000)
    assert plan.strategy == "range", plan.reason  # not materialize, not hash
    assert plan.scratch_table is None
    assert plan.cost == 1
    assert "ranges of the ordered key l_orderkey" in plan.reason
    assert "before its GROUP BY" in plan.reason
    assert "bounds from the key's index" in plan.reason
    assert plan.num_partitions >= m // 2, plan.reason
    assert _pushed_into_groups(plan)
    assert sized.strategy == "range"
    assert sized.rows_estimated, sized.reason  # M from the catalog: no COUNT(*) of the aggregate
    assert _rows_of(engine, plan) == Counter(engine.rows(sql))
    for partition in plan.partitions:
        explained = " ".join(str(r) for r in engine.rows("EXPLAIN " + partition.sql))
        if engine.name == "postgres":
            assert "Seq Scan" not in explained, explained
            assert "Index" in explained, explained  # Index, Index Only or Bitmap Index Scan
        elif "Impossible WHERE" not in explained:  # MariaDB: the NULL partition
            assert "'range'" in explained, explained
            assert "PRIMARY" in explained, explained
