"""ClickHouse."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects.base import Dialect


class ClickHouse(Dialect):
    """ClickHouse: ``cityHash64(toString(tuple(...)))``, an unsigned 64-bit number.

    Hashing the text of a tuple keeps NULLs in the input (``cityHash64`` of a Nullable
    argument would itself be NULL). ``SAMPLE`` needs a sampling key declared on the table,
    and CTEs cannot rename columns.
    """

    name = "clickhouse"
    sqlglot_dialect = "clickhouse"
    HASH_FUNCTION = "cityHash64"
    HASH_IS_UNSIGNED = True
    CTE_COLUMN_LIST = False

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        as_text = exp.Anonymous(
            this="toString", expressions=[exp.Anonymous(this="tuple", expressions=args)]
        )
        return exp.Anonymous(this="cityHash64", expressions=[as_text])
