"""Dialects: the SQL each engine is sent, what each can sample, and how a dialect is found.

Pure: no database server (only in-process DuckDB and SQLite connections). The golden
strings were checked by hand against each engine's documented functions; changing one
changes which partition a row lands in for every user of that engine.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any

import duckdb
import pytest
import sqlalchemy
import sqlglot
from sqlglot import exp

from sqlfeed.dialects import (
    Dialect,
    InvalidArgumentError,
    SqlfeedError,
    UnknownDialectError,
    UnsupportedError,
    dialect_for,
    dialect_names,
    get_dialect,
)
from sqlfeed.dialects.sqlite import SQLite, row_hash
from sqlfeed.sql import count_sql, partition_sql, partition_sqls, sample_sql, schema_sql

M = 8
"""Partitions in the golden queries."""

K = 3
"""The partition asked for in the golden queries."""

ALL_DIALECTS = dialect_names()

DESIGNED_ENGINES = (
    "bigquery",
    "clickhouse",
    "duckdb",
    "mysql",
    "oracle",
    "postgres",
    "snowflake",
    "spark",
    "sqlite",
    "trino",
    "tsql",
)
"""The engines the design handbook promises (section 3)."""


def _parse_back(sql: str, dialect: Dialect) -> exp.Expr:
    """Parse ``sql`` in the dialect it was rendered for; raises if it does not parse."""
    return sqlglot.parse_one(sql, read=dialect.sqlglot_dialect)


def _bucket_shape(dialect: Dialect, m: int) -> str:
    """A regex for the bucket expression; the group ``hash`` holds the hash call.

    Sign-safe wherever the hash may be negative: ``((h % m) + m) % m``, or the engine's
    own non-negative form (Spark ``pmod``, BigQuery ``MOD``, Oracle ``ORA_HASH(x, m - 1)``).
    """
    h = r"(?P<hash>.+)"
    special = {
        "oracle": rf"NVL\((?P<hash>ORA_HASH\(.+, {m - 1}\)), 0\)",
        "spark": rf"PMOD\({h}, {m}\)",
        "bigquery": rf"MOD\(\(MOD\({h}, {m}\)\) \+ {m}, {m}\)",
    }
    if dialect.name in special:
        return special[dialect.name]
    if dialect.HASH_IS_UNSIGNED:
        return rf"{h} % {m}"
    return rf"\(\({h} % {m}\) \+ {m}\) % {m}"


def _assert_sign_safe_bucket(bucket_sql: str, dialect: Dialect, m: int) -> None:
    match = re.fullmatch(_bucket_shape(dialect, m), bucket_sql)
    assert match, f"{dialect.name} bucket has an unexpected shape: {bucket_sql}"
    assert dialect.HASH_FUNCTION.lower() in match["hash"].lower()
    assert "ABS(" not in bucket_sql.upper()


def _partition_bucket(sql: str, dialect: Dialect) -> str:
    """The bucket expression of the ``bucket = K`` predicate that ends the WHERE clause."""
    condition = _parse_back(sql, dialect).args["where"].this
    predicate = condition.expression if isinstance(condition, exp.And) else condition
    assert isinstance(predicate, exp.EQ)
    assert predicate.expression.sql() == str(K)
    return str(predicate.this.sql(dialect.sqlglot_dialect))


# -- 1. golden partition SQL ---------------------------------------------------------------

PLAIN_PARTITION = {
    "bigquery": (
        "SELECT a, b FROM t "
        "WHERE MOD((MOD(FARM_FINGERPRINT(TO_JSON_STRING(STRUCT(a, b))), 8)) + 8, 8) = 3"
    ),
    "clickhouse": "SELECT a, b FROM t WHERE cityHash64(toString(tuple(a, b))) % 8 = 3",
    "duckdb": "SELECT a, b FROM t WHERE HASH(a, b) % 8 = 3",
    "mysql": "SELECT a, b FROM t WHERE CRC32(CONCAT_WS('|', ISNULL(a), a, ISNULL(b), b)) % 8 = 3",
    "oracle": "SELECT a, b FROM t WHERE NVL(ORA_HASH(a || '\x1f' || b, 7), 0) = 3",
    "postgres": ("SELECT a, b FROM t WHERE ((HASH_RECORD_EXTENDED(ROW(a, b), 0) % 8) + 8) % 8 = 3"),
    "snowflake": "SELECT a, b FROM t WHERE ((HASH(a, b) % 8) + 8) % 8 = 3",
    "spark": "SELECT a, b FROM t WHERE PMOD(XXHASH64(a, b), 8) = 3",
    "sqlite": "SELECT a, b FROM t WHERE SQLFEED_HASH(a, b) % 8 = 3",
    "trino": (
        "SELECT a, b FROM t WHERE "
        "((FROM_BIG_ENDIAN_64(XXHASH64(TO_UTF8(JSON_FORMAT(CAST(ROW(a, b) AS JSON))))) % 8) + 8)"
        " % 8 = 3"
    ),
    "tsql": "SELECT a, b FROM t WHERE ((CHECKSUM(a, b) % 8) + 8) % 8 = 3",
}
"""Partition K of M of ``SELECT a, b FROM t``: the bucket predicate joins the query's WHERE."""


