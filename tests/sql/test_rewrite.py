"""The rewriter's decisions, read from the SQL it writes (pure: no database)."""

from __future__ import annotations

import pytest

from sqlfeed import (
    InvalidArgumentError,
    ParseError,
    QueryError,
    UnstableQueryError,
    count_sql,
    parse,
    partition_sql,
    partition_sqls,
    sample_sql,
    unstable_reasons,
)
from sqlfeed.sql import partitions_for, schema_sql


def test_predicate_joins_a_plain_filter_with_its_or_parenthesised() -> None:
    sql = partition_sql("SELECT a, b FROM t WHERE a = 1 OR b = 2", 0, 4, dialect="duckdb")
    assert sql == "SELECT a, b FROM t WHERE (a = 1 OR b = 2) AND HASH(a, b) % 4 = 0"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT DISTINCT a FROM t",
        "SELECT a, COUNT(*) AS n FROM t GROUP BY a",
        "SELECT COUNT(*) AS n, MAX(a) AS m FROM t WHERE a > 1 HAVING COUNT(*) > 0",
        "SELECT a FROM t ORDER BY a LIMIT 5",
        "SELECT a, ROW_NUMBER() OVER (ORDER BY a) AS rn FROM t",
        "SELECT t.a FROM t JOIN u ON t.a = u.a",
        "SELECT a FROM t UNION ALL SELECT a FROM u",
        "WITH c AS (SELECT a FROM t) SELECT a FROM c",
        "SELECT a FROM (SELECT a FROM t) AS s",
    ],
)
def test_queries_beyond_a_plain_filter_are_wrapped(sql: str) -> None:
    partition = partition_sqls(sql, 4, dialect="postgres")[1]
    assert "_sqlfeed_q" in partition or "LIMIT 0" in partition


def test_computed_columns_are_hashed_outside_the_query() -> None:
    # a / b in the WHERE could be evaluated on rows the user's WHERE excludes: wrap instead.
    sql = partition_sql("SELECT a / b AS r FROM t WHERE b <> 0", 1, 2, dialect="postgres")
    assert sql.startswith("SELECT * FROM (SELECT a / b AS r FROM t WHERE b <> 0) AS _sqlfeed_q")


def test_order_by_without_limit_is_dropped_inside_the_wrap() -> None:
    sql = partition_sql("SELECT DISTINCT a FROM t ORDER BY a", 0, 2, dialect="tsql")
    assert "ORDER BY" not in sql  # T-SQL refuses ORDER BY in a derived table


def test_order_by_with_limit_is_kept() -> None:
    sql = partition_sql("SELECT a FROM t ORDER BY a LIMIT 5", 0, 2, dialect="duckdb")
    assert "ORDER BY a LIMIT 5" in sql


def test_user_ctes_are_hoisted_above_the_wrap() -> None:
    sql = partition_sql("WITH c AS (SELECT 1 AS a) SELECT a FROM c", 0, 2, dialect="tsql")
    assert sql.startswith("WITH c AS (SELECT 1 AS a) SELECT * FROM (SELECT a")


def test_recursive_ctes_stay_recursive() -> None:
    sql = (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
        "SELECT n FROM r"
    )
    # Embedded as written (PostgreSQL takes a WITH inside a derived table).
    assert partition_sql(sql, 0, 2, dialect="postgres").startswith(
        f"SELECT * FROM ({sql}) AS _sqlfeed_q WHERE"
    )


@pytest.mark.parametrize(
    ("dialect", "shape"),
    [
        ("postgres", "FROM (SELECT a, b AS a FROM t GROUP BY a, b) AS _sqlfeed_q(_sqlfeed_c0,"),
        ("duckdb", "FROM (SELECT a, b AS a FROM t GROUP BY a, b) AS _sqlfeed_q(_sqlfeed_c0,"),
        ("mysql", "WITH _sqlfeed_q(_sqlfeed_c0, _sqlfeed_c1) AS (SELECT a, b AS a FROM t"),
        ("sqlite", "WITH _sqlfeed_q(_sqlfeed_c0, _sqlfeed_c1) AS (SELECT a, b AS a FROM t"),
    ],
)
def test_duplicate_output_names_are_renamed_by_position_and_restored(
    dialect: str, shape: str
) -> None:
    sql = partition_sql("SELECT a, b AS a FROM t GROUP BY a, b", 0, 2, dialect=dialect)
    assert shape in sql
    assert "_sqlfeed_c0 AS a, _sqlfeed_c1 AS a" in sql


