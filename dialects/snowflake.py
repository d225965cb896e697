"""Snowflake."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects.base import Dialect, md5_hex_head


class Snowflake(Dialect):
    """Snowflake: ``HASH(...)`` is variadic, NULL-safe and returns a signed 64-bit number."""

    name = "snowflake"
    sqlglot_dialect = "snowflake"
    HASH_FUNCTION = "HASH"
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    SAMPLE_DERIVED_TABLES = True
    GROUPING_SETS = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="HASH", expressions=args)

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """``TO_NUMBER(SUBSTRING(MD5(t), 1, 7), 'XXXXXXX')``: Snowflake's hex format."""
        return exp.Anonymous(
            this="TO_NUMBER",
            expressions=[md5_hex_head(exp.MD5(this=text)), exp.Literal.string("XXXXXXX")],
        )