def test_every_engine_of_the_design_is_registered() -> None:
    assert set(DESIGNED_ENGINES) <= set(ALL_DIALECTS)


def test_every_registered_dialect_has_a_golden_partition() -> None:
    """A new dialect adds its golden line to PLAIN_PARTITION, checked against its docs."""
    assert sorted(PLAIN_PARTITION) == ALL_DIALECTS


@pytest.mark.parametrize(("name", "expected"), sorted(PLAIN_PARTITION.items()))
def test_partition_of_a_plain_select_is_golden(name: str, expected: str) -> None:
    assert partition_sql("SELECT a, b FROM t", K, M, dialect=name) == expected


def test_partition_predicate_keeps_the_users_or_together_on_tsql() -> None:
    sql = partition_sql("SELECT a, b FROM t WHERE a > 0 OR b < 0", K, M, dialect="tsql")
    assert sql == (
        "SELECT a, b FROM t WHERE (a > 0 OR b < 0) AND ((CHECKSUM(a, b) % 8) + 8) % 8 = 3"
    )


def test_partition_of_an_aggregate_hashes_only_the_grouping_columns_on_postgres() -> None:
    sql = partition_sql(
        "SELECT t.a, COUNT(*) AS n FROM t JOIN u ON t.id = u.id GROUP BY t.a",
        K,
        M,
        dialect="postgres",
    )
    assert sql == (
        "SELECT * FROM (SELECT t.a, COUNT(*) AS n FROM t JOIN u ON t.id = u.id GROUP BY t.a) "
        "AS _sqlfeed_q "
        "WHERE ((HASH_RECORD_EXTENDED(ROW(_sqlfeed_q.a), 0) % 8) + 8) % 8 = 3"
    )


def test_duplicate_output_names_are_renamed_by_a_derived_column_list_on_duckdb() -> None:
    sql = partition_sql(
        "SELECT t.a, u.a FROM t JOIN u ON t.id = u.id", K, M, dialect="duckdb", columns=["a", "a"]
    )
    assert sql == (
        'SELECT _sqlfeed_c0 AS "a", _sqlfeed_c1 AS "a" '
        "FROM (SELECT t.a, u.a FROM t JOIN u ON t.id = u.id) "
        "AS _sqlfeed_q(_sqlfeed_c0, _sqlfeed_c1) WHERE HASH(_sqlfeed_c0, _sqlfeed_c1) % 8 = 3"
    )


