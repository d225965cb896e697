"""The :class:`Source` interface every engine family implements, and its error handling.

A :class:`Source` knows its dialect, runs small queries (a count, the output columns),
derives a query's Arrow schema once, and streams a query's rows as record batches
(see :mod:`sqlfeed.io.arrow`) through its engine's readers (:mod:`sqlfeed.io.readers`:
a :class:`~sqlfeed.io.readers.ReadRequest`, the engine's reader table, one fallback
chain). Driver errors never escape as they are: they become a one-line
:class:`~sqlfeed.dialects.EngineError` (:func:`driver_message`). This module also owns
:class:`SnapshotHolder`; :func:`redact_url` (a URL without its secrets,
:mod:`sqlfeed.urlsecrets`) is re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from sqlfeed.dialects import Dialect, EngineError, InvalidArgumentError, UnsupportedError
from sqlfeed.io.arrow import (
    DEFAULT_BATCH_ROWS,
    conform,
    empty_batch,
    infer_schema,
    merge_schemas,
    rows_table,
    unique_names,
    without_hints,
)
from sqlfeed.io.faults import (
    SECONDS_VARIABLE,
    TRIES_VARIABLE,
    Losses,
    Reconnect,
    connection_lost,
)
from sqlfeed.io.readers import (
    Reader,
    ReadRequest,
    chosen_readers,
    read_in_order,
    readers_after,
)
from sqlfeed.sql import ParsedQuery, count_sql, parse, sample_sql, schema_sql
from sqlfeed.urlsecrets import redact_url, scrub

__all__ = [
    "SCHEMA_SAMPLE_ROWS",
    "Reconnect",
    "SnapshotHolder",
    "Source",
    "connection_lost",
    "driver_message",
    "redact_url",
]

_log = logging.getLogger("sqlfeed.io")
_T = TypeVar("_T")

SCHEMA_SAMPLE_ROWS = 1_000
"""Rows read to infer the Arrow types a driver does not report."""


class Source:
    """A database to run queries on. Made by :func:`connect`; safe to share across threads."""

    dialect: Dialect
    label: str
    parallel_read: bool = False
    """Whether one read of a query already keeps every core busy (DuckDB runs a query on
    all its threads). A static Feeder then merges adjacent partitions into queries of any
    size; otherwise into queries no larger than its read-ahead holds, so its readers read
    at once (a server engine runs each query on one core)."""

    shares_snapshots: bool = False
    """Whether a read can run inside a snapshot another session exported
    (:meth:`export_snapshot`)."""

    repeats_unordered: bool = True
    """Whether the engine returns an unordered read's rows in the same order on every read,
    so that a read that lost its connection resumes after the rows it delivered (not
    PostgreSQL: parallel and synchronized scans start anywhere; ``ordered`` reads do)."""

    readers: tuple[str, ...] = ()
    """The readers a read may take, in order (names of :meth:`reader_table`; set by
    ``connect(url, readers=[...])`` or the engine's environment variable). The table's
    last reader, which carries every type, is taken when none of them can."""

    reconnect: Reconnect | None = None
    """How a read that lost its connection reconnects and resumes (None: the defaults,
    with the ``SQLFEED_RECONNECT_TRIES`` and ``SQLFEED_RECONNECT_SECONDS`` environment
    variables; see :class:`~sqlfeed.io.faults.Reconnect`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections this source opened."""

    def parse(self, sql: str | ParsedQuery, *, allow_side_effects: bool = False) -> ParsedQuery:
        """Parse and validate ``sql`` in this source's dialect (see :func:`sqlfeed.parse`)."""
        return parse(sql, self.dialect, allow_side_effects=allow_side_effects)

    # -- small queries --------------------------------------------------------------------

    def rows(self, sql: str, *, what: str = "query") -> list[tuple[Any, ...]]:
        """All rows of a small query (counts, bounds, catalog look-ups)."""
        return self._retried(what, lambda: self._rows(sql))

    def scalar(self, sql: str, *, what: str = "query") -> Any:
        """The first column of the first row of a small query."""
        result = self.rows(sql, what=what)
        return result[0][0] if result else None

    def execute(self, sql: str, *, what: str = "statement") -> None:
        """Run a statement that returns no rows (sqlfeed's own scratch tables only)."""
        with self._errors(what):
            self._execute(sql)

    def output_columns(self, query: str | ParsedQuery) -> list[str]:
        """The query's output column names as the engine reports them (a LIMIT 0 query)."""
        sql = schema_sql(self.parse(query))
        return self._retried("schema query", lambda: self._describe(sql)[0])

    def text_columns(self, query: str | ParsedQuery) -> list[str]:
        """Output columns whose type the engine cannot hash, to hash through their text.

        Only PostgreSQL has such types (json, xml, point, money, ...), and its source says
        which; elsewhere none.
        """
        return []

    def count(self, query: str | ParsedQuery, *, columns: list[str] | None = None) -> int:
        """The number of rows the query returns."""
        parsed = self.parse(query)
        return int(self.scalar(count_sql(parsed, columns=columns), what="count query") or 0)

    # -- Arrow ----------------------------------------------------------------------------

    def schema(self, query: str | ParsedQuery) -> pa.Schema:
        """The Arrow schema of the query's rows, derived once for all its partitions.

        From the driver's column types where it reports them; the rest from a sample of
        rows (a column with no value in the sample is read as text). Repeated column names
        (``SELECT *`` over a join) are made unique (:func:`~sqlfeed.io.arrow.unique_names`).
        """
        parsed = self.parse(query)
        names, typed = self._retried("schema query", lambda: self._describe(schema_sql(parsed)))
        if typed is not None and not any(pa.types.is_null(f.type) for f in typed):
            return unique_names(typed)
        sql = sample_sql(parsed, SCHEMA_SAMPLE_ROWS, columns=names)
        sample = self._retried("schema query", lambda: self._rows(sql))
        inferred = infer_schema(names, sample)
        schema = merge_schemas(typed, inferred) if typed is not None else inferred
        return unique_names(
            pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in schema])
        )

    def read(
        self,
        sql: str,
        *,
        schema: pa.Schema | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        stop: threading.Event | None = None,
        ordered: bool = False,
        snapshot: str | None = None,
        rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the rows of ``sql`` (already validated) as record batches of ``schema``.

        Memory stays within a few batches, whatever the result's size. With ``ordered``,
        the engine is asked to return the rows in the same order on every read (for
        resuming a partition after its acknowledged batches). A connection lost mid-read
        (:func:`~sqlfeed.io.faults.connection_lost`) is reconnected with jittered pauses
        and the read resumed after the rows it delivered (:attr:`reconnect`); an unordered
        PostgreSQL read that delivered rows cannot resume, and fails. With ``snapshot`` (a
        PostgreSQL snapshot id, see :meth:`export_snapshot`), the rows are read inside it.
        ``rows``: the planner's estimate of the rows (:attr:`Partition.estimated_rows`), a
        hint: a reader may read a result estimated small at once instead of streaming it
        (connectorx, see :func:`sqlfeed.io.cxread.connectorx_batches`).
        The batches have ``schema``'s fields without its reader hints (see
        :data:`~sqlfeed.io.arrow.READER_HINT`), whichever reader returned them.
        """
        if schema is None:
            # ``sql`` was validated where it was made (a partition's, a sample's): deriving
            # its schema keeps what that allowed (functions with side effects, if so).
            schema = self.schema(self.parse(sql, allow_side_effects=True))
        out = without_hints(schema)
        if snapshot is not None and not self.shares_snapshots:
            raise UnsupportedError(f"{self.dialect.name} cannot share a snapshot across sessions")
        request = ReadRequest(sql, schema, batch_rows, stop, ordered, snapshot, rows)
        losses = Losses(self.reconnect or Reconnect.from_environment())
        resume = _Resume(ordered or self.repeats_unordered)
        owner = os.getpid()
        with self._errors("partition query"):
            while True:
                reads = self.batches(request)
                try:
                    for batch in resume.rest(reads, out):
                        losses.progressed()
                        yield batch
                    break
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
                    raise EngineError(
                        f"{self.dialect.name} returned a value that does not fit its column's "
                        f"Arrow type ({driver_message(err)}): cast the column in the query"
                    ) from None
                except Exception as err:
                    if not connection_lost(err):
                        raise
                    if stop is not None and stop.is_set():
                        return  # the caller stopped the read: no rows are missing
                    if not self._reconnect(err, losses, resume, stop):
                        return
                finally:  # its cursor and connection let go now, not when collected
                    close = getattr(reads, "close", None)
                    # Not in a forked child collecting its parent's read: its connection's
                    # threads and locks are the parent's (closing it there hangs).
                    if close is not None and os.getpid() == owner:
                        close()
            if not resume.delivered:
                yield empty_batch(out)

    def _reconnect(
        self, err: Exception, losses: Losses, resume: _Resume, stop: threading.Event | None
    ) -> bool:
        """After a lost connection: wait the pause before reconnecting.

        False: a stop came meanwhile. Or raise the one-line error that gives up.
        """
        engine, why = self.dialect.name, driver_message(err)
        if resume.delivered and not resume.resumable:
            raise EngineError(
                f"{engine} lost the connection after {resume.delivered} rows of an unordered "
                f"read, which cannot resume exactly: {why}"
            ) from None
        pause = losses.next_pause()
        if pause is None:
            raise EngineError(
                f"{engine} lost the connection reading a partition and could not resume it "
                f"({losses.spent()}): {why}; allow more with {TRIES_VARIABLE} or "
                f"{SECONDS_VARIABLE}"
            ) from None
        _log.warning(
            "%s lost the connection after %d rows of a partition (%s): reconnecting in "
            "%.1fs (try %d of %d)",
            engine,
            resume.delivered,
            why,
            pause,
            losses.count,
            losses.policy.tries,
        )
        if stop is not None:
            return not stop.wait(pause)
        time.sleep(pause)
        return True

    def arrow(self, sql: str, *, what: str = "query", settings: tuple[str, ...] = ()) -> pa.Table:
        """A small result (aggregates, catalog look-ups) as a table, types from its values.

        ``settings``: statements (``SET LOCAL ...``) run before the query in its transaction.
        """
        if settings:
            names, rows = self._retried(what, lambda: self._rows_with_names(sql, settings))
            return rows_table(names, rows)
        return self._retried(what, lambda: self._arrow(sql))

    def _arrow(self, sql: str) -> pa.Table:
        names, rows = self._rows_with_names(sql)
        return rows_table(names, rows)

    def _rows_with_names(
        self, sql: str, settings: tuple[str, ...] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        raise NotImplementedError

    def read_table(self, sql: str, *, schema: pa.Schema | None = None) -> pa.Table:
        """All rows of ``sql`` as one table (for small results)."""
        batches = list(self.read(sql, schema=schema))
        return pa.Table.from_batches(batches, schema=batches[0].schema)

    # -- backend hooks --------------------------------------------------------------------

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _execute(self, sql: str) -> None:
        raise NotImplementedError

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        """Run a LIMIT 0 query: its column names, and its Arrow schema if known."""
        raise NotImplementedError

    # -- readers --------------------------------------------------------------------------

    def reader_table(self) -> dict[str, Reader]:
        """This source's readers by name, in its engine's order of preference.

        The last one carries every type (see :mod:`sqlfeed.io.readers`).
        """
        raise NotImplementedError

    def use_readers(self, names: Sequence[str]) -> None:
        """Read with the readers ``names`` only, in that order (``connect(readers=...)``).

        Raises:
            InvalidArgumentError: a name is not one of this engine's readers.
        """
        self.readers = chosen_readers(self.dialect.name, names, tuple(self.reader_table()))

    def candidates(self, request: ReadRequest, *, after: str = "") -> Iterator[Reader]:
        """The readers a read of ``request`` tries, in order.

        Those of :attr:`readers` (after ``after``) that carry it, then the table's last
        reader (lazily: a type check may cost a query, run only when the readers before
        could not serve).
        """
        table = self.reader_table()
        last = next(reversed(table))
        for name in dict.fromkeys((*readers_after(self.readers, after), last)):
            reader = table.get(name)  # a name set by hand that is not in the table: skipped
            if reader is not None and (name == last or reader.carries(request)):
                yield reader

    def reader_for(
        self,
        sql: str,
        schema: pa.Schema | None = None,
        *,
        after: str = "",
        snapshot: str | None = None,
    ) -> str:
        """The reader a read of ``sql`` takes first.

        The first of :attr:`readers` (after ``after``) that carries every column of it, else
        the table's last.

        Args:
            sql: the query.
            schema: the plan's schema (derived when not given; its reader hints spare a
                query).
            after: the reader that could not serve: the choice starts after it.
            snapshot: the snapshot the read runs inside (every reader can read inside one,
                so it does not change the choice).
        """
        if schema is None:
            schema = self.schema(self.parse(sql, allow_side_effects=True))  # as read() does
        request = ReadRequest(sql, schema, snapshot=snapshot)
        return next(self.candidates(request, after=after)).name

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        """The batches of one read, before they are cast to the plan's types.

        From the first reader of :meth:`candidates` that serves it
        (:func:`~sqlfeed.io.readers.read_in_order`).
        """
        return read_in_order(self.dialect.name, self.candidates(request), request)

    def reading_beside(self, output: Source) -> None:
        """This source is read while ``output`` is written in the same process.

        Readers that could not share the file with the writer are set aside (SQLite: see
        there).
        """

    def write_session(self) -> Any:
        """A :class:`sqlfeed.io.writes.WriteSession` on this database.

        Raises:
            InvalidArgumentError: the source cannot be written to.
        """
        raise InvalidArgumentError(
            f"{self.label} cannot be written to by sqlfeed: give a PostgreSQL, MySQL/MariaDB, "
            "SQLite or DuckDB URL as the output"
        )

    def write_grant(self, schema: str | None, *, read_only: bool = False) -> str:
        """What lets this database's user write in ``schema``: for a refused write's error.

        Args:
            schema: the schema (MySQL: database) written in; None: the session's own.
            read_only: the session or server may not write at all (not a missing grant).
        """
        where = f"in {schema}" if schema else "there"
        if read_only:
            return f"the database is read-only: write {where} with a user and server that may"
        return f"the user needs the privilege to create tables and write rows {where}"

    def export_snapshot(self) -> SnapshotHolder:
        """Export a snapshot other sessions can read inside (PostgreSQL only).

        The snapshot lives as long as the returned holder's transaction: keep it open
        until every reader is done, then close it.
        """
        raise UnsupportedError(f"{self.dialect.name} cannot share a snapshot across sessions")

    def _retried(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, a read-only query, its driver errors worded (:meth:`_errors`).

        After a lost connection it runs again, as a partition read does (:attr:`reconnect`).
        """
        losses: Losses | None = None
        while True:
            try:
                with self._errors(what):
                    return call()
            except EngineError as err:
                if not connection_lost(err):
                    raise
                why = driver_message(err.__context__ or err)
                losses = losses or Losses(self.reconnect or Reconnect.from_environment())
                pause = losses.next_pause()
                if pause is None:
                    raise EngineError(
                        f"{self.dialect.name} lost the connection running the {what} "
                        f"({losses.spent()}): {why}; allow more with {TRIES_VARIABLE} or "
                        f"{SECONDS_VARIABLE}"
                    ) from None
                _log.warning(
                    "%s lost the connection running the %s (%s): reconnecting in %.1fs "
                    "(try %d of %d)",
                    self.dialect.name,
                    what,
                    why,
                    pause,
                    losses.count,
                    losses.policy.tries,
                )
                time.sleep(pause)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except EngineError:
            raise
        except Exception as err:
            if not _is_driver_error(err):
                raise
            raise EngineError(
                f"{self.dialect.name} failed running the {what}: {driver_message(err)}"
            ) from None


