"""SQLite: :class:`SQLiteSource`, read with ADBC, connectorx or the ``sqlite3`` module's cursor.

A read takes the first reader of :attr:`SQLiteSource.readers` (its readers' table:
:data:`READER_TABLE`) that can read it: ADBC's SQLite driver (:class:`SqliteAdbcReader`:
Arrow built in C, one connection per reading thread, opened read-only and reused for
every partition the thread reads), connectorx (:class:`SqliteConnectorx`: its Arrow
stream, or a partition estimated small read whole), both only on a database file and
for queries that call none of sqlfeed's own SQL functions (hash partitions call
``sqlfeed_hash``, which only sqlfeed's connections have); else ``sqlite3``'s
``fetchmany`` (:class:`Sqlite3Reader`), which reads anything.

SQLite types a value, not a column. connectorx types a column by its declared type or
first value and fails on a later value of another kind; ADBC types it by the values of
its first batch, fails on a later value it cannot carry, but turns some into the column's
type as it goes (a number into text, an integer into a float). So each fast reader's
first batch is checked against the plan's schema, and where a column's family differs
(an INTEGER column holding reals, a BOOLEAN one holding 2, a number in a text column, a
column starting with NULL) the next reader reads the partition instead (the one fallback
chain, :func:`sqlfeed.io.readers.read_in_order`): the plan's schema decides the values.
ADBC is taken only where its conversions cannot happen: every text column of the plan is a
column declared with TEXT affinity (which stores no numbers), every float column one with
REAL affinity (which stores no integers), as the schema's reader hints say
(:data:`SQLITE_HINT`, set by :meth:`SQLiteSource.schema` for a plain single-table query);
and its text is checked to be UTF-8 (a BLOB in a TEXT column). connectorx and ADBC are
optional and imported when used.

SQLite cannot export a snapshot: a read that must see one state of a changing database
reads its queries on one ``sqlite3`` connection inside one read transaction
(:meth:`SQLiteSource.pin_session`, :mod:`sqlfeed.io.pinned`): in WAL mode writers go on
meanwhile; in a rollback journal they wait until the read ends. With
``session_connections`` N, on N connections begun while another holds the write lock
(``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import sqlalchemy
from sqlglot import exp

from sqlfeed.dialects import SqlfeedError
from sqlfeed.dialects.optional import require
from sqlfeed.io.arrow import READER_HINT
from sqlfeed.io.cxread import ConnectorxReader
from sqlfeed.io.files import MEMORY, require_file
from sqlfeed.io.keptconnections import ThreadConnections
from sqlfeed.io.pinned import Batches, PinnedReads, Sync, SyncRefused, cursor_batches
from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.io.source import Source, redact_url
from sqlfeed.io.sqlalchemy import CursorReader, SQLAlchemySource, release
from sqlfeed.io.writes import DbapiSession
from sqlfeed.sql import ParsedQuery, single_table

__all__ = [
    "ADBC_BATCH_ROWS",
    "READERS",
    "READERS_VARIABLE",
    "READER_TABLE",
    "SQLITE_HINT",
    "SQLiteSource",
    "Sqlite3Reader",
    "SqliteAdbcReader",
    "SqliteConnectorx",
    "affinity",
]

READERS_VARIABLE = "SQLFEED_SQLITE_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``sqlite3``)."""

SQLITE_HINT = READER_HINT + b"sqlite"
"""Field metadata key: the affinity of the table column an output column is
(``b"TEXT"``, ``b"REAL"``, ...), for :class:`SqliteAdbcReader`'s choice."""

ADBC_BATCH_ROWS = "adbc.sqlite.query.batch_rows"
"""ADBC SQLite statement option: rows per batch (the first batch also types the columns)."""

_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
"""Paths connectorx's ``sqlite://`` URL takes as they are (others are read by sqlite3)."""