def test_duplicate_output_names_are_renamed_by_a_cte_column_list_on_mysql() -> None:
    """MySQL derived tables cannot rename their columns; MySQL 8 CTEs can."""
    sql = partition_sql(
        "SELECT t.a, u.a FROM t JOIN u ON t.id = u.id", K, M, dialect="mysql", columns=["a", "a"]
    )
    assert sql == (
        "WITH _sqlfeed_q(_sqlfeed_c0, _sqlfeed_c1) AS "
        "(SELECT t.a, u.a FROM t JOIN u ON t.id = u.id) "
        "SELECT _sqlfeed_c0 AS `a`, _sqlfeed_c1 AS `a` FROM _sqlfeed_q "
        "WHERE CRC32(CONCAT_WS('|', ISNULL(_sqlfeed_c0), _sqlfeed_c0, "
        "ISNULL(_sqlfeed_c1), _sqlfeed_c1)) % 8 = 3"
    )


QUERIES: dict[str, tuple[str, list[str] | None]] = {
    "filter": ("SELECT a, b FROM t WHERE a > 0 OR b < 0", None),
    "join-group-by": (
        "SELECT t.a, COUNT(*) AS n FROM t JOIN u ON t.id = u.id GROUP BY t.a",
        None,
    ),
    "union": ("SELECT a FROM t UNION ALL SELECT b FROM u", None),
    "cte": ("WITH c AS (SELECT a, b FROM t WHERE a > 1) SELECT a, b FROM c", None),
    "duplicate-names": ("SELECT t.a, u.a FROM t JOIN u ON t.id = u.id", ["a", "a"]),
    "star-with-columns": ("SELECT * FROM t", ["a", "b"]),
}
"""Representative queries, with the output names the engine reports where that matters."""

RENAMING = {"duplicate-names"}
"""Queries whose output columns must be renamed to be told apart."""

CANNOT_RENAME = ("bigquery", "clickhouse")
"""Engines where neither a derived table nor a CTE can rename its columns."""

MATRIX = [
    pytest.param(name, query, id=f"{name}-{query}")
    for name in ALL_DIALECTS
    for query in QUERIES
    if not (name in CANNOT_RENAME and query in RENAMING)
]


def _partition(name: str, query: str) -> str:
    sql, columns = QUERIES[query]
    return partition_sql(sql, K, M, dialect=name, columns=columns)


@pytest.mark.parametrize(("name", "query"), MATRIX)
def test_partition_sql_parses_back_in_its_dialect(name: str, query: str) -> None:
    _parse_back(_partition(name, query), get_dialect(name))


@pytest.mark.parametrize(("name", "query"), MATRIX)
def test_partition_sql_hashes_with_the_dialects_hash_function(name: str, query: str) -> None:
    dialect = get_dialect(name)
    assert dialect.HASH_FUNCTION.lower() in _partition(name, query).lower()


@pytest.mark.parametrize(("name", "query"), MATRIX)
def test_partition_bucket_is_sign_safe(name: str, query: str) -> None:
    dialect = get_dialect(name)
    sql = _partition(name, query)
    _assert_sign_safe_bucket(_partition_bucket(sql, dialect), dialect, M)
    assert "ABS(" not in sql.upper()


@pytest.mark.parametrize("name", CANNOT_RENAME)
def test_duplicate_output_names_are_refused_where_columns_cannot_be_renamed(name: str) -> None:
    sql, columns = QUERIES["duplicate-names"]
    with pytest.raises(UnsupportedError, match="distinct alias"):
        partition_sql(sql, K, M, dialect=name, columns=columns)


# -- 2. count ------------------------------------------------------------------------------

COUNT_CALL = {"tsql": "COUNT_BIG(*)"}
"""The count aggregate where it is not COUNT(*): T-SQL's COUNT overflows at 2**31."""


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_count_of_a_described_plain_filter_replaces_the_projection(name: str) -> None:
    count = COUNT_CALL.get(name, "COUNT(*)")
    assert count_sql("SELECT a, b FROM t WHERE a > 0", name, columns=["a", "b"]) == (
        f"SELECT {count} FROM t WHERE a > 0"
    )


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_count_keeps_the_select_list_it_has_not_seen_bind(name: str) -> None:
    # SELECT nosuchcol FROM t must fail the count as it fails the query (issue 14, item 4).
    assert "nosuchcol" in count_sql("SELECT nosuchcol FROM t WHERE a > 0", name)


