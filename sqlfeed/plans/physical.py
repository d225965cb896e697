"""The ``ctid`` strategy: physical row ranges of one base table, no key needed.

PostgreSQL partitions are ranges of ``ctid`` pages (a TID range scan reads only its
pages); DuckDB partitions are ``rowid`` ranges, cut at row-group edges; SQLite partitions
are ``rowid`` ranges between ``MIN(rowid)`` and ``MAX(rowid)`` (a rowid b-tree range
search; WITHOUT ROWID tables are refused). Each row is read once, so a whole plan costs
about one scan of the table. Every row has exactly one address and the first and last
ranges are open, so the partitions add up to exactly the query's rows (NULLs included:
the address is never NULL, and the query's own WHERE is kept in every partition).
"""

from __future__ import annotations

import itertools
import re

from sqlglot import exp

from sqlfeed.dialects import Dialect, get_dialect
from sqlfeed.dialects.duckdb import ROW_GROUP
from sqlfeed.plans.context import Built, PlanContext
from sqlfeed.plans.model import Partition
from sqlfeed.plans.spans import template
from sqlfeed.sql import ParsedQuery, physical_partition_sqls, rendering_problem

__all__ = [
    "DUCKDB_ROW_GROUP",
    "address_conditions",
    "build",
    "problem",
    "range_sqls",
    "reason",
]

DUCKDB_ROW_GROUP = ROW_GROUP
"""Rows in a DuckDB row group: rowid partitions are cut at multiples of it."""
_PLACEHOLDERS = (738_291_046_153, 738_291_046_171)
_PLACEHOLDER_TEXT = re.compile("|".join(str(p) for p in _PLACEHOLDERS))


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Physical ranges need PostgreSQL, DuckDB or SQLite, a plain scan of one base table, no key.

    The table must have a row address (not a view, not a WITHOUT ROWID table).
    """
    if not ctx.engine.PHYSICAL_ADDRESS:
        why = (
            f"{ctx.engine.name} has no physical row address (PostgreSQL ctid, DuckDB or "
            "SQLite rowid)"
        )
    elif ctx.table is None:
        why = (
            "needs a plain filter over one table (no join, aggregate, DISTINCT, LIMIT, window, "
            "CTE or set operation)"
        )
    elif ctx.keys:
        why = "a key was given"
    elif (unfaithful := rendering_problem(ctx.parsed)) is not None:
        why = f"a row range must go inside the query, but {unfaithful}: use hash or range"
    elif isinstance(ctx.physical, str):
        why = ctx.physical
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
    """Up to ``m`` ranges of pages (PostgreSQL) or rowids (DuckDB, SQLite); both ends open."""
    extent = ctx.physical
    assert not isinstance(extent, str)
    assert ctx.table is not None
    span = extent.high - extent.low
    parts = max(1, min(m, span))
    cuts = [extent.low + span * i // parts for i in range(1, parts)]
    group = ctx.engine.ROW_GROUP_ROWS
    if group is not None and span >= parts * group:
        # Cut at row-group edges: a range across a row group decompresses all of it twice.
        aligned = {round(c / group) * group for c in cuts}
        cuts = sorted(c for c in aligned if extent.low < c < extent.high)
    address = exp.column(extent.address, table=ctx.table.alias_or_name)
    sqls = range_sqls(ctx.parsed, ctx.engine, address, cuts, allow_unstable)
    merged = range_spans(ctx.parsed, ctx.engine, address, cuts, allow_unstable)
    rows = extent.rows if extent.rows is not None else ctx.counted_rows
    spans = list(zip([extent.low, *cuts], [*cuts, extent.high], strict=True))
    return [
        Partition(
            i,
            sql,
            round(rows * (hi - lo) / span) if span and rows is not None else None,
            f"{extent.unit} [{lo}, {hi}){' and beyond' if i == len(sqls) - 1 else ''}",
            span=merged[i],
        )
        for i, (sql, (lo, hi)) in enumerate(zip(sqls, spans, strict=True))
    ], None


def range_spans(
    query: str | ParsedQuery,
    engine: Dialect,
    address: exp.Column,
    cuts: list[int],
    allow_unstable: bool = False,
) -> list[tuple[str, int, int] | None]:
    """The span (:mod:`sqlfeed.plans.spans`) of each partition of :func:`range_sqls`.

    The closed ranges between cuts share one template, so a reader that takes several
    adjacent ones runs one query; the open first and last ranges have none.
    """
    none: list[tuple[str, int, int] | None] = [None] * (len(cuts) + 1)
    if len(cuts) < 3:  # fewer than two closed ranges: nothing to merge
        return none

    def render(low: int, high: int) -> str:
        return range_sqls(query, engine, address, [low, high], allow_unstable)[1]

    text = template(render, cuts[0], cuts[1])
    if text is None:
        return none
    return [None, *((text, low, high) for low, high in itertools.pairwise(cuts)), None]


def range_sqls(
    query: str | ParsedQuery,
    engine: Dialect,
    address: exp.Column,
    cuts: list[int],
    allow_unstable: bool = False,
) -> list[str]:
    """The query once per span between ``cuts`` (see :func:`address_conditions`).

    Only three shapes are rendered (first, middle, last span), with placeholder bounds
    that are then replaced as text: rendering each of M partitions costs about a
    millisecond. Falls back to rendering each when a placeholder is not found once.
    """
    shapes = physical_partition_sqls(
        query,
        address_conditions(engine, address, list(_PLACEHOLDERS) if len(cuts) > 1 else []),
        dialect=engine,
        allow_unstable=allow_unstable,
    )
    low, high = (str(p) for p in _PLACEHOLDERS)
    counts = [(shape.count(low), shape.count(high)) for shape in shapes]
    if counts != [(1, 0), (1, 1), (0, 1)]:
        return physical_partition_sqls(
            query,
            address_conditions(engine, address, cuts),
            dialect=engine,
            allow_unstable=allow_unstable,
        )
    first, middle, last = shapes

    def fill(shape: str, lo: int, hi: int) -> str:
        values = {low: str(lo), high: str(hi)}
        return _PLACEHOLDER_TEXT.sub(lambda match: values[match.group()], shape)

    spans = itertools.pairwise(cuts)
    return [
        fill(first, cuts[0], 0),
        *(fill(middle, lo, hi) for lo, hi in spans),
        fill(last, 0, cuts[-1]),
    ]


def address_conditions(
    engine: str | Dialect, address: exp.Column, cuts: list[int]
) -> list[exp.Expr]:
    """``address >= lo AND address < hi`` for each span between the cuts.

    The first and last are open-ended, so together they cover every row once. Each cut is
    written by the dialect's :meth:`~sqlfeed.dialects.Dialect.row_address`: PostgreSQL compares
    ctids with ``'(page,0)'::tid`` (a TID range scan from PostgreSQL 14), the others rowids.
    """
    at = get_dialect(engine).row_address

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
