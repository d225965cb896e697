"""Trino and Presto."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects.base import Dialect


class Trino(Dialect):
    """Trino: ``from_big_endian_64(xxhash64(to_utf8(json_format(CAST(ROW(...) AS JSON)))))``.

    The JSON text of a row keeps NULLs as ``null``; the result is a signed BIGINT.
    Trino's TABLESAMPLE BERNOULLI takes no seed.
    """

    name = "trino"
    aliases = ("presto",)
    sqlglot_dialect = "trino"
    HASH_FUNCTION = "xxhash64"
    TABLESAMPLE_BERNOULLI = True
    DERIVED_COLUMN_LIST = True
    GROUPING_SETS = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        row = exp.Anonymous(this="ROW", expressions=args)
        as_json = exp.Anonymous(this="json_format", expressions=[exp.cast(row, "JSON")])
        digest = exp.Anonymous(
            this="xxhash64", expressions=[exp.Anonymous(this="to_utf8", expressions=[as_json])]
        )
        return exp.Anonymous(this="from_big_endian_64", expressions=[digest])
