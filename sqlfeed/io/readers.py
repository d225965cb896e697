"""The reader protocol: a :class:`ReadRequest`, :class:`Reader` objects, and one fallback chain.

A read of one partition query is a :class:`ReadRequest` (frozen: the SQL, the plan's Arrow
schema, rows per batch, the stop event, whether the rows must come in a repeatable order,
the snapshot token, the planner's row estimate). An engine reads it with one of its
readers: each engine lists its reader classes in ONE table, fastest first
(``READER_TABLE`` in :mod:`sqlfeed.io.postgres.readers`, :mod:`sqlfeed.io.mysql`,
:mod:`sqlfeed.io.sqlite`, :mod:`sqlfeed.io.duckdb`; a generic SQLAlchemy engine has its
DB-API cursor only), and a source reads with the readers its :attr:`Source.readers
<sqlfeed.io.Source.readers>` names, in that order (``connect(url, readers=[...])`` or the
engine's environment variable), each taken only where :meth:`Reader.carries` says it
returns every column of the request exactly. The table's last reader carries everything
and always ends the list.

:func:`read_in_order` is the one fallback chain every engine shares. Before a reader
delivered its first batch, a :meth:`~Reader.failure` of it (a connectorx panic, a value
Arrow cannot parse, ADBC's own errors), or a first batch whose column families differ
from the plan's (:func:`compatible`, for readers typed by their values), sends the read to
the next reader; a kept connection found stale (:class:`StaleConnection`) is tried once
more on a fresh one. After a batch was delivered, nothing is read again for rows: a
failure that hides the database's own message (:meth:`Reader.hides`) becomes the engine's
one-line :class:`~sqlfeed.dialects.EngineError` (the next reader runs the query to the end first,
its rows dropped, so that the database's own error, if it has one, is the one raised),
and every other error is raised as it is. A lost connection is not the chain's to handle:
:meth:`sqlfeed.io.Source.read` reconnects and resumes after the rows it delivered
(:mod:`sqlfeed.io.faults`).
"""

from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS
from sqlfeed.io.faults import connection_lost

__all__ = [
    "ReadRequest",
    "Reader",
    "StaleConnection",
    "chosen_readers",
    "compatible",
    "first_line",
    "read_in_order",
    "readers_after",
    "readers_from_environment",
]


@dataclass(frozen=True)
class ReadRequest:
    """One read of a partition query, as every reader receives it.

    Attributes:
        sql: the partition query (validated).
        schema: the plan's Arrow schema of its rows, reader hints included (see
            :data:`~sqlfeed.io.arrow.READER_HINT`).
        batch_rows: rows per batch (the last one may have fewer).
        stop: when set, the read stops between batches.
        ordered: the engine is asked to return the rows in the same order on every read.
        snapshot: a snapshot token the read runs inside (PostgreSQL's exported snapshot).
        rows: the planner's estimate of the rows, a hint: a reader may read a result
            estimated small at once instead of streaming it.
    """

    sql: str
    schema: pa.Schema
    batch_rows: int = DEFAULT_BATCH_ROWS
    stop: threading.Event | None = field(default=None, compare=False)
    ordered: bool = False
    snapshot: str | None = None
    rows: int | None = None

    @property
    def stopped(self) -> bool:
        """Whether the caller asked the read to stop."""
        return self.stop is not None and self.stop.is_set()


