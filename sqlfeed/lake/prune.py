"""Data files a query's WHERE cannot match, by the bounds the table's metadata keeps.

Pure. A ``fragments`` plan skips a data file when one of the WHERE's top-level AND terms
is false for every value between the file's lower and upper bound of a column (and for
NULL): such a file contributes no row to the query's result, so leaving it out changes
nothing. Only terms whose truth the bounds decide exactly are used: a column of the table
compared with a literal (``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``), ``IS
NULL`` with the file's null count, on integer, decimal, date and (Iceberg) string
columns. Floating point columns are never used (NaN sorts above every number in DuckDB,
and bounds leave NaN out); nor is anything under OR or NOT, or a query that joins.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sqlfeed.lake.model import DataFile

__all__ = ["Term", "skipped", "terms"]

_KINDS = {"int", "decimal", "date", "string"}


@dataclass(frozen=True)
class Term:
    """One WHERE term a file's bounds can decide: ``column op values``."""

    column: str
    op: str
    """``eq``, ``lt``, ``le``, ``gt``, ``ge``, ``between``, ``in``, ``null``."""
    values: tuple[Any, ...] = ()


def terms(tree: exp.Expr, view: str, alias: str, kinds: dict[str, str]) -> list[Term]:
    """The WHERE terms of ``tree`` that bounds decide.

    ``tree`` is a SELECT reading the table ``view`` as ``alias`` and nothing else;
    ``kinds``: a column's kind (``int``, ``decimal``, ``date``, ``string``; others are left
    out).
    """
    if not isinstance(tree, exp.Select) or tree.args.get("joins"):
        return []
    where = tree.args.get("where")
    if where is None:
        return []
    out = []
    for node in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
        term = _term(node, view, alias, kinds)
        if term is not None:
            out.append(term)
    return out


_OPS = {exp.EQ: "eq", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt", exp.GTE: "ge"}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _term(node: exp.Expr, view: str, alias: str, kinds: dict[str, str]) -> Term | None:
    def column(expr: exp.Expr) -> str | None:
        if not isinstance(expr, exp.Column) or expr.table not in ("", view, alias):
            return None
        return expr.name if expr.name in kinds else None

    for kind, op in _OPS.items():
        if isinstance(node, kind):
            name, value, flip = column(node.this), node.expression, False
            if name is None:
                name, value, flip = column(node.expression), node.this, True
            found = _value(value, kinds.get(name or "", ""))
            if name is None or found is _NONE:
                return None
            return Term(name, _FLIP[op] if flip else op, (found,))
    if isinstance(node, exp.Between) and (name := column(node.this)) is not None:
        low, high = (_value(node.args[k], kinds[name]) for k in ("low", "high"))
        return None if _NONE in (low, high) else Term(name, "between", (low, high))
    if isinstance(node, exp.In) and (name := column(node.this)) is not None:
        if node.args.get("query") or not node.expressions:
            return None
        values = tuple(_value(v, kinds[name]) for v in node.expressions)
        return None if _NONE in values else Term(name, "in", values)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        name = column(node.this)
        return None if name is None else Term(name, "null")
    return None


_NONE = object()


def _value(node: exp.Expr, kind: str) -> Any:
    """A literal's Python value for comparing with a ``kind`` column (``_NONE``: not one)."""
    if isinstance(node, exp.Cast) and node.to.is_type("date"):
        node = node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = _value(node.this, kind)
        return _NONE if inner is _NONE or kind == "string" else -inner
    if not isinstance(node, exp.Literal):
        return _NONE
    text = node.this
    try:
        if kind in ("int", "decimal") and not node.is_string:
            return decimal.Decimal(text)
        if kind == "string" and node.is_string:
            return text
        if kind == "date" and node.is_string:
            return dt.date.fromisoformat(text)
    except (ValueError, decimal.InvalidOperation):
        return _NONE
    return _NONE


def _false_in(term: Term, low: Any, high: Any) -> bool:
    """Whether ``term`` is false for every value in ``[low, high]``."""
    value = term.values[0] if term.values else None
    tests: dict[str, Callable[[], bool]] = {
        "eq": lambda: value < low or value > high,
        "lt": lambda: low >= value,
        "le": lambda: low > value,
        "gt": lambda: high <= value,
        "ge": lambda: high < value,
        "between": lambda: high < term.values[0] or low > term.values[1],
        "in": lambda: all(v < low or v > high for v in term.values),
    }
    return tests[term.op]()


def skipped(file: DataFile, found: list[Term]) -> bool:
    """Whether no row of ``file`` can satisfy every term of ``found``."""
    for term in found:
        nulls = file.null_counts.get(term.column)
        if term.op == "null":
            if nulls == 0:
                return True
            continue
        if nulls is not None and nulls >= file.rows:
            return True  # only NULLs: a comparison is never true
        bounds = file.bounds.get(term.column)
        if bounds is None:
            continue
        low, high = (_comparable(b) for b in bounds)
        try:
            if _false_in(term, low, high):
                return True
        except TypeError:  # bounds of another type than the literal: decide nothing
            continue
    return False


def _comparable(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return decimal.Decimal(value)
    return value
