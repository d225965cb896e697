"""DuckDB, the embedded default engine."""

from __future__ import annotations

from sqlglot import exp

from dialects.base import Dialect


class DuckDB(Dialect):
    """DuckDB: ``hash(...)`` is variadic, NULL-safe and returns UBIGINT."""

    name = "duckdb"
    aliases = ("dataset",)  # dataset:///folder: a shardset dataset queried in DuckDB
    sqlglot_dialect = "duckdb"
    HASH_FUNCTION = "hash"
    HASH_IS_UNSIGNED = True
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    SAMPLE_DERIVED_TABLES = True
    DERIVED_COLUMN_LIST = True
    WHOLE_ROW_HASH = True
    GROUPING_SETS = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="hash", expressions=args)

    def whole_row_hash(self, alias: str | exp.Identifier) -> exp.Expr:
        """``hash(q)``: the row of relation ``q`` as a struct, hashed as ``hash(a, b, ...)``."""
        ident = exp.to_identifier(alias, quoted=True) if isinstance(alias, str) else alias
        return exp.Anonymous(this="hash", expressions=[exp.column(ident.copy())])

    def quantiles(self, arg: exp.Expr, fractions: list[float]) -> exp.Expr | None:
        points = exp.Array(expressions=[exp.Literal.number(repr(f)) for f in fractions])
        return exp.PercentileDisc(this=arg, expression=points)