class SqliteAdbcReader(Reader):
    """ADBC's SQLite driver on this thread's kept read-only connection.

    Where the plan's schema says it returns every column exactly (:func:`adbc_carries`); its
    text checked to be UTF-8. It types a column by the values of its first batch, which the
    chain checks against the plan's schema.
    """

    name = "adbc"
    typed_by_values = True
    source: SQLiteSource

    def __init__(self, source: SQLiteSource) -> None:
        super().__init__(source)
        self.connections = ThreadConnections(self._open)
        """This reader's connections: one per reading thread, reused."""

    def _open(self) -> Any:
        dbapi = require("adbc_driver_sqlite.dbapi", "the SQLite ADBC reader")
        # autocommit: no transaction left open (holding the file's read lock) between reads
        return dbapi.connect(self.source.adbc_uri(), autocommit=True)

    def carries(self, request: ReadRequest) -> bool:
        return (
            not self.source.calls_own_functions(request.sql)
            and self.source.adbc_uri() is not None
            and importlib.util.find_spec("adbc_driver_sqlite") is not None
            and adbc_carries(request.schema)
        )

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        """The batches on this thread's ADBC connection, their text checked.

        The connection is held until the read ends (whichever thread pulls it); its
        statement is closed then, also when the read stops early.
        """
        kept = self.connections.get()
        cursor = kept.connection.cursor()
        reader = None
        try:
            cursor.adbc_statement.set_options(**{ADBC_BATCH_ROWS: str(request.batch_rows)})
            cursor.execute(request.sql)  # runs the query; types the columns from its first batch
            reader = cursor.fetch_record_batch()
            while not request.stopped:
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

    def failure(self, err: BaseException) -> bool:
        """An error of an ADBC read, not ours nor the caller's.

        The driver's, its stream's, the text check's; or a source closed meanwhile, whose
        connections are gone.
        """
        if not isinstance(err, Exception) or isinstance(err, SqlfeedError):
            return False
        module = type(err).__module__ or ""
        failed = isinstance(err, OSError | RuntimeError | pa.ArrowException)
        return failed or module.startswith("adbc_driver")

    def hides(self, err: BaseException) -> bool:
        return self.failure(err)


class SqliteConnectorx(ConnectorxReader):
    """connectorx on the database file (a plain path).

    For a query that calls none of sqlfeed's own SQL functions; its first batch is checked
    against the plan's schema.
    """

    source: SQLiteSource

    def url(self) -> str | None:
        """``sqlite:///absolute/path`` of the database file, when connectorx can open it."""
        path = self.source.database_file()
        if path is None or not _PLAIN_PATH.fullmatch(path):
            return None
        return f"sqlite://{path}"

    def carries_types(self, request: ReadRequest) -> bool:
        return not self.source.calls_own_functions(request.sql)


class Sqlite3Reader(CursorReader):
    """The ``sqlite3`` module's cursor, which reads anything (sqlfeed's functions too)."""

    name = "sqlite3"


READER_TABLE: tuple[type[Reader], ...] = (SqliteAdbcReader, SqliteConnectorx, Sqlite3Reader)
"""The SQLite readers, fastest first; ``sqlite3``, last, reads anything."""

READERS = tuple(reader.name for reader in READER_TABLE)
"""Their names: the default order of :attr:`SQLiteSource.readers`."""


