"""connectorx reads shared by MySQL/MariaDB and SQLite: streaming, the fallback, readers.

connectorx reports a failure as a Rust panic (``PanicException``, not an ``Exception``) or
a ``RuntimeError``. :func:`read_with_fallback` never lets one reach the caller: before the
first batch the read runs again on the next reader (which returns the rows or the
database's own error); after it, the failure is a one-line :class:`~dialects.EngineError`.
The first batch is also checked against the plan's schema (:func:`compatible`): connectorx
types a column by its declared type or first value, and where that is not the family of
the plan's type (an integer for a float column, a boolean for an integer one, a number
for a text one) the next reader reads it instead, so the plan's schema decides the values.
(The panic's own lines still reach standard error: Rust prints them before Python sees
the exception.) SQLite's ADBC reader takes the same fallback, with its own failures
(``failure``). connectorx is optional and imported when used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from dialects import EngineError, InvalidArgumentError, SqlfeedError
from sqlfeed.io.source import connection_lost
from sqlfeed.io.sqlalchemy import SQLAlchemySource

__all__ = [
    "WHOLE_READ_ROWS",
    "ConnectorxFirst",
    "compatible",
    "connectorx_batches",
    "connectorx_module",
    "is_connectorx_failure",
    "read_with_fallback",
    "readers_after",
    "readers_from_environment",
]


WHOLE_READ_ROWS = 262_144
"""connectorx reads a result estimated at most this many rows at once (see
:func:`connectorx_batches`): about four default read batches, what a partition of an auto
plan (100,000 rows) holds."""

_USED_IN: list[int] = []
"""The process that took connectorx first (a list so that it is set once, without a global)."""


def connectorx_module() -> Any:
    """The ``connectorx`` module, or None when it is not installed or may not be used here.

    connectorx's Rust runtime (its thread pool and locks) does not survive ``fork``: a child
    forked after its parent read with connectorx (DataLoader and multiprocessing workers)
    deadlocks or crashes in it. Only the process that used it first takes it; a forked
    child reads with the next reader instead.
    """
    if _USED_IN and _USED_IN[0] != os.getpid():
        return None
    try:
        import connectorx
    except ImportError:
        return None
    if not _USED_IN:
        _USED_IN.append(os.getpid())
    return connectorx


def is_connectorx_failure(err: BaseException) -> bool:
    """A connectorx failure: its Rust panic, or an error it raised (never ours, nor an exit)."""
    if type(err).__name__ == "PanicException":
        return True
    return isinstance(err, RuntimeError | OSError | pa.ArrowException) and not isinstance(
        err, SqlfeedError
    )


def readers_from_environment(variable: str, readers: Sequence[str]) -> tuple[str, ...]:
    """The readers named by the environment variable ``variable`` (default ``readers``).

    Raises:
        InvalidArgumentError: the variable names a reader not in ``readers``.
    """
    value = os.environ.get(variable, "").strip()
    if not value:
        return tuple(readers)
    names = tuple(name.strip().lower() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in readers]
    if unknown or not names:
        raise InvalidArgumentError(
            f"{variable}={value!r}: unknown reader {(unknown or [value])[0]!r}; use a "
            f"comma-separated list of {', '.join(readers)}"
        )
    return names


def readers_after(readers: Sequence[str], after: str) -> tuple[str, ...]:
    """The readers of ``readers`` after ``after`` (all of them when ``after`` is empty)."""
    names = tuple(readers)
    return names[names.index(after) + 1 :] if after in names else names


def connectorx_batches(
    url: str,
    sql: str,
    batch_rows: int,
    stop: threading.Event | None,
    settings: Sequence[str] = (),
    *,
    rows: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """``sql`` read by connectorx (``settings`` run first, same session).

    A result estimated at most :data:`WHOLE_READ_ROWS` rows (``rows``, the plan's
    estimate) is read at once as one Arrow table and cut into batches; anything else (or
    of unknown size) streams through connectorx's Arrow stream, in batches of
    ``batch_rows``. connectorx's stream keeps Python's GIL while it reads, so other reader
    threads and the consumer wait on it; its whole read lets them run.
    """
    connectorx = connectorx_module()
    whole = rows is not None and rows <= WHOLE_READ_ROWS
    options: dict[str, Any] = (
        {"return_type": "arrow"}
        if whole
        else {"return_type": "arrow_stream", "batch_size": batch_rows}
    )
    if settings:
        options["pre_execution_query"] = list(settings)
    if whole:
        table = connectorx.read_sql(url, sql, **options)
        yield from table.to_batches(max_chunksize=batch_rows)
        return
    with connectorx.read_sql(url, sql, **options) as reader:
        for batch in reader:
            if stop is not None and stop.is_set():
                return
            yield batch


def read_with_fallback(
    engine: str,
    batches: Iterator[pa.RecordBatch],
    schema: pa.Schema,
    fallback: Callable[[], Iterator[pa.RecordBatch]],
    *,
    failure: Callable[[BaseException], bool] = is_connectorx_failure,
) -> Iterator[pa.RecordBatch]:
    """``batches`` (a fast reader's read) with ``fallback()`` in its place when it cannot serve.

    Args:
        engine: the dialect's name, for messages.
        batches: the fast read (connectorx; SQLite's ADBC).
        schema: the plan's schema; a first batch not :func:`compatible` with it is dropped
            and the fallback reads instead.
        fallback: the next reader's read of the same query.
        failure: whether an error raised by ``batches`` is the fast reader's failure (the
            fallback's to handle) rather than ours or the caller's (raised as it is).

    Raises:
        EngineError: the fast reader failed after it had delivered batches (the next
            reader reads the query to the end first: its own error, if it has one, is
            raised; not after a lost connection, which :meth:`sqlfeed.io.Source.read`
            reconnects and resumes).
    """
    yielded = False
    try:
        for batch in batches:
            if not yielded and not compatible(batch.schema, schema):
                break
            yielded = True
            yield batch
        else:
            return
    except BaseException as err:  # a Rust panic is a BaseException: caught by its name
        if not failure(err):
            raise
        if yielded:  # the next reader raises the error connectorx hid, in its own words
            if not connection_lost(err):  # a lost connection hides nothing: no re-read
                for _ in fallback():
                    pass
            raise EngineError(
                f"{engine} failed running the partition query: {_first_line(str(err))}"
            ) from None
    close = getattr(batches, "close", None)
    if close is not None:
        close()
    yield from fallback()


_FAMILIES: tuple[Callable[[pa.DataType], bool], ...] = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
    lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t),
    pa.types.is_boolean,
    pa.types.is_date,
    pa.types.is_timestamp,
    pa.types.is_time,
    pa.types.is_duration,
)


def compatible(got: pa.Schema, wanted: pa.Schema) -> bool:
    """Whether every column of ``got`` is of the same type family as in ``wanted``.

    Within a family, the batch is cast to the plan's type (a checked cast: an integer
    that does not fit, or a decimal that would lose digits, is an error, never a change).
    """
    if len(got) != len(wanted):
        return False
    for have, want in zip(got.types, wanted.types, strict=True):
        if have != want and not any(f(have) and f(want) for f in _FAMILIES):
            return False
    return True


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "connectorx failed"


class ConnectorxFirst(SQLAlchemySource):
    """A SQLAlchemy source that reads with connectorx where :meth:`reader_for` says so, and
    with its own DBAPI driver otherwise, or in connectorx's place when it cannot serve
    (:func:`read_with_fallback`): MySQL/MariaDB and SQLite.

    Attributes:
        connectorx_session: statements connectorx runs first, on the read's own session.
        engine_label: the engine's name in error messages.
    """

    connectorx_session: tuple[str, ...] = ()
    engine_label = "database"

    def reader_for(self, sql: str, schema: pa.Schema | None = None, *, after: str = "") -> str:
        """The reader a read of ``sql`` takes (``connectorx`` or the driver's name).

        Args:
            sql: the query.
            schema: the plan's schema, when known (its reader hints spare a query).
            after: the reader that could not serve: the choice starts after it.
        """
        raise NotImplementedError

    def _connectorx_url(self) -> str | None:
        """The URL connectorx opens, or None when it cannot open this source."""
        raise NotImplementedError

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
        reader = self.reader_for(sql, schema)
        yield from self._read_with(
            reader, sql, schema, batch_rows, stop, ordered, snapshot, rows=rows
        )

    def _read_with(
        self,
        reader: str,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
        rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The read of ``sql`` by ``reader``; where it cannot serve, by the next one."""
        url = self._connectorx_url()
        if reader != "connectorx" or url is None:
            yield from SQLAlchemySource._read(
                self, sql, schema, batch_rows, stop, ordered, snapshot
            )
            return

        def fallback() -> Iterator[pa.RecordBatch]:
            after = self.reader_for(sql, schema, after=reader)
            return self._read_with(
                after, sql, schema, batch_rows, stop, ordered, snapshot, rows=rows
            )

        batches = connectorx_batches(url, sql, batch_rows, stop, self.connectorx_session, rows=rows)
        yield from read_with_fallback(self.engine_label, batches, schema, fallback)
