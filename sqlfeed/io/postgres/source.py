"""PostgreSQL: :class:`PostgresSource`: its session settings, catalog look-ups, snapshots.

Its readers (``copy``, connectorx, ADBC, psycopg) are in one table,
:data:`~sqlfeed.io.postgres.readers.READER_TABLE`; a read takes the first of
:attr:`PostgresSource.readers` that carries every column type of the query
(:mod:`sqlfeed.io.postgres.readers`), psycopg when none does. A read runs inside an
exported snapshot when it is given one (:meth:`PostgresSource.export_snapshot`), and a
snapshot that is no longer held is one clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import EngineError
from sqlfeed.dialects.postgres import HASHABLE_TYPE_OIDS
from sqlfeed.io.keptconnections import ThreadConnections
from sqlfeed.io.postgres.readers import READER_TABLE, AdbcReader, CopyReader
from sqlfeed.io.postgres.sessions import POSTGRES_SESSION
from sqlfeed.io.postgres.types import postgres_description_schema
from sqlfeed.io.postgres.write import PostgresSession
from sqlfeed.io.readers import ReadRequest
from sqlfeed.io.source import SnapshotHolder
from sqlfeed.io.sqlalchemy import SQLAlchemySource
from sqlfeed.sql import ParsedQuery, schema_sql

__all__ = ["READERS_VARIABLE", "PostgresSource"]

READERS_VARIABLE = "SQLFEED_POSTGRES_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``adbc,psycopg``)."""

_TYPE_CACHE_SIZE = 1024


class PostgresSource(SQLAlchemySource):
    """PostgreSQL through SQLAlchemy, read with COPY, connectorx, ADBC or a psycopg cursor.

    Attributes:
        readers: the readers a read may take, in order (default
            :data:`~sqlfeed.io.postgres.readers.READERS`, ``connect(url, readers=[...])``
            or the ``SQLFEED_POSTGRES_READERS`` environment variable); psycopg, which
            carries every type, is taken when none of them can.
        connections: per reader that keeps its connections (``copy``, ``adbc``): one per
            reading thread, reused.
    """

    session_settings = POSTGRES_SESSION
    shares_snapshots = True
    repeats_unordered = False  # parallel and synchronized scans: ordered reads resume
    READER_TABLE = READER_TABLE
    READERS_VARIABLE = READERS_VARIABLE

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        self._types: dict[str, tuple[int, ...]] = {}
        super().__init__(engine, dialect, owned=owned, label=label)
        self.connections: dict[str, ThreadConnections] = {
            name: reader.connections
            for name, reader in self.reader_table().items()
            if isinstance(reader, CopyReader | AdbcReader)
        }

    def close(self) -> None:
        for connections in self.connections.values():
            connections.close()
        super().close()

    def _description_schema(self, cursor: Any) -> pa.Schema | None:
        if self.driver == "psycopg":
            return postgres_description_schema(cursor.description)
        return None

    def text_columns(self, query: str | ParsedQuery) -> list[str]:
        """Output columns whose type PostgreSQL cannot hash, to hash through their text.

        Such as json, xml, point, money, ...
        """
        sql = schema_sql(self.parse(query))
        return self._retried("schema query", lambda: self._unhashable(sql))

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

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        """The readers' batches; a snapshot no longer held is one clear error."""
        reads = super().batches(request)
        if request.snapshot is None:
            yield from reads
            return
        try:
            yield from reads
        except Exception as err:
            if "invalid snapshot identifier" not in str(err):
                raise
            raise EngineError(
                f"postgres: the snapshot {request.snapshot} is no longer held (the session "
                "that exported it ended, or it is another server's): keep its holder open "
                "until every read of the plan is done"
            ) from None

    def write_session(self) -> PostgresSession:
        """A session writing with ``COPY FROM STDIN`` (:mod:`sqlfeed.io.postgres.write`)."""
        return PostgresSession(self.engine.raw_connection(), self.dialect, "format")

    def write_grant(self, schema: str | None, *, read_only: bool = False) -> str:
        """CREATE on the schema (the staging and commit tables are made beside the output)."""
        user = self.engine.url.username or "the_role"
        if read_only:
            return (
                f"the role's transactions are read-only (default_transaction_read_only, or a "
                f"standby): write with a role that may (ALTER ROLE {user} SET "
                "default_transaction_read_only = off), on the primary"
            )
        where = schema or self._current_schema()
        return (
            f"the role needs CREATE on the schema {where} and INSERT on an existing output "
            f"table (GRANT CREATE ON SCHEMA {where} TO {user})"
        )

    def _current_schema(self) -> str:
        """The schema an unqualified table is created in (the first of the search path)."""
        try:
            with self.engine.connect() as connection:
                return str(connection.exec_driver_sql("SELECT current_schema()").scalar())
        except Exception:  # only for a message: the schema then stays unnamed
            return "<schema>"

    def export_snapshot(self) -> SnapshotHolder:
        """A snapshot exported by a REPEATABLE READ transaction on a connection of its own.

        Held open (no idle-in-transaction time-out) until the holder is closed.
        """
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
