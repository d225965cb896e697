"""Writing Arrow batches into a database table, in transactions the caller ends.

A :class:`WriteSession` is one connection of the output database: the table sink
(:mod:`sqlfeed.sink`) begins a transaction, runs its own statements (the commit record,
DDL), inserts a batch's rows with :meth:`WriteSession.insert` (each engine's fastest bulk
path: PostgreSQL ``COPY FROM STDIN``, DuckDB an Arrow scan, the others ``executemany``),
then commits or rolls back. A unique violation is told apart from other failures
(:meth:`WriteSession.duplicate`): the sink's commit protocol relies on it. Every source
makes its sessions with ``source.write_session()`` (:func:`write_session`); this module holds
the DB-API one every SQLAlchemy engine can use, and the conversion of Arrow values to the
Python values a driver binds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects import Dialect, EngineError

__all__ = [
    "DbapiSession",
    "WriteSession",
    "python_rows",
    "retry_busy",
    "utc_naive",
    "write_session",
]

BUSY_SECONDS = 60.0
"""How long a session retries a statement the engine answers busy (SQLite's lock)."""


class WriteSession:
    """One connection of the output database, writing in transactions the caller ends."""

    dialect: Dialect

    def begin(self) -> None:
        """Start a transaction (SQLite: ``BEGIN IMMEDIATE``, the write lock taken now)."""
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run one statement in the transaction (``params`` in the driver's paramstyle)."""
        raise NotImplementedError

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of a query run in the transaction."""
        raise NotImplementedError

    def insert(self, table: str, columns: Sequence[str], batch: pa.RecordBatch) -> None:
        """Insert ``batch``'s rows into ``table`` (rendered SQL) under ``columns`` (quoted)."""
        raise NotImplementedError

    def commit(self) -> None:
        """Commit the transaction."""
        raise NotImplementedError

    def rollback(self) -> None:
        """Roll the transaction back (never raises: a lost connection rolls back anyway)."""
        raise NotImplementedError

    def close(self) -> None:
        """Give the connection back."""
        raise NotImplementedError

    def duplicate(self, err: BaseException) -> bool:
        """Whether ``err`` is a unique or primary-key violation."""
        return type(err).__name__ in ("IntegrityError", "UniqueViolation", "ConstraintException")

    def busy(self, err: BaseException) -> bool:
        """Whether ``err`` says to try the transaction again (a lock, a deadlock)."""
        text = str(err).lower()
        return "database is locked" in text or "deadlock" in text or "lock wait timeout" in text

    def __enter__(self) -> WriteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_session(source: Any) -> WriteSession:
    """A new write session on ``source`` (a sqlfeed source): its engine's fastest kind.

    Raises:
        InvalidArgumentError: the source cannot be written to (see its ``write_session``).
    """
    make: Callable[[], WriteSession] = source.write_session
    return make()


class DbapiSession(WriteSession):
    """A DB-API connection of a SQLAlchemy engine; rows inserted with ``executemany``.

    Args:
        connection: the raw DB-API connection (a pooled one; closed = given back).
        dialect: the output's dialect.
        paramstyle: the driver's (``qmark``, ``format``, ``pyformat``, ``numeric``).
    """

    def __init__(self, connection: Any, dialect: Dialect, paramstyle: str) -> None:
        self.connection = connection
        self.dialect = dialect
        self.marker = "?" if paramstyle == "qmark" else "%s"
        self.cursor = connection.cursor()
        self.broken = False
        """The connection's state is not known good (a setting could not be put back):
        :meth:`close` lets it go instead of giving it back to the pool."""

    def begin(self) -> None:
        """DB-API connections are always in a transaction (it began with the last commit)."""

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        self.cursor.execute(sql, tuple(params) if params is not None else ())

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        self.cursor.execute(sql)
        return [tuple(row) for row in self.cursor.fetchall()]

    def insert(self, table: str, columns: Sequence[str], batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        marks = ", ".join([self.marker] * len(columns))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        self.cursor.executemany(sql, python_rows(batch, self.dialect))

    def commit(self) -> None:
        self.connection.commit()

    def rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.rollback()

    def close(self) -> None:
        """Give the connection back to its pool, or let it go where it is lost.

        The transaction is rolled back here first: where that fails (the server ended the
        connection) or the session was :attr:`broken`, the connection is invalidated, not
        given back (the pool's own rollback would fail again and log a traceback,
        "Exception during reset").
        """
        with contextlib.suppress(Exception):
            self.cursor.close()
        healthy = not self.broken
        if healthy:
            try:
                self.connection.rollback()
            except Exception:
                healthy = False
        if healthy:
            self.connection.close()
            return
        let_go = getattr(self.connection, "invalidate", None) or self.connection.close
        with contextlib.suppress(Exception):
            let_go()


def python_rows(batch: pa.RecordBatch, dialect: Dialect) -> list[tuple[Any, ...]]:
    """The rows of ``batch`` as tuples of the Python values a DB-API driver binds.

    Timestamps with a zone become naive UTC where the engine keeps them so
    (``SINK_TZ_AS_UTC``); decimals, dates, times and timestamps become their exact text
    where the engine keeps them as text (``SINK_AS_TEXT``).
    """
    columns = [_column_values(batch.column(i), dialect) for i in range(batch.num_columns)]
    return list(zip(*columns, strict=True)) if columns else [()] * batch.num_rows


def _column_values(column: pa.Array, dialect: Dialect) -> list[Any]:
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None and _flag(dialect, "SINK_TZ_AS_UTC"):
        column = utc_naive(column)
    values: list[Any] = column.to_pylist()
    if not _flag(dialect, "SINK_AS_TEXT"):
        return values
    if pa.types.is_decimal(kind):
        return [None if v is None else _decimal_text(v) for v in values]
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_time(kind):
        return [None if v is None else _time_text(v) for v in values]
    return values


def _flag(dialect: Dialect, name: str) -> bool:
    return bool(getattr(dialect, name, False))


def utc_naive(column: pa.Array) -> pa.Array:
    """A zoned timestamp column as naive UTC timestamps (the same instants)."""
    kind = column.type
    return pc.cast(column, pa.timestamp(kind.unit, tz="UTC")).cast(pa.timestamp(kind.unit))


def _decimal_text(value: decimal.Decimal) -> str:
    return format(value, "f")


def _time_text(value: dt.date | dt.time) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return value.isoformat()


def retry_busy(
    session: WriteSession, action: Callable[[], Any], seconds: float = BUSY_SECONDS
) -> Any:
    """``action()`` (a whole transaction), tried again while the engine says busy.

    Raises:
        EngineError: still busy after ``seconds``.
    """
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        try:
            return action()
        except Exception as err:
            session.rollback()
            if not session.busy(err) or time.monotonic() > deadline:
                raise
            if time.monotonic() + pause > deadline:
                raise EngineError(
                    f"the output database stayed busy for {seconds:.0f} s: {err}"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
