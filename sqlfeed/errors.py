"""Every error and warning sqlfeed raises on purpose, in one place.

One root, :class:`SqlfeedError`; its leaves also subclass the matching builtin
(``ValueError``, ``RuntimeError``, ``ImportError``, ``NotImplementedError``), so code that
catches those keeps working. The root and the errors every layer raises are defined at the bottom
(``sqlfeed.dialects.errors``, so that ``stats`` and ``dialects`` raise the same classes); the
lease queue's errors and sqlfeed's warnings are defined here. Importing this module
imports nothing else of sqlfeed.

>>> from sqlfeed.errors import QueueBusyError, EngineError, SqlfeedError
>>> issubclass(QueueBusyError, EngineError) and issubclass(EngineError, SqlfeedError)
True
"""

from __future__ import annotations

from sqlfeed.dialects.errors import (
    EngineError,
    InvalidArgumentError,
    MissingDependencyError,
    NotImplementedYetError,
    ParseError,
    QueryError,
    ShardsetError,
    SqlfeedError,
    UnknownDialectError,
    UnsafeQueryError,
    UnstableQueryError,
    UnsupportedError,
)


class UnknownJobError(InvalidArgumentError):
    """No job of that name exists in the queue."""


class CorruptStateError(SqlfeedError):
    """The queue's rows contradict the job (missing tasks, unknown states)."""


class QueueBusyError(EngineError):
    """A queue call kept failing on lock time-outs, deadlocks or lost connections.

    Nothing was changed by the failed call; asking again later is safe (a worker does).
    """


class JobIncompleteError(EngineError):
    """A job's output is checked before all its partitions are committed (nothing changed)."""


class SnapshotWarning(UserWarning):
    """A read of a plan's partitions is not one snapshot (and what that risks)."""


class UnequalSharesWarning(UserWarning):
    """The ranks of a static ``world_size`` get different numbers of partitions."""


__all__ = [
    "CorruptStateError",
    "EngineError",
    "InvalidArgumentError",
    "JobIncompleteError",
    "MissingDependencyError",
    "NotImplementedYetError",
    "ParseError",
    "QueryError",
    "QueueBusyError",
    "ShardsetError",
    "SnapshotWarning",
    "SqlfeedError",
    "UnequalSharesWarning",
    "UnknownDialectError",
    "UnknownJobError",
    "UnsafeQueryError",
    "UnstableQueryError",
    "UnsupportedError",
]
