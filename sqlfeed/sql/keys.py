"""Unique keys: which expressions provably identify one row, so an ORDER BY over them is total.

An ORDER BY is *total* when no two different rows can tie on it. That holds when its keys
cover a unique key of the rows it orders:

* the GROUP BY expressions of a grouped SELECT (one output row per group);
* the DISTINCT ON expressions;
* every output column (rows that tie on all of them are the same row as far as the result
  can tell: this covers DISTINCT and set operations with DISTINCT too);
* a primary or unique key of the only base table the query reads, as the catalog knows it
  (``table_keys``, handed in by the planner: this layer runs nothing), for a SELECT that
  reads that table alone, directly or through derived tables and CTEs that keep the key;
* nothing at all for a SELECT that returns at most one row (aggregates without GROUP BY).

:func:`order_is_total` answers for a LIMIT's ORDER BY, :func:`window_is_total` for a window's
PARTITION BY + ORDER BY; :func:`only_base_table` names the table whose keys are worth a
catalog look-up.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from sqlfeed.sql.syntax import (
    computes_aggregate,
    is_star,
    item_names,
    projection,
    single_aggregate_row,
)

__all__ = [
    "Key",
    "TableKeys",
    "base_tables",
    "cte_definitions",
    "group_expressions",
    "only_base_table",
    "order_is_total",
    "resolve_output",
    "window_is_total",
]

Key = frozenset[str]
"""A unique key: the normalized texts (see :func:`_norm`) of the expressions it is made of."""

TableKeys = Sequence[Sequence[str]]
"""The unique keys (column names) of the query's only base table, from the catalog."""


def only_base_table(tree: exp.Expr) -> exp.Table | None:
    """The one base table the query reads (CTE names and table functions aside), or None.

    >>> import sqlglot
    >>> only_base_table(sqlglot.parse_one("WITH c AS (SELECT * FROM s.t) SELECT * FROM c")).sql()
    's.t'
    """
    tables = base_tables(tree)
    return tables[0] if len(tables) == 1 else None


def base_tables(tree: exp.Expr) -> list[exp.Table]:
    """The base tables the query reads, each once, in the order they first appear.

    Each by its name alone (no alias or hints); CTE names and table functions aside.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT * FROM s.t AS a JOIN u ON a.x = u.x JOIN s.t AS b")
    >>> [table.sql() for table in base_tables(tree)]
    ['s.t', 'u']
    """
    ctes = set(cte_definitions(tree))
    found: dict[tuple[str, str, str], exp.Table] = {}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function such as read_parquet(...)
        if not table.db and table.name.casefold() in ctes:
            continue
        ident = (table.catalog.casefold(), table.db.casefold(), table.name.casefold())
        if ident not in found:  # its name alone: no alias, hints or sample
            parts = {k: v.copy() for k in ("this", "db", "catalog") if (v := table.args.get(k))}
            found[ident] = exp.Table(**parts)
    return list(found.values())


def cte_definitions(tree: exp.Expr) -> dict[str, exp.Expr]:
    """Every CTE of the query by lower-case name (its query), recursive ones left out."""
    definitions: dict[str, exp.Expr] = {}
    for with_ in tree.find_all(exp.With):
        if with_.args.get("recursive"):
            continue
        for cte in with_.expressions:
            if isinstance(cte, exp.CTE) and not cte.args["alias"].columns:
                definitions[cte.alias_or_name.casefold()] = cte.this
    return definitions