class SQLiteSource(PinnedReads, SQLAlchemySource):
    """A SQLite database through SQLAlchemy's pysqlite, read with ADBC, connectorx or ``sqlite3``.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_SQLITE_READERS`` environment variable); ``sqlite3`` reads whatever
            the others cannot.
        connections: ADBC's connections, one per reading thread, reused across partitions.
    """

    READER_TABLE = READER_TABLE
    READERS_VARIABLE = READERS_VARIABLE

    def _session_for(self) -> tuple[Any, tuple[str, ...], Batches]:
        """A consistent read session's connection (:mod:`sqlfeed.io.pinned`).

        A pooled ``sqlite3`` one (sqlfeed's functions in it), not ADBC's, whose driver has a
        SQLite library of its own (two in one process break each other's POSIX locks, see
        https://www.sqlite.org/howtocorrupt.html 2.2.1, while a read holds its transaction).
        ``BEGIN`` is deferred: the read of the schema starts the read transaction, which
        fixes the state every later read of the session sees (WAL) or holds the shared lock
        (rollback journal).
        """
        begin = ("BEGIN", "SELECT count(*) FROM sqlite_master")
        return self.engine.raw_connection(), begin, cursor_batches(self._streaming_cursor)

    def _snapshot_sync(self, sql: str | None) -> Sync | None:
        """Several sessions begin while one connection holds the write lock.

        That is ``BEGIN IMMEDIATE``: no writer commits until every session's read
        transaction has begun, so all see one state (WAL: each its own snapshot of it;
        rollback journal: their shared locks then hold writers off until the read ends).
        None for a memory database, which no other connection sees.
        """
        path = self.engine.url.database or ""
        if self.driver != "pysqlite" or not path or path == MEMORY or "mode=memory" in path:
            return None
        return self._write_lock_for_sync

    @contextlib.contextmanager
    def _write_lock_for_sync(self) -> Iterator[str]:
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                raise SyncRefused(
                    "SQLite: the connections of this consistent read cannot begin at one state "
                    f"(BEGIN IMMEDIATE: {err}: another writer held the database, or it is "
                    "read-only here), so it reads on ONE connection"
                ) from None
            try:
                yield "BEGIN IMMEDIATE held while they began"
            finally:
                cursor.execute("ROLLBACK")
        finally:
            release(connection)

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        adbc = self.reader_table()["adbc"]
        assert isinstance(adbc, SqliteAdbcReader)
        self.connections = adbc.connections

    @classmethod
    def check_url(cls, url: str) -> None:
        """A SQLite URL's file must exist: reading never creates a database."""
        try:
            parsed = sqlalchemy.engine.make_url(url)
        except sqlalchemy.exc.ArgumentError:
            return  # create_engine says what is wrong with the URL
        path = parsed.database or ""
        if parsed.query.get("uri") in ("true", "1") or path.startswith("file:"):
            if "mode=memory" in path or "mode=memory" in str(parsed.query):
                return
            path = path.removeprefix("file:").split("?", 1)[0]
        if path and path != MEMORY:
            require_file(path, redact_url(url), "SQLite database")

    def close(self) -> None:
        self.connections.close()
        super().close()

    def reading_beside(self, output: Source) -> None:
        """Reads of the file ``output`` writes go through ``sqlite3`` only.

        ADBC's driver has a SQLite library of its own, and two libraries with one file open
        in one process break each other's POSIX locks
        (https://www.sqlite.org/howtocorrupt.html 2.2.1); the writer's WAL switch fails
        ("disk I/O error") while ADBC has it open.
        """
        mine, theirs = _file_of(self), _file_of(output)
        if mine is not None and mine == theirs:
            self.use_readers(["sqlite3"])
            self.connections.close()  # ADBC's connections kept open by earlier reads

    @classmethod
    def make_file(cls, url: str) -> None:
        """Make the SQLite database file ``url`` names, when it does not exist yet.

        In the default rollback-journal mode: see :class:`SqliteSession`.
        """
        try:
            parsed = sqlalchemy.engine.make_url(url)
        except sqlalchemy.exc.ArgumentError:
            return  # connect says what is wrong with the URL
        path = parsed.database or ""
        if path and path != MEMORY and not path.startswith("file:") and not os.path.exists(path):
            sqlite3.connect(path).close()

    def write_session(self) -> SqliteSession:
        """A session writing with ``BEGIN IMMEDIATE`` transactions (WAL, busy retries)."""
        return SqliteSession(self.engine.raw_connection(), self.dialect, "qmark")

    def schema(self, query: str | ParsedQuery) -> pa.Schema:
        """The query's Arrow schema, with each plain table column's affinity.

        Each column that is a plain table column carries that column's affinity as its
        :data:`SQLITE_HINT` (what lets ADBC read it).
        """
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
        """Per output column, the affinity of the table column it is ("" for an expression).

        None unless the query is a plain select-project-filter of one table of ``main``.
        """
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
        """(name, declared type, hidden) of the columns of the ordinary table ``table``.

        Of the main database (None for a view, a virtual table or no such table);
        ``hidden``: not stored as declared (generated columns). None too where the catalog
        cannot tell (another driver; a SQLite without pragma functions): the schema is the
        same, only without hints.
        """
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

    def calls_own_functions(self, sql: str) -> bool:
        """Whether ``sql`` calls sqlfeed's own SQL functions.

        Hash partitions call ``sqlfeed_hash``; only sqlfeed's ``sqlite3`` connections have
        them.
        """
        own = self.dialect.HASH_FUNCTION.lower()
        return bool(own) and own in sql.lower()

    def adbc_uri(self) -> str | None:
        """The ``file:`` URI ADBC opens the database file with (read-only), if it is one."""
        path = self.database_file()
        return None if path is None else f"file:{urllib.parse.quote(path)}?mode=ro"

    def database_file(self) -> str | None:
        """The database file's absolute path; None for memory, URL options, other drivers."""
        url = self.engine.url
        path = url.database or ""
        if self.driver != "pysqlite" or url.query or not path or path == MEMORY:
            return None
        path = os.path.abspath(path)
        return path if os.path.isfile(path) else None


