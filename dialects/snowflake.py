"""Snowflake."""

from __future__ import annotations

from sqlglot import exp

from dialects.base import Dialect


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
