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

from dialects import EngineError
from sqlfeed.dispatch.queue import QueueBusyError
from sqlfeed.io.faults import connection_lost

__all__ = [
    "IDLE_TRANSACTION_SECONDS",
    "LOCK_WAIT_SECONDS",
    "MYSQL_WAIT_SECONDS",
    "READ_ONLY",
    "RETRY_SECONDS",
    "SQLITE_BUSY_MS",
    "SQLITE_CAVEAT",
    "create_queue_engine",
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
READ_ONLY = {"sqlfeed_read_only": True}
"""Execution options of a read-only queue transaction (SQLite: a deferred ``BEGIN``)."""

SQLITE_CAVEAT = (
    "a SQLite queue serves the processes of one machine, and cannot take a lease over "
    "from a worker that is frozen (SIGSTOP, swapped out) inside one of its queue "
    "transactions: every other worker waits until it resumes or dies; a PostgreSQL or "
    "MariaDB queue ends such a session within seconds"
)
"""What a SQLite queue cannot guarantee (said by ``job create`` and the README)."""

_PG_TRANSIENT = ("40001", "40P01", "55P03", "25P03", "57014")
_MYSQL_TRANSIENT = (1205, 1213, 4031)


def create_queue_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine for a queue at ``url``, its sessions bounded as described above.

    Raises:
        sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError: a bad URL.
    """
    name = sa.engine.make_url(url).get_backend_name()
    if name == "sqlite":
        engine = sa.create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_MS / 1000, "check_same_thread": False}
        )
        _sqlite_sessions(engine)
    elif name in ("mysql", "mariadb"):
        engine = sa.create_engine(url, pool_pre_ping=True, isolation_level="READ COMMITTED")
        sa.event.listen(engine, "connect", _mysql_session)
    else:
        engine = sa.create_engine(url, pool_pre_ping=True)
        if name == "postgresql":
            sa.event.listen(engine, "connect", _postgres_session)
    return engine


def _postgres_session(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"SET lock_timeout = '{LOCK_WAIT_SECONDS}s'")
    cursor.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_TRANSACTION_SECONDS}s'")
    cursor.close()
    dbapi_connection.commit()


def _mysql_session(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("SELECT VERSION()")
    mariadb = "mariadb" in str(cursor.fetchone()[0]).lower()
    cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}")
    if mariadb:
        cursor.execute(f"SET SESSION idle_transaction_timeout = {IDLE_TRANSACTION_SECONDS}")
    else:
        cursor.execute(f"SET SESSION wait_timeout = {MYSQL_WAIT_SECONDS}")
    cursor.close()
    dbapi_connection.commit()


def _sqlite_sessions(engine: sa.Engine) -> None:
    """WAL; ``BEGIN IMMEDIATE`` takes the write lock up front, reads a deferred ``BEGIN``."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlalchemy emits BEGIN below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        read_only = connection.get_execution_options().get("sqlfeed_read_only", False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def transient(err: BaseException) -> bool:
    """A lock time-out, deadlock, serialization failure or lost connection: run it again.

    A lost connection is what :func:`sqlfeed.io.faults.connection_lost` says it is (one
    classification for the queue and the readers)."""
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
    """``action(*args)`` (a short transaction), run again after a transient failure (an
    ``EngineError`` whose ``transient`` is true) with jittered pauses, for ``seconds``.

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
            if time.monotonic() + pause - started > seconds:
                raise QueueBusyError(
                    f"{err} (still failing after {attempt} tries in "
                    f"{time.monotonic() - started:.1f}s: another process holds a lock, or "
                    "the server is unreachable)"
                ) from None
            time.sleep(pause)
