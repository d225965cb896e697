"""SQLite: :class:`SQLiteSource`, read with ADBC, connectorx or the ``sqlite3`` module's cursor.

A read takes the first reader of :attr:`SQLiteSource.readers` that can read it: ADBC's
SQLite driver (Arrow built in C, one connection per reading thread, opened read-only and
reused for every partition the thread reads), connectorx (its Arrow stream), both only on
a database file and for queries that call none of sqlfeed's own SQL functions (hash
partitions call ``sqlfeed_hash``, which only sqlfeed's connections have); else
``sqlite3``'s ``fetchmany``, which reads anything.

SQLite types a value, not a column. connectorx types a column by its declared type or
first value and fails on a later value of another kind; ADBC types it by the values of
its first batch, fails on a later value it cannot carry, but turns some into the column's
type as it goes (a number into text, an integer into a float). So each fast reader's
first batch is checked against the plan's schema, and where a column's family differs
(an INTEGER column holding reals, a BOOLEAN one holding 2, a number in a text column, a
column starting with NULL) the next reader reads the partition instead
(:func:`sqlfeed.io.cxread.read_with_fallback`): the plan's schema decides the values. ADBC
is taken only where its conversions cannot happen: every text column of the plan is a
column declared with TEXT affinity (which stores no numbers), every float column one with
REAL affinity (which stores no integers), as the schema's reader hints say
(:data:`SQLITE_HINT`, set by :meth:`SQLiteSource.schema` for a plain single-table query);
and its text is checked to be UTF-8 (a BLOB in a TEXT column). connectorx and ADBC are
optional and imported when used.

SQLite cannot share a snapshot across connections: a read that must see one state of a
changing database reads its queries in order on one ``sqlite3`` connection inside one read
transaction (:meth:`SQLiteSource.pin_session`, :mod:`sqlfeed.io.pinned`): in WAL mode
writers go on meanwhile; in a rollback journal they wait until the read ends.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dialects import SqlfeedError
from sqlfeed.io.arrow import READER_HINT
from sqlfeed.io.cxread import (
    ConnectorxFirst,
    connectorx_module,
    read_with_fallback,
    readers_after,
    readers_from_environment,
)
from sqlfeed.io.files import MEMORY
from sqlfeed.io.pgsessions import ThreadConnections
from sqlfeed.io.pinned import Batches, PinnedReads, cursor_batches
from sqlfeed.sql import ParsedQuery, single_table

__all__ = [
    "ADBC_BATCH_ROWS",
    "READERS",
    "READERS_VARIABLE",
    "SQLITE_HINT",
    "SQLiteSource",
    "affinity",
]

READERS = ("adbc", "connectorx", "sqlite3")
"""The SQLite readers, fastest first (the default order of :attr:`SQLiteSource.readers`)."""

READERS_VARIABLE = "SQLFEED_SQLITE_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``sqlite3``)."""

SQLITE_HINT = READER_HINT + b"sqlite"
"""Field metadata key: the affinity of the table column an output column is
(``b"TEXT"``, ``b"REAL"``, ...), for the choice of :meth:`SQLiteSource.reader_for`."""

ADBC_BATCH_ROWS = "adbc.sqlite.query.batch_rows"
"""ADBC SQLite statement option: rows per batch (the first batch also types the columns)."""

_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
"""Paths connectorx's ``sqlite://`` URL takes as they are (others are read by sqlite3)."""


