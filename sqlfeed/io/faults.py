"""Lost connections: which driver errors are one, and how a read reconnects and resumes.

A database connection can be lost mid-read without anything being wrong with the query:
the server restarted or failed over, a proxy restarted, an idle-connection reaper or an
administrator ended the session (``pg_terminate_backend``, MariaDB ``KILL CONNECTION``).
:func:`connection_lost` tells those errors apart from every other one, for every reader
(psycopg and its ``COPY``, ADBC, connectorx, pymysql, SQLAlchemy): the one place this
is decided. :meth:`sqlfeed.io.Source.read` then reconnects with a jittered exponential
pause (:class:`Reconnect`) and resumes the read after the rows it delivered already: a
partition's rows come back in the same order on every read (the same assumption a lease
taken over resumes with), and the row just before the resume point is compared with the
one delivered, so a read whose order changed fails rather than repeating or losing rows.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from dataclasses import dataclass

from sqlfeed.dialects import EngineError, InvalidArgumentError, SqlfeedError

__all__ = [
    "RECONNECT_SECONDS",
    "RECONNECT_TRIES",
    "SECONDS_VARIABLE",
    "TRIES_VARIABLE",
    "Losses",
    "Reconnect",
    "connection_lost",
    "table_missing",
]

RECONNECT_TRIES = 20
"""Default: reconnections tried in a row (without a row read in between) before giving up."""
RECONNECT_SECONDS = 120.0
"""Default: seconds of trying to reconnect (without a row read in between) before giving up."""
TRIES_VARIABLE = "SQLFEED_RECONNECT_TRIES"
"""Environment variable: :attr:`Reconnect.tries` (0 turns reconnecting off)."""
SECONDS_VARIABLE = "SQLFEED_RECONNECT_SECONDS"
"""Environment variable: :attr:`Reconnect.seconds`."""

_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
"""PostgreSQL: administrator or crash shutdown, cannot connect now (class ``08`` too)."""
_LOST_MYSQL_CODES = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055})
"""MySQL/MariaDB: server shutdown, connection killed, cannot connect, server gone, lost."""
_LOST_TEXTS = (
    "server closed the connection",
    "terminating connection due to",
    "connection refused",
    "could not receive data from server",
    "could not send data to server",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "no connection to the server",
    "the connection is closed",
    "the connection is lost",
    "ssl connection has been closed unexpectedly",
    "connection reset by peer",
    "broken pipe",
    "consuming input failed",
    "lost connection to mysql server",
    "lost connection to server",
    "server has gone away",
    "connection was killed",
    "can't connect to mysql server",
    "can't connect to server",
    "server shutdown in progress",
    "bytes remaining on stream",  # connectorx (Rust mysql): the socket closed mid-packet
    "unexpected eof",
)
"""Lower-case phrases of a lost connection in the drivers' messages (connectorx's panics
carry only text; a reader that words an error itself keeps the driver's phrase)."""

_log = logging.getLogger("sqlfeed.io")

_MISSING_SQLSTATES = frozenset({"42P01", "3F000", "42S02"})
"""No such table (PostgreSQL's undefined_table, ODBC's base table not found) or schema."""
_MISSING_MYSQL_CODES = frozenset({1049, 1146})
"""MySQL/MariaDB: unknown database, no such table."""
_MISSING_TEXTS = (
    "no such table",  # SQLite
    "doesn't exist",  # MySQL/MariaDB
    "does not exist",  # PostgreSQL, DuckDB, Snowflake
    "table or view not found",  # Spark
    "table_or_view_not_found",
    "not found: table",  # BigQuery
    "not found: dataset",
)
"""Lower-case phrases of a missing table, for drivers that give no code."""

