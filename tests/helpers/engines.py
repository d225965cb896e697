"""Real database engines for the tests, driven through their own DB-API drivers.

The tests check sqlfeed's SQL against the engines with drivers of their own (not through
sqlfeed's sources), so a bug in sqlfeed's reading code cannot hide a bug in its SQL.

Server URLs come from the environment (defaults: the servers of the development machine):

* ``SQLFEED_TEST_POSTGRES_URL`` (``postgresql://postgres@127.0.0.1:5432/test``)
* ``SQLFEED_TEST_MYSQL_URL`` (``mysql://root@127.0.0.1:3306/test``)

An unreachable server skips its tests with the reason, except under ``CI=true``, where it
fails them. Every harness works in a schema (PostgreSQL) or database (MySQL) of its own,
named uniquely per test run and dropped at the end.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlparse

from sqlfeed.dialects.sqlite import SQLite

ENGINES = ("duckdb", "sqlite", "postgres", "mysql")

POSTGRES_URL = os.environ.get(
    "SQLFEED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("SQLFEED_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")

# Column types per engine for the portable type names the tests use.
TYPES: dict[str, dict[str, str]] = {
    "duckdb": {
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE",
        "text": "VARCHAR",
        "decimal": "DECIMAL(14,2)",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "bool": "BOOLEAN",
    },
    "sqlite": {
        "int": "INTEGER",
        "bigint": "INTEGER",
        "float": "REAL",
        "text": "TEXT",
        "decimal": "NUMERIC",
        "date": "TEXT",
        "timestamp": "TEXT",
        "bool": "INTEGER",
    },
    "postgres": {
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE PRECISION",
        "text": "TEXT",
        "decimal": "NUMERIC(14,2)",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "bool": "BOOLEAN",
    },
    # A binary collation: under MySQL's default ones distinct strings ('a', 'A', any two
    # emoji) are equal, and GROUP BY/DISTINCT return either at the engine's choice.
    "mysql": {
        "int": "INT",
        "bigint": "BIGINT",
        "float": "DOUBLE",
        "text": "VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "decimal": "DECIMAL(14,2)",
        "date": "DATE",
        "timestamp": "DATETIME(6)",
        "bool": "BOOLEAN",
    },
}


class EngineUnavailable(Exception):
    """The engine's server cannot be reached."""


class Engine:
    """One engine, connected, working in a schema of its own."""

    name: str

    def __init__(self) -> None:
        self.schema = f"sqlfeed_test_{uuid.uuid4().hex[:10]}"
        self.queries_run = 0

    def qualify(self, table: str) -> str:
        """``table`` as a query run through another connection must name it."""
        return table

    def source(self) -> Any:
        """A sqlfeed Source on the same database (the product's own connection)."""
        raise NotImplementedError

    scratch = "main"
    """A schema sqlfeed may create scratch tables in."""

    def execute(self, sql: str) -> None:
        """Run a statement that returns no rows."""
        cursor = self._cursor()
        cursor.execute(sql)
        cursor.close()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Run a query; its rows, normalised so equal values compare equal."""
        cursor = self._cursor()
        cursor.execute(sql)
        self.queries_run += 1
        fetched = cursor.fetchall()
        cursor.close()
        return [tuple(_normalize(v) for v in row) for row in fetched]

    def columns(self, sql: str) -> list[str]:
        """The output column names of a query, as the driver reports them."""
        cursor = self._cursor()
        cursor.execute(sql)
        names = [d[0] for d in cursor.description]
        cursor.fetchall()
        cursor.close()
        return names

    def create_table(
        self, table: str, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]]
    ) -> None:
        """Create ``table`` with (name, portable type) columns and insert ``rows``."""
        types = TYPES[self.name]
        ddl = ", ".join(f"{name} {types[kind]}" for name, kind in columns)
        self.execute(f"DROP TABLE IF EXISTS {table}")
        self.execute(f"CREATE TABLE {table} ({ddl})")
        data = [tuple(self._adapt(v) for v in row) for row in rows]
        if data:
            marks = ", ".join([self.placeholder] * len(columns))
            cursor = self._cursor()
            cursor.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
            cursor.close()
        self.commit()

    placeholder = "?"

    def _adapt(self, value: Any) -> Any:
        return value

    def commit(self) -> None:
        """Commit (engines in autocommit mode do nothing)."""

    def close(self) -> None:
        """Drop the schema and close the connection."""

    conn: Any

    def _cursor(self) -> Any:
        return self.conn.cursor()


class DuckDBEngine(Engine):
    name = "duckdb"

    def __init__(self) -> None:
        import duckdb

        super().__init__()
        self.conn = duckdb.connect()

    def source(self) -> Any:
        from sqlfeed import connect

        return connect(self.conn)

    def close(self) -> None:
        self.conn.close()


class SQLiteEngine(Engine):
    name = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.path = os.path.join(tempfile.mkdtemp(prefix="sqlfeed-test-"), "test.db")
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        SQLite().register_functions(self.conn)

    def source(self) -> Any:
        from sqlfeed import connect

        return connect(f"sqlite:///{self.path}")

    def _adapt(self, value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ")
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, decimal.Decimal):
            return str(value)
        return value

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


class ServerEngine(Engine):
    """An engine on a server: the run's tables live in a schema (or database) of its own."""

    @property
    def scratch(self) -> str:  # type: ignore[override]
        return self.schema

    def qualify(self, table: str) -> str:
        return f"{self.schema}.{table}"


