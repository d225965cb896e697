"""Oracle Database."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects.base import Dialect


class Oracle(Dialect):
    """Oracle: ``ORA_HASH(expr, M - 1)`` buckets directly into [0, M).

    ORA_HASH takes one expression, so several keys are joined with ``||`` and a separator
    (Oracle treats NULL as the empty string there); ``NVL(..., 0)`` covers an all-NULL key.
    """

    name = "oracle"
    sqlglot_dialect = "oracle"
    HASH_FUNCTION = "ORA_HASH"
    HASH_IS_UNSIGNED = True
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    GROUPING_SETS = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        # Only used for hash sampling: the full 32-bit range ORA_HASH offers by default.
        return exp.Anonymous(this="ORA_HASH", expressions=[self._joined(args)])

    def bucket(self, args: list[exp.Expr], m: int) -> exp.Expr:
        hashed = exp.Anonymous(
            this="ORA_HASH", expressions=[self._joined(args), exp.Literal.number(m - 1)]
        )
        return exp.Anonymous(this="NVL", expressions=[hashed, exp.Literal.number(0)])

    def bucket_of_hash(self, hashed: exp.Expr, m: int) -> exp.Expr:
        return exp.Mod(
            this=exp.Anonymous(this="NVL", expressions=[hashed, exp.Literal.number(0)]),
            expression=exp.Literal.number(m),
        )

    def tablesample(self, table: exp.Expr, percent: float, seed: int | None) -> exp.Expr:
        # Oracle's row sample is SAMPLE (pct) [SEED (n)]: no method word, pct below 100.
        super().tablesample(table, min(percent, 99.999999), seed)
        table.args["sample"].set("method", None)
        return table

    @staticmethod
    def _joined(args: list[exp.Expr]) -> exp.Expr:
        joined = args[0]
        for arg in args[1:]:
            joined = exp.DPipe(
                this=exp.DPipe(this=joined, expression=exp.Literal.string(chr(31))),
                expression=arg,
            )
        return joined