def group_expressions(select: exp.Select) -> list[exp.Expr] | None:
    """The GROUP BY expressions (positions and aliases resolved to the items).

    None when the SELECT does not group plainly (ROLLUP, CUBE, GROUPING SETS, or no GROUP
    BY).
    """
    group = select.args.get("group")
    if group is None:
        return None
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "totals")):
        return None
    if group.args.get("all"):  # DuckDB's GROUP BY ALL: every output item not aggregated
        if any(is_star(item) for item in select.expressions):
            return None
        return [item.unalias() for item in select.expressions if not computes_aggregate(item)]
    resolved = []
    for expr in group.expressions:
        if isinstance(expr, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            return None
        resolved.append(resolve_output(select, expr))
    return resolved


def resolve_output(select: exp.Select, expr: exp.Expr) -> exp.Expr:
    """What an ORDER BY or GROUP BY item means in ``select``.

    A position or an output alias stands for that output item's expression; anything else
    for itself.
    """
    items = select.expressions
    if isinstance(expr, exp.Literal) and not expr.is_string and expr.name.isdigit():
        position = int(expr.name)
        if 1 <= position <= len(items) and not any(is_star(i) for i in items):
            item: exp.Expr = items[position - 1]
            return item.unalias()
        return expr
    if isinstance(expr, exp.Column) and not expr.table and isinstance(expr.this, exp.Identifier):
        for item in items:
            if isinstance(item, exp.Alias) and item.alias.casefold() == expr.name.casefold():
                value: exp.Expr = item.this
                return value
    return expr


def order_is_total(
    node: exp.Expr,
    order: exp.Order | None,
    *,
    width: int | None = None,
    table_keys: TableKeys | None = None,
    every_output: bool = True,
    distinct_on: bool = True,
) -> bool:
    """Whether ``node``'s ORDER BY (for its LIMIT/OFFSET) leaves no two different rows tied.

    Args:
        node: a SELECT or a set operation.
        order: its ORDER BY (None: no ORDER BY).
        width: the number of output columns when known from the engine (``SELECT *``).
        table_keys: the unique keys of the query's only base table.
        every_output: count an ORDER BY over every output column as total (rows tied on
            all of them are equal); False asks for a key proper, which also holds where
            the collation ties different strings (``'a' = 'A'``).
        distinct_on: count the DISTINCT ON expressions as a key (its output rows); False
            asks about the rows DISTINCT ON picks from (which of them it keeps).
    """
    if isinstance(node, exp.Select) and single_aggregate_row(node):
        return True
    if order is None:
        return False
    if every_output and _covers_every_output(node, order, width):
        return True
    if not isinstance(node, exp.Select):
        return False
    covered = {_norm(resolve_output(node, o.this), node) for o in order.expressions}
    keys = _row_keys(node, table_keys, output_level=distinct_on)
    return any(key <= covered for key in keys)


def window_is_total(window: exp.Window, select: exp.Select, table_keys: TableKeys | None) -> bool:
    """Whether a window's PARTITION BY and ORDER BY leave no two rows of ``select`` tied."""
    if single_aggregate_row(select):
        return True
    order = window.args.get("order")
    keys = [*window.args.get("partition_by", []), *(order.expressions if order else [])]
    covered = {_norm(k.this if isinstance(k, exp.Ordered) else k, select) for k in keys}
    return any(key <= covered for key in _row_keys(select, table_keys, output_level=False))


def _covers_every_output(node: exp.Expr, order: exp.Order, width: int | None) -> bool:
    """Whether every output column is an ORDER BY key (by position, name or expression)."""
    if any(_order_by_all(o) for o in order.expressions):
        return True  # DuckDB's ORDER BY ALL: every output column, left to right
    items = projection(node)
    if items is None:
        return False
    if any(is_star(i) for i in items):
        if width is None:
            return False
        positions = {
            int(o.this.name)
            for o in order.expressions
            if isinstance(o.this, exp.Literal) and not o.this.is_string and o.this.name.isdigit()
        }
        return positions >= set(range(1, width + 1))
    keys = {o.this.sql().casefold() for o in order.expressions}
    names = item_names(items)
    for position, (item, name) in enumerate(zip(items, names, strict=True), start=1):
        candidates = {item.unalias().sql().casefold(), str(position)}
        if name is not None:
            candidates.add(exp.column(name.copy()).sql().casefold())
            candidates.add(name.name.casefold())
        if not candidates & keys:
            return False
    return True


def _order_by_all(ordered: exp.Expr) -> bool:
    """Whether an ORDER BY item is DuckDB's ``ALL`` (every output column)."""
    key = ordered.this if isinstance(ordered, exp.Ordered) else ordered
    return isinstance(key, exp.Var) and key.name.upper() == "ALL"


def _row_keys(select: exp.Select, table_keys: TableKeys | None, output_level: bool) -> list[Key]:
    """Keys of the rows of ``select``.

    Its output rows (``output_level``, for a LIMIT) or the rows its windows see (after
    WHERE, GROUP BY and HAVING).
    """
    keys: list[Key] = []
    groups = group_expressions(select)
    if groups is not None:
        keys.append(frozenset(_norm(g, select) for g in groups))
    elif select.args.get("group") is None:
        relation = _single_relation(select)
        if relation is not None and not _aggregates(select):
            for key in _relation_keys(relation, select, table_keys):
                keys.append(frozenset(key))
    distinct = select.args.get("distinct")
    if output_level and isinstance(distinct, exp.Distinct):
        on = distinct.args.get("on")
        if on is not None:
            keys.append(frozenset(_norm(resolve_output(select, e), select) for e in on.expressions))
    return keys


def _aggregates(select: exp.Select) -> bool:
    return any(
        isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window, exp.Select) is select
        for item in select.expressions
        for n in item.find_all(exp.AggFunc)
    )


