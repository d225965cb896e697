"""PostgreSQL: :class:`PostgresSource`, its readers, snapshots, types and session settings.

Reads try, in order: connectorx (Arrow stream), ADBC (``adbc-driver-postgresql``, binary
COPY, streamed), then psycopg with a server-side cursor. A read inside an exported
snapshot always takes the psycopg path, the only one that shares a session's snapshot.
connectorx, ADBC and psycopg are optional and imported when used.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from dialects.postgres import HASHABLE_TYPE_OIDS
from sqlfeed.io.source import SnapshotHolder
from sqlfeed.io.sqlalchemy import SQLAlchemySource

__all__ = [
    "POSTGRES_ORDERED",
    "POSTGRES_SESSION",
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

# PostgreSQL type OIDs -> Arrow types (the common built-in types).
_PG_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    17: pa.binary(),
    18: pa.string(),
    19: pa.string(),
    20: pa.int64(),
    21: pa.int16(),
    23: pa.int32(),
    25: pa.string(),
    26: pa.int64(),
    114: pa.string(),
    700: pa.float32(),
    701: pa.float64(),
    1042: pa.string(),
    1043: pa.string(),
    1082: pa.date32(),
    1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"),
    1083: pa.time64("us"),
    1186: pa.duration("us"),
    2950: pa.string(),
    3802: pa.string(),
}


class PostgresSource(SQLAlchemySource):
    """PostgreSQL through SQLAlchemy, read with connectorx, ADBC or a psycopg named cursor."""

    session_settings = POSTGRES_SESSION

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

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        settings = [*POSTGRES_SESSION, *(POSTGRES_ORDERED if ordered else ())]
        if snapshot is None and _connectorx() is not None:
            yield from self._read_connectorx(sql, batch_rows, stop, settings)
            return
        if snapshot is None and _adbc_postgres() is not None:
            yield from self._read_adbc(sql, batch_rows, stop, settings)
            return
        yield from super()._read(sql, schema, batch_rows, stop, ordered, snapshot)

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
            for batch in cursor.fetch_record_batch():
                if stop is not None and stop.is_set():
                    return
                yield batch

    def _read_connectorx(
        self, sql: str, batch_rows: int, stop: threading.Event | None, settings: list[str]
    ) -> Iterator[pa.RecordBatch]:
        connectorx = _connectorx()
        url = self.engine.url.set(drivername="postgresql")
        reader = connectorx.read_sql(
            url.render_as_string(hide_password=False),
            sql,
            return_type="arrow_stream",
            batch_size=batch_rows,
            pre_execution_query=settings,
        )
        for batch in reader:
            if stop is not None and stop.is_set():
                return
            yield batch


def postgres_description_schema(description: Sequence[Any]) -> pa.Schema:
    """Arrow types from psycopg's description; ``null`` for types to infer from values.

    Args:
        description: a psycopg cursor's ``description`` (its columns' type OIDs, and the
            precision and scale of ``numeric`` columns).
    """
    fields = []
    for column in description:
        oid = column.type_code
        if oid == 1700:  # numeric: exact decimal when its precision is declared
            precision, scale = column.precision, column.scale
            arrow_type = (
                pa.decimal128(precision, scale)
                if precision and precision <= 38 and scale is not None
                else pa.float64()
            )
        else:
            arrow_type = _PG_TYPES.get(oid, pa.null())
        fields.append(pa.field(column.name, arrow_type))
    return pa.schema(fields)


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