class _Resume:
    """What one read delivered, so that a re-read after a lost connection resumes after it.

    The re-read's first :attr:`delivered` rows are dropped; the last of them must equal
    the last row delivered (compared by value), else the engine returned the rows in
    another order and the read fails instead of repeating or losing rows.
    """

    def __init__(self, resumable: bool) -> None:
        self.resumable = resumable
        """Whether the engine returns the rows in the same order on every read."""
        self.delivered = 0
        self._last = ""

    def rest(self, reads: Iterator[pa.RecordBatch], out: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The batches of ``reads`` (conformed to ``out``) after the rows delivered before."""
        skip = self.delivered
        for batch in reads:
            if not batch.num_rows:
                continue
            if skip:
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    if not skip:
                        self._check(conform(batch.slice(batch.num_rows - 1), out))
                    continue
                self._check(conform(batch.slice(skip - 1, 1), out))
                batch, skip = batch.slice(skip), 0
            batch = conform(batch, out)
            self.delivered += batch.num_rows
            self._last = repr(batch.slice(batch.num_rows - 1).to_pylist())
            yield batch
        if skip:
            raise EngineError(
                f"a partition returned {self.delivered - skip} rows after reconnecting, "
                f"fewer than the {self.delivered} it delivered before: the data changed "
                "meanwhile (read inside a snapshot, or from a table that does not change)"
            )

    def _check(self, row: pa.RecordBatch) -> None:
        if repr(row.to_pylist()) != self._last:
            raise EngineError(
                f"after reconnecting, a partition's rows came back in another order (or "
                f"changed): it cannot resume after the {self.delivered} rows it delivered"
            )


class SnapshotHolder:
    """Keeps an exported PostgreSQL snapshot alive: its transaction stays open until close."""

    def __init__(self, snapshot: str, connection: Any) -> None:
        self.snapshot = snapshot
        self._connection = connection

    def __enter__(self) -> SnapshotHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the transaction: readers can no longer start inside the snapshot.

        A connection lost meanwhile (a server restart) is discarded quietly: closing never
        replaces the error of the read that found the snapshot gone.
        """
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.rollback()
        except Exception as err:
            if not connection_lost(err):
                raise
            with contextlib.suppress(Exception):  # a pooled connection: not put back
                connection.invalidate()
            _log.debug("the snapshot's connection was lost before it closed: %s", err)
            return
        connection.close()


DRIVER_MODULES = frozenset(
    {
        "sqlalchemy",
        "duckdb",
        "_duckdb",
        "psycopg",
        "psycopg2",
        "pymysql",
        "MySQLdb",
        "sqlite3",
        "adbc_driver_manager",
        "adbc_driver_postgresql",
        "connectorx",
    }
)
"""The top-level modules whose exceptions are driver errors (worded, never raised as is)."""


def _is_driver_error(err: Exception) -> bool:
    module = type(err).__module__ or ""
    return module.split(".")[0] in DRIVER_MODULES


def driver_message(err: BaseException) -> str:
    """The driver's own message, on one line, without SQLAlchemy's boilerplate.

    Args:
        err: a driver error, or a SQLAlchemy error wrapping one (its ``orig``).

    Returns:
        The first non-blank line of the message (pymysql: its text, not its code), or the
        error's class name when the message is empty.
    """
    inner = getattr(err, "orig", None) or err
    args: tuple[Any, ...] = tuple(getattr(inner, "args", ()))
    module = type(inner).__module__.split(".")[0]
    if module == "pymysql" and len(args) >= 2:
        text = str(args[1])
    elif module.startswith("adbc_driver"):  # "INVALID_DATA: [libpq] ...: ERROR:  message"
        text = str(inner).split("ERROR:", 1)[-1]
    else:
        text = str(inner)
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", text)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return scrub(lines[0]) if lines else type(inner).__name__
