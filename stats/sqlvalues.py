"""Values and expressions the statistics' SQL needs, written the way each engine reads them.

* Float literals: a finite float as its shortest exact decimal text; NaN and the
  infinities as SQL values (``CAST('NaN' AS DOUBLE PRECISION)`` on PostgreSQL,
  ``CAST('Infinity' AS DOUBLE)`` on DuckDB, ``9e999`` on SQLite), never as bare words an
  engine would read as column names.
* Which engines can hold NaN or infinities in a float column at all (MySQL/MariaDB cannot;
  SQLite has infinities and stores NaN as NULL), and the predicates that tell them apart
  whatever the engine's NaN ordering (PostgreSQL and DuckDB sort NaN above every number
  and call it equal to itself; IEEE engines compare it false).
* Dates and timestamps as numbers in the units of :mod:`stats.units` (days, microseconds
  since 1970), on the engines where sqlfeed knows how.
* The query described, as a derived table (:class:`Relation`): its own text embedded as
  written (the engine parses exactly what the user wrote; sqlglot never re-renders it),
  or a tree sqlglot renders where the caller asks for that.

>>> from dialects import get_dialect
>>> from sqlglot import exp
>>> [float_literal(v, get_dialect("postgres")).sql("postgres") for v in (0.5, float("nan"))]
['0.5', "CAST('NaN' AS DOUBLE PRECISION)"]
>>> float_literal(float("-inf"), get_dialect("sqlite")).sql("sqlite")
'-9e999'
"""

from __future__ import annotations

import math

import pyarrow as pa
from sqlglot import exp

from dialects import Dialect, UnsupportedError
from dialects.text import unused_name
from stats.units import DAYS, unit_of

__all__ = [
    "Relation",
    "epoch_units",
    "finite",
    "float_literal",
    "holds_non_finite",
    "not_nan",
    "raises_on_underflow",
]


class Relation:
    """The described query as a derived table, and the statements built over it rendered.

    A query given as text is embedded as written: the derived table holds a placeholder
    that :meth:`render` replaces with the text, so sqlglot never parses or re-renders it
    (it would change queries it cannot write back: MariaDB's ``REGEXP`` as a
    ``REGEXP_LIKE`` MariaDB lacks, SQLite's ``CAST(x AS NUMERIC)`` as ``REAL``). A query
    given as a tree is rendered by sqlglot with the statement (engines where the caller
    renders the query from its tree anyway, e.g. to hoist its CTEs).
    """

    def __init__(self, query: str | exp.Expr, alias: str, engine: Dialect) -> None:
        self.engine = engine
        self.text: str | None = None
        body: exp.Expr
        if isinstance(query, str):
            self.text = _statement_body(query)
            self.placeholder = unused_name(self.text, "_stats_query_5d2a")
            body = exp.var(self.placeholder)
        else:
            body = query.copy()
        self.node = exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))

    def render(self, statement: exp.Expr) -> str:
        """``statement`` (built over :attr:`node`) for the engine, the query's own text
        in place of the placeholder."""
        sql = self.engine.sql(statement)
        if self.text is None:
            return sql
        if sql.count(self.placeholder) != 1:
            raise AssertionError("the described query's placeholder is not in the SQL once")
        return sql.replace(self.placeholder, self.text)


def _statement_body(text: str) -> str:
    """A query's text as a derived table holds it: no trailing semicolons; a line end
    after a trailing line comment (which would comment out the closing parenthesis)."""
    body = text.strip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    if not body:
        raise UnsupportedError("statistics need a query; the SQL given is empty")
    last_line = body.rsplit("\n", 1)[-1]
    return f"{body}\n" if "--" in last_line or "#" in last_line else body


_NO_NON_FINITE = frozenset({"mysql"})
"""Engines whose floating-point columns hold neither NaN nor infinities."""
_NO_NAN = frozenset({"mysql", "sqlite"})
"""Engines with no NaN (SQLite stores a NaN as NULL)."""


def raises_on_underflow(engine: Dialect) -> bool:
    """Whether a float product that rounds to zero is an error (PostgreSQL's "value out of
    range: underflow") rather than zero."""
    return engine.name == "postgres"


def holds_non_finite(engine: Dialect) -> bool:
    """Whether a float column of this engine may hold NaN or an infinity."""
    return engine.name not in _NO_NON_FINITE


def float_literal(value: float, engine: Dialect) -> exp.Expr:
    """``value`` as a SQL value of this engine (NaN and infinities included).

    Raises:
        UnsupportedError: the engine has no such value (NaN on MySQL or SQLite).
    """
    if math.isfinite(value):
        number = exp.Literal.number(repr(float(value)).lstrip("-"))
        return exp.Neg(this=number) if math.copysign(1.0, value) < 0 else number
    if math.isnan(value):
        if engine.name in _NO_NAN:
            raise UnsupportedError(f"{engine.name} has no NaN value")
        return exp.cast(exp.Literal.string("NaN"), exp.DataType.Type.DOUBLE)
    if engine.name in _NO_NON_FINITE:
        raise UnsupportedError(f"{engine.name} has no infinite value")
    literal: exp.Expr
    if engine.name == "sqlite":  # SQLite reads an overflowing literal as infinity
        literal = exp.Literal.number("9e999")
    else:
        literal = exp.cast(exp.Literal.string("Infinity"), exp.DataType.Type.DOUBLE)
    return exp.Neg(this=literal) if value < 0 else literal


