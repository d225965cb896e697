"""Statistics computed by the engine: aggregate SQL built with sqlglot for each dialect.

Three scans of the query's rows, each covering every column at once:

1. counts, NULLs, NaNs, infinities, distinct counts, MIN and MAX;
2. means, and quantile boundaries where the engine has a discrete quantile aggregate
   (PostgreSQL ``percentile_disc``, DuckDB ``quantile_disc``); where it has none (MySQL,
   SQLite), the values at the boundary positions of a ``ROW_NUMBER()`` ordering, one
   query per column;
3. population variances (around the means of scan 2: exact where one pass of sums of
   squares would lose precision) and histogram counts between the boundaries;

and one ``GROUP BY ... ORDER BY COUNT(*) DESC LIMIT k`` per categorical column.

Exactness rules:

* Boundary ``i`` of ``b`` buckets over ``n`` values is the value at position
  ``max(1, ceil(i * n / b))`` of the sorted values, computed in integer arithmetic. An
  engine's quantile aggregate is asked for the fraction ``(position - 1/2) / n``, the
  middle of the interval of fractions that select that position, so the engine's own
  floating-point rounding (``ceil(0.14 * 50)`` is 8 in float64) cannot move it.
* Moments cannot overflow for finite inputs: each column's values are scaled by a power
  of two (exact) that brings them into [-1, 1] before they are summed or squared, and the
  result is scaled back in Python.
* NaN is counted (``nans``) and left out of MIN, MAX, moments, boundaries and histograms;
  infinities are counted (``infinities``), kept in MIN, MAX, boundaries and histograms,
  and left out of the moments, which describe the finite values. Non-finite values are
  written as SQL values of the engine (:mod:`stats.sqlvalues`), never as bare words.
* Dates and timestamps have moments in days / microseconds since 1970 (:mod:`stats.units`)
  on the engines :func:`stats.sqlvalues.epoch_units` knows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dialects import Dialect, get_dialect
from stats.model import ColumnStats, FeatureStats, StatsSpec
from stats.sqlvalues import (
    epoch_units,
    finite,
    float_literal,
    holds_non_finite,
    not_nan,
    raises_on_underflow,
)
from stats.units import unit_of

__all__ = ["Runner", "compute_pushdown", "kinds_of", "positions", "scale_exponent"]

Runner = Callable[[str], pa.Table]
"""Runs one query and returns its rows (``stats`` never imports the readers itself)."""

_ALIAS = "_stats_q"
_SCALE_LIMIT = 1000
"""Scaling exponents stay in [-1000, 1000], so that 2**-exponent is a normal double."""


def kinds_of(schema: pa.Schema, spec: StatsSpec) -> dict[str, str]:
    """Each column's kind: from the spec, else from its Arrow type."""
    kinds = {}
    for field in schema:
        kind = spec.kinds.get(field.name)
        if kind is None:
            numeric = (
                pa.types.is_integer(field.type)
                or pa.types.is_floating(field.type)
                or pa.types.is_decimal(field.type)
                or (pa.types.is_temporal(field.type) and not pa.types.is_interval(field.type))
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


class _Query:
    """SQL over the relation, for one dialect."""

    def __init__(self, relation_sql: str, engine: Dialect) -> None:
        self.engine = engine
        self.relation = exp.Subquery(
            this=exp.maybe_parse(relation_sql, dialect=engine.sqlglot_dialect),
            alias=exp.TableAlias(this=exp.to_identifier(_ALIAS)),
        )

    def column(self, name: str) -> exp.Expr:
        return exp.column(exp.to_identifier(name, quoted=True), table=_ALIAS)

    def select(self, expressions: list[exp.Expr], where: exp.Expr | None = None) -> str:
        select = exp.select(*expressions).from_(self.relation.copy())
        if where is not None:
            select = select.where(where)
        return self.engine.sql(select)

    def numeric(self, field: pa.Field) -> _Numeric:
        column, engine = self.column(field.name), self.engine
        floating = bool(pa.types.is_floating(field.type)) and holds_non_finite(engine)
        value: exp.Expr = column
        as_double = exp.cast(column.copy(), exp.DataType.Type.DOUBLE)
        moment: exp.Expr | None = as_double
        if floating:
            value = _case(not_nan(column, engine), column)
            moment = _case(finite(column, engine), as_double)
        elif pa.types.is_temporal(field.type):
            units = epoch_units(column, field.type, engine)
            moment = None if units is None else exp.cast(units, exp.DataType.Type.DOUBLE)
        return _Numeric(field, value, moment, floating)

    def scaled(self, column: _Numeric) -> exp.Expr:
        """``moment * 2**-scale``; values whose product would round to zero count as zero
        (PostgreSQL raises "underflow" on such a product instead)."""
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
    relation_sql: str,
    schema: pa.Schema,
    run: Runner,
    spec: StatsSpec | None = None,
    *,
    dialect: str | Dialect = "duckdb",
    method: str = "pushdown",
    progress: Callable[[str], None] | None = None,
) -> FeatureStats:
    """Statistics of ``relation_sql``'s columns, computed by the engine.

    Args:
        relation_sql: a SELECT whose output column names are distinct.
        schema: its Arrow schema (decides numeric or categorical).
        run: runs a query, returns a ``pyarrow.Table``.
        spec: which columns and how (default: all, inferred).
        dialect: the engine.
        method: recorded in the result (``pushdown``, or ``sample`` over a sample query).
        progress: called with the name of each step.
    """
    spec = spec or StatsSpec()
    spec.check_columns(schema.names)
    engine = get_dialect(dialect)
    query = _Query(relation_sql, engine)
    kinds = kinds_of(schema, spec)
    described = [f for f in schema if kinds[f.name] != "skip"]
    numeric = [query.numeric(f) for f in described if kinds[f.name] == "numeric"]
    categorical = [f for f in described if kinds[f.name] == "categorical"]
    say = progress or (lambda step: None)

    say("counts, minima and maxima")
    rows, result = _first_scan(query, described, numeric, kinds, spec.label, run)
    with_values = [c for c in numeric if c.numbers]
    if with_values:
        say("means and quantile boundaries")
        _second_scan(query, with_values, result, spec, run)
        say("variances and histograms")
        _third_scan(query, with_values, result, run)

    for field in categorical:
        say(f"vocabulary of {field.name}")
        _vocabulary(query, field.name, result[field.name], spec.top_k, run)
    return FeatureStats(result, rows, method, dialect=engine.name, sql=relation_sql,
                        label=spec.label)  # fmt: skip


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
        first += [exp.Count(this=column.copy()),
                  exp.Count(this=exp.Distinct(expressions=[column.copy()]))]  # fmt: skip
    for c in numeric:
        first += [exp.Min(this=c.value.copy()), exp.Max(this=c.value.copy())]
        if c.floating:
            first.append(exp.Count(this=c.value.copy()))
        if c.moment is not None:
            first += [exp.Count(this=c.moment.copy()), exp.Min(this=c.moment.copy()),
                      exp.Max(this=c.moment.copy())]  # fmt: skip
    values = _one_row(run(query.select(first)))
    rows = int(values.pop(0) or 0)
    result: dict[str, ColumnStats] = {}
    for field in described:
        non_null, distinct = int(values.pop(0) or 0), int(values.pop(0) or 0)
        result[field.name] = ColumnStats(
            name=field.name,
            kind=kinds[field.name],
            arrow_type=str(field.type),
            count=rows,
            nulls=rows - non_null,
            distinct=min(distinct, non_null),
            label=field.name == label,
        )
    for c in numeric:
        stats = result[c.field.name]
        stats.min, stats.max = values.pop(0), values.pop(0)
        stats.unit = unit_of(c.field.type)
        c.numbers = int(values.pop(0) or 0) if c.floating else stats.count - stats.nulls
        stats.nans = stats.count - stats.nulls - c.numbers
        if c.moment is not None:
            c.finite = int(values.pop(0) or 0)
            low, high = values.pop(0), values.pop(0)
            if c.finite:
                c.low, c.high = float(low), float(high)
                c.scale = scale_exponent(c.low, c.high)
            if c.floating:
                stats.infinities = c.numbers - c.finite
        if c.floating and not stats.nans:  # the later scans need no NaN or finite tests
            c.value = query.column(c.field.name)
            if not stats.infinities:
                c.moment = exp.cast(c.value.copy(), exp.DataType.Type.DOUBLE)
    return rows, result