@pytest.mark.parametrize(
    "sql",
    ["SELECT a, b FROM t WHERE a > 0", "SELECT DISTINCT a FROM t"],
    ids=["filter", "distinct"],
)
def test_tsql_counts_with_count_big(sql: str) -> None:
    count = count_sql(sql, "tsql")
    assert count.startswith("SELECT COUNT_BIG(*) FROM ")
    assert "COUNT(" not in count


@pytest.mark.parametrize("name", [n for n in ALL_DIALECTS if n != "tsql"])
def test_other_engines_count_with_count_star(name: str) -> None:
    assert count_sql("SELECT DISTINCT a FROM t", name).startswith("SELECT COUNT(*) FROM (")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        pytest.param(
            "SELECT a, COUNT(*) AS n FROM t GROUP BY a",
            "SELECT COUNT(*) FROM (SELECT a, COUNT(*) AS n FROM t GROUP BY a) AS _sqlfeed_q",
            id="aggregate",
        ),
        pytest.param(
            "SELECT DISTINCT a FROM t",
            "SELECT COUNT(*) FROM (SELECT DISTINCT a FROM t) AS _sqlfeed_q",
            id="distinct",
        ),
        pytest.param(
            "SELECT a FROM t ORDER BY a LIMIT 10",
            "SELECT COUNT(*) FROM (SELECT a FROM t ORDER BY a LIMIT 10) AS _sqlfeed_q",
            id="limit",
        ),
        pytest.param(
            "SELECT t.a FROM t JOIN u ON t.id = u.id",
            "SELECT COUNT(*) FROM (SELECT t.a FROM t JOIN u ON t.id = u.id) AS _sqlfeed_q",
            id="join",
        ),
    ],
)
def test_count_wraps_a_query_that_is_not_a_plain_filter(sql: str, expected: str) -> None:
    assert count_sql(sql, "duckdb") == expected


@pytest.mark.parametrize("name", ALL_DIALECTS)
@pytest.mark.parametrize(
    "sql",
    ["SELECT a FROM t ORDER BY a", "SELECT DISTINCT a FROM t ORDER BY a"],
    ids=["filter", "distinct"],
)
def test_count_drops_order_by_without_limit(name: str, sql: str) -> None:
    assert "ORDER BY" not in count_sql(sql, name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("duckdb", "SELECT COUNT(*) FROM (SELECT a FROM t ORDER BY a LIMIT 10) AS _sqlfeed_q"),
        ("tsql", "SELECT COUNT_BIG(*) FROM (SELECT TOP 10 a AS a FROM t ORDER BY a) AS _sqlfeed_q"),
        (
            "oracle",
            "SELECT COUNT(*) FROM (SELECT a FROM t ORDER BY a FETCH FIRST 10 ROWS ONLY) _sqlfeed_q",
        ),
    ],
)
def test_count_keeps_order_by_with_limit(name: str, expected: str) -> None:
    assert count_sql("SELECT a FROM t ORDER BY a LIMIT 10", name) == expected


@pytest.mark.parametrize("name", ALL_DIALECTS)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a, b FROM t WHERE a > 0 ORDER BY a",
        "SELECT a, COUNT(*) AS n FROM t GROUP BY a",
        "SELECT a FROM t ORDER BY a LIMIT 10",
    ],
    ids=["filter", "aggregate", "limit"],
)
def test_count_parses_back_in_its_dialect(name: str, sql: str) -> None:
    _parse_back(count_sql(sql, name), get_dialect(name))


# -- 3. sampling ---------------------------------------------------------------------------

