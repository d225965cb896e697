"""Read-only questions about a query's sqlglot tree, shared by the SQL layer's modules.

What the query outputs (its projection and output names), whether it has a LIMIT, whether
an output column computes an aggregate, and the name of a function call. Nothing here
builds or changes a tree.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

__all__ = [
    "ast_names",
    "computes_aggregate",
    "function_name",
    "has_limit",
    "is_constant",
    "is_star",
    "item_names",
    "projection",
    "single_aggregate_row",
]


def _leftmost_select(tree: exp.Expr) -> exp.Select | None:
    node = tree
    while True:
        if isinstance(node, exp.Select):
            return node
        if isinstance(node, (exp.SetOperation, exp.Subquery)):
            node = node.this
        else:
            return None


def projection(tree: exp.Expr) -> list[exp.Expr] | None:
    """The output items of the query's leftmost SELECT (which names a set operation's columns).

    Args:
        tree: a query tree.

    Returns:
        The SELECT list, or None when the query has no SELECT (a VALUES list).
    """
    select = _leftmost_select(tree)
    return None if select is None else list(select.expressions)


def is_star(item: exp.Expr) -> bool:
    """Whether an output item may make several columns the text does not name.

    ``*``, ``t.*`` and ``(expression).*``, DuckDB's ``COLUMNS(...)`` anywhere in it (one
    output column per column it matches), and an ``UNNEST(...)`` that is the item (DuckDB
    makes one column per field of a struct, alias or not, and per nested field with
    ``recursive := true``): the engine says how many columns and their names.
    """
    if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star):
        return True
    root = item.unalias()
    if isinstance(root, exp.Explode) or (
        isinstance(root, exp.Dot) and isinstance(root.expression, exp.Star)
    ):
        return True
    nested = (exp.Query, exp.Subquery)
    for node in item.walk(prune=lambda n: n is not item and isinstance(n, nested)):
        if isinstance(node, exp.Columns) and _expands(node):
            return True
    return False


def _expands(node: exp.Columns) -> bool:
    """Whether a ``COLUMNS(...)`` makes output columns.

    Not ``*COLUMNS(...)`` unpacked into a function's arguments.
    """
    return not (node.args.get("unpack") and isinstance(node.parent, exp.Func))


def item_names(items: Sequence[exp.Expr]) -> list[exp.Identifier | None]:
    """The name each output item has as written: its alias or column name, else None."""
    names: list[exp.Identifier | None] = []
    for item in items:
        if isinstance(item, exp.Alias):
            names.append(item.args["alias"])
        elif isinstance(item, exp.Column):
            names.append(item.this if isinstance(item.this, exp.Identifier) else None)
        else:
            names.append(None)
    return names


def ast_names(tree: exp.Expr) -> list[exp.Identifier | None] | None:
    """The query's output names as written (see :func:`item_names`); None behind a ``*``."""
    items = projection(tree)
    if items is None or any(is_star(item) for item in items):
        return None
    return item_names(items)


def computes_aggregate(item: exp.Expr) -> bool:
    """Whether an output item computes an aggregate or window (outside nested queries)."""

    def nested_query(node: exp.Expr) -> bool:
        return node is not item and isinstance(node, (exp.Subquery, exp.Query))

    for node in item.walk(prune=nested_query):
        if isinstance(node, (exp.AggFunc, exp.Window)):
            return True
    return False


def single_aggregate_row(select: exp.Select) -> bool:
    """Whether the SELECT aggregates without GROUP BY, so returns at most one row."""
    return (
        not select.args.get("group")
        and bool(select.expressions)
        and all(computes_aggregate(i) for i in select.expressions)
    )


def is_constant(expr: exp.Expr) -> bool:
    """Whether ``expr`` is a literal (a number, string, NULL or boolean, maybe in parentheses)."""
    return isinstance(expr, (exp.Literal, exp.Null, exp.Boolean)) or (
        isinstance(expr, exp.Paren) and is_constant(expr.this)
    )


def has_limit(tree: exp.Expr) -> bool:
    """Whether the query node has its own LIMIT, OFFSET or FETCH."""
    return any(tree.args.get(arg) for arg in ("limit", "offset", "fetch"))


def function_name(node: exp.Expr) -> str:
    """The lower-case name of a function call; empty for anything else."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return ""
