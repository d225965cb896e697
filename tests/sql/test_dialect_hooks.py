"""Dialect hooks: what each engine answers to the planner, the statistics and the queue.

Engine knowledge lives in ``dialects/`` as capability attributes and overridable methods
(the callers ask the dialect, never compare engine names). Pure: no database server; the
catalog queries of DuckDB and SQLite run on in-process connections, the others' SQL is
checked as text (the engine tests run it on real servers).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import duckdb
import pytest
from sqlglot import exp

from sqlfeed.dialects import Dialect, UnsupportedError, get_dialect
from sqlfeed.dialects.base import QueueBounds
from sqlfeed.dialects.catalog import Extent

ENGINES = ("postgres", "mysql", "sqlite", "duckdb")

CAPABILITIES: dict[str, dict[str, Any]] = {
    "EMBEDS_QUERY_TEXT": {"postgres": True, "mysql": True, "sqlite": True, "duckdb": True},
    "FETCH_WITH_TIES": {"postgres": True, "mysql": True, "sqlite": True, "duckdb": False},
    "PHYSICAL_ADDRESS": {"postgres": True, "mysql": False, "sqlite": True, "duckdb": True},
    "ROW_GROUP_ROWS": {"postgres": None, "mysql": None, "sqlite": None, "duckdb": 122_880},
    "ROWS_FROM_EXTENT": {"postgres": True, "mysql": False, "sqlite": True, "duckdb": False},
    "KEY_BOUNDS_FROM_INDEX": {"postgres": True, "mysql": True, "sqlite": False, "duckdb": False},
    "CLUSTERED_PRIMARY_KEY": {"postgres": False, "mysql": True, "sqlite": False, "duckdb": False},
    "READS_FILES": {"postgres": False, "mysql": False, "sqlite": False, "duckdb": True},
    "MEMORY_URLS": {"postgres": False, "mysql": False, "sqlite": False, "duckdb": True},
    "EXPORTS_SNAPSHOTS": {"postgres": True, "mysql": False, "sqlite": False, "duckdb": False},
    "WRITTEN_WHILE_READ": {"postgres": True, "mysql": True, "sqlite": True, "duckdb": False},
    "PINNED_DRIVER": {"postgres": "", "mysql": "pymysql", "sqlite": "sqlite3", "duckdb": ""},
    "SNAPSHOT_SYNC": {
        "postgres": "",
        "mysql": "LOCK TABLES ... READ on the tables read (else FLUSH TABLES WITH READ LOCK)",
        "sqlite": "BEGIN IMMEDIATE (a memory database: one session)",
        "duckdb": "",
    },
    "CREATES_SCRATCH_SCHEMA": {"postgres": True, "mysql": True, "sqlite": False, "duckdb": False},
    "SCRATCH_BY_PAGES": {"postgres": True, "mysql": False, "sqlite": False, "duckdb": False},
    "SCRATCH_ROW_NUMBER_INDEX": {
        "postgres": False,
        "mysql": True,
        "sqlite": True,
        "duckdb": False,
    },
    "FLOAT_NAN": {"postgres": True, "mysql": False, "sqlite": False, "duckdb": True},
    "FLOAT_INFINITY": {"postgres": True, "mysql": False, "sqlite": True, "duckdb": True},
    "FLOAT_UNDERFLOW_RAISES": {"postgres": True, "mysql": False, "sqlite": False, "duckdb": False},
    "GROUPED_PUSHDOWN_FENCE": {"postgres": False, "mysql": True, "sqlite": False, "duckdb": False},
    "ORDERED_AGGREGATES_SINCE": {
        "postgres": "",
        "mysql": "",
        "sqlite": "SQLite 3.44",
        "duckdb": "",
    },
    "QUEUE_LOCK_CLAUSE": {
        "postgres": " FOR UPDATE SKIP LOCKED",
        "mysql": " FOR UPDATE SKIP LOCKED",
        "sqlite": "",
        "duckdb": "",
    },
    "FILE_DATABASE": {"postgres": False, "mysql": False, "sqlite": True, "duckdb": True},
    "QUEUE_ISOLATION": {
        "postgres": None,
        "mysql": "READ COMMITTED",
        "sqlite": None,
        "duckdb": None,
    },
    "QUEUE_WRITE_BEGIN": {
        "postgres": None,
        "mysql": None,
        "sqlite": "BEGIN IMMEDIATE",
        "duckdb": None,
    },
    "SERVER_VERSION_SQL": {
        "postgres": None,
        "mysql": "SELECT VERSION()",
        "sqlite": None,
        "duckdb": None,
    },
    "TITLE": {
        "postgres": "PostgreSQL",
        "mysql": "MySQL/MariaDB",
        "sqlite": "SQLite",
        "duckdb": "DuckDB",
    },
}
"""Each capability attribute, per engine."""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("attribute", sorted(CAPABILITIES))
def test_each_engine_declares_its_capabilities(attribute: str, engine: str) -> None:
    assert getattr(get_dialect(engine), attribute) == CAPABILITIES[attribute][engine]


def test_the_base_dialect_declares_no_capability() -> None:
    base = Dialect()
    assert not base.PHYSICAL_ADDRESS
    assert not base.EXPORTS_SNAPSHOTS
    assert not base.WRITTEN_WHILE_READ
    assert not base.READS_FILES
    assert base.QUEUE_NOW is None
    assert frozenset() == base.OUTER_MODIFIERS
    assert base.primary_key_sql(exp.to_table("t"), "t") is None
    assert base.unique_keys_sql(exp.to_table("t")) is None
    assert base.unnest_elements(exp.column("x"), 1) is None
    assert base.epoch_days(exp.column("x")) is None


def test_only_queue_engines_say_the_time() -> None:
    assert [e for e in ENGINES if get_dialect(e).QUEUE_NOW] == ["postgres", "mysql", "sqlite"]
    assert get_dialect("sqlite").QUEUE_CAVEAT is not None
    assert get_dialect("postgres").QUEUE_CAVEAT is None


def test_the_engines_outside_the_corpus_are_rendered_from_their_tree() -> None:
    assert not get_dialect("tsql").EMBEDS_QUERY_TEXT
    assert not get_dialect("snowflake").EMBEDS_QUERY_TEXT


def test_synonyms_sqlglot_writes_are_declared_per_engine() -> None:
    assert dict(get_dialect("mysql").RENDERED_SYNONYMS) == {"COALESCE": frozenset({"IFNULL"})}
    assert "SUBSTR" in get_dialect("sqlite").RENDERED_SYNONYMS["SUBSTRING"]
    assert "LIST" in get_dialect("duckdb").RENDERED_SYNONYMS["ARRAY_AGG"]
    assert dict(get_dialect("postgres").RENDERED_SYNONYMS) == {}


def test_mysql_leaves_out_outer_modifiers() -> None:
    assert "SQL_NO_CACHE" in get_dialect("mysql").OUTER_MODIFIERS
    assert frozenset() == get_dialect("postgres").OUTER_MODIFIERS


# -- physical addresses -------------------------------------------------------------------


def test_a_postgres_row_address_is_a_tid_of_a_pages_first_tuple() -> None:
    assert get_dialect("postgres").row_address(12).sql("postgres") == "CAST('(12,0)' AS tid)"


@pytest.mark.parametrize("engine", ["duckdb", "sqlite", "mysql"])
def test_a_rowid_address_is_the_number(engine: str) -> None:
    assert get_dialect(engine).row_address(12).sql(engine) == "12"


def test_an_engine_without_row_addresses_says_so() -> None:
    why = get_dialect("mysql").physical_extent(_Runner(None), exp.to_table("t"), "t")
    assert why == "mysql has no physical row address (PostgreSQL ctid, DuckDB or SQLite rowid)"


class _Runner:
    """A SqlRunner over a DB-API connection (``None``: one that must not be asked)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.asked: list[str] = []

    def rows(self, sql: str, *, what: str = "query") -> list[tuple[Any, ...]]:
        assert self.connection is not None, f"not a catalog question: {sql}"
        self.asked.append(sql)
        return [tuple(r) for r in self.connection.execute(sql).fetchall()]

    def scalar(self, sql: str, *, what: str = "query") -> Any:
        found = self.rows(sql, what=what)
        return found[0][0] if found else None

    def execute(self, sql: str, *, what: str = "statement") -> None:
        self.rows(sql, what=what)