FILTER = "SELECT a, b FROM t WHERE a > 0"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "duckdb",
            "SELECT a, b FROM t TABLESAMPLE BERNOULLI (10 PERCENT) REPEATABLE (0) WHERE a > 0",
        ),
        ("postgres", "SELECT a, b FROM t TABLESAMPLE BERNOULLI (10) REPEATABLE (0) WHERE a > 0"),
    ],
)
def test_bernoulli_sample_is_a_seeded_tablesample(name: str, expected: str) -> None:
    assert sample_sql(FILTER, dialect=name, method="bernoulli", fraction=0.1) == expected


def test_bernoulli_sample_on_snowflake_is_a_tablesample() -> None:
    sql = sample_sql(FILTER, dialect="snowflake", method="bernoulli", fraction=0.1)
    assert "FROM t TABLESAMPLE BERNOULLI (10)" in sql
    _parse_back(sql, get_dialect("snowflake"))


@pytest.mark.parametrize("name", ["mysql", "sqlite", "bigquery", "clickhouse", "tsql"])
def test_bernoulli_sample_is_refused_where_the_engine_has_no_row_sampling(name: str) -> None:
    with pytest.raises(UnsupportedError, match=re.escape("method='hash'")):
        sample_sql(FILTER, dialect=name, method="bernoulli", fraction=0.1)


def test_bernoulli_sample_on_postgres_is_refused_beyond_a_single_table() -> None:
    """PostgreSQL samples base tables only: a join cannot be sampled as a whole."""
    with pytest.raises(UnsupportedError, match=re.escape("method='hash'")):
        sample_sql(
            "SELECT t.a FROM t JOIN u ON t.id = u.id",
            dialect="postgres",
            method="bernoulli",
            fraction=0.1,
        )


def test_bernoulli_sample_with_a_seed_is_refused_where_the_engine_cannot_seed() -> None:
    with pytest.raises(UnsupportedError, match="seed=None"):
        sample_sql(FILTER, dialect="trino", method="bernoulli", fraction=0.25, seed=0)


def test_bernoulli_sample_without_a_seed_works_on_trino() -> None:
    sql = sample_sql(FILTER, dialect="trino", method="bernoulli", fraction=0.25, seed=None)
    assert sql == "SELECT a, b FROM t TABLESAMPLE BERNOULLI (25) WHERE a > 0"


def test_bernoulli_sample_on_oracle_uses_the_oracle_sample_clause() -> None:
    sql = sample_sql(FILTER, dialect="oracle", method="bernoulli", fraction=0.1)
    assert sql == "SELECT a, b FROM t SAMPLE (10) SEED (0) WHERE a > 0"


def test_bernoulli_sample_on_spark_seeds_with_repeatable() -> None:
    sql = sample_sql(FILTER, dialect="spark", method="bernoulli", fraction=0.1)
    assert sql == "SELECT a, b FROM t TABLESAMPLE (10 PERCENT) REPEATABLE (0) WHERE a > 0"


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_hash_sample_works_on_every_engine(name: str) -> None:
    dialect = get_dialect(name)
    sql = sample_sql(FILTER, dialect=name, method="hash", fraction=0.1)
    assert dialect.HASH_FUNCTION.lower() in sql.lower()
    assert sql.endswith(" < 1000")  # 10% of the 10,000 hash-sample buckets
    _parse_back(sql, dialect)


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_hash_sample_is_deterministic(name: str) -> None:
    first = sample_sql(FILTER, dialect=name, method="hash", fraction=0.25, key="a")
    again = sample_sql(FILTER, dialect=name, method="hash", fraction=0.25, key="a")
    assert first == again


def test_limit_sample_on_tsql_renders_top() -> None:
    assert sample_sql("SELECT a, b FROM t", 5, dialect="tsql") == "SELECT TOP 5 a, b FROM t"


