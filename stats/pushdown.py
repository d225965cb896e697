"""Statistics computed by the engine: aggregate SQL built with sqlglot for each dialect.

The statements are built around the described query, which each holds as a derived table
of its own text, as written (:class:`sqlfeed.stats.sqlvalues.Relation`): sqlglot never re-renders
it, so the engine reads exactly the query the user wrote.

Two statements, one scan of the query's rows each, covering every column at once:

1. counts, NULLs, NaNs, infinities, MIN and MAX (and, for floats, dates and timestamps,
   the count and extremes of the moment values, which decide their scaling);
2. every column's value counts in one grouped scan (:mod:`sqlfeed.stats.grouped`: ``GROUPING
   SETS``, or a cross join emulating it), from which window functions over the distinct
   values give distinct counts, top-k vocabularies, quantile boundaries, histograms,
   means and population variances (around the means: exact where one pass of sums of
   squares would lose precision). No ``COUNT(DISTINCT)``, no sort of the rows.

A list column is described by its elements (the values a feed puts in its ragged
tensor): the same two statements over the query unnested (``UNNEST``; DuckDB flattens
nested lists first), on PostgreSQL and DuckDB; elsewhere refused (``accumulate``
flattens lists on any engine). The grouped statement's rows hold the columns' values:
the caller's ``read`` returns them as the feeds read them.

Exactness rules:

* Boundary ``i`` of ``b`` buckets over ``n`` values is the value at position
  ``max(1, ceil(i * n / b))`` of the sorted values, computed in integer arithmetic: the
  distinct value whose running count first reaches it (no floating-point fraction, so
  ``ceil(0.14 * 50)`` being 8 in float64 cannot move it).
* Moments cannot overflow for finite inputs: each column's values are scaled by a power
  of two (exact) that brings them into [-1, 1] before they are summed or squared, and the
  result is scaled back in Python.
* NaN is counted (``nans``) and left out of MIN, MAX, moments, boundaries and histograms;
  infinities are counted (``infinities``), kept in MIN, MAX, boundaries and histograms,
  and left out of the moments, which describe the finite values. Non-finite values are
  written as SQL values of the engine (:mod:`sqlfeed.stats.sqlvalues`), never as bare words.
* Dates and timestamps have moments in days / microseconds since 1970 (:mod:`sqlfeed.stats.units`)
  on the engines :func:`sqlfeed.stats.sqlvalues.epoch_units` knows.
"""

from __future__ import annotations

import decimal
import fractions
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import Dialect, UnsupportedError, get_dialect
from sqlfeed.stats.grouped import Counted, Grouped, grouped_sql, read_grouped
from sqlfeed.stats.model import ColumnStats, FeatureStats, StatsSpec
from sqlfeed.stats.sqlvalues import (
    Relation,
    epoch_units,
    finite,
    float_literal,
    holds_non_finite,
    not_nan,
    raises_on_underflow,
)
from sqlfeed.stats.units import unit_of

__all__ = ["Runner", "compute_pushdown", "innermost", "kinds_of", "positions", "scale_exponent"]

Runner = Callable[[str], pa.Table]
"""Runs one query and returns its rows (``stats`` never imports the readers itself)."""

_ALIAS = "_stats_q"
_SCALE_LIMIT = 1000
"""Scaling exponents stay in [-1000, 1000], so that 2**-exponent is a normal double."""


def kinds_of(schema: pa.Schema, spec: StatsSpec) -> dict[str, str]:
    """Each column's kind: from the spec, else from its Arrow type.

    A list's kind comes from its elements'.
    """
    kinds = {}
    for field in schema:
        kind = spec.kinds.get(field.name)
        if kind is None:
            element = innermost(field.type)[0]
            numeric = (
                pa.types.is_integer(element)
                or pa.types.is_floating(element)
                or pa.types.is_decimal(element)
                or (pa.types.is_temporal(element) and not pa.types.is_interval(element))
            )
            kind = "numeric" if numeric else "categorical"
        kinds[field.name] = kind
    return kinds