@pytest.fixture
def sqlite_db() -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(":memory:")) as connection:
        connection.executescript(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE, note TEXT);"
            "INSERT INTO t VALUES (3, 'a', NULL), (5, 'b', NULL), (9, 'c', 'x');"
            "CREATE TABLE w (k TEXT PRIMARY KEY) WITHOUT ROWID;"
            "CREATE VIEW v AS SELECT * FROM t;"
        )
        yield connection


@pytest.fixture
def duckdb_db() -> Iterator[duckdb.DuckDBPyConnection]:
    with duckdb.connect() as connection:
        connection.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, code VARCHAR NOT NULL UNIQUE, note VARCHAR);"
            "INSERT INTO t VALUES (3, 'a', NULL), (5, 'b', NULL), (9, 'c', 'x');"
            "CREATE VIEW v AS SELECT * FROM t;"
        )
        yield connection


def test_a_sqlite_extent_is_its_rowid_span(sqlite_db: sqlite3.Connection) -> None:
    extent = get_dialect("sqlite").physical_extent(_Runner(sqlite_db), exp.to_table("t"), "t")
    assert extent == Extent(
        3, 10, 7.0, "its rowid span, an upper bound after deletes", "rowid", "rowids"
    )


def test_a_sqlite_extent_refuses_views_and_without_rowid_tables(
    sqlite_db: sqlite3.Connection,
) -> None:
    sqlite = get_dialect("sqlite")
    assert "not a base table" in str(
        sqlite.physical_extent(_Runner(sqlite_db), exp.to_table("v"), "v")
    )
    assert "WITHOUT ROWID" in str(
        sqlite.physical_extent(_Runner(sqlite_db), exp.to_table("w"), "w")
    )


