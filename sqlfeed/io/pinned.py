"""Consistent sessions on several connections, for engines that cannot export a snapshot.

MySQL/MariaDB and SQLite cannot hand a snapshot to another connection (PostgreSQL exports
one: :meth:`sqlfeed.io.Source.export_snapshot`). What they can do is read several queries
inside one transaction of a connection: MySQL/MariaDB's ``START TRANSACTION WITH
CONSISTENT SNAPSHOT`` (REPEATABLE READ: every query of the transaction sees the state of
its start; InnoDB tables), SQLite's read transaction (``BEGIN``: in WAL mode its first read
fixes the state it sees, while writers go on; in a rollback journal it holds the shared
lock, so writers wait until it ends). And several connections begin such transactions at
ONE state when a short lock holds writers off while they begin, as mydumper does (the
source's ``_snapshot_sync``: MySQL ``LOCK TABLES ... READ`` on the tables read, else
``FLUSH TABLES WITH READ LOCK``; SQLite ``BEGIN IMMEDIATE``), released at once.

A :class:`PinnedSession` is such a set of transactions: a read given its
:attr:`~PinnedSession.snapshot` token (``Source.read(snapshot=...)``) runs on a free
connection of it (as many reads at once as it has connections). The token names the
session in this process only. :class:`PinnedReads` gives a source
:meth:`~PinnedReads.pin_session` and the reads of a token; a connection lost in a session
is an error (a snapshot cannot move to another connection), never a read resumed in
another state. Where the lock is refused (a privilege missing) one connection reads, and
a warning line says why.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import EngineError
from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS, conform, empty_batch, iterate_rows, without_hints
from sqlfeed.io.sqlalchemy import release, statement

__all__ = [
    "CLOSE_WAIT",
    "SESSION_PREFIX",
    "Batches",
    "PinnedReads",
    "PinnedSession",
    "SessionRegistry",
    "Sync",
    "SyncRefused",
    "cursor_batches",
]

LOG = logging.getLogger("sqlfeed.io")

CLOSE_WAIT = 30.0
"""Seconds closing a session waits for a read on it to stop."""

SESSION_PREFIX = "sqlfeed-session-"
"""How a pinned session's token starts (PostgreSQL snapshot ids never do)."""

Sync = Callable[[], "contextlib.AbstractContextManager[str]"]
"""A lock that holds writers off while a session's connections begin their transactions:
entered, it yields how it did so (words for ``plan.reason``); it raises :class:`SyncRefused`
when it cannot be taken, and the session reads on one connection."""


class SyncRefused(Exception):
    """A session's lock cannot be taken.

    Its message is the one line a user reads: why, and what would make the read parallel.
    """


Batches = Callable[[Any, str, pa.Schema, int, "threading.Event | None"], Iterator[pa.RecordBatch]]
"""How a session reads a query on its connection: ``(connection, sql, schema, batch_rows,
stop)`` to record batches."""