class SQLiteSource(PinnedReads, ConnectorxFirst):
    """A SQLite database through SQLAlchemy's pysqlite, read with ADBC, connectorx or ``sqlite3``.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_SQLITE_READERS`` environment variable); ``sqlite3`` reads whatever
            the others cannot.
        connections: ADBC's connections, one per reading thread, reused across partitions.
    """

    engine_label = "sqlite"

    def _session_for(self) -> tuple[Any, tuple[str, ...], Batches]:
        """A consistent read session's connection (:mod:`sqlfeed.io.pinned`): a pooled
        ``sqlite3`` one (sqlfeed's functions in it), not ADBC's, whose driver has a SQLite
        library of its own (two in one process break each other's POSIX locks, see
        https://www.sqlite.org/howtocorrupt.html 2.2.1, while a read holds its
        transaction). ``BEGIN`` is deferred: the read of the schema starts the read
        transaction, which fixes the state every later read of the session sees (WAL) or
        holds the shared lock (rollback journal)."""
        begin = ("BEGIN", "SELECT count(*) FROM sqlite_master")
        return self.engine.raw_connection(), begin, cursor_batches(self._streaming_cursor)

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        self.readers: tuple[str, ...] = readers_from_environment(READERS_VARIABLE, READERS)
        self.connections = ThreadConnections(self._open_adbc)

    def close(self) -> None:
        self.connections.close()
        super().close()

    def schema(self, query: str | ParsedQuery) -> pa.Schema:
        """The query's Arrow schema; each column that is a plain table column carries that
        column's affinity as its :data:`SQLITE_HINT` (what lets ADBC read it)."""
        schema = super().schema(query)
        affinities = self._affinities(self.parse(query))
        if affinities is None or len(affinities) != len(schema):
            return schema
        fields = [
            f.with_metadata({**(f.metadata or {}), SQLITE_HINT: kind.encode()}) if kind else f
            for f, kind in zip(schema, affinities, strict=True)
        ]
        return pa.schema(fields, metadata=schema.metadata)

    def _affinities(self, parsed: ParsedQuery) -> list[str] | None:
        """Per output column, the affinity of the table column it is ("" for an expression);
        None unless the query is a plain select-project-filter of one table of ``main``."""
        table = single_table(parsed, self.dialect)
        if table is None or table.db not in ("", "main") or table.catalog:
            return None
        columns = self._declared_types(table.name)
        if columns is None:
            return None
        # a generated column's values are the expression's: no affinity vouched for
        kinds = [affinity(kind) if not hidden else "" for _, kind, hidden in columns]
        by_name = {name.casefold(): kind for (name, _, _), kind in zip(columns, kinds, strict=True)}
        names = {table.name.casefold(), table.alias_or_name.casefold()}
        out: list[str] = []
        assert isinstance(parsed.tree, exp.Select)  # single_table: a plain SELECT
        for item in parsed.tree.expressions:
            column = item.this if isinstance(item, exp.Alias) else item
            qualifier = column.table.casefold() if isinstance(column, exp.Column) else ""
            if isinstance(column, exp.Star) or (
                isinstance(column, exp.Column) and column.is_star and qualifier in names
            ):
                out.extend(kinds)
            elif isinstance(column, exp.Column) and qualifier in names | {""}:
                out.append(by_name.get(column.name.casefold(), ""))  # rowid: none needed
            else:
                out.append("")
        return out

    def _declared_types(self, table: str) -> list[tuple[str, str, int]] | None:
        """(name, declared type, hidden) of the columns of the ordinary table ``table`` of
        the main database (None for a view, a virtual table or no such table); ``hidden``:
        not stored as declared (generated columns). None too where the catalog cannot
        tell (another driver; a SQLite without pragma functions): the schema is the same,
        only without hints."""
        if self.driver != "pysqlite":
            return None
        with self._raw() as connection:
            cursor = connection.cursor()
            try:  # parameters, not SQL text: the name is the user's
                cursor.execute(
                    "SELECT sql FROM main.sqlite_master WHERE type = 'table'"
                    " AND name = ? COLLATE NOCASE",
                    (table,),
                )
                found = cursor.fetchall()
                if len(found) != 1 or str(found[0][0] or "").lstrip()[:14].upper() == (
                    "CREATE VIRTUAL"
                ):
                    return None
                cursor.execute(
                    "SELECT name, type, hidden FROM pragma_table_xinfo(?, 'main')", (table,)
                )
                return [(str(n), str(t or ""), int(h)) for n, t, h in cursor.fetchall()]
            except sqlite3.Error:
                return None
            finally:
                cursor.close()
                connection.commit()

    def reader_for(self, sql: str, schema: pa.Schema | None = None, *, after: str = "") -> str:
        """The reader a read of ``sql`` takes: the first of :attr:`readers` (after ``after``)
        that is installed, can open the file and read the query: ADBC where the plan's
        ``schema`` (derived when not given) says it returns every column exactly (see
        :func:`adbc_carries`); ``sqlite3`` for a query calling sqlfeed's own functions."""
        own = self.dialect.HASH_FUNCTION.lower()
        if own and own in sql.lower():
            return "sqlite3"
        for name in readers_after(self.readers, after):
            if name == "sqlite3":
                return name
            if name == "connectorx":
                if self._connectorx_url() is not None and connectorx_module() is not None:
                    return name
            elif self._adbc_uri() is not None and _adbc_sqlite() is not None:
                schema = schema if schema is not None else self.schema(sql)
                if adbc_carries(schema):
                    return name
        return "sqlite3"

    def _connectorx_url(self) -> str | None:
        """``sqlite:///absolute/path`` of the database file, when connectorx can open it."""
        path = self._file()
        if path is None or not _PLAIN_PATH.fullmatch(path):
            return None
        return f"sqlite://{path}"

    def _adbc_uri(self) -> str | None:
        """The ``file:`` URI ADBC opens the database file with (read-only), if it is one."""
        path = self._file()
        return None if path is None else f"file:{urllib.parse.quote(path)}?mode=ro"

    def _file(self) -> str | None:
        """The database file's absolute path; None for memory, URL options, other drivers."""
        url = self.engine.url
        path = url.database or ""
        if self.driver != "pysqlite" or url.query or not path or path == MEMORY:
            return None
        path = os.path.abspath(path)
        return path if os.path.isfile(path) else None

    def _open_adbc(self) -> Any:
        dbapi = _adbc_sqlite()
        assert dbapi is not None
        # autocommit: no transaction left open (holding the file's read lock) between reads
        return dbapi.connect(self._adbc_uri(), autocommit=True)

    def _read_with(
        self,
        reader: str,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
        rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        if reader != "adbc":
            yield from super()._read_with(
                reader, sql, schema, batch_rows, stop, ordered, snapshot, rows=rows
            )
            return

        def fallback() -> Iterator[pa.RecordBatch]:
            after = self.reader_for(sql, schema, after="adbc")
            return self._read_with(
                after, sql, schema, batch_rows, stop, ordered, snapshot, rows=rows
            )

        batches = self._adbc_batches(sql, batch_rows, stop)
        yield from read_with_fallback(
            self.engine_label, batches, schema, fallback, failure=_adbc_failure
        )

    def _adbc_batches(
        self, sql: str, batch_rows: int, stop: threading.Event | None
    ) -> Iterator[pa.RecordBatch]:
        """The batches of ``sql`` on this thread's ADBC connection, their text checked.

        The connection is held until the read ends (whichever thread pulls it); its
        statement is closed then, also when the read stops early.
        """
        kept = self.connections.get()
        cursor = kept.connection.cursor()
        reader = None
        try:
            cursor.adbc_statement.set_options(**{ADBC_BATCH_ROWS: str(batch_rows)})
            cursor.execute(sql)  # runs the query and types the columns from its first batch
            reader = cursor.fetch_record_batch()
            while stop is None or not stop.is_set():
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                for column in batch.columns:  # a BLOB in a TEXT column: not always UTF-8
                    if pa.types.is_string(column.type):
                        column.validate(full=True)
                yield batch
        finally:
            if reader is not None:
                reader.close()
            cursor.close()


def affinity(declared: str) -> str:
    """The affinity SQLite gives a column of the declared type ``declared`` (its rules, in
    their order): ``INTEGER``, ``TEXT``, ``BLOB``, ``REAL`` or ``NUMERIC``.

    >>> [affinity(t) for t in ("BIGINT", "VARCHAR(10)", "", "DOUBLE", "DECIMAL(15,2)")]
    ['INTEGER', 'TEXT', 'BLOB', 'REAL', 'NUMERIC']
    """
    kind = declared.upper()
    if "INT" in kind:
        return "INTEGER"
    if any(word in kind for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in kind or not kind:
        return "BLOB"
    if any(word in kind for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def adbc_carries(schema: pa.Schema) -> bool:
    """Whether ADBC returns every column of ``schema`` (a plan's) exactly.

    Integer columns always: ADBC fails on a later value that is not an integer. Float
    columns only with REAL affinity (ADBC would turn a stored integer beyond 2**53 into
    another float) and text columns only with TEXT affinity (ADBC would turn a stored
    number into SQLite's text of it, or into ``%e`` text in its first batch), as the
    schema's :data:`SQLITE_HINT` says. Nothing else (bytes: a stored number turns into
    its text there too).
    """
    for field in schema:
        hint = (field.metadata or {}).get(SQLITE_HINT, b"")
        if pa.types.is_int64(field.type):
            continue
        if pa.types.is_float64(field.type) and hint == b"REAL":
            continue
        if pa.types.is_string(field.type) and hint == b"TEXT":
            continue
        return False
    return True


def _adbc_failure(err: BaseException) -> bool:
    """An error of an ADBC read (the driver's, its stream's, the text check's; a source
    closed meanwhile, whose connections are gone), not ours nor the caller's."""
    if not isinstance(err, Exception) or isinstance(err, SqlfeedError):
        return False
    module = type(err).__module__ or ""
    failed = isinstance(err, OSError | RuntimeError | pa.ArrowException)
    return failed or module.startswith("adbc_driver")


def _adbc_sqlite() -> Any:
    try:
        import adbc_driver_sqlite.dbapi as dbapi
    except ImportError:
        return None
    return dbapi
