"""PostgreSQL: :class:`PostgresSource`, its readers, snapshots and session settings.

A read takes the first reader of :attr:`PostgresSource.readers` (connectorx's Arrow
stream, ADBC's binary COPY, then psycopg's server-side cursor) that is installed and
carries every column type of the query (:mod:`sqlfeed.io.pgtypes`); psycopg carries them
all, and is the only reader for a read inside an exported snapshot. connectorx reports a
failure as a Rust panic (``PanicException``, not an ``Exception``): before its first
batch the read runs again on the next reader, which returns the rows or the database's
own error; after it, the panic becomes a one-line :class:`~dialects.EngineError` with
the database's message. (The panic's own lines still reach the process's standard error:
Rust prints them before Python sees the exception.) connectorx, ADBC and psycopg are
optional and imported when used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dialects import EngineError, InvalidArgumentError, SqlfeedError
from dialects.postgres import HASHABLE_TYPE_OIDS
from sqlfeed.io.pgtypes import (
    ADBC_TYPES,
    CONNECTORX_TYPES,
    adbc_batch,
    libpq_message,
    panic_database_message,
    postgres_description_schema,
)
from sqlfeed.io.source import SnapshotHolder
from sqlfeed.io.sqlalchemy import SQLAlchemySource
from sqlfeed.sql import schema_sql

__all__ = [
    "POSTGRES_ORDERED",
    "POSTGRES_SESSION",
    "READERS",
    "PostgresSource",
    "postgres_description_schema",
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

READERS = ("connectorx", "adbc", "psycopg")
"""The PostgreSQL readers, fastest first (the default order of :attr:`PostgresSource.readers`)."""

READERS_VARIABLE = "SQLFEED_POSTGRES_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``adbc,psycopg``)."""

_TYPE_CACHE_SIZE = 1024


class PostgresSource(SQLAlchemySource):
    """PostgreSQL through SQLAlchemy, read with connectorx, ADBC or a psycopg named cursor.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_POSTGRES_READERS`` environment variable); psycopg, which carries
            every type, is taken when none of them can.
    """

    session_settings = POSTGRES_SESSION

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        self.readers: tuple[str, ...] = readers_from_environment()
        self._types: dict[str, tuple[int, ...]] = {}

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

    def reader_for(self, sql: str, *, snapshot: str | None = None, after: str = "") -> str:
        """The reader a read of ``sql`` takes: the first of :attr:`readers` (after ``after``)
        that is installed and carries every column type; else ``psycopg``."""
        if snapshot is not None:
            return "psycopg"
        types = set(self.column_types(sql))
        names = self.readers
        if after in names:
            names = names[names.index(after) + 1 :]
        for name in names:
            if name == "psycopg":
                return name
            if name == "connectorx" and types <= CONNECTORX_TYPES and _connectorx() is not None:
                return name
            if name == "adbc" and types <= ADBC_TYPES and _adbc_postgres() is not None:
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
    ) -> Iterator[pa.RecordBatch]:
        reader = self.reader_for(sql, snapshot=snapshot)
        yield from self._read_with(reader, sql, schema, batch_rows, stop, ordered, snapshot)

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
        settings = [*POSTGRES_SESSION, *(POSTGRES_ORDERED if ordered else ())]
        if reader == "connectorx":
            yield from self._read_connectorx(sql, schema, batch_rows, stop, ordered, settings)
        elif reader == "adbc":
            yield from self._read_adbc(sql, batch_rows, stop, settings)
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
        if snapshot is not None:  # the first statements of this transaction
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute(f"SET TRANSACTION SNAPSHOT {_quote(snapshot)}")
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
        with self._errors("snapshot export"):
            connection = self.engine.raw_connection()
            cursor = connection.cursor()
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT pg_export_snapshot()")
            row = cursor.fetchone()
            assert row is not None
            snapshot = str(row[0])
            cursor.close()
        return SnapshotHolder(snapshot, connection)

    def _read_adbc(
        self, sql: str, batch_rows: int, stop: threading.Event | None, settings: list[str]
    ) -> Iterator[pa.RecordBatch]:
        dbapi = _adbc_postgres()
        assert dbapi is not None
        url = self.engine.url.set(drivername="postgresql")
        uri = url.render_as_string(hide_password=False)
        with dbapi.connect(uri) as connection, connection.cursor() as cursor:
            for setting in settings:
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
                    return
                except (OSError, pa.ArrowException) as err:  # a server error mid-stream
                    raise EngineError(
                        f"postgres failed running the partition query: {libpq_message(str(err))}"
                    ) from None
                yield adbc_batch(batch)

    def _read_connectorx(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        settings: list[str],
    ) -> Iterator[pa.RecordBatch]:
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
            if not _connectorx_failure(err):
                raise
            failure = str(err)
        fallback = self._read_with(
            self.reader_for(sql, after="connectorx"), sql, schema, batch_rows, stop, ordered, None
        )
        if not yielded:  # nothing delivered yet: the next reader's rows, or the real error
            yield from fallback
            return
        message = panic_database_message(failure)
        if message is None:
            for _ in fallback:  # the error connectorx hid, raised by the next reader
                pass
            message = libpq_message(failure)
        raise EngineError(f"postgres failed running the partition query: {message}")


def readers_from_environment() -> tuple[str, ...]:
    """The readers named by ``SQLFEED_POSTGRES_READERS`` (default :data:`READERS`).

    Raises:
        InvalidArgumentError: the variable names a reader that does not exist.
    """
    value = os.environ.get(READERS_VARIABLE, "").strip()
    if not value:
        return READERS
    names = tuple(name.strip().lower() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in READERS]
    if unknown:
        raise InvalidArgumentError(
            f"{READERS_VARIABLE}={value!r}: unknown reader {unknown[0]!r}; use a "
            f"comma-separated list of {', '.join(READERS)}"
        )
    return names


def _connectorx_failure(err: BaseException) -> bool:
    """A connectorx failure: its Rust panic, or an error it raised (never ours, nor an exit)."""
    if type(err).__name__ == "PanicException":
        return True
    return isinstance(err, RuntimeError | OSError | pa.ArrowException) and not isinstance(
        err, SqlfeedError
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _connectorx() -> Any:
    try:
        import connectorx
    except ImportError:
        return None
    return connectorx


def _adbc_postgres() -> Any:
    try:
        import adbc_driver_postgresql.dbapi as dbapi
    except ImportError:
        return None
    return dbapi