class PostgresEngine(ServerEngine):
    name = "postgres"
    placeholder = "%s"

    def __init__(self) -> None:
        import psycopg

        super().__init__()
        try:
            self.conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as err:
            raise EngineUnavailable(f"PostgreSQL at {POSTGRES_URL}: {err}") from None
        self.execute(f"CREATE SCHEMA {self.schema}")
        self.execute(f"SET search_path TO {self.schema}")

    def source(self) -> Any:
        from sqlfeed import connect

        return connect(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1))

    def close(self) -> None:
        self.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.conn.close()


class MySQLEngine(ServerEngine):
    name = "mysql"
    placeholder = "%s"

    def __init__(self) -> None:
        import pymysql

        super().__init__()
        url = urlparse(MYSQL_URL)
        try:
            self.conn = pymysql.connect(
                host=url.hostname or "127.0.0.1",
                port=url.port or 3306,
                user=url.username or "root",
                password=url.password or "",
                autocommit=True,
                connect_timeout=5,
                charset="utf8mb4",
            )
        except pymysql.err.OperationalError as err:
            raise EngineUnavailable(f"MySQL/MariaDB at {MYSQL_URL}: {err}") from None
        self.execute(f"CREATE DATABASE {self.schema} CHARACTER SET utf8mb4")
        self.execute(f"USE {self.schema}")

    def source(self) -> Any:
        from sqlfeed import connect

        url = urlparse(MYSQL_URL)
        netloc = url.netloc or "root@127.0.0.1:3306"
        return connect(f"mysql+pymysql://{netloc}/{self.schema}")

    def close(self) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {self.schema}")
        self.conn.close()


def open_engine(name: str) -> Engine:
    """Connect to engine ``name``; raises :class:`EngineUnavailable` when it is down."""
    classes: dict[str, type[Engine]] = {
        "duckdb": DuckDBEngine,
        "sqlite": SQLiteEngine,
        "postgres": PostgresEngine,
        "mysql": MySQLEngine,
    }
    return classes[name]()


def assert_engine_refuses(engine: Engine, sql: str) -> str:
    """``engine`` cannot run ``sql`` (its SQL has no such construct): its own driver raises,
    and sqlfeed refuses to plan it with one line of its own error class; that line.

    What an engine cannot express is no engine gap: the test runs the real attempt, so it
    fails (and the case gets a real test) the day the engine can run it.
    """
    import sqlfeed
    from sqlfeed.errors import SqlfeedError

    ran = True
    try:
        engine.rows(sql)
    except Exception:  # each driver has its own error classes
        ran = False
    assert not ran, f"{engine.name} runs it now: test it there ({sql})"
    with engine.source() as source:
        try:
            sqlfeed.plan(sql, source, partitions=2, strategy="hash")
        except SqlfeedError as err:
            message = str(err)
        else:
            raise AssertionError(f"sqlfeed planned what {engine.name} cannot run: {sql}")
    assert message, sql
    assert "\n" not in message, message
    return message


def _normalize(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_normalize(v) for v in value)
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    return value


def multiset(rows: Iterable[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    """Rows as a multiset."""
    return Counter(rows)


def write_through_sqlfeed(url: str, statements: Sequence[str]) -> None:
    """Run ``statements`` in one transaction of sqlfeed's own write session on ``url``."""
    import sqlfeed

    with sqlfeed.connect(url) as source:
        session = source.write_session()
        try:
            session.begin()
            for sql in statements:
                session.execute(sql)
            session.commit()
        finally:
            session.close()
