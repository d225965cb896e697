"""A write the database refused for want of a privilege: one line naming the privilege.

Reads need SELECT alone; what writes (the table sink of ``export --into`` and ``predict``,
a lease queue's tables, a materialized plan's scratch table) needs more, and a user
without it gets the driver's refusal in one line with the grant that allows it
(:meth:`Source.write_grant <sqlfeed.io.Source.write_grant>`), never a traceback.
"""

from __future__ import annotations

from sqlfeed.dialects import EngineError
from sqlfeed.io.source import Source, driver_message

__all__ = ["READ_ONLY_SQLSTATE", "privilege_denied", "read_only", "write_refused"]

DENIED_SQLSTATES = ("42501", "25006")
"""SQLSTATEs of a refused privilege: insufficient_privilege, read_only_sql_transaction
(a role whose ``default_transaction_read_only`` is on, a hot standby)."""
READ_ONLY_SQLSTATE = "25006"
"""A transaction that may not write at all (whatever the grants)."""
DENIED_ERRNOS = (1044, 1142, 1143, 1227, 1290, 1370, 1792)
"""MySQL/MariaDB error numbers of a refused privilege: database, table, column, SUPER-like
and routine access denied; a server or transaction in read-only mode."""
READ_ONLY_ERRNOS = (1290, 1792)


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in seen:
        seen.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return seen


def _codes(err: BaseException) -> tuple[set[str], set[int], bool]:
    """The SQLSTATEs and MySQL error numbers in ``err``'s chain; a read-only SQLite file."""
    states: set[str] = set()
    errnos: set[int] = set()
    sqlite_read_only = False
    for each in _chain(err):
        state = getattr(each, "sqlstate", None)
        if isinstance(state, str):
            states.add(state)
        args = getattr(each, "args", ())
        if type(each).__module__.split(".")[0] == "pymysql" and args and isinstance(args[0], int):
            errnos.add(args[0])
        if "readonly database" in str(each):  # sqlite3: attempt to write a readonly database
            sqlite_read_only = True
    return states, errnos, sqlite_read_only


def privilege_denied(err: BaseException) -> bool:
    """Whether ``err`` (or the driver error it wraps) refuses a privilege.

    Or says the session, server or database file is read-only.
    """
    states, errnos, sqlite_read_only = _codes(err)
    return (
        bool(states.intersection(DENIED_SQLSTATES) or errnos.intersection(DENIED_ERRNOS))
        or sqlite_read_only
    )


def read_only(err: BaseException) -> bool:
    """Whether ``err`` says the session or server may not write at all (not a grant)."""
    states, errnos, sqlite_read_only = _codes(err)
    return (
        READ_ONLY_SQLSTATE in states
        or bool(errnos.intersection(READ_ONLY_ERRNOS))
        or (sqlite_read_only)
    )


def write_refused(
    source: Source, err: BaseException, doing: str, schema: str | None
) -> EngineError:
    """The one-line error of a write refused for want of a privilege.

    Args:
        source: the database written to.
        err: the driver's refusal (:func:`privilege_denied`).
        doing: what was refused, in the user's terms (``creating the table t``).
        schema: the schema (MySQL: database) written in; None: the session's own.
    """
    grant = source.write_grant(schema, read_only=read_only(err))
    return EngineError(
        f"{doing} was refused: {driver_message(err)}; {grant} (which command needs which "
        "privileges: the security page of the docs)"
    )