class StaleConnection(Exception):
    """A connection a reader kept from an earlier read proved broken before this read's first row.

    The server restarted, or the session was ended meanwhile: the chain tries the reader
    once more, on a fresh connection; a second one raises :attr:`error`.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Reader(ABC):
    """One way to read an engine's query as Arrow batches.

    Attributes:
        name: how :attr:`Source.readers <sqlfeed.io.Source.readers>`, ``connect(readers=)``
            and the engine's environment variable name it.
        typed_by_values: the reader types a column by the values it meets (connectorx,
            SQLite's ADBC), not by the plan: its first batch is checked against the plan's
            schema (:func:`compatible`) and the next reader reads where a family differs.
    """

    name: ClassVar[str]
    typed_by_values: ClassVar[bool] = False

    def __init__(self, source: Any) -> None:
        # a weak proxy: a source and its readers form no cycle, so a source dropped
        # without close() still lets its connections (and a DuckDB file) go at once
        self.source: Any = weakref.proxy(source)
        """The source this reader reads for (its URL, connections, catalog look-ups)."""

    @abstractmethod
    def carries(self, request: ReadRequest) -> bool:
        """Whether this reader is installed, can open the source, and carries ``request``.

        It carries it when it returns every column of ``request`` exactly (its type check).
        """

    @abstractmethod
    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        """The rows of ``request.sql``, as record batches (cast to the plan's types later)."""

    def failure(self, err: BaseException) -> bool:
        """Whether ``err`` is this reader failing where the next reader may read instead.

        Before its first batch, rather than the query's or the caller's error.
        """
        return False

    def hides(self, err: BaseException) -> bool:
        """Whether ``err``, after a batch was delivered, may hide the database's own error.

        Such as a panic's text: the chain then asks the next reader for it.
        """
        return False

    def database_message(self, err: BaseException) -> str | None:
        """The database's own message inside a failure's text, if it carries one."""
        return None


def read_in_order(
    engine: str, readers: Iterable[Reader], request: ReadRequest
) -> Iterator[pa.RecordBatch]:
    """The rows of ``request`` from the first of ``readers`` that can serve them.

    Args:
        engine: the dialect's name, for messages.
        readers: the readers to try, in order (lazily: a reader's type check may cost a
            query, run only when the readers before it could not serve).
        request: the read.

    Raises:
        EngineError: a reader failed after it delivered batches, in a way that may hide
            the database's message (see the module's description).
    """
    remaining = iter(readers)
    for reader in remaining:
        served = yield from _serve(engine, reader, request, remaining)
        if served:
            return
    raise EngineError(f"{engine}: no reader can read the partition query")


def _serve(
    engine: str, reader: Reader, request: ReadRequest, rest: Iterator[Reader]
) -> Generator[pa.RecordBatch, None, bool]:
    """``reader``'s batches; False when nothing was delivered and the next reader must read."""
    delivered = False
    for attempt in (1, 2):
        batches: Iterator[pa.RecordBatch] | None = None
        try:
            batches = reader.batches(request)
            for batch in batches:
                checked = not delivered and reader.typed_by_values
                if checked and not compatible(batch.schema, request.schema):
                    return False
                delivered = True
                yield batch
            return True
        except StaleConnection as stale:
            if attempt == 2 or delivered:  # a retry after a batch would deliver rows twice
                raise stale.error from None
        except BaseException as err:  # a Rust panic is a BaseException: told by its name
            if not delivered and reader.failure(err):
                return False
            if delivered and reader.hides(err):
                _raise_hidden(engine, reader, err, lambda: read_in_order(engine, rest, request))
            raise
        finally:  # its cursor and connection let go now, not when collected
            close = getattr(batches, "close", None)
            if close is not None:
                close()
    return False  # pragma: no cover (the loop returns or raises)


def _raise_hidden(
    engine: str,
    reader: Reader,
    err: BaseException,
    rest: Callable[[], Iterator[pa.RecordBatch]],
) -> None:
    """The engine's one-line error for a failure after delivery.

    Unless the failure names the database's message, or is a lost connection (which hides
    nothing), the next reader runs the query to the end, its rows dropped: its own error, if
    any, is raised.
    """
    message = reader.database_message(err)
    if message is None and not connection_lost(err):
        for _ in rest():
            pass
    why = message or first_line(str(err)) or "the reader failed"
    raise EngineError(f"{engine} failed running the partition query: {why}") from None


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


def chosen_readers(engine: str, names: Sequence[str], readers: Sequence[str]) -> tuple[str, ...]:
    """``names`` (``connect(url, readers=[...])``) checked against the engine's ``readers``.

    Raises:
        InvalidArgumentError: a name is not one of the engine's readers, or none is given.
    """
    if isinstance(names, str):
        names = [part for part in names.split(",") if part.strip()]
    chosen = tuple(str(name).strip().lower() for name in names)
    unknown = [name for name in chosen if name not in readers]
    if unknown or not chosen:
        what = f"unknown {engine} reader {unknown[0]!r}" if unknown else "no reader given"
        raise InvalidArgumentError(f"readers: {what}; {engine} reads with {', '.join(readers)}")
    return chosen


def readers_after(readers: Sequence[str], after: str) -> tuple[str, ...]:
    """The readers of ``readers`` after ``after`` (all of them when ``after`` is empty)."""
    names = tuple(readers)
    return names[names.index(after) + 1 :] if after in names else names


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped ("" when there is none)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