def test_limit_sample_on_oracle_renders_fetch_first() -> None:
    assert sample_sql("SELECT a, b FROM t", 5, dialect="oracle") == (
        "SELECT a, b FROM t FETCH FIRST 5 ROWS ONLY"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"method": "reservoir", "fraction": 0.1}, id="unknown-method"),
        pytest.param({"method": "hash", "fraction": 0}, id="fraction-zero"),
        pytest.param({"method": "hash", "fraction": 1.5}, id="fraction-above-one"),
        pytest.param({"method": "hash", "fraction": -0.1}, id="fraction-negative"),
        pytest.param({"method": "hash"}, id="hash-without-fraction"),
        pytest.param({"method": "bernoulli", "fraction": 0}, id="bernoulli-fraction-zero"),
        pytest.param({"method": "limit"}, id="limit-without-n"),
        pytest.param({"method": "limit", "n": 5, "fraction": 0.5}, id="limit-with-fraction"),
        pytest.param({"method": "limit", "n": -1}, id="negative-n"),
    ],
)
def test_bad_sample_arguments_raise_invalid_argument_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        sample_sql("SELECT a, b FROM t", dialect="duckdb", **kwargs)


# -- 4. dialect look-up --------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_get_dialect_by_canonical_name(name: str) -> None:
    assert get_dialect(name).name == name


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("postgresql", "postgres"),
        ("mariadb", "mysql"),
        ("mssql", "tsql"),
        ("hive", "spark"),
        ("databricks", "spark"),
        ("presto", "trino"),
    ],
)
def test_get_dialect_by_alias(alias: str, name: str) -> None:
    assert get_dialect(alias).name == name


@pytest.mark.parametrize("spelling", ["DuckDB", "POSTGRESQL", "MsSql", " MariaDB "])
def test_get_dialect_ignores_case_and_surrounding_spaces(spelling: str) -> None:
    assert get_dialect(spelling) == get_dialect(spelling.strip().lower())


@pytest.mark.parametrize(("typo", "suggestion"), [("postgress", "postgres"), ("duckbd", "duckdb")])
def test_a_typo_raises_unknown_dialect_error_suggesting_the_closest_name(
    typo: str, suggestion: str
) -> None:
    with pytest.raises(UnknownDialectError, match=f"did you mean '{suggestion}'"):
        get_dialect(typo)


def test_unknown_dialect_error_is_an_invalid_argument_and_a_value_error() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        get_dialect("nosuchdb")
    assert isinstance(caught.value, ValueError)
    assert "known: " in str(caught.value)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql+psycopg://u@h/db", "postgres"),
        ("mysql+pymysql://root@h/db", "mysql"),
        ("sqlite:///x.db", "sqlite"),
        ("duckdb:///x.duckdb", "duckdb"),
        ("duckdb://", "duckdb"),
        ("mssql+pyodbc://u:p@dsn", "tsql"),
        ("snowflake://u@account/db/schema", "snowflake"),
        ("bigquery://proj", "bigquery"),
        ("x.duckdb", "duckdb"),
        (":memory:", "duckdb"),
    ],
)
def test_dialect_for_a_url(url: str, name: str) -> None:
    assert dialect_for(url).name == name


def test_dialect_for_a_duckdb_connection() -> None:
    with closing(duckdb.connect()) as connection:
        assert dialect_for(connection).name == "duckdb"


def test_dialect_for_a_sqlite3_connection() -> None:
    with closing(sqlite3.connect(":memory:")) as connection:
        assert dialect_for(connection).name == "sqlite"


def test_dialect_for_a_sqlalchemy_engine_and_its_connection() -> None:
    engine = sqlalchemy.create_engine("sqlite://")
    try:
        assert dialect_for(engine).name == "sqlite"
        with engine.connect() as connection:
            assert dialect_for(connection).name == "sqlite"
    finally:
        engine.dispose()


def test_dialect_for_a_sqlalchemy_url() -> None:
    url = sqlalchemy.engine.make_url("postgresql+psycopg://u@h/db")
    assert dialect_for(url).name == "postgres"


