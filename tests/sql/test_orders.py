"""Which ORDER BYs are total, and how the others are completed (pure: the SQL written).

The engine tests (tests/engines/test_partitions_engines.py,
tests/engines/test_orders_engines.py) check
that the completed queries return one valid result, the same every run; these check the
decisions: what is left alone, what is added, and what is refused with which reason.
"""

from __future__ import annotations

import pytest

from sqlfeed import UnstableQueryError
from sqlfeed.sql import (
    complete_orders,
    count_sql,
    only_base_table,
    parse,
    partition_sql,
    partition_sqls,
    sample_sql,
    unstable_reasons,
)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT city, COUNT(*) AS n FROM t GROUP BY city ORDER BY city LIMIT 3",
        "SELECT city, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY 1 LIMIT 3",
        "SELECT DISTINCT a, b FROM t ORDER BY b, a LIMIT 3",
        "SELECT a FROM t UNION SELECT b FROM u ORDER BY 1 LIMIT 3",
        "SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b LIMIT 3",
        "SELECT COUNT(*) AS n FROM t LIMIT 1",
        "SELECT a FROM t ORDER BY a LIMIT 0",
        "SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES",
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u LIMIT 1)",
        "SELECT g, ROW_NUMBER() OVER (ORDER BY g) AS rn FROM t GROUP BY g",
        "SELECT a, RANK() OVER (ORDER BY b) AS r, SUM(c) OVER (ORDER BY b) AS s FROM t",
        "SELECT g, STRING_AGG(a, ',' ORDER BY a) AS s FROM t GROUP BY g",
    ],
)
def test_total_orders_are_left_alone(sql: str) -> None:
    completion = complete_orders(sql, "postgres")
    assert completion.completed == ()
    assert completion.ties == ()
    assert completion.parsed.tree.sql("postgres") == parse(sql, "postgres").tree.sql("postgres")


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT id, v FROM t ORDER BY id DESC LIMIT 5", [["id"]]),
        ("SELECT x.v, x.id FROM t AS x ORDER BY x.id LIMIT 5", [["id"]]),
        ("SELECT v FROM t ORDER BY a, b LIMIT 5", [["b", "a"]]),
        ("WITH c AS (SELECT id, v FROM s.t) SELECT v, id FROM c ORDER BY id LIMIT 5", [["id"]]),
        ("SELECT k, v FROM (SELECT id AS k, v FROM t) d ORDER BY k LIMIT 5", [["id"]]),
        ("SELECT v, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM t", [["ID"]]),
    ],
)
def test_an_order_over_a_catalog_key_of_the_only_table_is_total(
    sql: str, keys: list[list[str]]
) -> None:
    assert complete_orders(sql, "postgres").ties  # not total without the catalog's keys
    completion = complete_orders(sql, "postgres", table_keys=keys)
    assert completion.ties == ()
    assert unstable_reasons(sql, "postgres", table_keys=keys) == []


def test_a_catalog_key_does_not_prove_a_join_or_another_table() -> None:
    joined = "SELECT t.id, u.v FROM t JOIN u ON t.id = u.id ORDER BY t.id LIMIT 5"
    assert complete_orders(joined, "postgres", table_keys=[["id"]]).completed
    assert only_base_table(parse(joined).tree) is None
    assert only_base_table(parse("SELECT a FROM s.t AS x WHERE b IN (SELECT b FROM s.t)").tree)


