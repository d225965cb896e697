"""PostgreSQL."""

from __future__ import annotations

from sqlglot import exp

from dialects.base import Dialect

HASHABLE_TYPE_OIDS = frozenset(
    {
        16,
        17,
        18,
        19,
        20,
        21,
        23,
        25,
        26,
        700,
        701,
        869,
        1042,
        1043,
        1082,
        1083,
        1114,
        1184,
        1186,
        1266,
        1700,
        2950,
        3802,  # bool bytea char name ints oid floats inet
        # text varchar date time timestamp(tz) interval timetz numeric uuid jsonb
        1000,
        1001,
        1005,
        1007,
        1009,
        1014,
        1015,
        1016,
        1021,
        1022,
        1028,
        1115,
        1182,
        1183,
        1185,
        1187,
        1231,
        2951,
        3807,  # arrays of the above
    }
)
"""Type OIDs with an extended hash function (a hash opclass): usable by hash_record_extended.

Columns of other types (json, xml, point, money, bit, tsvector, user types) are cast to
text before hashing.
"""


class Postgres(Dialect):
    """PostgreSQL 14+: ``hash_record_extended(ROW(...), 0)``, a signed 64-bit hash.

    It hashes each value's binary form with the type's own hash function: NULL-safe (a
    NULL field hashes as 0), independent of session settings (unlike the text form of a
    row, which follows TimeZone, DateStyle and extra_float_digits), and about twice as
    cheap as hashing ``ROW(...)::text``. Types without a hash function are hashed through
    their text form (the rewriter's ``text_columns``).
    """

    name = "postgres"
    aliases = ("postgresql", "pg")
    sqlglot_dialect = "postgres"
    HASH_FUNCTION = "hash_record_extended"
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    DERIVED_COLUMN_LIST = True
    WHOLE_ROW_HASH = True
    GROUPING_SETS = True
    STATS_SETTINGS = ("SET LOCAL work_mem = '128MB'",)
    """The statistics' hash aggregations (one hash table per column's distinct values) and
    sorts of distinct values stay in memory; PostgreSQL's default 4MB would spill them."""

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return self._hash_record(exp.Anonymous(this="ROW", expressions=args))

    def whole_row_hash(self, alias: str | exp.Identifier) -> exp.Expr:
        """``hash_record_extended(q, 0)``: the row of relation ``q`` as a record (every
        column's type needs a hash function: json, xml, point... fail)."""
        ident = exp.to_identifier(alias, quoted=True) if isinstance(alias, str) else alias
        return self._hash_record(exp.column(ident.copy()))

    def quantiles(self, arg: exp.Expr, fractions: list[float]) -> exp.Expr | None:
        points = exp.Array(expressions=[exp.Literal.number(repr(f)) for f in fractions])
        order = exp.Order(expressions=[exp.Ordered(this=arg, nulls_first=False)])
        return exp.WithinGroup(this=exp.PercentileDisc(this=points), expression=order)

    @staticmethod
    def _hash_record(record: exp.Expr) -> exp.Expr:
        return exp.Anonymous(
            this="hash_record_extended", expressions=[record, exp.Literal.number(0)]
        )