def _second_scan(
    query: _Query,
    columns: list[_Numeric],
    result: dict[str, ColumnStats],
    spec: StatsSpec,
    run: Runner,
) -> None:
    """Means (of the scaled finite values) and, where the engine can, quantile boundaries."""
    summed = [c for c in columns if c.finite and c.low != c.high]
    for c in columns:
        if c.finite and c.low == c.high:  # one value: exact, no arithmetic
            c.mean = math.ldexp(c.low, -c.scale)
    sums: list[exp.Expr] = [exp.Sum(this=query.scaled(c)) for c in summed]
    native = [
        query.engine.quantiles(c.value.copy(), [(p - 0.5) / c.numbers
                                                for p in positions(c.numbers, spec.buckets)])
        for c in columns
    ]  # fmt: skip
    quantiles = [q for q in native if q is not None] if all(q is not None for q in native) else []
    if sums or quantiles:
        values = _one_row(run(query.select([*sums, *quantiles])))
        for c, total in zip(summed, values[: len(sums)], strict=True):
            if total is not None:
                c.mean = float(total) / c.finite
        if quantiles:
            for c, bounds in zip(columns, values[len(sums) :], strict=True):
                result[c.field.name].boundaries = _python(list(bounds))
    if not quantiles:
        for c in columns:
            _boundaries_by_position(query, c, result[c.field.name], spec, run)
    for c in columns:
        if c.mean is not None:
            mean = min(max(math.ldexp(c.mean, c.scale), c.low), c.high)
            result[c.field.name].mean = mean