def not_nan(column: exp.Expr, engine: Dialect) -> exp.Expr:
    """True for a number (infinities included), false for NaN, NULL for NULL.

    ``-inf <= x <= inf`` holds for every number and for no NaN, both where NaN sorts above
    every number (PostgreSQL, DuckDB) and where comparisons with NaN are false (IEEE).
    """
    low, high = float_literal(-math.inf, engine), float_literal(math.inf, engine)
    return exp.and_(
        exp.GTE(this=column.copy(), expression=low), exp.LTE(this=column.copy(), expression=high)
    )


def finite(column: exp.Expr, engine: Dialect) -> exp.Expr:
    """True for a finite number, false for NaN and the infinities, NULL for NULL."""
    low, high = float_literal(-math.inf, engine), float_literal(math.inf, engine)
    return exp.and_(
        exp.GT(this=column.copy(), expression=low), exp.LT(this=column.copy(), expression=high)
    )


def epoch_units(column: exp.Expr, arrow_type: pa.DataType, engine: Dialect) -> exp.Expr | None:
    """A date as days, a timestamp as microseconds since 1970 (an integer or exact number);
    a time of day as microseconds since midnight, a duration as microseconds (the int64
    the feeds give with ``time_unit="us"``).

    None for other types, and on engines where sqlfeed does not know the arithmetic (the
    statistics then have no mean or variance for the column).
    """
    if pa.types.is_time(arrow_type) or pa.types.is_duration(arrow_type):
        return _clock_units(column, bool(pa.types.is_time(arrow_type)), engine)
    unit = unit_of(arrow_type)
    if unit is None:
        return None
    name = engine.name
    if name in ("duckdb", "postgres") and unit == DAYS:
        epoch = exp.cast(exp.Literal.string("1970-01-01"), exp.DataType.Type.DATE)
        return exp.cast(
            exp.paren(exp.Sub(this=column.copy(), expression=epoch)), exp.DataType.Type.BIGINT
        )
    if name == "duckdb":
        return exp.Anonymous(this="epoch_us", expressions=[column.copy()])
    if name == "postgres":  # EXTRACT(EPOCH ...) is an exact numeric (PostgreSQL 14+)
        seconds = exp.Extract(this=exp.var("EPOCH"), expression=column.copy())
        return exp.Mul(this=seconds, expression=exp.Literal.number(1_000_000))
    if name == "mysql" and unit == DAYS:
        return exp.Anonymous(
            this="DATEDIFF", expressions=[column.copy(), exp.Literal.string("1970-01-01")]
        )
    if name == "mysql":
        return exp.Anonymous(
            this="TIMESTAMPDIFF",
            expressions=[
                exp.var("MICROSECOND"),
                exp.Literal.string("1970-01-01 00:00:00"),
                column.copy(),
            ],
        )
    return None


_US = {"HOUR": 3_600_000_000, "MINUTE": 60_000_000, "SECOND": 1_000_000}


def _clock_units(column: exp.Expr, clock: bool, engine: Dialect) -> exp.Expr | None:
    """A time of day (``clock``: microseconds since midnight) or a duration (microseconds)."""
    if engine.name == "duckdb":  # TIME (a DuckDB INTERVAL is no duration: not fed)
        return exp.Anonymous(this="epoch_us", expressions=[column.copy()]) if clock else None
    if engine.name == "postgres" and clock:  # an exact numeric (PostgreSQL 14+)
        seconds = exp.Extract(this=exp.var("EPOCH"), expression=column.copy())
        return exp.Mul(this=seconds, expression=exp.Literal.number(1_000_000))
    if engine.name == "postgres":  # time, or interval as the feeds read it: a year 365
        # days, a month 30 (EXTRACT(EPOCH ...) would count 365.25 and 30)
        def part(field: str, factor: int) -> exp.Expr:
            extract = exp.Extract(this=exp.var(field), expression=column.copy())
            return exp.Mul(this=extract, expression=exp.Literal.number(factor))

        total: exp.Expr = part("HOUR", _US["HOUR"])
        for field, factor in (("MINUTE", _US["MINUTE"]), ("SECOND", _US["SECOND"])):
            total = exp.Add(this=total, expression=part(field, factor))
        days = exp.Add(
            this=exp.Add(this=part("YEAR", 365), expression=part("MONTH", 30)),
            expression=part("DAY", 1),
        )
        day = exp.Literal.number(86_400_000_000)
        return exp.Add(this=exp.Mul(this=exp.paren(days), expression=day), expression=total)
    if engine.name == "mysql":  # TIME, a duration (HOUR() and the others are unsigned)
        parts: exp.Expr = exp.Anonymous(this="MICROSECOND", expressions=[column.copy()])
        for field, factor in _US.items():
            value = exp.Anonymous(this=field, expressions=[column.copy()])
            scaled = exp.Mul(this=value, expression=exp.Literal.number(factor))
            parts = exp.Add(this=parts, expression=scaled)
        negative = exp.LT(this=column.copy(), expression=exp.Literal.string("00:00:00"))
        sign = exp.Case(
            ifs=[exp.If(this=negative, true=exp.Literal.number(-1))], default=exp.Literal.number(1)
        )
        return exp.Mul(this=sign, expression=exp.paren(parts))
    return None