def test_a_duckdb_extent_is_its_rowids(duckdb_db: duckdb.DuckDBPyConnection) -> None:
    extent = get_dialect("duckdb").physical_extent(_Runner(duckdb_db), exp.to_table("t"), "t")
    assert isinstance(extent, Extent)
    assert (extent.low, extent.high, extent.address, extent.unit) == (0, 3, "rowid", "rowids")
    assert extent.rows_from == "duckdb_tables().estimated_size"
    why = get_dialect("duckdb").physical_extent(_Runner(duckdb_db), exp.to_table("v"), "v")
    assert why == "v is not a base table (a view, or not found)"


# -- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_the_primary_key_query_names_its_columns_and_types(
    engine: str, request: pytest.FixtureRequest
) -> None:
    connection = request.getfixturevalue(f"{engine}_db")
    sql = get_dialect(engine).primary_key_sql(exp.to_table("t"), "t")
    assert sql is not None
    assert [(str(c), str(t).upper()) for c, t in connection.execute(sql).fetchall()] == [
        ("id", "INTEGER")
    ]


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_the_unique_keys_query_says_which_columns_are_not_null(
    engine: str, request: pytest.FixtureRequest
) -> None:
    connection = request.getfixturevalue(f"{engine}_db")
    sql = get_dialect(engine).unique_keys_sql(exp.to_table("t"))
    assert sql is not None
    found = {
        (str(column), bool(not_null)) for _, column, not_null in connection.execute(sql).fetchall()
    }
    assert found == {("id", True), ("code", True)}


def test_server_catalog_queries_name_the_table_as_a_literal() -> None:
    table = exp.to_table("s.t")
    postgres, mysql = get_dialect("postgres"), get_dialect("mysql")
    assert "to_regclass('s.t')" in str(postgres.primary_key_sql(table, "s.t"))
    assert "to_regclass('s.t')" in str(postgres.unique_keys_sql(table))
    assert "k.TABLE_NAME = 't'" in str(mysql.primary_key_sql(table, "s.t"))
    assert "TABLE_SCHEMA = 's' AND TABLE_NAME = 't'" in str(mysql.unique_keys_sql(table))
    plain = str(mysql.unique_keys_sql(exp.to_table("t")))
    assert "TABLE_SCHEMA = DATABASE()" in plain


def test_mysql_estimates_rows_from_information_schema() -> None:
    class Catalog(_Runner):
        def rows(self, sql: str, *, what: str = "query") -> list[tuple[Any, ...]]:
            self.asked.append(sql)
            return [(1200, "InnoDB")]

    runner = Catalog(None)
    estimate = get_dialect("mysql").catalog_row_estimate(runner, exp.to_table("t"))
    assert estimate == (1200, "information_schema.tables.table_rows, an estimate")
    assert "table_name = 't'" in runner.asked[0]
    assert get_dialect("duckdb").catalog_row_estimate(_Runner(None), exp.to_table("t")) is None


def test_postgres_reads_the_key_histogram() -> None:
    class Catalog(_Runner):
        def rows(self, sql: str, *, what: str = "query") -> list[tuple[Any, ...]]:
            self.asked.append(sql)
            return [("{1,5,9}",)]

    runner = Catalog(None)
    assert get_dialect("postgres").key_histogram(runner, "t", "id") == [1, 5, 9]
    assert "pg_stats" in runner.asked[0]
    assert "s.attname = 'id'" in runner.asked[0]
    assert get_dialect("mysql").key_histogram(_Runner(None), "t", "id") is None