def _boundaries_by_position(
    query: _Query, c: _Numeric, stats: ColumnStats, spec: StatsSpec, run: Runner
) -> None:
    """The values at the boundary positions of a ``ROW_NUMBER()`` ordering (one query)."""
    wanted = positions(c.numbers, spec.buckets)
    numbered = (
        exp.select(
            c.value.copy().as_("v"),
            exp.alias_(
                exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[c.value.copy()])),
                "rn",
            ),
        )
        .from_(query.relation.copy())
        .where(exp.Not(this=exp.Is(this=c.value.copy(), expression=exp.null())))
    )
    picked = (
        exp.select("rn", "v")
        .from_(exp.Subquery(this=numbered, alias=exp.TableAlias(this=exp.to_identifier("o"))))
        .where(
            exp.In(
                this=exp.column("rn"),
                expressions=[exp.Literal.number(p) for p in sorted(set(wanted))],
            )
        )
    )
    table = run(query.engine.sql(picked))
    at = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
    stats.boundaries = _python([at[p] for p in wanted])


def _third_scan(
    query: _Query, columns: list[_Numeric], result: dict[str, ColumnStats], run: Runner
) -> None:
    """Variances around the means, and histogram counts between the boundaries (one scan)."""
    centred = [c for c in columns if c.mean is not None and c.low != c.high]
    for c in columns:
        if c.mean is not None and c.low == c.high:
            result[c.field.name].variance = 0.0
    sums: list[exp.Expr] = []
    for c in centred:
        assert c.mean is not None
        deviation = exp.Sub(this=query.scaled(c), expression=float_literal(c.mean, query.engine))
        sums.append(exp.Sum(this=query.square(deviation)))
    widths = []
    for c in columns:
        counts = _histogram_sums(query, c, result[c.field.name].boundaries)
        sums += counts
        widths.append(len(counts))
    values = _one_row(run(query.select(sums)))
    for c, squares in zip(centred, values[: len(centred)], strict=True):
        if squares is not None:
            result[c.field.name].variance = _unscaled(float(squares) / c.finite, 2 * c.scale)
    del values[: len(centred)]
    for c, width in zip(columns, widths, strict=True):
        result[c.field.name].histogram = [int(v or 0) for v in values[:width]]
        del values[:width]


def _unscaled(value: float, exponent: int) -> float:
    """``value * 2**exponent``; infinity when it is beyond the largest double."""
    try:
        return max(math.ldexp(value, exponent), 0.0)
    except OverflowError:
        return math.inf


def _histogram_sums(query: _Query, c: _Numeric, boundaries: list[Any]) -> list[exp.Expr]:
    """Counts in (-inf, b1), [b1, b2), ..., [bn, +inf) of one column, as SUMs."""
    bounds = [_literal(b, query.engine) for b in boundaries]
    edges: list[exp.Expr | None] = [None, *bounds, None]
    sums: list[exp.Expr] = []
    for low, high in itertools.pairwise(edges):
        terms: list[exp.Expr] = []
        if low is not None:
            terms.append(exp.GTE(this=c.value.copy(), expression=low.copy()))
        if high is not None:
            terms.append(exp.LT(this=c.value.copy(), expression=high.copy()))
        if not terms:
            terms.append(exp.Not(this=exp.Is(this=c.value.copy(), expression=exp.null())))
        condition = exp.and_(*terms) if len(terms) > 1 else terms[0]
        case = exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))],
                        default=exp.Literal.number(0))  # fmt: skip
        sums.append(exp.Sum(this=case))
    return sums


def _vocabulary(query: _Query, name: str, stats: ColumnStats, top_k: int, run: Runner) -> None:
    """The ``top_k`` most frequent non-NULL values of a categorical column, and the rest."""
    column = query.column(name)
    top = exp.select(column.copy(), exp.Count(this=exp.Star()).as_("n"))
    top = top.from_(query.relation.copy()).where(
        exp.Not(this=exp.Is(this=column.copy(), expression=exp.null()))
    )
    top = (
        top.group_by(column.copy())
        .order_by(exp.Ordered(this=exp.column("n"), desc=True), exp.Ordered(this=column.copy()))
        .limit(top_k)
    )
    table = run(query.engine.sql(top))
    stats.vocabulary = _python(table.column(0).to_pylist())
    stats.vocabulary_counts = [int(n) for n in table.column(1).to_pylist()]
    stats.other_count = stats.count - stats.nulls - sum(stats.vocabulary_counts)


def _literal(value: Any, engine: Dialect) -> exp.Expr:
    """A boundary as a SQL value of the engine."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, float):
        return float_literal(value, engine)
    if isinstance(value, int | decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, dt.datetime):
        kind = exp.DataType.Type.TIMESTAMPTZ if value.tzinfo else exp.DataType.Type.TIMESTAMP
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), kind)
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.Type.DATE)
    return exp.Literal.string(str(value))


def _one_row(table: pa.Table) -> list[Any]:
    """The first row by position (aggregate columns may share a name, e.g. ``count``)."""
    if not table.num_rows:
        return [None] * table.num_columns
    return [table.column(i)[0].as_py() for i in range(table.num_columns)]


def _python(values: list[Any]) -> list[Any]:
    return [float(v) if isinstance(v, decimal.Decimal) else v for v in values]
