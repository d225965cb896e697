"""PostgreSQL: :class:`PostgresSource`, its readers, snapshots and session settings.

A read takes the first reader of :attr:`PostgresSource.readers` (``copy``: a CSV ``COPY``
parsed by Arrow into the query's own types, :mod:`sqlfeed.io.pgcopy`; connectorx's Arrow
stream; ADBC's binary COPY; then psycopg's server-side cursor) that is installed and
carries every column type of the query (:mod:`sqlfeed.io.pgtypes`); psycopg carries them
all. Every reader reads inside an exported snapshot when a read gives one
(:meth:`PostgresSource.export_snapshot`): its transaction begins with
:func:`snapshot_statements` (connectorx runs them first on its own connection), and a
snapshot that is no longer held is one clear error. ``copy`` and ADBC keep
one connection per reading thread, set up once and reused for every partition the thread
reads (:mod:`sqlfeed.io.pgsessions`); connectorx opens one per partition, psycopg takes the
engine's pooled connections. connectorx reports a
failure as a Rust panic (``PanicException``, not an ``Exception``): before its first
batch the read runs again on the next reader, which returns the rows or the database's
own error; after it, the panic becomes a one-line :class:`~dialects.EngineError` with
the database's message. (The panic's own lines still reach the process's standard error:
Rust prints them before Python sees the exception.) connectorx, ADBC and psycopg are
optional and imported when used.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dialects import EngineError
from dialects.postgres import HASHABLE_TYPE_OIDS
from sqlfeed.io.cxread import (
    connectorx_module,
    is_connectorx_failure,
    readers_from_environment,
)
from sqlfeed.io.pgcopy import COPY_SESSION, copy_batches, copy_fits
from sqlfeed.io.pgsessions import KeptConnection, ThreadConnections
from sqlfeed.io.pgtypes import (
    ADBC_TYPES,
    adbc_batch,
    connectorx_carries,
    libpq_message,
    panic_database_message,
    postgres_description_schema,
)
from sqlfeed.io.source import SnapshotHolder, connection_lost
from sqlfeed.io.sqlalchemy import SQLAlchemySource
from sqlfeed.sql import schema_sql

__all__ = [
    "POSTGRES_ORDERED",
    "POSTGRES_SESSION",
    "READERS",
    "PostgresSource",
    "postgres_description_schema",
    "snapshot_statements",
]

# Session settings that fix the text form of values: the PostgreSQL hash of a row is taken
# over its text, so every worker must render timestamps, dates and floats alike.
POSTGRES_SESSION = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
)

# Settings that make PostgreSQL return a partition's rows in the same order on every read
# (resuming after acknowledged batches counts on it): no parallel workers, and no scan
# that starts where another session's scan of the same table is.
POSTGRES_ORDERED = (
    "SET max_parallel_workers_per_gather = 0",
    "SET synchronize_seqscans = off",
)

READERS = ("copy", "connectorx", "adbc", "psycopg")
"""The PostgreSQL readers, fastest first (the default order of :attr:`PostgresSource.readers`;
measured by ``benchmarks/pg_readers.py``)."""

READERS_VARIABLE = "SQLFEED_POSTGRES_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``adbc,psycopg``)."""

_TYPE_CACHE_SIZE = 1024


