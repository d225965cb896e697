"""PostgreSQL's readers, listed in one table (:data:`READER_TABLE`), fastest first.

``copy`` (:class:`CopyReader`): a CSV ``COPY`` parsed by Arrow into the query's own types
(:mod:`sqlfeed.io.postgres.copy`), taken when Arrow parses every column of the plan's
schema exactly from its text. ``connectorx`` (:class:`PostgresConnectorx`): its Arrow
stream, or for a partition estimated small its whole read (the plan's row estimate,
:func:`sqlfeed.io.cxread.connectorx_batches`), taken when every column's type OID is one
it returns exactly. ``adbc`` (:class:`AdbcReader`): ADBC's binary COPY, the same check
by type OID. ``psycopg`` (:class:`PsycopgReader`): a server-side cursor, which carries
every type. ``copy`` and ADBC keep one connection per reading thread, set up once and
reused for every partition the thread reads (:mod:`sqlfeed.io.keptconnections`);
connectorx opens one per partition, psycopg takes the engine's pooled connections. Every
reader reads inside an exported snapshot when the request gives one: its transaction
begins with :func:`~sqlfeed.io.postgres.sessions.snapshot_statements` (connectorx runs
them first on its own connection). The fallback between them is the one chain every
engine shares (:func:`sqlfeed.io.readers.read_in_order`). connectorx, ADBC and psycopg
are optional and imported when used.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa

from sqlfeed.dialects import EngineError
from sqlfeed.dialects.optional import require
from sqlfeed.io.cxread import ConnectorxReader
from sqlfeed.io.keptconnections import KeptConnection, ThreadConnections
from sqlfeed.io.postgres.copy import COPY_SESSION, copy_batches, copy_fits
from sqlfeed.io.postgres.sessions import (
    POSTGRES_ORDERED,
    POSTGRES_SESSION,
    local_settings,
    set_up,
    snapshot_statements,
)
from sqlfeed.io.postgres.types import (
    ADBC_TYPES,
    adbc_batch,
    connectorx_carries,
    libpq_message,
    panic_database_message,
)
from sqlfeed.io.readers import Reader, ReadRequest, StaleConnection
from sqlfeed.io.sqlalchemy import CursorReader

__all__ = [
    "READERS",
    "READER_TABLE",
    "AdbcReader",
    "CopyReader",
    "PostgresConnectorx",
    "PostgresReading",
    "PsycopgReader",
]


class PostgresReading(Protocol):
    """What PostgreSQL's readers ask of their source."""

    engine: Any
    driver: str

    def column_types(self, sql: str) -> tuple[int, ...]:
        """The type OIDs of the output columns of ``sql``."""
        ...


def reader_url(source: PostgresReading) -> str:
    """The source's URL as libpq, connectorx and ADBC take it (``postgresql://``)."""
    url = source.engine.url.set(drivername="postgresql")
    return str(url.render_as_string(hide_password=False))


class CopyReader(Reader):
    """``COPY ... (FORMAT csv)`` on this thread's kept psycopg connection, parsed by Arrow.

    A value Arrow cannot parse (an ``infinity`` date, a year past 9999) before the first
    batch sends the read to the next reader; after it, it is the read's error.
    """

    name = "copy"
    source: PostgresReading

    def __init__(self, source: PostgresReading) -> None:
        super().__init__(source)
        self.connections = ThreadConnections(self._open)
        """This reader's connections: one per reading thread, reused."""

    def _open(self) -> Any:
        psycopg = require("psycopg", "the PostgreSQL copy reader")
        connection = psycopg.connect(reader_url(self.source))
        set_up(connection, (*POSTGRES_SESSION, *COPY_SESSION))
        return connection

    def carries(self, request: ReadRequest) -> bool:
        return importlib.util.find_spec("psycopg") is not None and copy_fits(request.schema)

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        kept = self.connections.get()
        connection = kept.connection
        yielded = False
        try:
            local = local_settings(request)
            for batch in copy_batches(
                connection, request.sql, request.schema, request.batch_rows, request.stop, local
            ):
                yielded = True
                yield batch
        except Exception as err:
            if not yielded and connection.broken and not self.failure(err):
                raise StaleConnection(err) from err
            raise
        finally:
            _settle(kept, self.connections)

    def failure(self, err: BaseException) -> bool:
        return isinstance(err, pa.ArrowInvalid | pa.ArrowNotImplementedError)


