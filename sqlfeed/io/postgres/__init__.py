"""PostgreSQL, in one place: the source, its readers, their types and sessions.

:mod:`~sqlfeed.io.postgres.source` (:class:`PostgresSource`: catalog look-ups, snapshots),
:mod:`~sqlfeed.io.postgres.readers` (the reader table: ``copy``, connectorx, ADBC,
psycopg), :mod:`~sqlfeed.io.postgres.types` (type OIDs to Arrow, which reader carries
which type), :mod:`~sqlfeed.io.postgres.copy` (the ``copy`` reader's ``COPY`` stream
parsed by Arrow), :mod:`~sqlfeed.io.postgres.sessions` (session settings, a read's
transaction inside a snapshot).
"""

from __future__ import annotations

from sqlfeed.io.postgres.readers import READER_TABLE, READERS
from sqlfeed.io.postgres.sessions import POSTGRES_ORDERED, POSTGRES_SESSION, snapshot_statements
from sqlfeed.io.postgres.source import READERS_VARIABLE, PostgresSource
from sqlfeed.io.postgres.types import postgres_description_schema

__all__ = [
    "POSTGRES_ORDERED",
    "POSTGRES_SESSION",
    "READERS",
    "READERS_VARIABLE",
    "READER_TABLE",
    "PostgresSource",
    "postgres_description_schema",
    "snapshot_statements",
]
