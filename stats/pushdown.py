"""Statistics computed by the engine: aggregate SQL built with sqlglot for each dialect.

Scans of the query's rows, each covering every column at once:

1. counts, NULLs, distinct counts, MIN, MAX and means;
2. population variances (a second pass around the means: exact where one pass of
   sums of squares would lose precision);
3. quantile boundaries: the dialect's discrete quantile aggregate (PostgreSQL
   ``percentile_disc``, DuckDB ``quantile_disc``); where there is none (MySQL, SQLite),
   the values at the boundary positions of a ``ROW_NUMBER()`` ordering, one query per
   column; both are exact ("the first value whose position reaches the fraction");
4. histogram counts between the boundaries;

and one ``GROUP BY ... ORDER BY COUNT(*) DESC LIMIT k`` per categorical column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dialects import Dialect, get_dialect
from stats.model import ColumnStats, FeatureStats, StatsSpec

__all__ = ["Runner", "compute_pushdown", "kinds_of"]

Runner = Callable[[str], pa.Table]
"""Runs one query and returns its rows (``stats`` never imports the readers itself)."""

_ALIAS = "_stats_q"


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
                or pa.types.is_temporal(field.type)
            )
            kind = "numeric" if numeric else "categorical"
        kinds[field.name] = kind
    return kinds


def _is_temporal(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_temporal(arrow_type))


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

    def as_double(self, name: str) -> exp.Expr:
        return exp.cast(self.column(name), exp.DataType.Type.DOUBLE)


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
    numeric = [f for f in described if kinds[f.name] == "numeric"]
    categorical = [f for f in described if kinds[f.name] == "categorical"]
    say = progress or (lambda step: None)

    say("counts, minima, maxima and means")
    rows, result = _first_scan(query, described, numeric, kinds, spec.label, run)

    averaged = [f for f in numeric if result[f.name].mean is not None]
    if averaged:
        say("variances")
        _variances(query, averaged, result, run)

    with_values = [f for f in numeric if result[f.name].count > result[f.name].nulls]
    if with_values:
        say("quantile boundaries")
        _boundaries(query, with_values, result, spec, run)
        say("histograms")
        _histograms(query, with_values, result, run)

    for field in categorical:
        say(f"vocabulary of {field.name}")
        _vocabulary(query, field.name, result[field.name], spec.top_k, run)
    return FeatureStats(result, rows, method, dialect=engine.name, sql=relation_sql,
                        label=spec.label)  # fmt: skip


def _first_scan(
    query: _Query,
    described: list[pa.Field],
    numeric: list[pa.Field],
    kinds: dict[str, str],
    label: str | None,
    run: Runner,
) -> tuple[int, dict[str, ColumnStats]]:
    """The row count and each column's counts, NULLs, distinct count, MIN, MAX and mean."""
    first: list[exp.Expr] = [query.engine.count_star()]
    for field in described:
        column = query.column(field.name)
        first += [exp.Count(this=column.copy()),
                  exp.Count(this=exp.Distinct(expressions=[column.copy()]))]  # fmt: skip
    for field in numeric:
        first += [exp.Min(this=query.column(field.name)), exp.Max(this=query.column(field.name))]
        if not _is_temporal(field.type):
            # SUM / COUNT, not AVG: PostgreSQL's AVG(float8) also sums squares, which
            # overflows above ~1e154.
            first.append(exp.Sum(this=query.as_double(field.name)))
    values = _one_row(run(query.select(first)))
    rows = int(values.pop(0) or 0)
    result: dict[str, ColumnStats] = {}
    for field in described:
        non_null, distinct = int(values.pop(0) or 0), values.pop(0)
        result[field.name] = ColumnStats(
            name=field.name,
            kind=kinds[field.name],
            arrow_type=str(field.type),
            count=rows,
            nulls=rows - non_null,
            distinct=int(distinct or 0),
            label=field.name == label,
        )
    for field in numeric:
        stats = result[field.name]
        stats.min, stats.max = values.pop(0), values.pop(0)
        if not _is_temporal(field.type):
            total = values.pop(0)
            present = stats.count - stats.nulls
            stats.mean = float(total) / present if total is not None and present else None
    return rows, result