class PinnedSession:
    """Transactions at one state, one per connection, that every read of its token runs in.

    Attributes:
        snapshot: the token a read passes as ``snapshot=`` to read in this session.
        readers: how many reads it serves at once (one per connection; each read takes a
            free connection, so reads beyond that wait their turn).
        how: how its connections' transactions were made one state (``plan.reason`` words),
            or ``""`` for one connection.
    """

    def __init__(
        self,
        connections: Sequence[Any],
        begin: Sequence[str],
        batches: Batches,
        on_close: Callable[[PinnedSession], None],
        sync: Sync | None = None,
    ) -> None:
        self.snapshot = SESSION_PREFIX + uuid.uuid4().hex
        self.readers = len(connections)
        self.how = ""
        self._connections: list[Any] = list(connections)
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lost = 0
        self._batches = batches
        self._lock = threading.Lock()
        self._closed = False
        self._on_close = on_close
        if sync is None or len(connections) == 1:
            for connection in connections:
                _run(connection, begin)
        else:
            with sync() as how:
                for connection in connections:
                    _run(connection, begin)
                self.how = how
        for connection in connections:
            self._free.put(connection)

    def __enter__(self) -> PinnedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, stop: threading.Event | None) -> Any:
        """A free connection of the session (waits while every one is reading)."""
        while True:
            with self._lock:
                if self._closed:
                    raise EngineError("the read's consistent session was closed before the read")
                if self._lost >= self.readers:
                    raise EngineError(
                        "every connection of the read's consistent session was lost: its "
                        "snapshot cannot move to another connection; read the plan again"
                    )
            if stop is not None and stop.is_set():
                return None
            try:
                return self._free.get(timeout=0.2)
            except queue.Empty:
                continue

    def read(
        self, sql: str, schema: pa.Schema, batch_rows: int, stop: threading.Event | None
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``sql`` read in this session's transaction, on a free connection."""
        connection = self._take(stop)
        if connection is None:
            return
        alive = True
        try:
            yield from self._batches(connection, sql, schema, batch_rows, stop)
        except EngineError:
            raise
        except Exception as err:
            if _alive(connection):
                raise  # the query's own error: the source words it
            alive = False
            raise EngineError(
                f"the connection of a consistent read was lost ({_first_line(err)}): its "
                "snapshot cannot move to another connection, so the read cannot resume; "
                "read the plan again"
            ) from None
        finally:
            if alive:
                self._free.put(connection)
            else:
                with self._lock:
                    self._lost += 1

    def close(self) -> None:
        """End the transactions (rolled back: they only read) and close the connections.

        Waits for reads still running to stop (at most :data:`CLOSE_WAIT` seconds).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            lost = self._lost
        deadline = time.monotonic() + CLOSE_WAIT
        back: list[Any] = []
        while len(back) < self.readers - lost:
            try:
                back.append(self._free.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break  # a read still running: its connection is closed under it below
            with self._lock:
                lost = self._lost
        self._on_close(self)
        for connection in self._connections:
            release(connection)  # rolled back, or invalidated when lost


def _run(connection: Any, statements: Sequence[str]) -> None:
    """Run ``statements`` on ``connection`` (their rows, if any, read and dropped)."""
    cursor = connection.cursor()
    try:
        for statement in statements:
            cursor.execute(statement)
            if cursor.description is not None:
                cursor.fetchall()
    finally:
        cursor.close()


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

    def open(
        self,
        connections: Sequence[Any],
        begin: Sequence[str],
        batches: Batches,
        sync: Sync | None = None,
    ) -> PinnedSession:
        """A session on ``connections``, each begun with ``begin``, read by ``batches``.

        Several begin under ``sync``. The connections are handed over: the session closes
        them. Registered until it closes.
        """
        try:
            session = PinnedSession(connections, begin, batches, self._forget, sync)
        except BaseException:
            for connection in connections:
                release(connection)
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

    Attributes:
        session_connections: the most connections a session reads on (default 1). The
            drivers that read sessions (pymysql, ``sqlite3``) turn rows into Python objects
            holding the GIL, so on one machine several connections read no faster (TPC-H
            lineitem SF 0.1, 2 cores: MariaDB 12.1-13.4 s on one, 13.9-14.7 s on two;
            SQLite 3.8 s and 5.2-5.9 s); more pay where the server does the work (a remote
            server, a heavy query), and they begin at one state under the source's lock.
    """

    session_connections = 1

    def pin_session(self, readers: int = 1, sql: str | None = None) -> PinnedSession:
        """Transactions on connections of their own whose reads all see one state of the database.

        Its reads are ``read(snapshot=its token)``; close it when done.

        Args:
            readers: how many reads run at once: the session has that many connections, at
                most :attr:`session_connections`. Several are begun while a short lock
                holds writers off (the source's ``_snapshot_sync``: MySQL/MariaDB ``LOCK
                TABLES ... READ`` on the tables ``sql`` reads, else ``FLUSH TABLES WITH READ
                LOCK``; SQLite ``BEGIN IMMEDIATE``); where no such lock can be taken (a
                privilege missing, a memory database) one connection reads, and a warning
                line of logger ``sqlfeed.io`` says why.
            sql: the query the session reads (the tables a lock must cover).

        Raises:
            EngineError: the transaction cannot begin.
        """
        source: Any = self
        registry = self._sessions()
        count = max(1, min(readers, self.session_connections))
        with source._errors("consistent snapshot"):
            sync = source._snapshot_sync(sql) if count > 1 else None
            if sync is not None:
                try:
                    session = registry.open(*self._session_connections(count), sync)
                    LOG.info("a consistent read on %d connections: %s", count, session.how)
                    return session
                except SyncRefused as refused:
                    if source.__dict__.get("_sync_refused") != str(refused):
                        source.__dict__["_sync_refused"] = str(refused)
                        LOG.warning("%s", refused)
            return registry.open(*self._session_connections(1))

    def _session_connections(self, count: int) -> tuple[list[Any], Sequence[str], Batches]:
        """``count`` new connections of the source's sessions, how to begin and read them."""
        source: Any = self
        connections: list[Any] = []
        try:
            for _ in range(count):
                connection, begin, batches = source._session_for()
                connections.append(connection)
        except BaseException:
            for connection in connections:
                release(connection)
            raise
        return connections, begin, batches

    def _snapshot_sync(self, sql: str | None) -> Sync | None:
        """How several connections begin at one state (None: they cannot; one reads)."""
        return None

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