@pytest.mark.parametrize("text", ["localhost:5432/db", "data.db", "postgres"])
def test_dialect_for_a_string_that_is_not_a_url_explains_the_expected_form(text: str) -> None:
    expected = "is not a database URL; expected e.g. postgresql://user@host/db"
    with pytest.raises(UnknownDialectError, match=re.escape(expected)):
        dialect_for(text)


def test_dialect_for_an_unknown_object_suggests_passing_the_dialect() -> None:
    with pytest.raises(UnknownDialectError, match="dialect=NAME"):
        dialect_for(object())


# -- 5. the SQLite hash function -----------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param((1, None, "a"), 3753006177, id="row"),
        pytest.param((None,), 4215463597, id="null"),
        pytest.param(("",), 1649118999, id="empty-text"),
        pytest.param((1,), 1395677367, id="integer"),
        pytest.param((1.0,), 80586860, id="real"),
        pytest.param(("1",), 2264486737, id="text"),
        pytest.param((b"\x00\xff",), 2257552050, id="blob"),
    ],
)
def test_sqlite_row_hash_never_changes(values: tuple[Any, ...], expected: int) -> None:
    """Frozen values: partitions must be reproducible across sqlfeed and Python versions."""
    assert row_hash(*values) == expected


def test_sqlite_row_hash_tells_null_from_empty_text() -> None:
    assert row_hash(None) != row_hash("")


def test_sqlite_row_hash_tells_integer_real_and_text_apart() -> None:
    assert len({row_hash(1), row_hash(1.0), row_hash("1"), row_hash(b"1")}) == 4


def test_sqlite_row_hash_tells_text_from_the_same_bytes() -> None:
    assert row_hash("ab") != row_hash(b"ab")


def test_sqlite_row_hash_keeps_column_boundaries() -> None:
    assert row_hash("ab", "c") != row_hash("a", "bc")
    assert row_hash(1, 2) != row_hash(2, 1)


@pytest.mark.parametrize(
    "values",
    [(None,), (0,), (-1,), (2**63 - 1,), (-(2**63),), (-0.5,), ("é",), (b"",), (1, None, "a")],
    ids=repr,
)
def test_sqlite_row_hash_is_an_unsigned_32_bit_integer(values: tuple[Any, ...]) -> None:
    value = row_hash(*values)
    assert isinstance(value, int)
    assert 0 <= value < 2**32


def test_sqlite_hash_registered_on_a_connection_buckets_in_range() -> None:
    with closing(sqlite3.connect(":memory:")) as connection:
        SQLite().register_functions(connection)
        [(bucket,)] = connection.execute("SELECT sqlfeed_hash(1, NULL, 'a') % 8").fetchall()
    assert isinstance(bucket, int)
    assert 0 <= bucket < 8
    assert bucket == row_hash(1, None, "a") % 8


def test_sqlite_hash_in_sql_sees_sqlites_storage_classes() -> None:
    """INTEGER, REAL, TEXT, BLOB and NULL reach row_hash as int, float, str, bytes, None."""
    with closing(sqlite3.connect(":memory:")) as connection:
        SQLite().register_functions(connection)
        row = connection.execute(
            "SELECT sqlfeed_hash(1), sqlfeed_hash(1.0), sqlfeed_hash('1'), "
            "sqlfeed_hash(x'00ff'), sqlfeed_hash(NULL)"
        ).fetchone()
    assert row == (row_hash(1), row_hash(1.0), row_hash("1"), row_hash(b"\x00\xff"), row_hash(None))


# -- 6. rendering refuses what an engine lacks ---------------------------------------------


def test_rendering_a_tablesample_for_mysql_raises_instead_of_dropping_it() -> None:
    """sqlglot alone would drop the sample with a warning: a silent full scan."""
    table = exp.to_table("t")
    table.set(
        "sample", exp.TableSample(method=exp.var("BERNOULLI"), percent=exp.Literal.number(10))
    )
    select = exp.select("a").from_(table)
    with pytest.raises(UnsupportedError, match="mysql cannot express this query"):
        get_dialect("mysql").sql(select)