def positions(n: int, buckets: int) -> list[int]:
    """The 1-based positions of the ``buckets - 1`` boundaries among ``n`` sorted values.

    Boundary ``i`` is the first value whose position reaches the fraction ``i / buckets``:
    ``max(1, ceil(i * n / buckets))``, in exact integer arithmetic.

    >>> positions(50, 100)[13]  # 0.14 * 50 = 7 exactly (float64 says 7.000000000000001)
    7
    """
    return [max(1, -(-i * n // buckets)) for i in range(1, buckets)]


def scale_exponent(low: float, high: float) -> int:
    """``e`` such that values in [low, high] times ``2**-e`` lie in [-1, 1] (clamped)."""
    bound = max(abs(low), abs(high))
    if bound == 0:
        return 0
    return min(max(math.frexp(bound)[1], -_SCALE_LIMIT), _SCALE_LIMIT)


@dataclass
class _Numeric:
    """How one numeric column is scanned, and what the scans found."""

    field: pa.Field
    value: exp.Expr
    """The column with NaN as NULL: what MIN, MAX, quantiles and histograms see."""
    moment: exp.Expr | None
    """The finite values as DOUBLE (non-finite as NULL), or None: no moments."""
    floating: bool
    """Whether NaN and infinities are possible (and counted)."""
    numbers: int = 0
    """Non-NULL, non-NaN values: the ones quantiles are taken over."""
    finite: int = 0
    low: float = 0.0
    high: float = 0.0
    scale: int = 0
    mean: float | None = None
    """The mean of the scaled values (``moment * 2**-scale``)."""
    exact: exp.Expr | None = None
    """The values as integers or decimals whose ``SUM`` the engine computes exactly (see
    :attr:`~sqlfeed.dialects.Dialect.EXACT_SUMS`), or None: the mean from the scaled sums."""
    total: Any = None
    """``SUM(exact)``, as the engine returned it."""


class _Query:
    """SQL over the relation, for one dialect."""

    def __init__(self, relation: str | exp.Expr, engine: Dialect) -> None:
        self.engine = engine
        self.relation = Relation(relation, _ALIAS, engine)

    def column(self, name: str) -> exp.Expr:
        return exp.column(exp.to_identifier(name, quoted=True), table=_ALIAS)

    def select(self, expressions: list[exp.Expr], where: exp.Expr | None = None) -> str:
        select = exp.select(*expressions).from_(self.relation.node.copy())
        if where is not None:
            select = select.where(where)
        return self.relation.render(select)

    def numeric(self, field: pa.Field) -> _Numeric:
        column, engine = self.column(field.name), self.engine
        floating = bool(pa.types.is_floating(field.type)) and holds_non_finite(engine)
        value: exp.Expr = column
        as_double = exp.cast(column.copy(), exp.DataType.Type.DOUBLE)
        moment: exp.Expr | None = as_double
        exact: exp.Expr | None = None
        if floating:
            value = _case(not_nan(column, engine), column)
            moment = _case(finite(column, engine), as_double)
        elif pa.types.is_temporal(field.type):
            exact = epoch_units(column, field.type, engine)
            moment = None if exact is None else exp.cast(exact, exp.DataType.Type.DOUBLE)
        elif pa.types.is_integer(field.type) or pa.types.is_decimal(field.type):
            exact = column
        numeric = _Numeric(field, value, moment, floating)
        if engine.EXACT_SUMS and exact is not None:
            numeric.exact = exact.copy()
        return numeric

    def scaled(self, column: _Numeric) -> exp.Expr:
        """``moment * 2**-scale``; values whose product would round to zero count as zero.

        PostgreSQL raises "underflow" on such a product instead.
        """
        assert column.moment is not None
        factor = float_literal(math.ldexp(1.0, -column.scale), self.engine)
        product = exp.Mul(this=exp.paren(column.moment.copy()), expression=factor)
        tiny = math.ldexp(1.0, max(column.scale - _UNDERFLOW, -1022))
        return self.unless_tiny(column.moment, tiny, product)

    def square(self, deviation: exp.Expr) -> exp.Expr:
        """``deviation ** 2``, zero where it would underflow."""
        product = exp.Mul(this=exp.paren(deviation.copy()), expression=exp.paren(deviation.copy()))
        return self.unless_tiny(deviation, math.ldexp(1.0, -_UNDERFLOW // 2), product)

    def unless_tiny(self, value: exp.Expr, tiny: float, then: exp.Expr) -> exp.Expr:
        if not raises_on_underflow(self.engine):
            return then  # IEEE engines round such a product to zero themselves
        small = exp.LT(this=exp.Abs(this=value.copy()), expression=float_literal(tiny, self.engine))
        return _case(small, exp.Literal.number("0.0"), otherwise=then)


_UNDERFLOW = 1070
"""Products below ``2**-1070`` are treated as zero: they are negligible next to the values
(scaled into [-1, 1]) and would round to zero, which PostgreSQL refuses."""


def _case(condition: exp.Expr, then: exp.Expr, otherwise: exp.Expr | None = None) -> exp.Expr:
    return exp.Case(ifs=[exp.If(this=condition, true=then.copy())], default=otherwise)


def compute_pushdown(
    relation_sql: str | exp.Expr,
    schema: pa.Schema,
    run: Runner,
    spec: StatsSpec | None = None,
    *,
    dialect: str | Dialect = "duckdb",
    method: str = "pushdown",
    progress: Callable[[str], None] | None = None,
    read: Runner | None = None,
) -> FeatureStats:
    """Statistics of ``relation_sql``'s columns, computed by the engine.

    A list column is described by its elements (``ColumnStats.elements``), from the
    relation unnested (PostgreSQL, DuckDB; elsewhere refused).

    Args:
        relation_sql: a SELECT whose output column names are distinct: its text, which
            every statement embeds as written (the engine parses exactly that text;
            sqlglot never re-renders it), or a tree, which sqlglot renders with each
            statement (for an engine where the caller renders the query from its tree).
        schema: its Arrow schema (decides numeric or categorical).
        run: runs a query, returns a ``pyarrow.Table``.
        spec: which columns and how (default: all, inferred).
        dialect: the engine.
        method: recorded in the result (``pushdown``, or ``sample`` over a sample query).
        progress: called with the name of each step.
        read: runs the grouped statement, whose rows hold the columns' values: it must
            return them as the feeds read them (e.g. a PostgreSQL ``jsonb`` as its JSON
            text, not a driver's dict), so that a vocabulary holds the values fed
            (default: ``run``).
    """
    spec = spec or StatsSpec()
    spec.check_columns(schema.names)
    engine = get_dialect(dialect)
    query = _Query(relation_sql, engine)
    kinds = kinds_of(schema, spec)
    described = [f for f in schema if kinds[f.name] != "skip"]
    lists = [f for f in described if _is_list(f.type)]
    scalars = [f for f in described if not _is_list(f.type)]
    numeric = [query.numeric(f) for f in scalars if kinds[f.name] == "numeric"]
    categorical = [f for f in scalars if kinds[f.name] == "categorical"]
    say = progress or (lambda step: None)

    say("counts, minima and maxima")
    rows, result = _first_scan(query, scalars, numeric, kinds, spec.label, run)
    say("value counts: distinct counts, vocabularies, quantiles, histograms, moments")
    _grouped_scan(query, numeric, categorical, result, spec, read or run)
    for field in lists:
        say(f"elements of list column {field.name}")
        result[field.name] = _elements(query, field, kinds[field.name], spec, run, read)
    ordered = {f.name: result[f.name] for f in described}
    text = relation_sql if isinstance(relation_sql, str) else engine.sql(relation_sql)
    return FeatureStats(ordered, rows, method, dialect=engine.name, sql=text, label=spec.label)


def _is_list(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
    )


def innermost(arrow_type: pa.DataType) -> tuple[pa.DataType, int]:
    """A list type's innermost value type and its list depth (a scalar type and 0)."""
    depth = 0
    while _is_list(arrow_type):
        arrow_type, depth = arrow_type.value_type, depth + 1
    return arrow_type, depth


def _elements(
    query: _Query, field: pa.Field, kind: str, spec: StatsSpec, run: Runner, read: Runner | None
) -> ColumnStats:
    """The statistics of a list column's innermost values, as the feeds give them."""
    element, depth = innermost(field.type)
    name, engine = field.name, query.engine
    value = engine.unnest_elements(query.column(name), depth)
    if value is None:  # PostgreSQL's unnest flattens every level: one level deep only
        raise UnsupportedError(
            f"statistics of list column {name!r} need its elements, which sqlfeed unnests in "
            f"SQL on PostgreSQL and DuckDB only: use method='accumulate' or leave it out"
        )
    unnested = exp.Unnest(expressions=[value]).as_(exp.to_identifier(name, quoted=True))
    sql = query.select([unnested])
    sub = StatsSpec(
        kinds={name: kind},
        label=spec.label if spec.label == name else None,
        buckets=spec.buckets,
        top_k=spec.top_k,
    )
    found = compute_pushdown(
        sql, pa.schema([pa.field(name, element)]), run, sub, dialect=engine, read=read
    ).columns[name]
    found.arrow_type, found.elements = str(field.type), True
    return found


def _first_scan(
    query: _Query,
    described: list[pa.Field],
    numeric: list[_Numeric],
    kinds: dict[str, str],
    label: str | None,
    run: Runner,
) -> tuple[int, dict[str, ColumnStats]]:
    """The row count; each column's counts, NULLs, NaNs, infinities, distinct count, MIN, MAX."""
    first: list[exp.Expr] = [query.engine.count_star()]
    for field in described:
        column = query.column(field.name)
        first.append(exp.Count(this=column.copy()))
    for c in numeric:
        first += [exp.Min(this=c.value.copy()), exp.Max(this=c.value.copy())]
        if c.floating:
            first.append(exp.Count(this=c.value.copy()))
        if c.moment is not None and not _exact_number(c):
            first += [
                exp.Count(this=c.moment.copy()),
                exp.Min(this=c.moment.copy()),
                exp.Max(this=c.moment.copy()),
            ]
        if c.exact is not None:
            first.append(exp.Sum(this=c.exact.copy()))
    values = _one_row(run(query.select(first)))
    rows = int(values.pop(0) or 0)
    result: dict[str, ColumnStats] = {}
    for field in described:
        non_null = int(values.pop(0) or 0)
        result[field.name] = ColumnStats(
            name=field.name,
            kind=kinds[field.name],
            arrow_type=str(field.type),
            count=rows,
            nulls=rows - non_null,
            distinct=0,
            label=field.name == label,
        )
    for c in numeric:
        stats = result[c.field.name]
        stats.min, stats.max = values.pop(0), values.pop(0)
        stats.unit = unit_of(c.field.type)
        c.numbers = int(values.pop(0) or 0) if c.floating else stats.count - stats.nulls
        stats.nans = stats.count - stats.nulls - c.numbers
        if c.moment is not None:
            if _exact_number(c):  # MIN and MAX as doubles: the moments' extremes
                c.finite, low, high = c.numbers, stats.min, stats.max
            else:
                c.finite = int(values.pop(0) or 0)
                low, high = values.pop(0), values.pop(0)
            if c.finite:
                c.low, c.high = float(low), float(high)
                c.scale = scale_exponent(c.low, c.high)
            if c.floating:
                stats.infinities = c.numbers - c.finite
        if c.exact is not None:
            c.total = values.pop(0)
        if c.floating and not stats.nans:  # the later scans need no NaN or finite tests
            c.value = query.column(c.field.name)
            if not stats.infinities:
                c.moment = exp.cast(c.value.copy(), exp.DataType.Type.DOUBLE)
    return rows, result


def _exact_number(c: _Numeric) -> bool:
    """An integer or decimal column: its moment values are its values as doubles.

    So their count, MIN and MAX follow from the column's own (no aggregates over casts).
    """
    return bool(pa.types.is_integer(c.field.type) or pa.types.is_decimal(c.field.type))


def _grouped_scan(
    query: _Query,
    numeric: list[_Numeric],
    categorical: list[pa.Field],
    result: dict[str, ColumnStats],
    spec: StatsSpec,
    run: Runner,
) -> None:
    """Distinct counts, vocabularies, boundaries, histograms and moments: one statement."""
    columns: list[Grouped] = []
    for c in numeric:
        scaled = query.scaled(c) if c.finite and c.low != c.high else None
        columns.append(Grouped(c.field.name, 0, c.numbers, scaled))
        if c.finite and c.low == c.high:  # one value: exact, no arithmetic
            c.mean = math.ldexp(c.low, -c.scale)
            result[c.field.name].variance = 0.0
    columns += [Grouped(f.name, spec.top_k) for f in categorical]
    columns = [c for c in columns if result[c.name].count > result[c.name].nulls]
    if not columns:
        return
    sql = grouped_sql(query.relation, columns, spec.buckets, query.square)
    counted = read_grouped(run(sql), columns, spec.buckets)
    moments = {c.field.name: c for c in numeric}
    for column, found in zip(columns, counted, strict=True):
        stats = result[column.name]
        stats.distinct = min(found.distinct, stats.count - stats.nulls)
        if column.name in moments:
            stats.boundaries, stats.histogram = found.boundaries, found.histogram
            _moments(moments[column.name], stats, found)
        else:
            stats.vocabulary, stats.vocabulary_counts = found.vocabulary, found.vocabulary_counts
            stats.other_count = stats.count - stats.nulls - sum(found.vocabulary_counts)


def _moments(c: _Numeric, stats: ColumnStats, found: Counted) -> None:
    """The mean and variance of a column from its scaled sums (clamped into [low, high]).

    The mean of an integer, decimal, date or timestamp column is its exact sum over its
    count, rounded once, where the engine sums exactly.
    """
    if found.total is not None and c.finite:
        c.mean = found.total / c.finite
        if found.squares is not None:
            stats.variance = _unscaled(found.squares / c.finite, 2 * c.scale)
    if c.mean is not None:
        stats.mean = min(max(math.ldexp(c.mean, c.scale), c.low), c.high)
    exact = _exact(c.total)
    if exact is not None and c.finite:
        stats.mean = float(exact / c.finite)


def _exact(total: Any) -> fractions.Fraction | None:
    """An exact sum as a fraction; None when absent or already rounded (a float)."""
    if isinstance(total, int | decimal.Decimal):
        return fractions.Fraction(total)
    return None


def _unscaled(value: float, exponent: int) -> float:
    """``value * 2**exponent``; infinity when it is beyond the largest double."""
    try:
        return max(math.ldexp(value, exponent), 0.0)
    except OverflowError:
        return math.inf


def _one_row(table: pa.Table) -> list[Any]:
    """The first row by position (aggregate columns may share a name, e.g. ``count``)."""
    if not table.num_rows:
        return [None] * table.num_columns
    return [table.column(i)[0].as_py() for i in range(table.num_columns)]


def _python(values: list[Any]) -> list[Any]:
    return [float(v) if isinstance(v, decimal.Decimal) else v for v in values]