_MISSING_OTHER = re.compile(
    r"function with name|function \S+\(.*\) does not exist|type with name|macro with name"
    r"|column \S+ does not exist",
    re.IGNORECASE,
)
"""Messages of the phrases above that name a missing function, type or column, not a table
(DuckDB's ``Scalar Function with name f does not exist``, PostgreSQL's ``function f(integer)
does not exist``): such a query fails for another reason than an absent table."""


def connection_lost(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says the connection was lost.

    Or that the server cannot be reached right now, rather than that the query failed.

    Args:
        err: any error a read raised: a driver's, SQLAlchemy's (its ``orig``), a
            connectorx panic, or sqlfeed's own :class:`~sqlfeed.dialects.EngineError` wording one.

    Returns:
        True for a lost, killed or refused connection and a server shutting down or
        starting up; False for everything else (bad SQL, a value error, a time-out, a
        stop asked for, sqlfeed's own argument errors).
    """
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        one = stack.pop()
        if one is None or id(one) in seen or len(seen) > 16:
            continue
        seen.add(id(one))
        if _lost(one):
            return True
        orig = getattr(one, "orig", None)
        stack += [orig if isinstance(orig, BaseException) else None, one.__cause__]
        stack.append(one.__context__)
    return False


def _lost(err: BaseException) -> bool:
    if isinstance(err, SqlfeedError) and type(err).__name__ != "EngineError":
        return False  # sqlfeed's own argument or query errors, whatever their words
    if isinstance(err, ConnectionError):  # refused, reset, aborted, broken pipe
        return True
    if getattr(err, "connection_invalidated", False):  # SQLAlchemy saw a disconnect
        return True
    module = (type(err).__module__ or "").split(".")[0]
    if module == "pymysql" and type(err).__name__ == "InterfaceError":
        return True  # pymysql: a call on a connection it already found closed
    code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    if isinstance(code, str) and (code in _LOST_SQLSTATES or code.startswith("08")):
        return True
    args = getattr(err, "args", ())
    if module in ("pymysql", "MySQLdb") and args and args[0] in _LOST_MYSQL_CODES:
        return True
    text = str(err).lower()
    return any(phrase in text for phrase in _LOST_TEXTS)


@dataclass(frozen=True)
class Reconnect:
    """How a read that lost its connection reconnects (see :meth:`sqlfeed.io.Source.read`).

    After each loss the read waits a jittered pause that doubles from ``first_pause`` up
    to ``max_pause`` seconds, reconnects and resumes; it gives up (one-line
    :class:`~sqlfeed.dialects.EngineError`) after ``tries`` losses in a row or ``seconds`` of
    trying, whichever comes first. A row read in between starts the count again, so a
    long read survives a connection reaper that strikes every few seconds.

    Attributes:
        tries: losses in a row tolerated (0: never reconnect).
        seconds: seconds of trying tolerated, from the first loss in a row.
        first_pause: the first pause (seconds, before jitter).
        max_pause: the longest pause (seconds, before jitter).
    """

    tries: int = RECONNECT_TRIES
    seconds: float = RECONNECT_SECONDS
    first_pause: float = 0.1
    max_pause: float = 5.0

    @classmethod
    def from_environment(cls) -> Reconnect:
        """The defaults, with ``SQLFEED_RECONNECT_TRIES`` and ``SQLFEED_RECONNECT_SECONDS``.

        Raises:
            InvalidArgumentError: a variable is not a number >= 0.
        """
        tries = _number(TRIES_VARIABLE, RECONNECT_TRIES, int)
        seconds = _number(SECONDS_VARIABLE, RECONNECT_SECONDS, float)
        return cls(tries=int(tries), seconds=float(seconds))

    def pause(self, attempt: int) -> float:
        """The pause before reconnection ``attempt`` (1, 2, ...).

        Half of the doubled pause fixed, half at random, so workers that lost the server
        together spread out.
        """
        step = min(self.max_pause, self.first_pause * 2.0 ** min(attempt - 1, 60))
        return step / 2 + random.uniform(0.0, step / 2)


def _number(variable: str, default: float, kind: type[int] | type[float]) -> float:
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    try:
        number = float(kind(value))
    except ValueError:
        number = -1.0
    if number < 0:
        raise InvalidArgumentError(
            f"{variable}={value!r}: give a{'n integer' if kind is int else ' number'} >= 0"
        )
    return number


class Losses:
    """The losses in a row of one read, against its :class:`Reconnect` budget."""

    def __init__(self, policy: Reconnect) -> None:
        self.policy = policy
        self.count = 0
        self.since = 0.0

    def progressed(self) -> None:
        """A row was read: the next loss starts a new count."""
        self.count = 0

    def next_pause(self) -> float | None:
        """Count one more loss: the pause before reconnecting, or None when the budget is spent."""
        now = time.monotonic()
        if self.count == 0:
            self.since = now
        self.count += 1
        if self.count > self.policy.tries or now - self.since > self.policy.seconds:
            return None
        return self.policy.pause(self.count)

    def spent(self) -> str:
        """How much was tried, for the message that gives up."""
        took = time.monotonic() - self.since
        return f"{self.count - 1} reconnections in {took:.0f}s"

    def wait(self, engine: str, doing: str, why: str) -> None:
        """Count one more loss while ``doing``; wait the pause before reconnecting.

        One warning line says so (as a read's reconnection does).

        Args:
            engine: the engine's name, for the messages.
            doing: what lost its connection (``writing into t``).
            why: the driver's message, on one line.

        Raises:
            EngineError: the budget is spent (one line naming the variables that allow more).
        """
        pause = self.next_pause()
        if pause is None:
            raise EngineError(
                f"{engine} lost the connection {doing} and could not reconnect "
                f"({self.spent()}): {why}; allow more with {TRIES_VARIABLE} or {SECONDS_VARIABLE}"
            )
        _log.warning(
            "%s lost the connection %s (%s): reconnecting in %.1fs (try %d of %d)",
            engine,
            doing,
            why,
            pause,
            self.count,
            self.policy.tries,
        )
        time.sleep(pause)


def table_missing(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says the table queried is not there.

    A probe of a table reads only that as its absence: a lost connection, a lock wait, a
    refused privilege or any other failure is not "no such table" (read as one, a table
    that is there was taken for gone). A driver's error code decides where one is in the
    chain; the words of the messages only where none is.
    """
    chain: list[BaseException] = []
    stack: list[BaseException | None] = [err]
    while stack and len(chain) <= 16:
        one = stack.pop()
        if one is None or any(one is seen for seen in chain):
            continue
        chain.append(one)
        orig = getattr(one, "orig", None)
        stack += [orig if isinstance(orig, BaseException) else None, one.__cause__]
        if one.__suppress_context__:  # a wrapper's driver error (``raise ... from None``);
            stack.append(one.__context__)  # not an unrelated error handled meanwhile
    for one in chain:
        verdict = _coded_missing(one)
        if verdict is not None:
            return verdict
    return any(_says_missing(str(one)) for one in chain)


def _says_missing(message: str) -> bool:
    """Whether a driver's message (no code) says a table is missing."""
    lowered = message.lower()
    if not any(phrase in lowered for phrase in _MISSING_TEXTS):
        return False
    return _MISSING_OTHER.search(message) is None


def _coded_missing(err: BaseException) -> bool | None:
    """True/False where ``err`` carries a code that decides it; None where it has none."""
    module = (type(err).__module__ or "").split(".")[0]
    code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    if module.startswith("psycopg") and isinstance(code, str):
        return code in _MISSING_SQLSTATES
    args = getattr(err, "args", ())
    if module in ("pymysql", "MySQLdb") and args and isinstance(args[0], int):
        return args[0] in _MISSING_MYSQL_CODES
    if type(err).__name__ == "CatalogException":  # DuckDB's: a table, schema, function, type..
        return _says_missing(str(err))
    return None