@pytest.mark.parametrize("name", ["mysql", "sqlite"])
@pytest.mark.parametrize(
    "rewrite",
    [
        pytest.param(lambda q, d: partition_sqls(q, 2, dialect=d), id="partitions"),
        pytest.param(lambda q, d: count_sql(q, d), id="count"),
        pytest.param(lambda q, d: schema_sql(q, d), id="schema"),
        pytest.param(lambda q, d: sample_sql(q, 5, dialect=d), id="sample-limit"),
    ],
)
def test_a_query_with_tablesample_is_refused_where_the_engine_has_none(
    name: str, rewrite: Callable[[str, str], object]
) -> None:
    """Never a silent full scan: count, schema, sample and partitions all refuse."""
    with pytest.raises(UnsupportedError, match="TABLESAMPLE"):
        rewrite("SELECT a FROM t TABLESAMPLE BERNOULLI (10) REPEATABLE (1)", name)


def test_a_derived_column_list_is_refused_on_sqlite() -> None:
    with pytest.raises(UnsupportedError, match="Named columns are not supported"):
        partition_sqls("SELECT x, y FROM (SELECT 1 AS a, 2 AS b) AS s(x, y)", 2, dialect="sqlite")


@pytest.mark.parametrize("name", ["bigquery", "snowflake", "sqlite", "tsql"])
def test_intersect_all_is_refused_where_the_engine_has_only_intersect_distinct(
    name: str,
) -> None:
    """Rendering INTERSECT ALL as INTERSECT would silently drop duplicate rows."""
    with pytest.raises(UnsupportedError, match="INTERSECT ALL"):
        partition_sqls("SELECT a FROM t INTERSECT ALL SELECT a FROM u", 2, dialect=name)


def test_a_natural_full_join_is_refused_on_mysql_with_a_sqlfeed_error() -> None:
    with pytest.raises(SqlfeedError):
        partition_sqls("SELECT a FROM t NATURAL FULL OUTER JOIN u", 2, dialect="mysql")


# -- 7. every registered dialect builds a bucket -------------------------------------------

KEY_SETS = {
    "one-key": ["a"],
    "three-keys": ["a", "b", "c"],
    "quoted-key": ["order id"],
}


def _columns(names: list[str]) -> list[exp.Expr]:
    return [exp.column(exp.to_identifier(n, quoted=" " in n)) for n in names]


@pytest.mark.parametrize("keys", list(KEY_SETS.values()), ids=list(KEY_SETS))
@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_bucket_expression_parses_back_in_its_dialect(name: str, keys: list[str]) -> None:
    dialect = get_dialect(name)
    bucket_sql = dialect.sql(dialect.bucket(_columns(keys), M))
    _parse_back(bucket_sql, dialect)


@pytest.mark.parametrize("keys", list(KEY_SETS.values()), ids=list(KEY_SETS))
@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_bucket_expression_is_sign_safe(name: str, keys: list[str]) -> None:
    dialect = get_dialect(name)
    bucket_sql = dialect.sql(dialect.bucket(_columns(keys), M))
    _assert_sign_safe_bucket(bucket_sql, dialect, M)


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_bucket_expression_hashes_every_key(name: str) -> None:
    dialect = get_dialect(name)
    bucket_sql = dialect.sql(dialect.bucket(_columns(["k1", "k2", "k3"]), M))
    for key in ("k1", "k2", "k3"):
        assert key in bucket_sql


@pytest.mark.parametrize("name", ALL_DIALECTS)
def test_dialect_declares_its_engine(name: str) -> None:
    dialect = get_dialect(name)
    assert dialect.HASH_FUNCTION
    assert sqlglot.Dialect.get_or_raise(dialect.sqlglot_dialect)
