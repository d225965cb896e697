"""The one way the tests open a sqlfeed Source (the ``make_source`` fixture's factory).

A test asks for ``make_source`` (or for ``source``, which calls it with the arguments of
the test's ``@pytest.mark.source(...)``) and gets sources that are closed after the test:

* ``make_source()``: an in-memory DuckDB that sqlfeed opens (``duckdb://``);
* ``make_source(tables={"t": "SELECT range AS id FROM range(1000)"})``: an in-memory DuckDB
  connection of the test's own holding those tables (each ``CREATE TABLE name AS select``),
  read through as it is (sqlfeed does not own it);
* ``make_source("postgres")`` (an engine name) or ``make_source(engine)``: the session's
  engine's database, through sqlfeed's own connection (:meth:`Engine.source`);
* ``make_source("sqlite:///file.db")``: any URL :func:`sqlfeed.connect` takes;
* ``readers=("adbc",)``: read through those readers only; ``requires="adbc_driver_sqlite"``:
  skip the test when that driver is not installed (not a gap: the extra is optional).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from tests.helpers.engines import ENGINES, Engine

__all__ = ["SourceFactory", "require_module"]


def require_module(*modules: str) -> None:
    """Skip the test (with the reason) when one of ``modules`` is not installed."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


class SourceFactory:
    """Opens the sources of one test and closes every one of them after it.

    Args:
        engine: the session's engine of a name (``tests.conftest.get_engine``: skips the
            test when its server is unreachable).
    """

    def __init__(self, engine: Callable[[str], Engine]) -> None:
        self._engine = engine
        self._closers: list[Callable[[], None]] = []

    def __call__(
        self,
        target: str | Engine = "duckdb://",
        *,
        tables: Mapping[str, str] | None = None,
        readers: Sequence[str] | None = None,
        requires: str | Sequence[str] = (),
    ) -> Any:
        """A source on ``target`` (see the module's docstring), closed after the test."""
        require_module(*([requires] if isinstance(requires, str) else requires))
        if tables:
            source = self._duckdb_with(target, tables)
        elif isinstance(target, Engine):
            source = target.source()
        elif target in ENGINES:
            source = self._engine(target).source()
        else:
            import sqlfeed

            source = sqlfeed.connect(target)
        self._closers.append(source.close)
        if readers is not None:
            source.readers = tuple(readers)
        return source

    def _duckdb_with(self, target: str | Engine, tables: Mapping[str, str]) -> Any:
        if target not in ("duckdb://", "duckdb"):
            raise ValueError(f"tables= builds an in-memory DuckDB, not {target!r}")
        import duckdb

        import sqlfeed

        conn = duckdb.connect()
        self._closers.append(conn.close)
        for name, select in tables.items():
            conn.execute(f"CREATE TABLE {name} AS {select}")
        return sqlfeed.connect(conn)

    def close(self) -> None:
        """Close every source opened (the last first), then the connections under them."""
        while self._closers:
            self._closers.pop()()