@pytest.mark.parametrize(
    ("sql", "dialect", "completed"),
    [
        (
            "SELECT a, b, c FROM t ORDER BY b DESC LIMIT 5",
            "postgres",
            "ORDER BY b DESC, 1 ASC NULLS FIRST, 3 ASC NULLS FIRST LIMIT 5",
        ),
        (
            "SELECT a, b FROM t ORDER BY a LIMIT 5",
            "mysql",
            "ORDER BY a, 2 ASC, CAST(a AS BINARY) ASC, CAST(b AS BINARY) ASC LIMIT 5",
        ),
        ("SELECT a, b FROM t ORDER BY a, b LIMIT 5", "mysql", "CAST(b AS BINARY) ASC LIMIT 5"),
        (
            "SELECT * FROM t JOIN u ON t.id = u.id ORDER BY t.x LIMIT 3",
            "duckdb",
            "ORDER BY t.x, HASH(t) ASC NULLS FIRST, HASH(u) ASC NULLS FIRST LIMIT 3",
        ),
        (
            "SELECT id, FIRST_VALUE(v) OVER (PARTITION BY g) AS f FROM t",
            "postgres",
            "OVER (PARTITION BY g ORDER BY id ASC NULLS FIRST, v ASC NULLS FIRST "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)",
        ),
        (
            "SELECT id, SUM(v) OVER (ORDER BY g ROWS 2 PRECEDING) AS s FROM t",
            "postgres",
            "OVER (ORDER BY g, id ASC NULLS FIRST, v ASC NULLS FIRST ROWS BETWEEN 2 PRECEDING",
        ),
        (
            "SELECT ROW_NUMBER() OVER w AS rn, a FROM t WINDOW w AS (PARTITION BY b)",
            "postgres",
            "ROW_NUMBER() OVER (PARTITION BY b ORDER BY a ASC NULLS FIRST)",
        ),
        (
            "SELECT g, STRING_AGG(a, ',' ORDER BY b) AS s FROM t GROUP BY g",
            "postgres",
            "STRING_AGG(a, ',' ORDER BY b, a ASC NULLS FIRST)",
        ),
    ],
)
def test_orders_that_may_tie_are_completed(sql: str, dialect: str, completed: str) -> None:
    completion = complete_orders(sql, dialect)
    assert completed in completion.parsed.tree.sql(dialect)
    assert len(completion.completed) == 1
    again = complete_orders(completion.parsed, dialect)
    assert again.completed == ()  # completing twice adds nothing
    assert again.parsed.tree.sql(dialect) == completion.parsed.tree.sql(dialect)


def test_a_star_with_known_columns_is_completed_by_position() -> None:
    completion = complete_orders(
        "SELECT * FROM t ORDER BY b LIMIT 3", "sqlite", columns=["a", "b", "c"]
    )
    assert "ORDER BY b, 1 ASC, 3 ASC LIMIT 3" in completion.parsed.tree.sql("sqlite")
    assert completion.completed == ("ORDER BY b LIMIT 3 completed with a, c (NULLS FIRST)",)


@pytest.mark.parametrize(
    ("sql", "dialect", "why"),
    [
        ("SELECT id, LAST_VALUE(v) OVER (ORDER BY g) AS l FROM t", "postgres", "RANGE frame"),
        ("SELECT id, NTH_VALUE(v, 2) OVER (ORDER BY g) AS n FROM t", "duckdb", "RANGE frame"),
        ("SELECT a FROM t WHERE a IN (SELECT * FROM u ORDER BY b LIMIT 2)", "mysql", "hidden"),
        ("SELECT *, ROW_NUMBER() OVER (ORDER BY b) AS n FROM t", "sqlite", "list the columns"),
    ],
)
def test_orders_no_tie_breaker_can_complete_are_refused_with_a_reason(
    sql: str, dialect: str, why: str
) -> None:
    (reason,) = unstable_reasons(sql, dialect, strict=False)
    assert why in reason
    assert "\n" not in reason
    with pytest.raises(UnstableQueryError, match=why):
        partition_sqls(sql, 2, dialect=dialect)


def test_whole_rows_are_hashed_where_the_engine_can() -> None:
    for sql in (
        "SELECT * FROM t JOIN u USING (id)",
        "SELECT a + 1, COUNT(*) FROM t GROUP BY a + 1",
    ):
        assert 'HASH("_sqlfeed_q") % 2 = 0' in partition_sql(sql, 0, 2, dialect="duckdb")
        assert 'HASH_RECORD_EXTENDED("_sqlfeed_q", 0)' in partition_sql(
            sql, 0, 2, dialect="postgres"
        )
        assert "HASH(" in sample_sql(sql, method="hash", fraction=0.5, dialect="duckdb")


def test_a_count_needs_no_column_names() -> None:
    # Unnamed and repeated columns are renamed by position, never named back.
    assert count_sql("SELECT a + 1, a + 1 FROM t ORDER BY 1 LIMIT 5", "mysql") == (
        "WITH _sqlfeed_q(_sqlfeed_c0, _sqlfeed_c1) AS (SELECT a + 1, a + 1 FROM t ORDER BY 1 "
        "LIMIT 5) SELECT COUNT(*) FROM _sqlfeed_q"
    )
    # SELECT * over a join counts without the * (MySQL refuses repeated names in a subquery).
    assert count_sql("SELECT * FROM t JOIN t AS u ON t.a = u.a", "mysql") == (
        "SELECT COUNT(*) FROM t JOIN t AS u ON t.a = u.a"
    )
