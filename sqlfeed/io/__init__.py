"""The I/O layer: where a query runs, and its rows as Arrow.

:func:`connect` turns a URL, engine or connection into a :class:`Source`
(:mod:`sqlfeed.io.source`), with one module per engine family: :mod:`sqlfeed.io.duckdb`,
:mod:`sqlfeed.io.sqlalchemy` (any SQLAlchemy engine, SQLite included),
:mod:`sqlfeed.io.postgres` and :mod:`sqlfeed.io.mysql`. Engine-independent Arrow helpers
are in :mod:`sqlfeed.io.arrow`. This layer imports only :mod:`sqlfeed.sql` and ``dialects``.
"""

from __future__ import annotations

from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS
from sqlfeed.io.connect import connect, register_scheme
from sqlfeed.io.duckdb import DuckDBSource
from sqlfeed.io.mysql import MySQLSource
from sqlfeed.io.postgres import PostgresSource
from sqlfeed.io.source import SnapshotHolder, Source, driver_message, redact_url
from sqlfeed.io.sqlalchemy import SQLAlchemySource

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "DuckDBSource",
    "MySQLSource",
    "PostgresSource",
    "SQLAlchemySource",
    "SnapshotHolder",
    "Source",
    "connect",
    "driver_message",
    "redact_url",
    "register_scheme",
]
