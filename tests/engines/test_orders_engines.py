"""Plans of queries SQL lets return several results, on every real engine, through ``plan()``.

An ORDER BY that may tie (a LIMIT's, a window's) is completed with tie-breakers, and the
reason says so; ``strict=True`` refuses it instead; an ORDER BY over a primary or unique
key (read from the catalog) is total and left alone; ``*``, unnamed and repeated output
columns need no key. A wrong column fails a count as it fails the query.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

import sqlfeed
from sqlfeed import EngineError, UnstableQueryError
from sqlfeed.sql import count_sql, parse, sample_sql, schema_sql
from tests.helpers.cli import run_cli
from tests.helpers.corpus import CORPUS, Case, invalid_result
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine, assert_engine_refuses, multiset

pytestmark = pytest.mark.engine

TABLES = ("people", "orders", "dups", "empty_t", "orders_pk")
PLANNED = [
    case
    for case in CORPUS
    if case.valid is not None
    or case.id.startswith(("star_join", "unnamed", "duplicate_names", "window_", "limit_ties"))
]


def qualified(engine: Engine, sql: str) -> str:
    """``sql`` with the test tables named as another connection to the engine sees them."""
    if engine.qualify("x") == "x":
        return sql
    tree = sqlglot.parse_one(sql, read=engine.name)
    for table in tree.find_all(exp.Table):
        if not table.db and table.name in TABLES:
            table.set("db", exp.to_identifier(engine.schema))
    return tree.sql(engine.name)


def plan_rows(engine: Engine, planned: sqlfeed.Plan) -> Counter[tuple[Any, ...]]:
    """The rows of all the plan's partitions (equal rows hash alike: none is in two)."""
    union: Counter[tuple[Any, ...]] = Counter()
    for partition in planned.partitions:
        rows = multiset(engine.rows(partition.sql))
        assert not set(rows) & set(union), f"rows in two partitions: {partition.sql}"
        union.update(rows)
    sqlfeed.plans.drop_scratch(planned, engine.source())  # auto may materialize (servers)
    return union


@pytest.mark.parametrize("case", PLANNED, ids=lambda c: c.id)
def test_plan_reads_one_valid_result_the_same_every_time(engine: Engine, case: Case) -> None:
    if engine.name in case.cannot_run:
        assert_engine_refuses(engine, case.sql_for(engine.name))
        return
    sql = qualified(engine, case.sql_for(engine.name))
    source = engine.source()
    first: Counter[tuple[Any, ...]] | None = None
    for m in (1, 2, 7, 64):
        planned = sqlfeed.plan(sql, source, partitions=m, strategy="hash")
        rows = plan_rows(engine, planned)
        first = rows if first is None else first
        assert rows == first, f"plans with {m} partitions read other rows"
    assert first is not None
    if case.valid is not None:
        problem = invalid_result(case.valid, first, multiset(engine.rows(case.valid.base)))
        assert problem is None, problem
    if "tie-breakers" not in planned.reason:
        assert first == multiset(engine.rows(case.sql_for(engine.name)))
        return
    assert "completed with" in planned.to_dict()["reason"]
    if any(line in planned.reason for line in ("ORDER BY", "OVER (")):
        with pytest.raises(UnstableQueryError, match=r"tie|arbitrary"):
            sqlfeed.plan(sql, source, partitions=2, strategy="hash", strict=True)


