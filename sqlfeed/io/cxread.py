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
the exception.) connectorx is optional and imported when used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from dialects import EngineError, InvalidArgumentError, SqlfeedError
from sqlfeed.io.sqlalchemy import SQLAlchemySource

__all__ = [
    "ConnectorxFirst",
    "compatible",
    "connectorx_batches",
    "connectorx_module",
    "is_connectorx_failure",
    "read_with_fallback",
    "readers_from_environment",
]


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


def connectorx_batches(
    url: str,
    sql: str,
    batch_rows: int,
    stop: threading.Event | None,
    settings: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """Stream ``sql`` through connectorx's Arrow stream (``settings`` run first, same session)."""
    connectorx = connectorx_module()
    options: dict[str, Any] = {"return_type": "arrow_stream", "batch_size": batch_rows}
    if settings:
        options["pre_execution_query"] = list(settings)
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
) -> Iterator[pa.RecordBatch]:
    """``batches`` (a connectorx read) with ``fallback()`` in its place when it cannot serve.

    Args:
        engine: the dialect's name, for messages.
        batches: the connectorx read.
        schema: the plan's schema; a first batch not :func:`compatible` with it is dropped
            and the fallback reads instead.
        fallback: the next reader's read of the same query.

    Raises:
        EngineError: connectorx failed after it had delivered batches (the next reader
            reads the query to the end first: its own error, if it has one, is raised).
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
        if not is_connectorx_failure(err):
            raise
        if yielded:  # the next reader raises the error connectorx hid, in its own words
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

    def reader_for(self, sql: str) -> str:
        """The reader a read of ``sql`` takes (``connectorx`` or the driver's name)."""
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
    ) -> Iterator[pa.RecordBatch]:
        def driver_read() -> Iterator[pa.RecordBatch]:
            return SQLAlchemySource._read(self, sql, schema, batch_rows, stop, ordered, snapshot)

        url = self._connectorx_url()
        if url is None or self.reader_for(sql) != "connectorx":
            yield from driver_read()
            return
        batches = connectorx_batches(url, sql, batch_rows, stop, self.connectorx_session)
        yield from read_with_fallback(self.engine_label, batches, schema, driver_read)