def _single_relation(select: exp.Select) -> exp.Expr | None:
    """The one relation a SELECT reads (no join, lateral or pivot), or None."""
    source = select.args.get("from_")
    if source is None or select.args.get("joins") or select.args.get("laterals"):
        return None
    relation = source.this
    if relation.args.get("joins") or relation.args.get("pivots"):
        return None
    return relation if isinstance(relation, (exp.Table, exp.Subquery)) else None


def _relation_keys(
    relation: exp.Expr, scope: exp.Expr, table_keys: TableKeys | None
) -> list[set[str]]:
    """Unique keys (lower-case column names) of a relation read in ``scope``."""
    alias = relation.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return []  # columns renamed by position: not followed
    if isinstance(relation, exp.Subquery):
        return _query_keys(relation.this, table_keys)
    if not isinstance(relation, exp.Table) or not isinstance(relation.this, exp.Identifier):
        return []
    if relation.args.get("sample"):
        return []
    root = scope.root()
    if not relation.db:
        definition = cte_definitions(root).get(relation.name.casefold())
        if definition is not None:
            return _query_keys(definition, table_keys)
    only = only_base_table(root)
    if table_keys is None or only is None or only.name.casefold() != relation.name.casefold():
        return []
    return [{c.casefold() for c in key} for key in table_keys if key]


def _query_keys(query: exp.Expr, table_keys: TableKeys | None) -> list[set[str]]:
    """Unique keys of a query's output, as lower-case output names."""
    if isinstance(query, exp.Subquery):
        return _query_keys(query.this, table_keys)
    items = projection(query)
    if items is None or any(is_star(i) for i in items):
        return []
    names = [n.name.casefold() if n is not None else None for n in item_names(items)]
    everything = {n for n in names if n is not None}
    keys: list[set[str]] = []
    if len(everything) == len(names):
        if isinstance(query, exp.SetOperation) and query.args.get("distinct"):
            keys.append(everything)
        distinct = query.args.get("distinct")
        if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is None:
            keys.append(everything)
    if not isinstance(query, exp.Select):
        return keys
    if single_aggregate_row(query):
        return [set()]
    texts = {_norm(item.unalias(), query): names[i] for i, item in enumerate(items)}
    groups = group_expressions(query)
    if groups is not None:
        mapped = [texts.get(_norm(g, query)) for g in groups]
        if all(m is not None for m in mapped):
            keys.append({m for m in mapped if m is not None})
    relation = _single_relation(query)
    if relation is not None and query.args.get("group") is None and not _aggregates(query):
        for key in _relation_keys(relation, query, table_keys):
            found = [texts.get(name) for name in key]
            if all(f is not None for f in found):
                keys.append({f for f in found if f is not None})
    return keys


def _norm(expr: exp.Expr, select: exp.Select) -> str:
    """A comparable text for an expression in ``select``.

    A column of its only relation without its qualifier, anything else as rendered,
    lower-cased.
    """
    if isinstance(expr, exp.Column) and isinstance(expr.this, exp.Identifier):
        relation = _single_relation(select)
        alias = relation.alias_or_name if relation is not None else None
        if expr.table and (alias is None or expr.table.casefold() != alias.casefold()):
            return f"{expr.table.casefold()}.{expr.name.casefold()}"
        return expr.name.casefold()
    return expr.sql().casefold()