class PostgresConnectorx(ConnectorxReader):
    """connectorx's Arrow reads, for the type OIDs it returns exactly.

    See :func:`~sqlfeed.io.postgres.types.connectorx_carries`. A partition estimated small
    is read whole, as on MySQL/MariaDB and SQLite.
    """

    source: PostgresReading
    typed_by_values = False  # it types a column by its type OID, which carries() checked

    def url(self) -> str | None:
        return reader_url(self.source)

    def settings(self, request: ReadRequest) -> Sequence[str]:
        # a snapshot's BEGIN among them: the query then reads inside the transaction
        ordered = POSTGRES_ORDERED if request.ordered else ()
        begin = snapshot_statements(request.snapshot, begin=True)
        return [*begin, *POSTGRES_SESSION, *ordered]

    def carries_types(self, request: ReadRequest) -> bool:
        return connectorx_carries(self.source.column_types(request.sql), request.schema)

    def database_message(self, err: BaseException) -> str | None:
        return panic_database_message(str(err))


class AdbcReader(Reader):
    """ADBC's binary COPY on this thread's kept connection, for the type OIDs it returns exactly.

    See :data:`~sqlfeed.io.postgres.types.ADBC_TYPES`.
    """

    name = "adbc"
    source: PostgresReading

    def __init__(self, source: PostgresReading) -> None:
        super().__init__(source)
        self.connections = ThreadConnections(self._open)
        """This reader's connections: one per reading thread, reused."""

    def _open(self) -> Any:
        dbapi = require("adbc_driver_postgresql.dbapi", "the PostgreSQL ADBC reader")
        connection = dbapi.connect(reader_url(self.source))
        set_up(connection, POSTGRES_SESSION)
        return connection

    def carries(self, request: ReadRequest) -> bool:
        if importlib.util.find_spec("adbc_driver_postgresql") is None:
            return False
        return set(self.source.column_types(request.sql)) <= ADBC_TYPES

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        kept = self.connections.get()
        yielded = finished = False
        try:
            local = local_settings(request)
            batches = _adbc_batches(
                kept.connection, request.sql, request.batch_rows, request.stop, local
            )
            for batch in batches:
                yielded = True
                yield batch
            finished = not request.stopped
        except Exception as err:
            if not yielded and not _alive(kept.connection):
                raise StaleConnection(err) from err
            raise
        finally:
            if not finished:
                self.connections.drop(kept)


class PsycopgReader(CursorReader):
    """psycopg's server-side cursor on a pooled connection: it carries every type.

    The types without an Arrow form come as the text PostgreSQL prints for them.
    """

    name = "psycopg"

    def begin(self, cursor: Any, request: ReadRequest) -> None:
        for statement in snapshot_statements(request.snapshot):  # the first of this transaction
            cursor.execute(statement)
        if request.ordered:
            for setting in POSTGRES_ORDERED:  # for this transaction only
                cursor.execute(setting.replace("SET ", "SET LOCAL ", 1))

    def cursor(self, connection: Any, batch_rows: int) -> Any:
        if self.source.driver != "psycopg":
            return super().cursor(connection, batch_rows)
        cursor = connection.driver_connection.cursor(name=f"sqlfeed_{threading.get_ident()}")
        cursor.itersize = batch_rows
        return cursor

    def prepare(self, cursor: Any, request: ReadRequest) -> None:
        """psycopg: read the columns typed as text in PostgreSQL's own text form."""
        if self.source.driver != "psycopg":
            return
        text_loader = require("psycopg.types.string", "the PostgreSQL reader").TextLoader
        types: tuple[int, ...] = self.source.column_types(request.sql)  # type: ignore[attr-defined]
        for oid, field in zip(types, request.schema, strict=True):
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                cursor.adapters.register_loader(oid, text_loader)


READER_TABLE: tuple[type[Reader], ...] = (CopyReader, PostgresConnectorx, AdbcReader, PsycopgReader)
"""The PostgreSQL readers, fastest first (measured by ``benchmarks/pg_readers.py``);
psycopg, last, carries every type."""

READERS = tuple(reader.name for reader in READER_TABLE)
"""Their names: the default order of :attr:`PostgresSource.readers
<sqlfeed.io.postgres.PostgresSource.readers>`."""


def _adbc_batches(
    connection: Any, sql: str, batch_rows: int, stop: threading.Event | None, local: list[str]
) -> Iterator[pa.RecordBatch]:
    """The batches of ``sql`` on an ADBC connection; its transaction committed at the end.

    Left open when ``stop`` ends the read early.
    """
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


def _settle(kept: KeptConnection, connections: ThreadConnections) -> None:
    """After a ``copy`` read: keep the connection when its transaction is over.

    Or when it can be rolled back; else drop it (broken, or a ``COPY`` still sending rows).
    """
    pq = require("psycopg.pq", "the PostgreSQL copy reader")
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
