"""The connectorx reader every engine's table shares: streamed or whole reads, its failures.

connectorx reports a failure as a Rust panic (``PanicException``, not an ``Exception``) or
a ``RuntimeError``: :meth:`ConnectorxReader.failure` tells them apart, so that the one
fallback chain (:func:`sqlfeed.io.readers.read_in_order`) never lets one reach the caller:
before the first batch the next reader reads (which returns the rows or the database's
own error); after it, the failure is the engine's one-line :class:`~sqlfeed.dialects.EngineError`.
(The panic's own lines still reach standard error: Rust prints them before Python sees
the exception.) A result estimated small is read whole (:func:`connectorx_batches`).
Each engine's subclass says which URL connectorx opens, what runs first on its session,
and which column types it carries exactly (:mod:`sqlfeed.io.postgres.readers`,
:mod:`sqlfeed.io.mysql`, :mod:`sqlfeed.io.sqlite`). connectorx is optional and imported
when used.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import SqlfeedError
from sqlfeed.dialects.optional import require
from sqlfeed.io.readers import Reader, ReadRequest

__all__ = [
    "WHOLE_READ_ROWS",
    "ConnectorxReader",
    "connectorx_batches",
    "connectorx_module",
    "is_connectorx_failure",
]


WHOLE_READ_ROWS = 262_144
"""connectorx reads a result estimated at most this many rows at once (see
:func:`connectorx_batches`): about four default read batches, what a partition of an auto
plan (100,000 rows) holds."""

_USED_IN: list[int] = []
"""The process that took connectorx first (a list so that it is set once, without a global)."""


def connectorx_module() -> ModuleType | None:
    """The ``connectorx`` module, or None when it is not installed or may not be used here.

    connectorx's Rust runtime (its thread pool and locks) does not survive ``fork``: a child
    forked after its parent read with connectorx (DataLoader and multiprocessing workers)
    deadlocks or crashes in it. Only the process that used it first takes it; a forked
    child reads with the next reader instead.
    """
    if _USED_IN and _USED_IN[0] != os.getpid():
        return None
    if importlib.util.find_spec("connectorx") is None:
        return None
    connectorx = require("connectorx", "the connectorx reader")
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
    connectorx: Any = connectorx_module()
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


class ConnectorxReader(Reader):
    """connectorx's Arrow reads (:func:`connectorx_batches`), the partition estimate used.

    A subclass gives :meth:`url`, :meth:`settings` and :meth:`carries_types`. connectorx
    types a column by its declared type or its first value (MySQL/MariaDB, SQLite), so its
    first batch is checked against the plan's schema (:attr:`typed_by_values`).
    """

    name = "connectorx"
    typed_by_values = True

    def url(self) -> str | None:
        """The URL connectorx opens, or None when it cannot open this source."""
        raise NotImplementedError

    def settings(self, request: ReadRequest) -> Sequence[str]:
        """Statements connectorx runs first, on the read's own session."""
        return ()

    def carries_types(self, request: ReadRequest) -> bool:
        """Whether connectorx returns every column of ``request`` exactly."""
        return True

    def carries(self, request: ReadRequest) -> bool:
        return (
            self.url() is not None
            and connectorx_module() is not None
            and self.carries_types(request)
        )

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        url = self.url()
        assert url is not None  # carries() said so
        yield from connectorx_batches(
            url,
            request.sql,
            request.batch_rows,
            request.stop,
            self.settings(request),
            rows=request.rows,
        )

    def failure(self, err: BaseException) -> bool:
        return is_connectorx_failure(err)

    def hides(self, err: BaseException) -> bool:
        return is_connectorx_failure(err)
