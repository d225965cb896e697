"""PostgreSQL."""

from __future__ import annotations

from sqlglot import exp

from dialects.base import Dialect


class Postgres(Dialect):
    """PostgreSQL: ``hashtextextended`` over the text form of a row constructor.

    ``ROW(a, b)::text`` renders NULL as an empty field, so the hash input is never NULL,
    and every type has a text form (``hash_record_extended`` would fail on types without
    a hash opclass, such as ``point`` or ``json``). The 64-bit result may be negative.
    """

    name = "postgres"
    aliases = ("postgresql", "pg", "redshift")
    sqlglot_dialect = "postgres"
    HASH_FUNCTION = "hashtextextended"
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    DERIVED_COLUMN_LIST = True
    WHOLE_ROW_HASH = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        row = exp.Anonymous(this="ROW", expressions=args)
        return self._hash_text(exp.cast(row, exp.DataType.Type.TEXT))

    def whole_row_hash(self, alias: str) -> exp.Expr:
        whole_row = exp.column(exp.to_identifier(alias, quoted=True))
        return self._hash_text(exp.cast(whole_row, exp.DataType.Type.TEXT))

    @staticmethod
    def _hash_text(text: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this="hashtextextended", expressions=[text, exp.Literal.number(0)])
