"""Every column's value counts in one scan, and the statistics that follow from them.

One statement groups the rows by each described column separately, so each column's
distinct values come with their counts:

* where the engine has ``GROUPING SETS`` (:attr:`sqlfeed.dialects.Dialect.GROUPING_SETS`):
  ``GROUP BY GROUPING SETS (("c1"), ("c2"), ...)``, one hash aggregation per column over
  a single scan;
* elsewhere (MySQL/MariaDB, whose ``WITH ROLLUP`` groups by prefixes, and SQLite): the
  rows cross joined with one row per column, grouped by
  ``CASE WHEN i = 0 THEN "c1" END, CASE WHEN i = 1 THEN "c2" END, ...``: the same groups,
  still one scan of the query (each row is counted once per column).

Window functions over those groups (not over the rows) then give, per column:

* the distinct count: the number of non-NULL groups (NaN is one group; -0.0 and 0.0 are
  one, as the engine's equality says);
* the top-k vocabulary: ``ROW_NUMBER() OVER (ORDER BY count DESC, value)``;
* the quantile boundaries: the running count in value order; the group holding sorted
  position ``p`` is the one whose running count ``cum`` satisfies ``cum - n < p <= cum``.
  Only the groups holding a boundary position are returned: the ``i``-th of ``b``
  boundaries over ``N`` values is at ``ceil(i * N / b)``, so a group holds one exactly
  when ``(cum - n) * b DIV N < min(b - 1, cum * b DIV N)`` (integer arithmetic);
* the histogram: the values below boundary ``j`` are ``cum - n`` of its group;
* the sum of the scaled moment values, ``SUM(n * x)``, and the sum of squared deviations
  from their mean, ``SUM(n * (x - mean)**2)``.

No ``COUNT(DISTINCT)``, no sort of the rows: sorts are of distinct values only.
"""

from __future__ import annotations

import decimal
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import Dialect
from sqlfeed.stats.sqlvalues import Relation

__all__ = ["Counted", "Grouped", "grouped_sql", "read_grouped"]

_I, _N, _X = "_stats_i", "_stats_n", "_stats_x"
_O = "_stats_o"
_CUM, _RANK, _DISTINCT = "_stats_cum", "_stats_rank", "_stats_distinct"
_SUM, _FINITE, _SQUARES = "_stats_sum", "_stats_finite", "_stats_squares"
_ALIAS = "_stats_q"
_KEYS = "_stats_k"


@dataclass
class Grouped:
    """One column of the grouped statement, and what it is asked for.

    Attributes:
        name: the column's output name.
        top: groups kept in order of count (a categorical column's vocabulary), or 0: a
            numeric column, whose groups are ordered by value instead.
        numbers: the non-NULL, non-NaN values the boundaries are taken over (0: none).
        scaled: the column's moment value scaled into [-1, 1], over the grouped relation
            (named ``_stats_q``), or None: no moments.
    """

    name: str
    top: int = 0
    numbers: int = 0
    scaled: exp.Expr | None = None


@dataclass
class Counted:
    """What the grouped statement found for one column."""

    distinct: int = 0
    vocabulary: list[Any] = field(default_factory=list)
    vocabulary_counts: list[int] = field(default_factory=list)
    boundaries: list[Any] = field(default_factory=list)
    histogram: list[int] = field(default_factory=list)
    total: float | None = None
    """``SUM(n * x)`` of the scaled moment values."""
    squares: float | None = None
    """``SUM(n * (x - mean)**2)``, the mean being ``total`` over the finite count."""


def _column(name: str, table: str | None = _ALIAS) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True), table=table)


def _plain(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _window(
    this: exp.Expr, order: Sequence[exp.Expr] | None = None, running: bool = False
) -> exp.Window:
    spec = None
    if running:  # every row of the partition up to this one (not its peers after it)
        spec = exp.WindowSpec(
            kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"
        )
    return exp.Window(
        this=this,
        partition_by=[_plain(_I)],
        order=exp.Order(expressions=list(order)) if order else None,
        spec=spec,
        over="OVER",
    )


def _derived(select: exp.Select) -> exp.Subquery:
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(_ALIAS)))


