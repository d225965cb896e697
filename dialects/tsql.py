"""Microsoft SQL Server (T-SQL)."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects import effects
from sqlfeed.dialects.base import Dialect


class TSQL(Dialect):
    """T-SQL: ``CHECKSUM(...)`` (variadic, NULL-safe, signed 32-bit) and ``COUNT_BIG``.

    CHECKSUM follows the column collation, so under a case-insensitive collation 'A' and
    'a' share a bucket: partitions stay correct, only their balance is affected.
    TABLESAMPLE is page-level (SYSTEM) only, and a derived table may not keep an ORDER BY
    without TOP/OFFSET.
    """

    name = "tsql"
    aliases = ("mssql", "sqlserver")
    sqlglot_dialect = "tsql"
    HASH_FUNCTION = "CHECKSUM"
    COUNT_FUNCTION = "COUNT_BIG"
    DERIVED_COLUMN_LIST = True
    ORDER_BY_IN_DERIVED_TABLE = False
    GROUPING_SETS = True
    SIDE_EFFECT_FUNCTIONS = effects.TSQL

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="CHECKSUM", expressions=args)
