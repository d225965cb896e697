"""Whether a SELECT's key columns identify its rows, and how many distinct keys it has."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from sqlfeed.io import Source
from sqlfeed.plans.context import unique_keys
from sqlfeed.sql import ParsedQuery, only_base_table
from sqlfeed.sql.keys import order_is_total

__all__ = ["distinct_keys", "key_is_unique"]


def key_is_unique(source: Source, parsed: ParsedQuery, key: Sequence[str]) -> bool:
    """Whether the catalog proves ``key`` (output columns) unique in the SELECT's rows.

    A primary or unique NOT NULL key of its only base table among them, kept one row per key
    by the query (no join fanning it out, no UNION ALL).
    """
    tree = parsed.tree
    if not isinstance(tree, exp.Select) or not key or not all(_plain(tree, k) for k in key):
        return False
    base = only_base_table(tree)
    table_keys = unique_keys(source, base) if base is not None else []
    ordered = tree.copy().order_by(*(exp.column(exp.to_identifier(k)) for k in key), copy=False)
    order = ordered.args.get("order")
    return bool(order_is_total(ordered, order, table_keys=table_keys, every_output=False))


def distinct_keys(source: Source, parsed: ParsedQuery, key: Sequence[str]) -> int:
    """The number of distinct ``key`` values in the SELECT's rows (counted by the engine)."""
    inner = parsed.tree.copy()
    assert isinstance(inner, exp.Query)
    columns = [exp.column(k, quoted=True) for k in key]
    distinct = exp.select(*columns).distinct().from_(inner.subquery("q"))
    sql = (
        exp.select("COUNT(*)")
        .from_(distinct.subquery("k"))
        .sql(dialect=source.dialect.sqlglot_dialect)
    )
    return int(source.scalar(sql, what="key count") or 0)


def _plain(select: exp.Select, name: str) -> bool:
    """Whether output column ``name`` is the base column of that name.

    Not an alias of another expression.
    """
    for item in select.expressions:
        if item.alias_or_name.casefold() == name.casefold():
            inner = item.unalias()
            return isinstance(inner, exp.Column) and inner.name.casefold() == name.casefold()
    return any(
        isinstance(item, exp.Star) or isinstance(item.this, exp.Star) for item in select.expressions
    )
