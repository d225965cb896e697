"""Grouped ranges: a range of a grouping column filters a GROUP BY query before it groups.

A range partition of ``SELECT k, SUM(v) AS s FROM t WHERE w GROUP BY k, j HAVING h`` on
its output column ``k`` may wrap it (``SELECT * FROM (q) AS _sqlfeed_q WHERE k >= 10``,
which an engine that cannot push the filter through the GROUP BY runs as a whole
aggregate per partition), or put the range into the query's own WHERE:
``... WHERE (w) AND k >= 10 GROUP BY k, j HAVING h``, which reads only the range's rows
(an index range scan on a key). This module says when the second is the same rows.

**Claim.** Let ``P`` be a predicate that depends only on the value of a column ``k`` of
the query's one table: ``k >= a``, ``k < b``, both, or ``k IS NULL``. If ``k`` is one of
the GROUP BY expressions and is an output column unchanged (possibly renamed), then
``q`` with ``P`` added to its WHERE returns exactly the rows of ``q`` whose ``k``
satisfies ``P``.

**Proof.** GROUP BY splits the rows that pass ``w`` into groups whose rows agree on every
grouping expression, so on ``k``: under the engine's grouping equality all NULLs form one
group and no NULL shares a group with a value. ``P`` answers alike on every row of a
group: ``IS NULL`` does by the above, and on the types ranges are cut on (numbers, dates,
timestamps) the engine's ``<`` and ``>=`` are consistent with the equality it groups by
(values it puts in one group compare equal, so none of them lies on the other side of a
bound). Adding ``P`` to the WHERE therefore keeps each group whole or removes it whole. A
kept group has the same rows, hence the same aggregates, the same HAVING verdict and the
same output row; a removed group gives no row. Its output row would show the group's own
``k`` (``k`` is output unchanged), which fails ``P``: filtering the output by ``P``
removes exactly those rows too. Both sides hold the same rows. ∎

The proof needs each group's output row to depend on that group's rows alone, and ``k``
in the output to be the grouping column itself, so these are refused (the range then
wraps the query): a join, a subquery or CTE (other rows than the table's), a window
function (computed over all groups), ROLLUP / CUBE / GROUPING SETS and ``GROUP BY ALL``
(rows over several ``k`` values, with ``k`` NULL in them), LIMIT / OFFSET / FETCH (which
groups survive depends on the others), DISTINCT and DISTINCT ON, QUALIFY, a ``*`` in the
output, and a key computed by an expression, or not in the GROUP BY. Names are matched
only where they cannot mean something else: a GROUP BY item is the column itself
(optionally qualified by the table) or its output position, never an output alias; and
no output column other than ``k`` itself may be named like ``k`` (an engine may resolve
the WHERE's ``k`` to such an alias).

>>> q = parse("SELECT o AS k, COUNT(*) AS n FROM t WHERE x > 0 OR y > 0 GROUP BY o HAVING "
...           "COUNT(*) > 1", "postgres")
>>> frame = grouped_frame(q, "k", None)
>>> frame.with_condition(exp.GTE(this=frame.hash_args(["k"])[0], expression=exp.Literal.number(5))).sql()
'SELECT o AS k, COUNT(*) AS n FROM t WHERE (x > 0 OR y > 0) AND o >= 5 GROUP BY o HAVING COUNT(*) > 1'
>>> grouped_frame(parse("SELECT o + 1 AS k, COUNT(*) AS n FROM t GROUP BY o + 1"), "k", None)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from sqlfeed.dialects import Dialect
from sqlfeed.sql.frame import BEYOND_A_FILTER, Frame
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import is_star, item_names

__all__ = ["grouped_blocker", "grouped_frame", "grouped_output", "grouped_table", "grouping_column"]

_REFUSED_ARGS = (*(a for a in BEYOND_A_FILTER if a not in ("group", "having")), "into")
"""SELECT clauses that make a group's output row depend on more than its own rows (or
read other rows): see the module docstring."""
_GROUP_ARGS = frozenset({"expressions", "all"})


def grouped_blocker(select: exp.Select) -> str | None:
    """Why a range of a grouping column may not join this SELECT's WHERE.

    None: it may, for a column :func:`grouping_column` accepts. It must be a plain GROUP BY
    over one table, as the module docstring says.
    """
    for arg in _REFUSED_ARGS:
        if select.args.get(arg):
            return arg
    group = select.args.get("group")
    if group is None or not group.expressions:
        return "group"  # no GROUP BY (or GROUP BY ALL): not this case
    if any(value for name, value in group.args.items() if name not in _GROUP_ARGS):
        return "group"  # WITH ROLLUP, CUBE, GROUPING SETS, WITH TOTALS
    if group.args.get("all"):
        return "group"  # GROUP BY ALL (DuckDB); GROUP BY DISTINCT parses as all=False
    source = select.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return "source"
    table = source.this
    if not isinstance(table.this, exp.Identifier):
        return "source"  # a table function such as read_parquet(...)
    if table.args.get("sample") or table.args.get("joins") or table.args.get("pivots"):
        return "table"
    for node in select.walk():
        if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            return "group"
        if isinstance(node, exp.Window):
            return "window"
        if node is not select and isinstance(node, (exp.Query, exp.Subquery)):
            return "subquery"
    return None


def grouped_table(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> exp.Table | None:
    """The table of a plain GROUP BY over one table (see :func:`grouped_blocker`), or None.

    >>> grouped_table("SELECT a, COUNT(*) FROM s.t AS x GROUP BY a").sql()
    's.t AS x'
    >>> grouped_table("SELECT a, COUNT(*) FROM t GROUP BY ROLLUP (a)") is None
    True
    """
    tree = parse(query, dialect).tree
    if not isinstance(tree, exp.Select) or grouped_blocker(tree) is not None:
        return None
    table: exp.Table = tree.args["from_"].this
    return table.copy()


def grouping_column(select: exp.Select, position: int) -> exp.Column | None:
    """The table column output ``position`` (from 0) shows, when a range of it may join the WHERE.

    The WHERE is the one of ``select`` (see the module docstring); else None.

    The output item must be the column itself (``k``, ``t.k``, ``k AS name``), one of the
    GROUP BY items must be that column (or the output position), and no other output
    column may be named like it.
    """
    if grouped_blocker(select) is not None:
        return None
    items = select.expressions
    if any(is_star(item) for item in items) or not 0 <= position < len(items):
        return None
    table = select.args["from_"].this
    column = items[position].unalias()
    if not _table_column(column, table):
        return None
    assert isinstance(column, exp.Column)
    for item, name in zip(items, item_names(items), strict=True):
        named_alike = name is not None and name.name.casefold() == column.name.casefold()
        if named_alike and not _same_column(item.unalias(), column, table):
            return None  # the WHERE's name could mean this output column instead
    for expr in select.args["group"].expressions:
        if isinstance(expr, exp.Literal) and not expr.is_string and expr.name.isdigit():
            if int(expr.name) == position + 1:
                return column
        elif _same_column(expr, column, table):
            return column
    return None


def grouped_output(select: exp.Select, column: str) -> int | None:
    """The output position (from 0) of table column ``column``, as :func:`grouping_column` takes it.

    ``column`` is named as the catalog names it, matched case-insensitively; else None.
    """
    for position, item in enumerate(select.expressions):
        found = item.unalias()
        named = isinstance(found, exp.Column) and found.name.casefold() == column.casefold()
        if named and grouping_column(select, position) is not None:
            return position
    return None


def grouped_frame(
    parsed: ParsedQuery, key: str, engine_columns: Sequence[str] | None
) -> Frame | None:
    """A frame over the query itself whose one column is output ``key``'s table column.

    For range predicates (and only those: see the module docstring) that join the WHERE
    before the GROUP BY; None when :func:`grouping_column` refuses it.
    """
    tree = parsed.tree
    if not isinstance(tree, exp.Select) or grouped_blocker(tree) is not None:
        return None
    if engine_columns is not None:
        names: list[str | None] = [str(c) for c in engine_columns]
    else:
        names = [n.name if n is not None else None for n in item_names(tree.expressions)]
    if len(names) != len(tree.expressions):
        return None
    exact = [i for i, n in enumerate(names) if n == key]
    found = exact or [
        i for i, n in enumerate(names) if n is not None and n.casefold() == key.casefold()
    ]
    if len(found) != 1:
        return None
    column = grouping_column(tree, found[0])
    if column is None:
        return None
    return Frame(tree.copy(), parsed.dialect, [column.copy()], [key], [True], alias="")


def _table_column(expr: exp.Expr, table: exp.Table) -> bool:
    """Whether ``expr`` is a plain column of ``table`` (unqualified, or by its name)."""
    if not isinstance(expr, exp.Column) or not isinstance(expr.this, exp.Identifier):
        return False
    if expr.args.get("db") or expr.args.get("catalog"):
        return False
    return not expr.table or expr.table.casefold() == table.alias_or_name.casefold()


def _same_column(a: exp.Expr, b: exp.Column, table: exp.Table) -> bool:
    """Whether ``a`` certainly names the same column of ``table`` as ``b``.

    Identifiers quoted alike and equal (case-insensitively when unquoted; a quoted name is
    exact).
    """
    if not _table_column(a, table):
        return False
    assert isinstance(a, exp.Column)
    x, y = a.this, b.this
    if x.quoted != y.quoted:
        return False
    return bool(x.name == y.name if x.quoted else x.name.casefold() == y.name.casefold())