# -- scratch tables -------------------------------------------------------------------------


def test_scratch_tables_come_from_each_catalog() -> None:
    assert "pg_class" in get_dialect("postgres").scratch_tables_sql("s")
    assert "data_length + index_length" in get_dialect("mysql").scratch_tables_sql("s")
    assert "duckdb_tables()" in get_dialect("duckdb").scratch_tables_sql("s")
    assert get_dialect("sqlite").scratch_tables_sql("s") == (
        "SELECT name, NULL, NULL, NULL FROM s.sqlite_master WHERE type = 'table'"
    )
    assert get_dialect("sqlite").table_names_sql("s") == (
        "SELECT name FROM s.sqlite_master WHERE type = 'table'"
    )
    assert get_dialect("postgres").table_names_sql("s") == (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 's'"
    )


def test_a_scratch_table_comment_is_set_and_read_where_the_engine_keeps_one() -> None:
    table = exp.table_("x", db="s")
    text = "train --out /m/it's (pid 1 on h)"
    assert get_dialect("postgres").scratch_comment_sql(table, text) == (
        "COMMENT ON TABLE s.x IS 'train --out /m/it''s (pid 1 on h)'"
    )
    assert get_dialect("duckdb").scratch_comment_sql(table, text) == (
        "COMMENT ON TABLE s.x IS 'train --out /m/it''s (pid 1 on h)'"
    )
    assert get_dialect("mysql").scratch_comment_sql(table, "a\\b'c") == (
        "ALTER TABLE s.x COMMENT = 'a\\\\b''c'"
    )
    assert get_dialect("sqlite").scratch_comment_sql(table, text) is None
    assert "obj_description(c.oid, 'pg_class')" in get_dialect("postgres").scratch_tables_sql("s")
    assert "NULLIF(table_comment, '')" in get_dialect("mysql").scratch_tables_sql("s")
    assert ", comment FROM duckdb_tables()" in get_dialect("duckdb").scratch_tables_sql("s")


def test_sqlite_qualifies_the_scratch_index_not_its_table() -> None:
    table = exp.table_("x", db="s")
    sqlite = get_dialect("sqlite")
    assert sqlite.sql(sqlite.scratch_index(table, "x", "s", "rn")) == "CREATE INDEX s.x_rn ON x(rn)"
    mysql = get_dialect("mysql")
    assert mysql.sql(mysql.scratch_index(table, "x", "s", "rn")) == "CREATE INDEX x_rn ON s.x(rn)"


def test_a_postgres_scratch_table_is_unlogged_and_read_by_pages() -> None:
    postgres = get_dialect("postgres")
    create = exp.Create(
        kind="TABLE",
        this=exp.to_table("s.x"),
        properties=exp.Properties(expressions=postgres.scratch_properties()),
    )
    assert postgres.sql(create).startswith("CREATE UNLOGGED TABLE s.x")
    assert "pg_relation_size(to_regclass('s.x'))" in postgres.relation_pages_sql("s.x")
    assert get_dialect("mysql").scratch_properties() == []
    with pytest.raises(UnsupportedError):
        get_dialect("mysql").relation_pages_sql("s.x")


def test_mysql_probes_its_scratch_database() -> None:
    runner = _Recorder()
    assert get_dialect("mysql").prepare_scratch_schema(runner, "scratch", "probe_1") is None
    assert runner.asked == [
        "CREATE DATABASE IF NOT EXISTS scratch",
        "CREATE TABLE scratch.probe_1 (x INT)",
        "DROP TABLE IF EXISTS scratch.probe_1",
    ]


class _Recorder(_Runner):
    def __init__(self) -> None:
        super().__init__(None)

    def execute(self, sql: str, *, what: str = "statement") -> None:
        self.asked.append(sql)


# -- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "nan", "infinity"),
    [
        ("postgres", "CAST('NaN' AS DOUBLE PRECISION)", "CAST('Infinity' AS DOUBLE PRECISION)"),
        ("duckdb", "CAST('NaN' AS DOUBLE)", "CAST('Infinity' AS DOUBLE)"),
        ("sqlite", None, "9e999"),
    ],
)
def test_non_finite_floats_are_values(engine: str, nan: str | None, infinity: str) -> None:
    dialect = get_dialect(engine)
    assert dialect.infinity().sql(engine) == infinity
    if nan is not None:
        assert dialect.nan().sql(engine) == nan


