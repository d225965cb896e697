"""Engine knowledge for sqlfeed: one small dialect class per engine.

This package imports sqlglot only; ``stats`` and ``sqlfeed`` build on it.

>>> from dialects import get_dialect
>>> get_dialect("mariadb").name
'mysql'
"""

from __future__ import annotations

from sqlfeed.dialects import (  # noqa: F401  (importing registers each dialect)
    bigquery,
    clickhouse,
    duckdb,
    mysql,
    oracle,
    postgres,
    snowflake,
    spark,
    sqlite,
    trino,
    tsql,
)
from sqlfeed.dialects.base import Dialect, dialect_for, dialect_names, get_dialect, url_backend
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

__all__ = [
    "Dialect",
    "EngineError",
    "InvalidArgumentError",
    "MissingDependencyError",
    "NotImplementedYetError",
    "ParseError",
    "QueryError",
    "ShardsetError",
    "SqlfeedError",
    "UnknownDialectError",
    "UnsafeQueryError",
    "UnstableQueryError",
    "UnsupportedError",
    "dialect_for",
    "dialect_names",
    "get_dialect",
    "url_backend",
]
