"""sqlfeed: feed machine-learning training straight from a SQL SELECT."""

from __future__ import annotations

from dialects import (
    Dialect,
    EngineError,
    InvalidArgumentError,
    MissingDependencyError,
    NotImplementedYetError,
    ParseError,
    QueryError,
    SqlfeedError,
    UnknownDialectError,
    UnsafeQueryError,
    UnstableQueryError,
    UnsupportedError,
    dialect_for,
    get_dialect,
)
from sqlfeed.rewrite import (
    ParsedQuery,
    count_sql,
    parse,
    partition_sql,
    partition_sqls,
    sample_sql,
    unstable_reasons,
)

__version__ = "0.1.0"

__all__ = [
    "Dialect",
    "EngineError",
    "InvalidArgumentError",
    "MissingDependencyError",
    "NotImplementedYetError",
    "ParseError",
    "ParsedQuery",
    "QueryError",
    "SqlfeedError",
    "UnknownDialectError",
    "UnsafeQueryError",
    "UnstableQueryError",
    "UnsupportedError",
    "__version__",
    "count_sql",
    "dialect_for",
    "get_dialect",
    "parse",
    "partition_sql",
    "partition_sqls",
    "sample_sql",
    "unstable_reasons",
]