def test_duckdb_time_arithmetic_gives_the_fed_units() -> None:
    duck = get_dialect("duckdb")
    date = exp.cast(exp.Literal.string("1970-01-11"), exp.DataType.Type.DATE)
    stamp = exp.cast(exp.Literal.string("1970-01-01 00:00:01"), exp.DataType.Type.TIMESTAMP)
    clock = exp.cast(exp.Literal.string("00:00:02"), exp.DataType.Type.TIME)
    expressions = [
        duck.epoch_days(date),
        duck.epoch_microseconds(stamp),
        duck.clock_microseconds(clock),
    ]
    sql = "SELECT " + ", ".join(duck.sql(e) for e in expressions if e is not None)
    with duckdb.connect() as connection:
        assert connection.execute(sql).fetchone() == (10, 1_000_000, 2_000_000)
    assert duck.duration_microseconds(exp.column("d")) is None


@pytest.mark.parametrize(
    ("engine", "days", "micros"),
    [
        (
            "postgres",
            "CAST((d - CAST('1970-01-01' AS DATE)) AS BIGINT)",
            "EXTRACT(EPOCH FROM d) * 1000000",
        ),
        (
            "mysql",
            "DATEDIFF(d, '1970-01-01')",
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', d)",
        ),
    ],
)
def test_server_time_arithmetic(engine: str, days: str, micros: str) -> None:
    dialect = get_dialect(engine)
    assert dialect.sql(dialect.epoch_days(exp.column("d"))) == days  # type: ignore[arg-type]
    assert dialect.sql(dialect.epoch_microseconds(exp.column("d"))) == micros  # type: ignore[arg-type]
    assert dialect.duration_microseconds(exp.column("d")) is not None
    assert get_dialect("sqlite").epoch_days(exp.column("d")) is None


def test_list_elements_are_unnested_where_sql_can() -> None:
    value = exp.column("x")
    duck = get_dialect("duckdb")
    assert duck.sql(duck.unnest_elements(value, 3)) == "FLATTEN(FLATTEN(x))"  # type: ignore[arg-type]
    assert get_dialect("postgres").unnest_elements(value, 1) is value
    assert get_dialect("postgres").unnest_elements(value, 2) is None
    assert get_dialect("mysql").unnest_elements(value, 1) is None


# -- the lease queue ------------------------------------------------------------------------

BOUNDS = QueueBounds(lock_wait_s=2, idle_transaction_s=4, silent_session_s=10, busy_ms=200)


def test_each_queue_engine_inserts_ignoring_duplicates() -> None:
    assert get_dialect("postgres").insert_ignoring("t", "(1)") == (
        "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING"
    )
    assert get_dialect("mysql").insert_ignoring("t", "(1)") == "INSERT IGNORE INTO t VALUES (1)"
    assert get_dialect("sqlite").insert_ignoring("t", "(1)") == "INSERT OR IGNORE INTO t VALUES (1)"
    with pytest.raises(UnsupportedError):
        get_dialect("duckdb").insert_ignoring("t", "(1)")


def test_queue_sessions_are_bounded_per_engine() -> None:
    assert get_dialect("postgres").queue_session_sql("", BOUNDS) == [
        "SET lock_timeout = '2s'",
        "SET idle_in_transaction_session_timeout = '4s'",
    ]
    mysql = get_dialect("mysql")
    assert mysql.queue_session_sql("10.11.6-MariaDB", BOUNDS) == [
        "SET SESSION innodb_lock_wait_timeout = 2",
        "SET SESSION idle_transaction_timeout = 4",
    ]
    assert mysql.queue_session_sql("8.0.36", BOUNDS)[1] == "SET SESSION wait_timeout = 10"
    assert get_dialect("sqlite").queue_session_sql("", BOUNDS) == [
        "PRAGMA busy_timeout=200",
        "PRAGMA journal_mode=WAL",
    ]
    assert get_dialect("sqlite").queue_connect_args(BOUNDS) == {
        "timeout": 0.2,
        "check_same_thread": False,
    }
    assert get_dialect("postgres").queue_connect_args(BOUNDS) == {}
    assert get_dialect("mysql").queue_connect_args(BOUNDS, "pymysql") == {
        "read_timeout": 90,
        "write_timeout": 90,
        "connect_timeout": 10,
    }
    assert get_dialect("mysql").queue_connect_args(BOUNDS, "mysqlconnector") == {}