def _groups(relation: exp.Subquery, columns: list[Grouped], engine: Dialect) -> exp.Select:
    """Each column's distinct values and their counts (NULL groups included), one scan."""
    count = engine.count_star().as_(_N)
    if engine.GROUPING_SETS:
        sets = [exp.paren(_column(c.name)) for c in columns]
        select = exp.select(*[_column(c.name).as_(c.name) for c in columns], count)
        select = select.from_(relation.copy())
        select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
        return select
    keys = (
        exp.union(
            *[exp.select(exp.Literal.number(i).as_(_I)) for i in range(len(columns))],
            distinct=False,
        )
        if len(columns) > 1
        else exp.select(exp.Literal.number(0).as_(_I))
    )
    picked = [
        exp.Case(
            ifs=[
                exp.If(
                    this=exp.EQ(this=exp.column(_I, table=_KEYS), expression=exp.Literal.number(i)),
                    true=_column(c.name),
                )
            ]
        )
        for i, c in enumerate(columns)
    ]
    select = exp.select(*[p.as_(c.name) for p, c in zip(picked, columns, strict=True)], count)
    select = select.from_(relation.copy()).join(
        exp.Subquery(this=keys, alias=exp.TableAlias(this=exp.to_identifier(_KEYS))),
        join_type="CROSS",
    )
    return select.group_by(*[p.copy() for p in picked])


def _numbered(groups: exp.Select, columns: list[Grouped]) -> exp.Select:
    """The non-NULL groups, each with its column's number ``_stats_i`` and moment value."""
    present = [exp.Not(this=exp.Is(this=_column(c.name), expression=exp.null())) for c in columns]
    which = exp.Case(
        ifs=[exp.If(this=p.copy(), true=exp.Literal.number(i)) for i, p in enumerate(present)]
    )
    moments = [
        exp.If(this=p.copy(), true=c.scaled.copy())
        for p, c in zip(present, columns, strict=True)
        if c.scaled is not None
    ]
    nothing = exp.cast(exp.null(), exp.DataType.Type.DOUBLE)  # typed: PostgreSQL says text
    value: exp.Expr = exp.Case(ifs=moments) if moments else nothing
    names = [_column(c.name).as_(c.name) for c in columns]
    ranked = [p for p, c in zip(present, columns, strict=True) if c.top]
    by_count: exp.Expr = exp.null()
    if ranked:
        categorical = exp.or_(*[p.copy() for p in ranked])
        by_count = exp.Case(ifs=[exp.If(this=categorical, true=_column(_N))])
    count = _column(_N).as_(_N)
    select = exp.select(which.as_(_I), *names, count, value.as_(_X), by_count.as_(_O))
    return select.from_(_derived(groups)).where(exp.or_(*present))


def _windows(numbered: exp.Select, columns: list[Grouped]) -> exp.Select:
    """Per group: running count in value order, rank by count, and per-column totals."""
    # One order serves both running counts and ranks (one sort): numeric columns by value;
    # categorical ones by count (``_stats_o``, NULL for the numeric ones), then by value.
    # Within a partition the other keys are all NULL: where NULLs sort is moot, and MySQL's
    # own NULL order is asked for (it cannot be told otherwise in a window).
    numeric = [exp.Ordered(this=_plain(c.name), nulls_first=True) for c in columns if not c.top]
    ranked = [exp.Ordered(this=_plain(c.name), nulls_first=True) for c in columns if c.top]
    order = [*numeric, exp.Ordered(this=_plain(_O), desc=True, nulls_first=False), *ranked]
    weighted = exp.Mul(this=_plain(_N), expression=_plain(_X))
    finite = exp.Case(
        ifs=[
            exp.If(
                this=exp.Not(this=exp.Is(this=_plain(_X), expression=exp.null())), true=_plain(_N)
            )
        ]
    )
    names = [_plain(c.name) for c in columns]
    select = exp.select(
        _plain(_I),
        *names,
        _plain(_N),
        _plain(_X),
        _window(exp.Sum(this=_plain(_N)), order=order, running=True).as_(_CUM),
        _window(exp.RowNumber(), order=[o.copy() for o in order]).as_(_RANK),
        _window(exp.Count(this=exp.Star())).as_(_DISTINCT),
        _window(exp.Sum(this=weighted)).as_(_SUM),
        _window(exp.Sum(this=finite)).as_(_FINITE),
    )
    return select.from_(_derived(numbered))