def _variances(
    query: _Query, fields: list[pa.Field], result: dict[str, ColumnStats], run: Runner
) -> None:
    """Population variances around the means of the first scan (one scan)."""
    second: list[exp.Expr] = []
    for field in fields:
        centred = exp.Sub(
            this=query.as_double(field.name),
            expression=exp.Literal.number(repr(result[field.name].mean)),
        )
        square = exp.Mul(this=exp.paren(centred), expression=exp.paren(centred.copy()))
        second.append(exp.Sum(this=square))
    for field, squares in zip(fields, _one_row(run(query.select(second))), strict=True):
        stats = result[field.name]
        if squares is not None:
            stats.variance = max(float(squares), 0.0) / (stats.count - stats.nulls)


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


def _boundaries(
    query: _Query,
    fields: list[pa.Field],
    result: dict[str, ColumnStats],
    spec: StatsSpec,
    run: Runner,
) -> None:
    engine = query.engine
    fractions = spec.fractions
    native = [engine.quantiles(query.column(f.name), fractions) for f in fields]
    if all(q is not None for q in native):
        row = _one_row(run(query.select([q for q in native if q is not None])))
        for field, values in zip(fields, row, strict=True):
            result[field.name].boundaries = _python(list(values))
        return
    for field in fields:  # no quantile aggregate: the values at the boundary positions
        stats = result[field.name]
        present = stats.count - stats.nulls
        positions = sorted({max(1, math.ceil(f * present)) for f in fractions})
        column = query.column(field.name)
        numbered = (
            exp.select(
                column.copy().as_("v"),
                exp.alias_(
                    exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[column.copy()])),
                    "rn",
                ),
            )
            .from_(query.relation.copy())
            .where(exp.Not(this=exp.Is(this=column.copy(), expression=exp.null())))
        )
        picked = (
            exp.select("rn", "v")
            .from_(exp.Subquery(this=numbered, alias=exp.TableAlias(this=exp.to_identifier("o"))))
            .where(
                exp.In(
                    this=exp.column("rn"), expressions=[exp.Literal.number(p) for p in positions]
                )
            )
        )
        table = run(engine.sql(picked))
        at = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))
        stats.boundaries = _python([at[max(1, math.ceil(f * present))] for f in fractions])


def _histograms(
    query: _Query, fields: list[pa.Field], result: dict[str, ColumnStats], run: Runner
) -> None:
    """Counts in (-inf, b1), [b1, b2), ..., [bn, +inf) for each column (one scan)."""
    sums: list[exp.Expr] = []
    shape: list[tuple[str, int]] = []
    for field in fields:
        column = query.column(field.name)
        bounds = [_literal(b, field.type) for b in result[field.name].boundaries]
        edges: list[exp.Expr | None] = [None, *bounds, None]
        for low, high in itertools.pairwise(edges):
            terms: list[exp.Expr] = []
            if low is not None:
                terms.append(exp.GTE(this=column.copy(), expression=low.copy()))
            if high is not None:
                terms.append(exp.LT(this=column.copy(), expression=high.copy()))
            if not terms:
                terms.append(exp.Not(this=exp.Is(this=column.copy(), expression=exp.null())))
            condition = exp.and_(*terms) if len(terms) > 1 else terms[0]
            case = exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))],
                            default=exp.Literal.number(0))  # fmt: skip
            sums.append(exp.Sum(this=case))
        shape.append((field.name, len(bounds) + 1))
    values = _one_row(run(query.select(sums)))
    for name, width in shape:
        result[name].histogram = [int(v or 0) for v in values[:width]]
        del values[:width]


def _literal(value: Any, arrow_type: pa.DataType) -> exp.Expr:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float | decimal.Decimal):
        return exp.Literal.number(repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), exp.DataType.Type.TIMESTAMP)
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
