"""SQLite: :class:`SQLiteSource`, read with connectorx or the ``sqlite3`` module's cursor.

A read takes the first reader of :attr:`SQLiteSource.readers`: connectorx (its Arrow
stream, several times faster than building Arrow columns from Python rows) when the
database is a file it can open and the query calls none of sqlfeed's own SQL functions
(hash partitions call ``sqlfeed_hash``, which only sqlfeed's connections have); else
``sqlite3``'s ``fetchmany``. SQLite types a value, not a column: connectorx types a
column by its declared type or its first value, so its first batch is checked against
the plan's schema, and where a column's family differs (an INTEGER column holding
reals, a BOOLEAN one holding 2, a number in a text column, a column starting with
NULL) ``sqlite3`` reads instead (:func:`sqlfeed.io.cxread.read_with_fallback`): the
plan's schema decides the values. connectorx is optional and imported when used.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sqlfeed.io.cxread import ConnectorxFirst, connectorx_module, readers_from_environment
from sqlfeed.io.files import MEMORY

__all__ = ["READERS", "READERS_VARIABLE", "SQLiteSource"]

READERS = ("connectorx", "sqlite3")
"""The SQLite readers, fastest first (the default order of :attr:`SQLiteSource.readers`)."""

READERS_VARIABLE = "SQLFEED_SQLITE_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``sqlite3``)."""

_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
"""Paths connectorx's ``sqlite://`` URL takes as they are (others are read by sqlite3)."""


class SQLiteSource(ConnectorxFirst):
    """A SQLite database through SQLAlchemy's pysqlite, read with connectorx or ``sqlite3``.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_SQLITE_READERS`` environment variable); ``sqlite3`` reads whatever
            connectorx cannot.
    """

    engine_label = "sqlite"

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        self.readers: tuple[str, ...] = readers_from_environment(READERS_VARIABLE, READERS)

    def reader_for(self, sql: str) -> str:
        """The reader a read of ``sql`` starts with: connectorx when it is first in
        :attr:`readers`, installed, can open the file and the query calls none of
        sqlfeed's functions; else ``sqlite3``."""
        if not self.readers or self.readers[0] != "connectorx":
            return "sqlite3"
        own = self.dialect.HASH_FUNCTION.lower()
        if own and own in sql.lower():
            return "sqlite3"
        if self._connectorx_url() is None or connectorx_module() is None:
            return "sqlite3"
        return "connectorx"

    def _connectorx_url(self) -> str | None:
        """``sqlite:///absolute/path`` of the database file, when connectorx can open it."""
        url = self.engine.url
        path = url.database or ""
        if self.driver != "pysqlite" or url.query or not path or path == MEMORY:
            return None
        path = os.path.abspath(path)
        if not _PLAIN_PATH.fullmatch(path) or not os.path.isfile(path):
            return None
        return f"sqlite://{path}"