def affinity(declared: str) -> str:
    """The affinity SQLite gives a column of the declared type ``declared``.

    By its rules, in their order: ``INTEGER``, ``TEXT``, ``BLOB``, ``REAL`` or ``NUMERIC``.

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


class SqliteSession(DbapiSession):
    """A pooled ``sqlite3`` connection writing in ``BEGIN IMMEDIATE`` transactions.

    The write lock is taken when the transaction starts, so two writers wait for each other
    (busy retries) instead of one failing at its commit. The file's journal mode is left as
    it is, and sqlfeed makes files in the default rollback-journal mode: switching a file to
    WAL while another library's connection has it open in this process fails ("disk I/O
    error"), and in WAL mode a process reading through two SQLite libraries (ADBC's and
    Python's) was seen to read a stale state of the file. A large page cache keeps a
    partition's writes from spilling, which would need the exclusive lock while reads of the
    partition still hold a shared one; a commit waiting for readers is asked again.
    """

    CACHE_KIB = 262_144

    def __init__(self, connection: Any, dialect: Any, paramstyle: str) -> None:
        super().__init__(connection, dialect, paramstyle)
        raw = getattr(connection, "dbapi_connection", connection)
        self.raw = raw
        self.isolation = raw.isolation_level
        raw.isolation_level = None  # transactions begun here, not by the module
        self.cache = self.rows("PRAGMA cache_size")[0][0]
        self.cursor.execute("PRAGMA busy_timeout = 10000")
        self.cursor.execute(f"PRAGMA cache_size = -{self.CACHE_KIB}")

    def begin(self) -> None:
        self.cursor.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.cursor.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.cursor.execute("ROLLBACK")

    def close(self) -> None:
        self.rollback()
        with contextlib.suppress(sqlite3.Error):
            self.cursor.execute(f"PRAGMA cache_size = {int(self.cache)}")
        self.raw.isolation_level = self.isolation
        super().close()


def _file_of(source: Any) -> str | None:
    """The real path of a SQLite source's database file (None: not a SQLite file)."""
    engine = getattr(source, "engine", None)
    if not isinstance(source, SQLiteSource) or engine is None:
        return None
    path = engine.url.database or ""
    if not path or path == MEMORY or path.startswith("file:"):
        return None
    return os.path.realpath(path)
