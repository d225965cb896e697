"""Whether a query returns the same rows on every run: :func:`unstable_reasons`.

Partition queries each re-run the query (and a failed partition is re-run elsewhere), so
only a stable query partitions consistently. Unstable are: volatile functions (random,
now, uuid, ...), TABLESAMPLE without a seed, aggregates that concatenate or pick rows in
arrival order without an ORDER BY of their own (``string_agg``, ``array_agg``, ``list``,
``GROUP_CONCAT``, ``json_agg``, ``first``, ...), and every ORDER BY that may tie where the
order decides the rows: a LIMIT/OFFSET's, a ``DISTINCT ON``'s (which row of each group it
keeps), an OFFSET's before ``FETCH ... WITH TIES``, a window's (``ROW_NUMBER``, ``LAG``,
...), an ordered aggregate's. Functions are named as the user wrote them.

The ORDER BYs need not be refused: :func:`sqlfeed.sql.order.complete_orders` completes them
with tie-breakers, so the query returns one valid result every time. ``strict=False`` asks
only for what no such completion fixes; ``strict=True`` (the default here) judges the
query as it is written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import sqlglot
from sqlglot import exp

from sqlfeed.dialects import Dialect, UnstableQueryError
from sqlfeed.sql.keys import TableKeys
from sqlfeed.sql.order import (
    ORDER_SENSITIVE_AGGREGATE_CLASSES,
    ORDER_SENSITIVE_AGGREGATES,
    complete_orders,
)
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import function_name

__all__ = ["check_stable", "unstable_reasons"]

# Functions whose value changes from one run to the next.
_VOLATILE_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.Rand,
    exp.Uuid,
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentDatetime,
    exp.Localtimestamp,
)
_VOLATILE_FUNCTIONS = frozenset(
    (
        "random rand now uuid gen_random_uuid uuid_generate_v1 uuid_generate_v4 random_uuid "
        "uuid_short newid newsequentialid clock_timestamp statement_timestamp "
        "transaction_timestamp timeofday getdate getutcdate sysdate systimestamp sysdatetime "
        "curdate curtime utc_timestamp utc_date utc_time localtime localtimestamp "
        "current_timestamp current_date current_time setseed currval lastval last_insert_id "
        "connection_id pg_backend_pid txid_current random_bytes gen_random_bytes randn "
        "randstr uniform normal"
    ).split()
)

# unix_timestamp() without arguments is "now"; with an argument it is a pure conversion.
_VOLATILE_WITHOUT_ARGS = frozenset({"unix_timestamp"})


def unstable_reasons(
    query: str | ParsedQuery,
    dialect: str | Dialect = "duckdb",
    *,
    strict: bool = True,
    columns: Sequence[str] | None = None,
    table_keys: TableKeys | None = None,
    orders: bool = True,
) -> list[str]:
    """Why the query's result may differ between two runs; empty when it is stable.

    Partition queries each re-run the query (and a failed partition is re-run by another
    worker), so a query must return the same rows every time to be partitioned.

    Args:
        query: SQL text or a parsed query.
        dialect: the engine (when ``query`` is text).
        strict: judge the query as written (True), or only what completing its ORDER BYs
            with tie-breakers cannot fix (False; see
            :func:`~sqlfeed.sql.order.complete_orders`).
        columns: the output column names, when known (see ``complete_orders``).
        table_keys: the unique keys of the query's only base table (see ``complete_orders``).
        orders: judge ORDER BYs at all; False leaves them for later (before the catalog
            facts and output columns that may prove or complete them are known).

    >>> unstable_reasons("SELECT a FROM t LIMIT 10")
    ['LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows']
    >>> unstable_reasons("SELECT a FROM t LIMIT 10", strict=False)
    []
    >>> unstable_reasons("SELECT a FROM t ORDER BY a LIMIT 10")
    []
    """
    parsed = parse(query, dialect)
    reasons: list[str] = []

    def add(reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    for node in parsed.tree.walk():
        name = function_name(node)
        if isinstance(node, _VOLATILE_CLASSES) or name in _VOLATILE_FUNCTIONS:
            add(f"{_display_function(node, parsed)} returns a different value on every run")
        elif name in _VOLATILE_WITHOUT_ARGS and not node.expressions and not node.this:
            add(f"{name}() without an argument is the current time")
        elif isinstance(node, exp.TableSample) and node.args.get("seed") is None:
            add("TABLESAMPLE without a seed (REPEATABLE) draws a different sample every run")
        elif _is_order_sensitive_aggregate(node):
            add(_aggregate_reason(node, parsed))
    if orders:
        completion = complete_orders(parsed, columns=columns, table_keys=table_keys)
        for reason in completion.ties if strict else completion.unfixable:
            add(reason)
    return reasons


def check_stable(
    query: str | ParsedQuery,
    dialect: str | Dialect = "duckdb",
    *,
    strict: bool = True,
    columns: Sequence[str] | None = None,
    table_keys: TableKeys | None = None,
    orders: bool = True,
) -> None:
    """Raise :class:`UnstableQueryError` with every reason when the query is not stable.

    The arguments are those of :func:`unstable_reasons`.
    """
    reasons = unstable_reasons(
        query, dialect, strict=strict, columns=columns, table_keys=table_keys, orders=orders
    )
    if reasons:
        raise UnstableQueryError(
            "cannot partition this query consistently, because "
            + "; ".join(reasons)
            + ". Make it deterministic, materialize it first, or pass allow_unstable=True "
            "(--allow-unstable) if you accept rows lost or repeated across partitions"
        )


_PICKING_AGGREGATES = frozenset({"any_value", "first", "last", "arbitrary"})
"""Order-sensitive aggregates that pick one row's value rather than concatenate."""


