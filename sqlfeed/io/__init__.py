"""The I/O layer: where a query runs, and its rows as Arrow.

:func:`connect` turns a URL, engine or connection into a :class:`Source`
(:mod:`sqlfeed.io.source`), with one module per engine family: :mod:`sqlfeed.io.duckdb`,
:mod:`sqlfeed.io.sqlalchemy` (any SQLAlchemy engine), the package
:mod:`sqlfeed.io.postgres`, :mod:`sqlfeed.io.mysql` and :mod:`sqlfeed.io.sqlite`. A read
is a :class:`~sqlfeed.io.readers.ReadRequest` served by the engine's readers, listed in one
table per engine, through one fallback chain (:mod:`sqlfeed.io.readers`; connectorx's
reader, shared by every engine, in :mod:`sqlfeed.io.cxread`). Engine-independent Arrow
helpers are in :mod:`sqlfeed.io.arrow`,
file URLs (``duckdb:``, ``sqlite:``, ``dataset:``) in :mod:`sqlfeed.io.files`, the pieces
of local files partition queries name (byte ranges, ORC stripes) in
:mod:`sqlfeed.io.ranges`. This layer imports only
:mod:`sqlfeed.sql` and ``dialects``.
"""

from __future__ import annotations

from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS
from sqlfeed.io.connect import connect, connect_output, register_scheme
from sqlfeed.io.duckdb import DuckDBSource, duckdb_file
from sqlfeed.io.files import MEMORY, require_file, url_path
from sqlfeed.io.mysql import MySQLSource
from sqlfeed.io.postgres import READERS, PostgresSource
from sqlfeed.io.ranges import range_url
from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.io.source import SnapshotHolder, Source, driver_message, redact_url
from sqlfeed.io.sqlalchemy import SQLAlchemySource
from sqlfeed.io.sqlite import SQLiteSource

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "MEMORY",
    "READERS",
    "DuckDBSource",
    "MySQLSource",
    "PostgresSource",
    "ReadRequest",
    "Reader",
    "SQLAlchemySource",
    "SQLiteSource",
    "SnapshotHolder",
    "Source",
    "connect",
    "connect_output",
    "driver_message",
    "duckdb_file",
    "range_url",
    "redact_url",
    "register_scheme",
    "require_file",
    "url_path",
]
