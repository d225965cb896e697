"""One connection's consistent snapshot, for engines that cannot share one across connections.

MySQL/MariaDB and SQLite cannot hand a snapshot to another connection (PostgreSQL exports
one: :meth:`sqlfeed.io.Source.export_snapshot`). What they can do is read several queries
inside one transaction of ONE connection: MySQL/MariaDB's ``START TRANSACTION WITH
CONSISTENT SNAPSHOT`` (REPEATABLE READ: every query of the transaction sees the state of
its start; InnoDB tables), SQLite's read transaction (``BEGIN``: in WAL mode its first read
fixes the state it sees, while writers go on; in a rollback journal it holds the shared
lock, so writers wait until it ends). A :class:`PinnedSession` is such a transaction: a
read given its :attr:`~PinnedSession.snapshot` token (``Source.read(snapshot=...)``) runs on
its connection, one read at a time, in the order they come. The token names the session
in this process only. :class:`PinnedReads` gives a source :meth:`~PinnedReads.pin_session`
and the reads of a token; a connection lost in a session is an error (a snapshot cannot
move to another connection), never a read resumed in another state.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from dialects import EngineError
from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS, conform, empty_batch, iterate_rows, without_hints
from sqlfeed.io.sqlalchemy import dead, release, statement

__all__ = [
    "CLOSE_WAIT",
    "SESSION_PREFIX",
    "Batches",
    "PinnedReads",
    "PinnedSession",
    "SessionRegistry",
    "cursor_batches",
]

CLOSE_WAIT = 30.0
"""Seconds closing a session waits for a read on it to stop."""

SESSION_PREFIX = "sqlfeed-session-"
"""How a pinned session's token starts (PostgreSQL snapshot ids never do)."""

Batches = Callable[[Any, str, pa.Schema, int, "threading.Event | None"], Iterator[pa.RecordBatch]]
"""How a session reads a query on its connection: ``(connection, sql, schema, batch_rows,
stop)`` to record batches."""