def _squares(
    windows: exp.Select, columns: list[Grouped], square: Callable[[exp.Expr], exp.Expr]
) -> exp.Select:
    """Adds each column's sum of squared deviations from its mean."""
    mean = exp.Div(this=_plain(_SUM), expression=_plain(_FINITE))
    deviation = exp.Sub(this=_plain(_X), expression=mean)
    weighted = exp.Mul(this=_plain(_N), expression=exp.paren(square(deviation)))
    squares = _window(exp.Sum(this=weighted))
    names = [_plain(c.name) for c in columns]
    return exp.select(
        _plain(_I),
        *names,
        _plain(_N),
        _plain(_CUM),
        _plain(_RANK),
        _plain(_DISTINCT),
        _plain(_SUM),
        squares.as_(_SQUARES),
    ).from_(_derived(windows))


def _kept(i: int, column: Grouped, buckets: int, engine: Dialect) -> exp.Expr:
    """Whether a group of column ``i`` is returned.

    It is when in its top, or the first by value, or holding a boundary.
    """
    keep: exp.Expr = exp.LTE(this=_plain(_RANK), expression=exp.Literal.number(column.top))
    if not column.top:
        keep = exp.EQ(this=_plain(_CUM), expression=_plain(_N))
    if column.numbers:
        b, total = exp.Literal.number(buckets), exp.Literal.number(column.numbers)
        before = exp.Sub(this=_plain(_CUM), expression=_plain(_N))
        low = engine.integer_division(exp.Mul(this=exp.paren(before), expression=b), total)
        high = engine.integer_division(
            exp.Mul(this=_plain(_CUM), expression=b.copy()), total.copy()
        )
        holds = exp.and_(
            exp.LT(this=low, expression=exp.Literal.number(buckets - 1)),
            exp.LT(this=low.copy(), expression=high),
        )
        keep = exp.or_(keep, holds)
    which = exp.EQ(this=_plain(_I), expression=exp.Literal.number(i))
    return exp.and_(which, exp.paren(keep))


def grouped_sql(
    relation: Relation,
    columns: list[Grouped],
    buckets: int,
    square: Callable[[exp.Expr], exp.Expr],
) -> str:
    """The one statement: per column, its top groups and the groups holding boundaries.

    Args:
        relation: the query as a derived table named ``_stats_q`` (its own text embedded
            as written, see :class:`sqlfeed.stats.sqlvalues.Relation`), and its engine.
        columns: the columns, at least one; names distinct.
        buckets: quantile buckets.
        square: ``x * x`` of an expression, safe on the engine (underflow).
    """
    engine = relation.engine
    numbered = _numbered(_groups(relation.node, columns, engine), columns)
    squares = _squares(_windows(numbered, columns), columns, square)
    kept = [_kept(i, c, buckets, engine) for i, c in enumerate(columns)]
    select = exp.select(exp.Star()).from_(_derived(squares)).where(exp.or_(*kept))
    return relation.render(select)


def read_grouped(table: pa.Table, columns: list[Grouped], buckets: int) -> list[Counted]:
    """The statistics of each column from the rows of :func:`grouped_sql`."""
    rows = table.to_pylist() if table.num_rows else []
    found = [Counted() for _ in columns]
    per_column: list[list[dict[str, Any]]] = [[] for _ in columns]
    for row in rows:
        per_column[int(row[_I])].append(row)
    for column, counted, mine in zip(columns, found, per_column, strict=True):
        if not mine:
            continue
        first = mine[0]
        counted.distinct = int(first[_DISTINCT])
        counted.total = _float(first[_SUM])
        counted.squares = _float(first[_SQUARES])
        if column.top:
            top = sorted((r for r in mine if int(r[_RANK]) <= column.top), key=lambda r: r[_RANK])
            counted.vocabulary = _python([r[column.name] for r in top])
            counted.vocabulary_counts = [int(r[_N]) for r in top]
        elif column.numbers:
            _boundaries(counted, column, mine, buckets)
    return found


def _boundaries(
    counted: Counted, column: Grouped, rows: list[dict[str, Any]], buckets: int
) -> None:
    """Boundaries at positions ``ceil(i * N / b)``, and the histogram between them."""
    wanted = [max(1, -(-i * column.numbers // buckets)) for i in range(1, buckets)]
    ordered = sorted(rows, key=lambda r: int(r[_CUM]))
    values, below = [], []
    at = 0
    for p in wanted:
        while int(ordered[at][_CUM]) < p:
            at += 1
        values.append(ordered[at][column.name])
        below.append(int(ordered[at][_CUM]) - int(ordered[at][_N]))
    counted.boundaries = _python(values)
    edges = [0, *below, column.numbers]
    counted.histogram = [high - low for low, high in itertools.pairwise(edges)]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _python(values: list[Any]) -> list[Any]:
    return [float(v) if isinstance(v, decimal.Decimal) else v for v in values]
