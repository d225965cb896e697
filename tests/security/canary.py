"""A database the command line can reach, holding a canary table a hostile input must spare.

DuckDB and SQLite: a file of the test's own; PostgreSQL and MariaDB: the session's engine
(its schema or database of the run), each canary table named uniquely and dropped after.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pytest

from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine

ROWS = [(1, "a"), (2, "b"), (3, "c")]
"""The canary's rows."""


class Canary:
    """One engine's database with a canary table ``t(id, v)`` of :data:`ROWS`."""

    def __init__(self, engine: str, tmp: Path) -> None:
        self.engine = engine
        self.table = f"canary_{uuid.uuid4().hex[:8]}"
        self._server: Engine | None = None
        if engine == "duckdb":
            self.path = tmp / "canary.duckdb"
            self.url = f"duckdb:///{self.path}"
        elif engine == "sqlite":
            self.path = tmp / "canary.db"
            self.url = f"sqlite:///{self.path}"
        else:
            self._server = get_engine(engine)
            if engine == "postgres":
                self.url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
            else:
                netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
                self.url = f"mysql+pymysql://{netloc}/{self._server.schema}"
        self.execute(f"CREATE TABLE {self.name} (id INTEGER, v VARCHAR(10))")
        self.execute(f"INSERT INTO {self.name} VALUES {', '.join(map(str, ROWS))}")

    @property
    def schema(self) -> str | None:
        """The schema the canary is in where a name must say it (PostgreSQL's run schema)."""
        return self._server.schema if self.engine == "postgres" and self._server else None

    @property
    def name(self) -> str:
        """The canary as a query (and a ``--into``) names it."""
        return f"{self.schema}.{self.table}" if self.schema else self.table

    def quoted(self, name: str) -> str:
        """``name`` (one part) quoted as the engine's SQL quotes an identifier."""
        if self.engine == "mysql":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, name: str) -> str:
        """The table ``name`` (one part, quoted) in the canary's schema."""
        return f"{self.schema}.{self.quoted(name)}" if self.schema else self.quoted(name)

    def execute(self, sql: str) -> None:
        """Run a statement through the engine's own driver (not sqlfeed)."""
        self.rows(sql, fetch=False)

    def rows(self, sql: str, *, fetch: bool = True) -> list[tuple[Any, ...]]:
        """A query's rows through the engine's own driver (not sqlfeed)."""
        if self._server is not None:
            if not fetch:
                self._server.execute(sql)
                return []
            return self._server.rows(sql)
        if self.engine == "duckdb":
            with duckdb.connect(str(self.path)) as conn:
                result = conn.execute(sql)
                return [tuple(r) for r in result.fetchall()] if fetch else []
        with sqlite3.connect(self.path) as conn:
            cursor = conn.execute(sql)
            return [tuple(r) for r in cursor.fetchall()] if fetch else []

    def intact(self) -> bool:
        """Whether the canary holds exactly its rows."""
        return sorted(self.rows(f"SELECT id, v FROM {self.name}")) == ROWS

    def tables(self) -> set[str]:
        """The tables of the canary's schema (or database)."""
        if self.engine == "sqlite":
            return {r[0] for r in self.rows("SELECT name FROM sqlite_master WHERE type='table'")}
        schema = self._server.schema if self._server else "main"
        found = self.rows(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}'"
        )
        return {r[0] for r in found}

    def drop(self) -> None:
        """Drop the canary (server engines; the files go with the test's folder)."""
        if self._server is not None:
            self.execute(f"DROP TABLE IF EXISTS {self.name}")


@pytest.fixture
def canary(engine_name: str, tmp_path: Path) -> Iterator[Canary]:
    """The canary of the test's ``engine_name``."""
    made = Canary(engine_name, tmp_path)
    yield made
    made.drop()
