"""Bounded queue sessions: no queue call waits long on a lock, whoever holds it.

A worker can freeze anywhere (SIGSTOP, swapped out, a long GC pause, a lost network),
also inside one of its own queue transactions, holding locks. Each backend's sessions are
set up so that such a worker delays the others by a few seconds at most:

* **PostgreSQL**: ``lock_timeout`` (a statement waits :data:`LOCK_WAIT_SECONDS` for a lock,
  then fails and is retried) and ``idle_in_transaction_session_timeout`` (the server ends
  a session idle inside a transaction for :data:`IDLE_TRANSACTION_SECONDS`, rolling it back:
  a frozen worker's row locks are gone after that, and its expired lease can be taken over).
* **MariaDB**: ``innodb_lock_wait_timeout`` and ``idle_transaction_timeout`` (the same two
  bounds), and READ COMMITTED, so a claim's ``FOR UPDATE SKIP LOCKED`` scan keeps no lock
  on the rows it passes over. **MySQL** has no idle-transaction timeout: ``wait_timeout``
  ends a silent session after :data:`MYSQL_WAIT_SECONDS` instead.
  Both: the driver's socket read and write timeouts (``BOUNDS.socket_s``, 90 s: pymysql
  and mysqlclient wait for ever by default), so a connection that died without a word
  (a killed session on a loaded server, a network gone) is a lost one, tried again.
* **SQLite**: WAL, ``BEGIN IMMEDIATE`` for writes and a plain (deferred) ``BEGIN`` for reads,
  so reads never wait; a short busy timeout and jittered retries. The write lock belongs to
  a process, and no server can end it: a worker frozen inside a write transaction stalls
  every writer until it resumes or dies (:data:`SQLITE_CAVEAT`).

Transactions that fail on a lock time-out, a deadlock or a lost connection are run again
(:func:`transient`); every transaction is short and never spans I/O or user code.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from sqlfeed.dialects import Dialect, EngineError, UnknownDialectError, get_dialect
from sqlfeed.dialects.base import QueueBounds
from sqlfeed.dialects.sqlite import QUEUE_CAVEAT
from sqlfeed.dispatch.queue import QueueBusyError
from sqlfeed.io.faults import connection_lost

__all__ = [
    "BOUNDS",
    "IDLE_TRANSACTION_SECONDS",
    "LOCK_WAIT_SECONDS",
    "MIN_TRIES",
    "MYSQL_WAIT_SECONDS",
    "READ_ONLY",
    "RETRY_SECONDS",
    "SQLITE_BUSY_MS",
    "SQLITE_CAVEAT",
    "create_queue_engine",
    "queue_dialect",
    "retry_delay",
    "retrying",
    "transient",
]

LOCK_WAIT_SECONDS = 2
"""The longest a queue statement waits for a row lock (PostgreSQL, MariaDB, MySQL)."""
IDLE_TRANSACTION_SECONDS = 4
"""A session idle this long inside a transaction is ended by the server (PostgreSQL, MariaDB)."""
MYSQL_WAIT_SECONDS = 10
"""MySQL's ``wait_timeout`` for queue sessions (it has no idle-transaction timeout)."""
SQLITE_BUSY_MS = 200
"""SQLite's busy timeout per attempt; the queue then retries with a jittered pause."""
RETRY_SECONDS = 3.0
"""How long a queue call retries transient failures before it raises ``QueueBusyError``."""
MIN_TRIES = 3
"""A queue call meeting a lost connection tries this many times at least, however long."""
READ_ONLY = {"sqlfeed_read_only": True}
"""Execution options of a read-only queue transaction (SQLite: a deferred ``BEGIN``)."""

SQLITE_CAVEAT = QUEUE_CAVEAT
"""What a SQLite queue cannot guarantee (said by ``job create`` and the README)."""
BOUNDS = QueueBounds(
    LOCK_WAIT_SECONDS, IDLE_TRANSACTION_SECONDS, MYSQL_WAIT_SECONDS, SQLITE_BUSY_MS
)
"""The bounds above, as :meth:`~sqlfeed.dialects.Dialect.queue_session_sql` takes them."""

_PG_TRANSIENT = ("40001", "40P01", "55P03", "25P03", "57014")
_MYSQL_TRANSIENT = (1205, 1213, 4031)


def queue_dialect(backend: str) -> Dialect:
    """The dialect of a queue's SQLAlchemy backend name (``postgresql``, ``mariadb``...).

    The base dialect, which holds no queue (:attr:`~sqlfeed.dialects.Dialect.QUEUE_NOW` None), for
    an engine sqlfeed knows nothing of.
    """
    try:
        return get_dialect(backend)
    except UnknownDialectError:
        return Dialect()