class PinnedSession:
    """A transaction on one connection that every read given its token runs in.

    Attributes:
        snapshot: the token a read passes as ``snapshot=`` to read in this session.
        readers: how many reads it serves at once (1: reads run one after the other).
    """

    readers = 1

    def __init__(
        self,
        connection: Any,
        begin: Sequence[str],
        batches: Batches,
        on_close: Callable[[PinnedSession], None],
    ) -> None:
        self.snapshot = SESSION_PREFIX + uuid.uuid4().hex
        self._connection: Any = connection
        self._batches = batches
        self._lock = threading.Lock()
        self._on_close = on_close
        cursor = connection.cursor()
        try:
            for statement in begin:
                cursor.execute(statement)
                if cursor.description is not None:
                    cursor.fetchall()
        finally:
            cursor.close()

    def __enter__(self) -> PinnedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(
        self, sql: str, schema: pa.Schema, batch_rows: int, stop: threading.Event | None
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``sql`` read in this session's transaction (one read at a time)."""
        with self._lock:
            connection = self._connection
            if connection is None:
                raise EngineError("the read's consistent session was closed before the read")
            try:
                yield from self._batches(connection, sql, schema, batch_rows, stop)
            except EngineError:
                raise
            except Exception as err:
                if _alive(connection):
                    raise  # the query's own error: the source words it
                raise EngineError(
                    f"the connection of a consistent read was lost ({_first_line(err)}): its "
                    "snapshot cannot move to another connection, so the read cannot resume; "
                    "read the plan again"
                ) from None

    def close(self) -> None:
        """End the transaction (rolled back: it only read) and close the connection.

        Waits for a read still running to stop (at most :data:`CLOSE_WAIT` seconds).
        """
        locked = self._lock.acquire(timeout=CLOSE_WAIT)
        try:
            connection, self._connection = self._connection, None
        finally:
            if locked:
                self._lock.release()
        if connection is None:
            return
        self._on_close(self)
        try:
            if not dead(connection):  # a lost one cannot roll back: invalidated instead
                connection.rollback()
        finally:
            release(connection)


def cursor_batches(cursor_for: Callable[[Any, int], Any]) -> Batches:
    """A session's reads through a DB-API cursor and ``fetchmany``.

    The cursor is ``cursor_for(connection, batch_rows)``, the source's streaming one.
    """

    def batches(
        connection: Any, sql: str, schema: pa.Schema, batch_rows: int, stop: threading.Event | None
    ) -> Iterator[pa.RecordBatch]:
        # an unbuffered cursor reads what is left of its result; after an error, a
        # cleanup that fails on a lost connection never replaces it (item 10 of #24)
        with statement(connection, cursor_for(connection, batch_rows), commit=False) as cursor:
            cursor.execute(sql)
            yield from iterate_rows(cursor.fetchmany, schema, batch_rows, stop)

    return batches


class SessionRegistry:
    """The pinned sessions of one source, by token, open until closed."""

    def __init__(self) -> None:
        self._sessions: dict[str, PinnedSession] = {}
        self._lock = threading.Lock()

    def open(self, connection: Any, begin: Sequence[str], batches: Batches) -> PinnedSession:
        """A session on ``connection``, begun with ``begin``, reading by ``batches``.

        The connection is handed over: the session closes it. Registered until it closes.
        """
        try:
            session = PinnedSession(connection, begin, batches, self._forget)
        except BaseException:
            connection.close()
            raise
        with self._lock:
            self._sessions[session.snapshot] = session
        return session

    def get(self, token: str) -> PinnedSession:
        """The open session of ``token``.

        Raises:
            EngineError: no such session is open in this source (closed, or another
                process's or source's token).
        """
        with self._lock:
            session = self._sessions.get(token)
        if session is None:
            raise EngineError(
                f"the consistent session {token} is not open on this source: it was closed, "
                "or it belongs to another source or process (a session cannot be shared)"
            )
        return session

    def _forget(self, session: PinnedSession) -> None:
        with self._lock:
            self._sessions.pop(session.snapshot, None)


class PinnedReads:
    """What a source (a :class:`~sqlfeed.io.Source` subclass) gets from pinned sessions.

    :meth:`pin_session`, and :meth:`read` of a session's token on its connection.

    The source provides ``_session_for()`` (a new connection, its session set up; the
    statements that begin the transaction; how a query is read on it),
    ``_errors(what)`` and ``schema(sql)``.
    """

    def pin_session(self) -> PinnedSession:
        """A transaction on a connection of its own whose reads all see one state of the database.

        Its reads are ``read(snapshot=its token)``; close it when done.

        Raises:
            EngineError: the transaction cannot begin.
        """
        source: Any = self
        with source._errors("consistent snapshot"):
            connection, begin, batches = source._session_for()
            return self._sessions().open(connection, begin, batches)

    def _sessions(self) -> SessionRegistry:
        registry: SessionRegistry | None = self.__dict__.get("_pinned_sessions")
        if registry is None:
            registry = self.__dict__.setdefault("_pinned_sessions", SessionRegistry())
        return registry

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
        """Read as :meth:`sqlfeed.io.Source.read` does, or on a pinned session.

        With a pinned session's token as ``snapshot``, the rows are read on that session's
        connection, inside its transaction.
        """
        if snapshot is None or not snapshot.startswith(SESSION_PREFIX):
            reads: Iterator[pa.RecordBatch] = super().read(  # type: ignore[misc]
                sql,
                schema=schema,
                batch_rows=batch_rows,
                stop=stop,
                ordered=ordered,
                snapshot=snapshot,
                rows=rows,
            )
            return reads
        return self._pinned_read(sql, schema, batch_rows, stop, snapshot)

    def _pinned_read(
        self,
        sql: str,
        schema: pa.Schema | None,
        batch_rows: int,
        stop: threading.Event | None,
        token: str,
    ) -> Iterator[pa.RecordBatch]:
        source: Any = self
        session = self._sessions().get(token)
        if schema is None:
            schema = source.schema(sql)
        out = without_hints(schema)
        delivered = False
        with source._errors("partition query"):
            for batch in session.read(sql, schema, batch_rows, stop):
                if batch.num_rows:
                    delivered = True
                    yield conform(batch, out)
        if not delivered:
            yield empty_batch(out)


def _alive(connection: Any) -> bool:
    """Whether a session's connection still answers after a failed read."""
    try:
        cursor = connection.cursor()
        try:
            cursor.execute("SELECT 1")
            cursor.fetchall()
        finally:
            cursor.close()
    except Exception:
        return False
    return True


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
