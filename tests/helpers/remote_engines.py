"""Engines reached by URL, for the tests whose reads run in other processes (Ray, Dask).

A task in another process cannot use the test's connection: it opens the source's URL.
:func:`url_engine` gives each engine of :data:`tests.helpers.engines.ENGINES` with that URL; DuckDB
is a file here (an in-memory DuckDB exists in one process only), written once per test
process and closed, so that other processes may open it read-only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from typing import Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa

from tests.conftest import get_engine
from tests.helpers import corpus
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine

PLANS: dict[str, dict[str, Any]] = {
    "hash": {"strategy": "hash"},
    "range": {"strategy": "range", "key": "k"},
    "physical": {"strategy": "ctid"},
}
"""The strategies every engine is tested with (physical: PostgreSQL ctid, DuckDB rowid)."""

QUERY = "SELECT id, k, ts, v, s FROM {keyed}"
"""The awkward table of the plan tests: NULL keys, int64 extremes, negative values."""


class DuckDBFileEngine(Engine):
    """DuckDB in a file, holding the corpus's keyed tables; no connection left open."""

    name = "duckdb"

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="sqlfeed-remote-")
        self.path = os.path.join(self.folder, "test.duckdb")
        self.conn = duckdb.connect(self.path)
        rows = corpus.keyed_rows()
        self.create_table("keyed", corpus.KEYED_COLUMNS, rows)
        self.create_table("empty_keyed", corpus.KEYED_COLUMNS, [])
        self.conn.close()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with duckdb.connect(self.path, read_only=True) as conn:
            self.conn = conn
            return super().rows(sql)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


_duckdb_file: list[DuckDBFileEngine] = []


def url_engine(name: str) -> tuple[Engine, str]:
    """The engine ``name`` (skipped when its server is down) and the URL a task opens."""
    if name == "duckdb":
        if not _duckdb_file:
            _duckdb_file.append(DuckDBFileEngine())
        return _duckdb_file[0], "duckdb:///" + _duckdb_file[0].path
    engine = get_engine(name)
    if name == "sqlite":
        return engine, f"sqlite:///{engine.path}"  # type: ignore[attr-defined]
    if name == "postgres":
        return engine, POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
    return engine, f"mysql+pymysql://{netloc}/{engine.schema}"


def close_duckdb_file() -> None:
    """Remove the DuckDB file (at the end of a test module)."""
    while _duckdb_file:
        _duckdb_file.pop().close()


def refusal(engine: str, plan: str) -> str | None:
    """The one line sqlfeed refuses an (engine, plan) pair with, or None: not an engine
    gap, the engine has no physical row address (the tests assert the refusal)."""
    if plan == "physical" and engine not in ("postgres", "duckdb", "sqlite"):
        return (
            f"strategy ctid: {engine} has no physical row address "
            "(PostgreSQL ctid, DuckDB or SQLite rowid)"
        )
    return None


def expected_rows(engine: Engine, sql: str) -> Counter[tuple[Any, ...]]:
    """The query's rows as the engine's own driver returns them, as a multiset."""
    return Counter(engine.rows(sql))


def rows_of(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """An Arrow table's rows as a multiset, normalised as :meth:`Engine.rows` does."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for row in table.to_pylist():
        rows[tuple(_normal(v) for v in row.values())] += 1
    return rows


def _normal(value: Any) -> Any:
    normalize = getattr(value, "normalize", None)  # Decimal
    if normalize is not None and not hasattr(value, "tzinfo"):
        return normalize()
    return value