def create_queue_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine for a queue at ``url``, its sessions bounded as described above.

    Each dialect's queue settings: :attr:`~sqlfeed.dialects.Dialect.QUEUE_ISOLATION`,
    :meth:`~sqlfeed.dialects.Dialect.queue_session_sql`, ...

    Raises:
        sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError: a bad URL.
    """
    parsed = sa.engine.make_url(url)
    dialect = queue_dialect(parsed.get_backend_name())
    options: dict[str, Any] = {}
    connect_args = dialect.queue_connect_args(BOUNDS, parsed.get_driver_name())
    if connect_args:
        options["connect_args"] = connect_args
    if not dialect.FILE_DATABASE:  # a server: a connection the pool kept may have been lost
        options["pool_pre_ping"] = True
    if dialect.QUEUE_ISOLATION is not None:
        options["isolation_level"] = dialect.QUEUE_ISOLATION
    engine = sa.create_engine(url, **options)
    if dialect.QUEUE_NOW is not None:  # an engine that holds queues
        sa.event.listen(engine, "connect", _session_setup(dialect))
    if dialect.QUEUE_WRITE_BEGIN is not None:
        _own_begins(engine, dialect.QUEUE_WRITE_BEGIN)
    return engine


def _session_setup(dialect: Dialect) -> Callable[[Any, Any], None]:
    """What runs on every new queue connection: the dialect's session statements."""
    begins_itself = dialect.QUEUE_WRITE_BEGIN is not None

    def setup(dbapi_connection: Any, _record: Any) -> None:
        if begins_itself:
            dbapi_connection.isolation_level = None  # sqlalchemy emits BEGIN (_own_begins)
        cursor = dbapi_connection.cursor()
        version = ""
        if dialect.SERVER_VERSION_SQL is not None:
            cursor.execute(dialect.SERVER_VERSION_SQL)
            version = str(cursor.fetchone()[0])
        for statement in dialect.queue_session_sql(version, BOUNDS):
            cursor.execute(statement)
        cursor.close()
        if not begins_itself:
            dbapi_connection.commit()

    return setup


def _own_begins(engine: sa.Engine, write_begin: str) -> None:
    """``write_begin`` (SQLite: ``BEGIN IMMEDIATE``) takes the write lock up front.

    Reads begin with a deferred ``BEGIN``.
    """

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        read_only = connection.get_execution_options().get("sqlfeed_read_only", False)
        connection.exec_driver_sql("BEGIN" if read_only else write_begin)


def transient(err: BaseException) -> bool:
    """A lock time-out, deadlock, serialization failure or lost connection: run it again.

    A lost connection is what :func:`sqlfeed.io.faults.connection_lost` says it is (one
    classification for the queue and the readers).
    """
    if connection_lost(err):
        return True
    inner = getattr(err, "orig", err)
    code = getattr(inner, "sqlstate", None) or getattr(inner, "pgcode", None) or ""
    args = getattr(inner, "args", ())
    mysql_code = args[0] if args and isinstance(args[0], int) else None
    text = str(inner).lower()
    return (
        code in _PG_TRANSIENT
        or mysql_code in _MYSQL_TRANSIENT
        or "database is locked" in text
        or "database table is locked" in text
        or "deadlock" in text
        or "idle-in-transaction timeout" in text
    )


def retry_delay(attempt: int) -> float:
    """A jittered pause before retry number ``attempt`` (1, 2, ...): up to 5 ms x 2^n, <= 0.25 s."""
    return random.uniform(0.0, min(0.25, 0.005 * 2**attempt))


def retrying(action: Callable[..., Any], args: Sequence[Any], seconds: float) -> Any:
    """``action(*args)`` (a short transaction), run again after a transient failure.

    A transient failure is an ``EngineError`` whose ``transient`` is true; the action is run
    again with jittered pauses, for ``seconds``; a lost connection at least :data:`MIN_TRIES`
    times (on a loaded machine one try can outlast ``seconds``: a server ends a session
    descheduled inside its transaction, and the next try on a new connection succeeds).

    Raises:
        QueueBusyError: it kept failing that long.
    """
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return action(*args)
        except EngineError as err:
            if not getattr(err, "transient", False):
                raise
            attempt += 1
            pause = retry_delay(attempt)
            again = attempt < MIN_TRIES and connection_lost(err)
            if not again and time.monotonic() + pause - started > seconds:
                raise QueueBusyError(
                    f"{err} (still failing after {attempt} tries in "
                    f"{time.monotonic() - started:.1f}s: another process holds a lock, or "
                    "the server is unreachable)"
                ) from None
            time.sleep(pause)