def test_unnamed_columns_need_their_engine_names() -> None:
    with pytest.raises(QueryError, match="has no name"):
        partition_sqls("SELECT a + 1 FROM t GROUP BY a", 2, dialect="mysql")
    sql = partition_sqls("SELECT a + 1 FROM t GROUP BY a", 2, dialect="mysql", columns=["a+1"])
    assert "AS `a+1`" in sql[0]


def test_star_without_column_names_hashes_the_whole_row_on_postgres() -> None:
    sql = partition_sql("SELECT * FROM t JOIN u USING (id)", 0, 2, dialect="postgres")
    assert 'HASH_RECORD_EXTENDED("_sqlfeed_q", 0)' in sql


def test_star_without_column_names_asks_for_them_elsewhere() -> None:
    with pytest.raises(QueryError, match="hidden behind"):
        partition_sqls("SELECT * FROM t JOIN u USING (id)", 2, dialect="mysql")


def test_star_from_one_table_is_pushed_down_when_the_columns_are_known() -> None:
    sql = partition_sql("SELECT * FROM t", 0, 2, dialect="mysql", columns=["x", "y"])
    assert sql.startswith("SELECT * FROM t WHERE CRC32(")


def test_aggregates_are_left_out_of_the_hash_when_grouping_columns_remain() -> None:
    sql = partition_sql("SELECT g, SUM(x) AS s FROM t GROUP BY g", 0, 2, dialect="duckdb")
    assert sql.endswith("WHERE HASH(_sqlfeed_q.g) % 2 = 0")


def test_a_single_aggregate_row_lands_in_partition_zero() -> None:
    sqls = partition_sqls("SELECT SUM(x), COUNT(*) FROM t", 3, dialect="postgres")
    assert sqls == [
        "SELECT SUM(x), COUNT(*) FROM t",
        "SELECT SUM(x), COUNT(*) FROM t LIMIT 0",
        "SELECT SUM(x), COUNT(*) FROM t LIMIT 0",
    ]


def test_one_partition_is_the_query_itself() -> None:
    assert partition_sqls("SELECT a FROM t", 1) == ["SELECT a FROM t"]


def test_key_columns_are_matched_case_insensitively() -> None:
    sql = partition_sql("SELECT Name, city FROM t", 0, 2, dialect="duckdb", key="name")
    assert "HASH(Name)" in sql


def test_a_key_not_in_the_output_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"output columns: a, b"):
        partition_sqls("SELECT a, b FROM t", 2, key="c")


def test_the_wrap_alias_avoids_names_the_query_uses() -> None:
    sql = partition_sql("SELECT _sqlfeed_q FROM t GROUP BY _sqlfeed_q", 0, 2, dialect="duckdb")
    assert "AS _sqlfeed_q1" in sql


@pytest.mark.parametrize("m", [0, -1, True, 2.5, "4"])
def test_partition_count_must_be_a_positive_integer(m: object) -> None:
    with pytest.raises(InvalidArgumentError):
        partition_sqls("SELECT a FROM t", m)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [-1, 4, True])
def test_partition_index_must_be_in_range(k: object) -> None:
    with pytest.raises(InvalidArgumentError):
        partition_sql("SELECT a FROM t", k, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", ["postgres", "snowflake", "tsql", "trino", "bigquery"])
def test_signed_hashes_are_folded_without_abs(dialect: str) -> None:
    sql = partition_sql("SELECT a FROM t", 1, 8, dialect=dialect)
    assert "ABS(" not in sql.upper()
    assert "+ 8" in sql


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT a, RANDOM() AS r FROM t", "different value"),
        ("SELECT a FROM t WHERE d > CURRENT_DATE", "different value"),
        ("SELECT a, gen_random_uuid() AS u FROM t", "different value"),
        ("SELECT a, clock_timestamp() AS c FROM t", "different value"),
        ("SELECT a FROM t TABLESAMPLE BERNOULLI (5)", "TABLESAMPLE"),
        ("SELECT g, ARRAY_AGG(a) AS l FROM t GROUP BY g", "ORDER BY inside the aggregate"),
    ],
)
def test_nondeterministic_queries_are_refused_with_the_reason(sql: str, reason: str) -> None:
    reasons = unstable_reasons(sql, "postgres", strict=False)
    assert len(reasons) == 1, reasons
    assert reason in reasons[0]
    assert "\n" not in reasons[0]
    with pytest.raises(UnstableQueryError, match="allow_unstable"):
        partition_sqls(sql, 2, dialect="postgres")
    assert len(partition_sqls(sql, 2, dialect="postgres", allow_unstable=True)) == 2


