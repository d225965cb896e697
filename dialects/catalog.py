"""What the dialects' catalog hooks run their queries on, and what they answer.

A dialect builds the catalog SQL of its engine (primary and unique keys, row estimates,
physical extents, scratch tables); the caller runs it through the source it holds. A hook
that needs several queries in turn (a physical extent: the table's kind, then its rowid
span) is handed that source as a :class:`SqlRunner`, a protocol every
``sqlfeed.io.Source`` meets, so ``dialects`` never imports ``sqlfeed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Extent", "SqlRunner"]


class SqlRunner(Protocol):
    """Runs small queries and statements (a ``sqlfeed.io.Source``)."""

    def rows(self, sql: str, *, what: str = ...) -> list[tuple[Any, ...]]:
        """All rows of a small query; ``what`` names it in an error."""
        ...

    def scalar(self, sql: str, *, what: str = ...) -> Any:
        """The first column of the first row of a small query (None: no row)."""
        ...

    def execute(self, sql: str, *, what: str = ...) -> None:
        """Run a statement that returns no rows."""
        ...


@dataclass(frozen=True)
class Extent:
    """The physical row addresses of a base table: ``[low, high)`` in ``unit``."""

    low: int
    high: int
    rows: float | None
    """The catalog's row estimate; None when it has none (never analyzed)."""
    rows_from: str
    """Where ``rows`` comes from, for ``plan.reason``."""
    address: str
    """The column holding a row's address: ``ctid``, ``rowid`` (or SQLite's ``_rowid_``,
    ``oid`` when a column named rowid hides it)."""
    unit: str
    """``pages`` (PostgreSQL) or ``rowids``."""