def _is_order_sensitive_aggregate(node: exp.Expr) -> bool:
    """An aggregate whose value depends on the order rows arrive in, without an ORDER BY of its own.

    One with an ORDER BY is completed or judged by ``complete_orders``.
    """
    name = function_name(node)
    if not (
        isinstance(node, ORDER_SENSITIVE_AGGREGATE_CLASSES) or name in ORDER_SENSITIVE_AGGREGATES
    ):
        return False
    if isinstance(node.parent, exp.Window):
        return False  # judged as a window function
    if isinstance(node.parent, exp.WithinGroup):
        return False
    nested = (exp.Query, exp.Subquery)
    own = node.walk(prune=lambda n: n is not node and isinstance(n, nested))
    return not any(isinstance(n, exp.Order) and n.parent is node for n in own)


def _aggregate_reason(node: exp.Expr, parsed: ParsedQuery) -> str:
    """Why an order-sensitive aggregate without ORDER BY is unstable, and the fix."""
    shown = _display_function(node, parsed)
    name = function_name(node)
    if name in ("any_value", "arbitrary"):
        return (
            f"{shown} picks the value of an arbitrary row; use MIN() or MAX(), or an "
            "aggregate with an ORDER BY of its own"
        )
    if isinstance(node, (exp.First, exp.Last)) or name in _PICKING_AGGREGATES:
        what = "picks the value of an arbitrary row"
    else:
        what = "concatenates rows in an arbitrary order"
    fix = "add ORDER BY inside the aggregate"
    if parsed.dialect.ORDERED_AGGREGATES_SINCE:
        fix += f" (needs {parsed.dialect.ORDERED_AGGREGATES_SINCE} or newer)"
    return f"{shown} without ORDER BY {what}; {fix}"


def _display_function(node: exp.Expr, parsed: ParsedQuery | None = None) -> str:
    """The function as the user wrote it (``random()``, not sqlglot's ``RAND()``)."""
    keyword = isinstance(node, exp.Func) and isinstance(node, _VOLATILE_CLASSES[2:])
    if keyword and isinstance(node, exp.Func) and not node.this and not node.meta:
        return str(node.sql_name())  # CURRENT_TIMESTAMP, written without parentheses
    written = _written_name(node, parsed) if parsed is not None else None
    if written is not None:
        return f"{written}()"
    if isinstance(node, exp.Anonymous):
        return f"{node.name}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name()}()"
    return node.sql()


def _written_name(node: exp.Expr, parsed: ParsedQuery) -> str | None:
    """The name of a function call in the user's text.

    Where the parser saw it, else the first name called in the text that the dialect reads
    as the same function.
    """
    sql = parsed.sql
    start, end = node.meta.get("start"), node.meta.get("end")
    if isinstance(start, int) and isinstance(end, int) and _NAME.fullmatch(sql[start : end + 1]):
        return sql[start : end + 1]
    for name in dict.fromkeys(m.group(1) for m in _CALL.finditer(sql)):
        if type(node).__name__ in _function_classes(name, parsed.dialect.sqlglot_dialect):
            return name
    return None


@functools.lru_cache(maxsize=512)
def _function_classes(name: str, dialect: str) -> frozenset[str]:
    """The sqlglot classes ``name(...)`` parses to in ``dialect`` (with 0 to 2 arguments)."""
    found = set()
    for args in ("", "x", "x, ','"):
        try:
            tree = sqlglot.parse_one(f"SELECT {name}({args})", read=dialect)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            continue
        if isinstance(tree, exp.Select) and tree.expressions:
            found.add(type(tree.expressions[0].unalias()).__name__)
    return frozenset(found)


_CALL = re.compile(r"(?<![\w.\"'`])([A-Za-z_]\w*)\s*\(")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