class PostgresSource(SQLAlchemySource):
    """PostgreSQL through SQLAlchemy, read with COPY, connectorx, ADBC or a psycopg cursor.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_POSTGRES_READERS`` environment variable); psycopg, which carries
            every type, is taken when none of them can.
    """

    session_settings = POSTGRES_SESSION

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        self.readers: tuple[str, ...] = readers_from_environment(READERS_VARIABLE, READERS)
        self._types: dict[str, tuple[int, ...]] = {}
        self.connections = {
            "copy": ThreadConnections(self._open_psycopg),
            "adbc": ThreadConnections(self._open_adbc),
        }
        """Per reader that keeps its connections: one per reading thread, reused."""

    def close(self) -> None:
        for connections in self.connections.values():
            connections.close()
        super().close()

    def _reader_url(self) -> str:
        url = self.engine.url.set(drivername="postgresql")
        return str(url.render_as_string(hide_password=False))

    def _open_psycopg(self) -> Any:
        import psycopg

        connection = psycopg.connect(self._reader_url())
        _set_up(connection, (*POSTGRES_SESSION, *COPY_SESSION))
        return connection

    def _open_adbc(self) -> Any:
        dbapi = _adbc_postgres()
        assert dbapi is not None
        connection = dbapi.connect(self._reader_url())
        _set_up(connection, POSTGRES_SESSION)
        return connection

    def _description_schema(self, cursor: Any) -> pa.Schema | None:
        if self.driver == "psycopg":
            return postgres_description_schema(cursor.description)
        return None

    def _unhashable(self, sql: str) -> list[str]:
        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
                description = cursor.description
                cursor.fetchall()
            finally:
                cursor.close()
                connection.commit()
        return [d[0] for d in description if d[1] not in HASHABLE_TYPE_OIDS]

    def column_types(self, sql: str) -> tuple[int, ...]:
        """The type OIDs of the output columns of ``sql`` (one ``LIMIT 0`` query, remembered)."""
        types = self._types.get(sql)
        if types is None:
            with self._errors("schema query"), self._raw() as connection:
                cursor = connection.cursor()
                try:
                    cursor.execute(schema_sql(self.parse(sql)))
                    types = tuple(int(d[1]) for d in cursor.description)
                    cursor.fetchall()
                finally:
                    cursor.close()
                    connection.commit()
            if len(self._types) >= _TYPE_CACHE_SIZE:
                self._types.clear()
            self._types[sql] = types
        return types

    def reader_for(
        self,
        sql: str,
        *,
        snapshot: str | None = None,
        after: str = "",
        schema: pa.Schema | None = None,
    ) -> str:
        """The reader a read of ``sql`` takes: the first of :attr:`readers` (after ``after``)
        that is installed and carries every column type; else ``psycopg``.

        ``copy`` is chosen from the read's Arrow ``schema`` alone (derived when not given);
        connectorx and ADBC from the columns' type OIDs (one ``LIMIT 0`` query). Every
        reader can read inside a ``snapshot``, so it does not change the choice.
        """
        names = self.readers
        if after in names:
            names = names[names.index(after) + 1 :]
        if schema is None and set(names) & {"copy", "connectorx"}:
            schema = self.schema(sql)
        oids: tuple[int, ...] | None = None
        for name in names:
            if name in ("psycopg", "copy"):
                if name == "psycopg" or (_installed("psycopg") and copy_fits(schema)):
                    return name
                continue
            if oids is None:
                oids = self.column_types(sql)
            cx = name == "connectorx" and _connectorx() is not None
            if cx and connectorx_carries(oids, schema):
                return name
            if name == "adbc" and set(oids) <= ADBC_TYPES and _adbc_postgres() is not None:
                return name
        return "psycopg"

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
        rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        reader = self.reader_for(sql, snapshot=snapshot, schema=schema)
        reads = self._read_with(reader, sql, schema, batch_rows, stop, ordered, snapshot)
        if snapshot is None:
            yield from reads
            return
        try:
            yield from reads
        except Exception as err:
            if "invalid snapshot identifier" not in str(err):
                raise
            raise EngineError(
                f"postgres: the snapshot {snapshot} is no longer held (the session that "
                "exported it ended, or it is another server's): keep its holder open until "
                "every read of the plan is done"
            ) from None

    def _read_with(
        self,
        reader: str,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        begin = snapshot_statements(snapshot)
        settings = [
            *snapshot_statements(snapshot, begin=True),
            *POSTGRES_SESSION,
            *(POSTGRES_ORDERED if ordered else ()),
        ]
        local = [s.replace("SET ", "SET LOCAL ", 1) for s in POSTGRES_ORDERED] if ordered else []
        local = [*begin, *local]
        if reader == "copy":
            yield from self._read_copy(sql, schema, batch_rows, stop, ordered, local, snapshot)
        elif reader == "connectorx":
            yield from self._read_connectorx(
                sql, schema, batch_rows, stop, ordered, settings, snapshot
            )
        elif reader == "adbc":
            yield from self._read_adbc(sql, batch_rows, stop, local)
        else:
            yield from super()._read(sql, schema, batch_rows, stop, ordered, snapshot)

    def _prepare_cursor(self, cursor: Any, sql: str, schema: pa.Schema) -> None:
        """psycopg: read the columns typed as text in PostgreSQL's own text form."""
        if self.driver != "psycopg":
            return
        from psycopg.types.string import TextLoader

        for oid, field in zip(self.column_types(sql), schema, strict=True):
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                cursor.adapters.register_loader(oid, TextLoader)

    def _begin_read(self, cursor: Any, ordered: bool, snapshot: str | None) -> None:
        for statement in snapshot_statements(snapshot):  # the first of this transaction
            cursor.execute(statement)
        if ordered:
            for setting in POSTGRES_ORDERED:  # for this transaction only
                cursor.execute(setting.replace("SET ", "SET LOCAL ", 1))

    def _streaming_cursor(self, connection: Any, batch_rows: int) -> Any:
        if self.driver != "psycopg":
            return super()._streaming_cursor(connection, batch_rows)
        cursor = connection.driver_connection.cursor(name=f"sqlfeed_{threading.get_ident()}")
        cursor.itersize = batch_rows
        return cursor

    def export_snapshot(self) -> SnapshotHolder:
        """A snapshot exported by a REPEATABLE READ transaction on a connection of its own,
        held open (no idle-in-transaction time-out) until the holder is closed."""
        connection = None
        try:
            with self._errors("snapshot export"):
                connection = self.engine.raw_connection()
                cursor = connection.cursor()
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                cursor.execute("SELECT pg_export_snapshot()")
                row = cursor.fetchone()
                assert row is not None
                snapshot = str(row[0])
                cursor.close()
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        return SnapshotHolder(snapshot, connection)

    def _read_adbc(
        self, sql: str, batch_rows: int, stop: threading.Event | None, local: list[str]
    ) -> Iterator[pa.RecordBatch]:
        """ADBC's binary COPY on this thread's connection (``local``: ``SET LOCAL``s).

        A kept connection found broken before any row is reopened once.
        """
        connections = self.connections["adbc"]
        for attempt in (1, 2):
            kept = connections.get()
            yielded = finished = False
            try:
                for batch in _adbc_batches(kept.connection, sql, batch_rows, stop, local):
                    yielded = True
                    yield batch
                finished = stop is None or not stop.is_set()
                return
            except Exception:
                if yielded or attempt == 2 or _alive(kept.connection):
                    raise
            finally:
                if not finished:
                    connections.drop(kept)

    def _read_copy(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        local: list[str],
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        """``COPY ... (FORMAT csv)`` on this thread's psycopg connection, parsed by Arrow.

        A connection found broken before any row is reopened once; a value Arrow cannot
        parse before the first batch sends the read to the next reader.
        """
        connections = self.connections["copy"]
        for attempt in (1, 2):
            kept = connections.get()
            connection = kept.connection
            yielded = False
            try:
                for batch in copy_batches(connection, sql, schema, batch_rows, stop, local):
                    yielded = True
                    yield batch
                return
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                if yielded:
                    raise
                break
            except Exception:
                if yielded or attempt == 2 or not connection.broken:
                    raise
            finally:
                _settle(kept, connections)
        after = self.reader_for(sql, after="copy", schema=schema)
        yield from self._read_with(after, sql, schema, batch_rows, stop, ordered, snapshot)

    def _read_connectorx(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        settings: list[str],
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        """connectorx's Arrow stream; ``settings`` run first on its connection (a
        snapshot's ``BEGIN`` among them: its query then reads inside the transaction)."""
        connectorx = _connectorx()
        url = self.engine.url.set(drivername="postgresql")
        yielded = False
        try:
            with connectorx.read_sql(
                url.render_as_string(hide_password=False),
                sql,
                return_type="arrow_stream",
                batch_size=batch_rows,
                pre_execution_query=settings,
            ) as reader:
                for batch in reader:
                    if stop is not None and stop.is_set():
                        return
                    yielded = True
                    yield batch
            return
        except BaseException as err:  # a Rust panic is a BaseException: caught by its name
            if not is_connectorx_failure(err):
                raise
            failure, lost = str(err), connection_lost(err)
        after = self.reader_for(sql, after="connectorx")
        fallback = self._read_with(after, sql, schema, batch_rows, stop, ordered, snapshot)
        if not yielded:  # nothing delivered yet: the next reader's rows, or the real error
            yield from fallback
            return
        message = panic_database_message(failure)
        if message is None and not lost:  # a lost connection hides nothing: no re-read
            for _ in fallback:  # the error connectorx hid, raised by the next reader
                pass
            message = libpq_message(failure)
        raise EngineError(f"postgres failed running the partition query: {message}")


def snapshot_statements(snapshot: str | None, *, begin: bool = False) -> list[str]:
    """The first statements of a read's transaction inside ``snapshot`` (none without one).

    ``begin``: open the transaction too (connectorx runs them on a connection outside one;
    psycopg and ADBC connections are inside the transaction their driver began).
    """
    if snapshot is None:
        return []
    mode = "ISOLATION LEVEL REPEATABLE READ READ ONLY"
    first = f"BEGIN {mode}" if begin else f"SET TRANSACTION {mode}"
    return [first, f"SET TRANSACTION SNAPSHOT {_quote(snapshot)}"]


def _adbc_batches(
    connection: Any, sql: str, batch_rows: int, stop: threading.Event | None, local: list[str]
) -> Iterator[pa.RecordBatch]:
    """The batches of ``sql`` on an ADBC connection; its transaction committed at the end
    (left open when ``stop`` ends the read early)."""
    with connection.cursor() as cursor:
        for setting in local:
            cursor.execute(setting)
        cursor.adbc_statement.set_options(
            **{"adbc.postgresql.batch_size_hint_bytes": str(batch_rows * 64)}
        )
        cursor.execute(sql)
        reader = cursor.fetch_record_batch()
        while stop is None or not stop.is_set():
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as err:  # a server error mid-stream
                raise EngineError(
                    f"postgres failed running the partition query: {libpq_message(str(err))}"
                ) from None
            yield adbc_batch(batch)
        else:
            return
    connection.commit()


def _alive(connection: Any) -> bool:
    """Whether a reader connection still answers after a failed read (rolled back)."""
    try:
        connection.rollback()
        cursor = connection.cursor()
        try:
            cursor.execute("SELECT 1")
            cursor.fetchall()
        finally:
            cursor.close()
        connection.rollback()
    except Exception:
        return False
    return True


def _set_up(connection: Any, settings: tuple[str, ...]) -> None:
    """Run a new reader connection's session ``settings`` and commit them."""
    cursor = connection.cursor()
    try:
        for setting in settings:
            cursor.execute(setting)
    finally:
        cursor.close()
    connection.commit()


def _settle(kept: KeptConnection, connections: ThreadConnections) -> None:
    """After a ``copy`` read: keep the connection when its transaction is over (or can be
    rolled back), else drop it (broken, or a ``COPY`` still sending rows)."""
    from psycopg import pq

    connection = kept.connection
    if connection is None:  # closed with the source meanwhile
        return
    status = connection.info.transaction_status
    if status == pq.TransactionStatus.IDLE:
        return
    if status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        try:
            connection.rollback()
            return
        except Exception:  # the connection broke meanwhile
            pass
    connections.drop(kept)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _connectorx() -> Any:
    return connectorx_module()


def _adbc_postgres() -> Any:
    try:
        import adbc_driver_postgresql.dbapi as dbapi
    except ImportError:
        return None
    return dbapi
