"""PostgreSQL sessions: the settings every reader connection runs, and a read's transaction.

Every connection a read uses runs :data:`POSTGRES_SESSION` (the text form of values fixed:
the PostgreSQL hash of a row is taken over its text); an ``ordered`` read adds
:data:`POSTGRES_ORDERED` for its transaction; a read inside an exported snapshot begins
its transaction with :func:`snapshot_statements`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlfeed.io.readers import ReadRequest

__all__ = [
    "POSTGRES_ORDERED",
    "POSTGRES_SESSION",
    "local_settings",
    "set_up",
    "snapshot_statements",
]

POSTGRES_SESSION = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
)
"""Session settings that fix the text form of values: the PostgreSQL hash of a row is
taken over its text, so every worker must render timestamps, dates and floats alike."""

POSTGRES_ORDERED = (
    "SET max_parallel_workers_per_gather = 0",
    "SET synchronize_seqscans = off",
)
"""Settings that make PostgreSQL return a partition's rows in the same order on every read
(resuming after acknowledged batches counts on it): no parallel workers, and no scan that
starts where another session's scan of the same table is."""


def snapshot_statements(snapshot: str | None, *, begin: bool = False) -> list[str]:
    """The first statements of a read's transaction inside ``snapshot`` (none without one).

    ``begin``: open the transaction too (connectorx runs them on a connection outside one;
    psycopg and ADBC connections are inside the transaction their driver began).
    """
    if snapshot is None:
        return []
    mode = "ISOLATION LEVEL REPEATABLE READ READ ONLY"
    first = f"BEGIN {mode}" if begin else f"SET TRANSACTION {mode}"
    return [first, f"SET TRANSACTION SNAPSHOT {_quote(snapshot)}"]


def local_settings(request: ReadRequest) -> list[str]:
    """The statements that begin a read's transaction on a kept connection.

    Its snapshot, then, for an ``ordered`` read, :data:`POSTGRES_ORDERED` as ``SET LOCAL``.
    """
    ordered = POSTGRES_ORDERED if request.ordered else ()
    local = [s.replace("SET ", "SET LOCAL ", 1) for s in ordered]
    return [*snapshot_statements(request.snapshot), *local]


def set_up(connection: Any, settings: Sequence[str]) -> None:
    """Run a new reader connection's session ``settings`` and commit them."""
    cursor = connection.cursor()
    try:
        for setting in settings:
            cursor.execute(setting)
    finally:
        cursor.close()
    connection.commit()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