@pytest.mark.parametrize(
    ("sql", "reason", "completed"),
    [
        ("SELECT a FROM t LIMIT 3", "without ORDER BY", "ORDER BY 1 ASC NULLS FIRST LIMIT 3"),
        ("SELECT a FROM t OFFSET 3", "without ORDER BY", "ORDER BY 1 ASC NULLS FIRST OFFSET 3"),
        ("SELECT a, b FROM t ORDER BY a LIMIT 3", "tie", "ORDER BY a, 2 ASC NULLS FIRST LIMIT 3"),
        (
            "SELECT a FROM t WHERE a IN (SELECT b FROM u LIMIT 2)",
            "without ORDER BY",
            "(SELECT b FROM u ORDER BY 1 ASC NULLS FIRST LIMIT 2)",
        ),
        (
            "SELECT a, LAG(a) OVER () AS p FROM t",
            "ORDER BY to the window",
            "LAG(a) OVER (ORDER BY a ASC NULLS FIRST)",
        ),
        (
            "SELECT a, ROW_NUMBER() OVER (ORDER BY b) AS n FROM t",
            "tie on its ORDER BY",
            "ROW_NUMBER() OVER (ORDER BY b, a ASC NULLS FIRST)",
        ),
    ],
)
def test_orders_that_may_tie_are_completed_or_refused_when_strict(
    sql: str, reason: str, completed: str
) -> None:
    reasons = unstable_reasons(sql, "postgres")
    assert any(reason in r for r in reasons), reasons
    assert unstable_reasons(sql, "postgres", strict=False) == []
    with pytest.raises(UnstableQueryError, match="allow_unstable"):
        partition_sqls(sql, 2, dialect="postgres", strict=True)
    assert all(completed in q for q in partition_sqls(sql, 2, dialect="postgres"))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, b FROM t ORDER BY a, b LIMIT 3",
        "SELECT a FROM t ORDER BY 1 LIMIT 3",
        "SELECT (SELECT MAX(b) FROM u LIMIT 1) AS m FROM t",
        "SELECT g, ARRAY_AGG(a ORDER BY a) AS l FROM t GROUP BY g",
        "SELECT a, LAG(a) OVER (ORDER BY a) AS p FROM t",
        "SELECT a FROM t TABLESAMPLE BERNOULLI (5) REPEATABLE (1)",
        "SELECT a FROM t LIMIT 0",
    ],
)
def test_stable_queries_pass(sql: str) -> None:
    assert unstable_reasons(sql, "postgres") == []


def test_parse_errors_carry_line_and_column() -> None:
    with pytest.raises(ParseError) as caught:
        parse("SELECT a\nFROM t WHERE (", "postgres")
    assert (caught.value.line, caught.value.col) == (2, 14)


def test_count_of_a_described_plain_filter_replaces_the_projection() -> None:
    assert count_sql("SELECT a, b FROM t WHERE a > 0 ORDER BY b", columns=["a", "b"]) == (
        "SELECT COUNT(*) FROM t WHERE a > 0"
    )


def test_count_of_an_undescribed_query_keeps_its_select_list() -> None:
    assert count_sql("SELECT nosuchcol FROM t WHERE a > 0 ORDER BY b") == (
        "SELECT COUNT(*) FROM (SELECT nosuchcol FROM t WHERE a > 0) AS _sqlfeed_q"
    )


def test_count_of_a_limited_query_keeps_the_limit() -> None:
    assert count_sql("SELECT a FROM t ORDER BY a LIMIT 5", "postgres") == (
        "SELECT COUNT(*) FROM (SELECT a FROM t ORDER BY a LIMIT 5) AS _sqlfeed_q"
    )


def test_limit_sample_of_a_limited_query_wraps_it() -> None:
    assert sample_sql("SELECT a FROM t ORDER BY a LIMIT 50", 10, dialect="postgres") == (
        "SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 50) AS _sqlfeed_q LIMIT 10"
    )


def test_hash_sample_keeps_the_buckets_below_the_fraction() -> None:
    sql = sample_sql("SELECT a FROM t", method="hash", fraction=0.05, dialect="duckdb")
    assert sql == "SELECT a FROM t WHERE HASH(a) % 10000 < 500"


def test_schema_query_returns_no_rows() -> None:
    assert schema_sql("SELECT a FROM t UNION SELECT b FROM u", "postgres").endswith("LIMIT 0")


def test_default_partition_count() -> None:
    assert partitions_for(1000, 100) == 10
    assert partitions_for(10, 100, workers=3) == 12
    assert partitions_for(0, 100) == 4