PK_ROWS = [(i, i % 10, i // 10, f"n{i % 3}") for i in range(60)]
TOTAL_BY_KEY = [
    "SELECT id, note FROM orders_pk ORDER BY id DESC LIMIT 5",
    "SELECT grp, code, note FROM orders_pk ORDER BY grp, code LIMIT 7",
    "SELECT o.note, o.id FROM orders_pk o ORDER BY o.note, o.id LIMIT 5",
    "SELECT note, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM orders_pk",
    "WITH c AS (SELECT id, note FROM orders_pk WHERE id > 3) SELECT note, id FROM c "
    "ORDER BY id LIMIT 4",
    "SELECT grp, COUNT(*) AS n FROM orders_pk GROUP BY grp ORDER BY grp LIMIT 3",
]


@pytest.fixture
def orders_pk(engine: Engine) -> Any:
    """A table with a primary key and a NOT NULL unique key, dropped afterwards."""
    engine.execute("DROP TABLE IF EXISTS orders_pk")
    engine.execute(
        "CREATE TABLE orders_pk (id INTEGER NOT NULL PRIMARY KEY, code INTEGER NOT NULL, "
        "grp INTEGER NOT NULL, note VARCHAR(20), UNIQUE (grp, code))"
    )
    marks = ", ".join([engine.placeholder] * 4)
    cursor = engine.conn.cursor()
    cursor.executemany(f"INSERT INTO orders_pk VALUES ({marks})", PK_ROWS)
    cursor.close()
    engine.commit()
    yield
    engine.execute("DROP TABLE orders_pk")
    engine.commit()


@pytest.mark.parametrize("sql", TOTAL_BY_KEY)
def test_an_order_over_a_catalog_key_needs_no_tie_breaker(
    engine: Engine, orders_pk: Any, sql: str
) -> None:
    planned = sqlfeed.plan(qualified(engine, sql), engine.source(), partitions=3, strict=True)
    assert "tie-breakers" not in planned.reason
    assert plan_rows(engine, planned) == multiset(engine.rows(sql))


def test_an_order_over_part_of_a_key_is_completed(engine: Engine, orders_pk: Any) -> None:
    sql = qualified(engine, "SELECT grp, note FROM orders_pk ORDER BY grp LIMIT 15")
    with pytest.raises(UnstableQueryError, match="tie on it"):
        sqlfeed.plan(sql, engine.source(), partitions=3, strict=True)
    planned = sqlfeed.plan(sql, engine.source(), partitions=3)
    assert "ORDER BY grp LIMIT 15 completed with note" in planned.reason
    rows = plan_rows(engine, planned)
    assert Counter(grp for grp, _ in rows.elements()) == {0: 10, 1: 5}


@pytest.mark.parametrize("case_id", ["star_join", "unnamed_aggregates", "duplicate_names_grouped"])
def test_star_and_unnamed_columns_count_and_sample_without_names(
    engine: Engine, case_id: str
) -> None:
    case = next(c for c in CORPUS if c.id == case_id)
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    expected = multiset(engine.rows(sql))
    [(count,)] = engine.rows(count_sql(parsed))
    assert count == sum(expected.values())
    # DuckDB and PostgreSQL hash the whole row; elsewhere the engine's names are needed.
    whole_row = engine.name in ("duckdb", "postgres")
    columns = None if whole_row else engine.columns(schema_sql(parsed))
    query = sample_sql(parsed, method="hash", fraction=0.5, columns=columns)
    sample = multiset(engine.rows(query))
    assert not sample - expected
    assert 0 < sum(sample.values()) < sum(expected.values())
    assert multiset(engine.rows(query)) == sample


def test_a_wrong_column_fails_the_count(engine: Engine) -> None:
    sql = qualified(engine, "SELECT nosuchcol FROM people")
    with pytest.raises(EngineError):
        engine.source().count(sql)
    url = _url(engine)
    if url is not None:  # the CLI, on the engines a URL reaches
        run = run_cli(["count", "--db", url, sql])
        assert run.code == 1, run
        assert run.out == ""
        assert len(run.err.strip().splitlines()) == 1, run.err
        assert "nosuchcol" in run.err.lower()


def _url(engine: Engine) -> str | None:
    if engine.name == "sqlite":
        return f"sqlite:///{engine.path}"  # type: ignore[attr-defined]
    if engine.name == "postgres":
        return POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    if engine.name == "mysql":
        base = MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1).rsplit("/", 1)[0]
        return f"{base}/{engine.schema}"
    return None  # the test's DuckDB lives in this process's memory
