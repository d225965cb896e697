"""Values and expressions the statistics' SQL needs, written the way each engine reads them.

* Float literals: a finite float as its shortest exact decimal text; NaN and the
  infinities as SQL values (``CAST('NaN' AS DOUBLE PRECISION)`` on PostgreSQL,
  ``CAST('Infinity' AS DOUBLE)`` on DuckDB, ``9e999`` on SQLite), never as bare words an
  engine would read as column names.
* Which engines can hold NaN or infinities in a float column at all (MySQL/MariaDB cannot;
  SQLite has infinities and stores NaN as NULL), and the predicates that tell them apart
  whatever the engine's NaN ordering (PostgreSQL and DuckDB sort NaN above every number
  and call it equal to itself; IEEE engines compare it false).
* Dates and timestamps as numbers in the units of :mod:`sqlfeed.stats.units` (days, microseconds
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

from sqlfeed.dialects import Dialect, UnsupportedError
from sqlfeed.dialects.text import unused_name
from sqlfeed.stats.units import DAYS, unit_of

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
        """``statement`` (built over :attr:`node`) for the engine.

        The query's own text is in place of the placeholder.
        """
        sql = self.engine.sql(statement)
        if self.text is None:
            return sql
        if sql.count(self.placeholder) != 1:
            raise AssertionError("the described query's placeholder is not in the SQL once")
        return sql.replace(self.placeholder, self.text)


def _statement_body(text: str) -> str:
    """A query's text as a derived table holds it.

    No trailing semicolons; a line end after a trailing line comment (which would comment
    out the closing parenthesis).
    """
    body = text.strip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    if not body:
        raise UnsupportedError("statistics need a query; the SQL given is empty")
    last_line = body.rsplit("\n", 1)[-1]
    return f"{body}\n" if "--" in last_line or "#" in last_line else body


def raises_on_underflow(engine: Dialect) -> bool:
    """Whether a float product that rounds to zero is an error rather than zero.

    PostgreSQL's "value out of range: underflow" is such an error.
    """
    return engine.FLOAT_UNDERFLOW_RAISES


def holds_non_finite(engine: Dialect) -> bool:
    """Whether a float column of this engine may hold NaN or an infinity."""
    return engine.FLOAT_NAN or engine.FLOAT_INFINITY


def float_literal(value: float, engine: Dialect) -> exp.Expr:
    """``value`` as a SQL value of this engine (NaN and infinities included).

    Raises:
        UnsupportedError: the engine has no such value (NaN on MySQL or SQLite).
    """
    if math.isfinite(value):
        number = exp.Literal.number(repr(float(value)).lstrip("-"))
        return exp.Neg(this=number) if math.copysign(1.0, value) < 0 else number
    if math.isnan(value):
        if not engine.FLOAT_NAN:
            raise UnsupportedError(f"{engine.name} has no NaN value")
        return engine.nan()
    if not engine.FLOAT_INFINITY:
        raise UnsupportedError(f"{engine.name} has no infinite value")
    literal = engine.infinity()
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
    """Dates and times as exact numbers: days, or microseconds.

    A date as days, a timestamp as microseconds since 1970 (an integer or exact number); a
    time of day as microseconds since midnight, a duration as microseconds (the int64 the
    feeds give with ``time_unit="us"``).

    None for other types, and on engines where sqlfeed does not know the arithmetic (the
    statistics then have no mean or variance for the column).
    """
    if pa.types.is_time(arrow_type):
        return engine.clock_microseconds(column)
    if pa.types.is_duration(arrow_type):
        return engine.duration_microseconds(column)
    unit = unit_of(arrow_type)
    if unit is None:
        return None
    return engine.epoch_days(column) if unit == DAYS else engine.epoch_microseconds(column)
