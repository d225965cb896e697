"""The ``ctid`` strategy: physical row ranges of one base table, no key needed.

PostgreSQL partitions are ranges of ``ctid`` pages (a TID range scan reads only its
pages); DuckDB partitions are ``rowid`` ranges, cut at row-group edges. Each row is read
once, so a whole plan costs about one scan of the table.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from sqlfeed.plans.context import Built, PlanContext
from sqlfeed.plans.model import Partition
from sqlfeed.sql import physical_partition_sqls

__all__ = ["DUCKDB_ROW_GROUP", "build", "problem", "reason"]

DUCKDB_ROW_GROUP = 122_880
"""Rows in a DuckDB row group: rowid partitions are cut at multiples of it."""


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Physical ranges need PostgreSQL or DuckDB, a plain scan of one base table, no key."""
    if ctx.engine.name not in ("postgres", "duckdb"):
        why = f"{ctx.engine.name} has no physical row address (PostgreSQL ctid, DuckDB rowid)"
    elif ctx.table is None:
        why = (
            "needs a plain filter over one table (no join, aggregate, DISTINCT, LIMIT, window, "
            "CTE or set operation)"
        )
    elif ctx.keys:
        why = "a key was given"
    elif ctx.base_table_info is None:
        why = f"{ctx.table.sql()} is not a base table (a view, or not found)"
    else:
        return None
    return f"strategy ctid: {why}"


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """The table whose physical rows the partitions read."""
    assert ctx.table is not None
    if auto:
        return (
            f"a plain scan of table {ctx.table.sql(ctx.engine.sqlglot_dialect)}, so "
            "each partition reads its own physical rows (one scan in all)"
        )
    return f"physical row ranges of {ctx.table.sql()}"


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """Up to ``m`` ranges of pages (PostgreSQL) or rowids (DuckDB); the last is open."""
    info = ctx.base_table_info
    assert info is not None
    assert ctx.table is not None
    extent, estimated = info
    parts = max(1, min(m, extent))
    cuts = [extent * i // parts for i in range(1, parts)]
    if ctx.engine.name == "duckdb" and extent >= parts * DUCKDB_ROW_GROUP:
        # Cut at row-group edges: a range across a row group decompresses all of it twice.
        aligned = {round(c / DUCKDB_ROW_GROUP) * DUCKDB_ROW_GROUP for c in cuts}
        cuts = sorted(c for c in aligned if 0 < c < extent)
    unit = "pages" if ctx.engine.name == "postgres" else "rowids"
    sqls = physical_partition_sqls(
        ctx.parsed, _conditions(ctx, cuts), dialect=ctx.engine, allow_unstable=allow_unstable
    )
    spans = list(zip([0, *cuts], [*cuts, extent], strict=True))
    return [
        Partition(
            i,
            sql,
            round(estimated * (hi - lo) / extent) if extent else 0,
            f"{unit} [{lo}, {hi}){' and beyond' if i == len(sqls) - 1 else ''}",
        )
        for i, (sql, (lo, hi)) in enumerate(zip(sqls, spans, strict=True))
    ], None


def _conditions(ctx: PlanContext, cuts: list[int]) -> list[exp.Expr]:
    """``address >= lo AND address < hi`` for each span between the cuts (open ends)."""
    assert ctx.table is not None
    alias = ctx.table.alias_or_name
    if ctx.engine.name == "postgres":
        address = exp.column("ctid", table=alias)

        def at(value: int) -> exp.Expr:
            kind = exp.DataType.build("tid", dialect="postgres", udt=True)
            return exp.cast(exp.Literal.string(f"({value},0)"), kind)
    else:
        address = exp.column("rowid", table=alias)

        def at(value: int) -> exp.Expr:
            return exp.Literal.number(value)

    conditions: list[exp.Expr] = []
    edges = [None, *cuts, None]
    for lo, hi in itertools.pairwise(edges):
        terms: list[exp.Expr] = []
        if lo is not None:
            terms.append(exp.GTE(this=address.copy(), expression=at(lo)))
        if hi is not None:
            terms.append(exp.LT(this=address.copy(), expression=at(hi)))
        conditions.append(exp.and_(*terms) if terms else exp.true())
    return conditions
