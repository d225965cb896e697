"""The one error hierarchy of sqlfeed.

It lives in the lowest layer so that every layer (``dialects``, ``stats``, ``sqlfeed``)
raises the same classes. Leaves also subclass the matching builtin, so callers that
catch ``ValueError`` or ``NotImplementedError`` keep working.

Two kinds of "cannot" are kept apart on purpose:

* :class:`UnsupportedError`: the *engine* cannot do it (MySQL has no TABLESAMPLE).
* :class:`NotImplementedYetError`: the engine could, but *sqlfeed* does not do it yet.
"""

from __future__ import annotations


class SqlfeedError(Exception):
    """Root of every error sqlfeed raises on purpose."""


class QueryError(SqlfeedError, ValueError):
    """The SQL text is not a query sqlfeed can work with."""


class ParseError(QueryError):
    """The SQL text does not parse; carries the line and column of the first problem."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None) -> None:
        where = f" at line {line}, column {col}" if line is not None else ""
        super().__init__(f"{message}{where}")
        self.line = line
        self.col = col


class UnsafeQueryError(QueryError):
    """The SQL would modify data or the schema (DDL/DML), or has side effects."""


class UnstableQueryError(QueryError):
    """The query's result may differ between two runs, so it cannot be partitioned."""


class InvalidArgumentError(SqlfeedError, ValueError):
    """An argument other than the SQL text is wrong (partition count, key, option)."""


class UnknownDialectError(InvalidArgumentError):
    """No dialect is registered under that name or URL scheme."""


class UnsupportedError(SqlfeedError, ValueError):
    """The engine cannot do what was asked (a capability it lacks)."""


class NotImplementedYetError(SqlfeedError, NotImplementedError):
    """The engine could do it, but sqlfeed does not implement it yet."""


class EngineError(SqlfeedError, RuntimeError):
    """The database (or its driver) failed while running a query sqlfeed sent."""


class MissingDependencyError(SqlfeedError, ImportError):
    """An optional package is needed; the message names the extra to install."""


class ShardsetError(SqlfeedError, ValueError):
    """A dataset, shardset or shard file breaks a shardset rule or cannot be read."""
