"""Whether a query returns the same rows on every run: :func:`unstable_reasons`.

Partition queries each re-run the query (and a failed partition is re-run elsewhere), so
only a stable query partitions consistently. Unstable are: volatile functions (random,
now, uuid, ...), TABLESAMPLE without a seed, aggregates and window functions that pick or
concatenate rows in arrival order, and LIMIT/OFFSET whose ORDER BY may cut between ties.
"""

from __future__ import annotations

from sqlglot import exp

from dialects import Dialect, UnstableQueryError
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import (
    function_name,
    has_limit,
    is_star,
    projection,
    single_aggregate_row,
)

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

# Aggregates whose result depends on the order rows arrive in, unless given an ORDER BY.
_ORDER_SENSITIVE_AGG_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.AnyValue,
    exp.First,
    exp.Last,
)
_ORDER_SENSITIVE_AGGS = frozenset(
    (
        "string_agg listagg array_agg group_concat any_value first last arbitrary json_agg "
        "jsonb_agg json_arrayagg json_group_array list first_value last_value collect_list "
        "array_concat_agg xmlagg"
    ).split()
)

# Window functions that pick or number rows, so ties in the window order make them unstable.
_ORDER_SENSITIVE_WINDOW_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.RowNumber,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.NthValue,
    exp.Ntile,
)


def unstable_reasons(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> list[str]:
    """Why the query's result may differ between two runs; empty when it is stable.

    Partition queries each re-run the query (and a failed partition is re-run by another
    worker), so a query must return the same rows every time to be partitioned.

    >>> unstable_reasons("SELECT a FROM t LIMIT 10")
    ['LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows']
    >>> unstable_reasons("SELECT a FROM t ORDER BY a LIMIT 10")
    []
    """
    tree = parse(query, dialect).tree
    reasons: list[str] = []

    def add(reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    for node in tree.walk():
        name = function_name(node)
        if isinstance(node, _VOLATILE_CLASSES) or name in _VOLATILE_FUNCTIONS:
            add(f"{_display_function(node)} returns a different value on every run")
        elif name in _VOLATILE_WITHOUT_ARGS and not node.expressions and not node.this:
            add(f"{name}() without an argument is the current time")
        elif isinstance(node, exp.TableSample) and node.args.get("seed") is None:
            add("TABLESAMPLE without a seed (REPEATABLE) draws a different sample every run")
        elif _is_order_sensitive_aggregate(node):
            add(
                f"{_display_function(node)} without ORDER BY concatenates rows in an "
                "arbitrary order; add ORDER BY inside the aggregate"
            )
        elif isinstance(node, exp.Window) and _is_order_sensitive_window(node):
            add(
                f"{_display_function(node.this)} OVER (...) without ORDER BY numbers or picks "
                "rows in an arbitrary order; add ORDER BY to the window"
            )
        if isinstance(node, (exp.Select, exp.SetOperation)):
            reason = _limit_reason(node)
            if reason:
                add(reason)
    return reasons


def check_stable(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> None:
    """Raise :class:`UnstableQueryError` with every reason when the query is not stable."""
    reasons = unstable_reasons(query, dialect)
    if reasons:
        raise UnstableQueryError(
            "cannot partition this query consistently, because "
            + "; ".join(reasons)
            + ". Make it deterministic, materialize it first, or pass allow_unstable=True "
            "(--allow-unstable) if you accept rows lost or repeated across partitions"
        )


def _limit_reason(node: exp.Expr) -> str | None:
    if not has_limit(node):
        return None
    limit = node.args.get("limit")
    if isinstance(limit, exp.Limit) and _is_zero(limit.expression):
        return None
    if isinstance(node, exp.Select) and single_aggregate_row(node):
        return None
    order = node.args.get("order")
    if order is None:
        return "LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows"
    if not _order_is_total(node, order):
        ordered = ", ".join(o.this.sql() for o in order.expressions)
        return (
            f"LIMIT/OFFSET with ORDER BY {ordered} may cut between rows that tie on it; "
            "order by every output column"
        )
    return None


def _is_zero(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and node.name == "0"


def _order_is_total(node: exp.Expr, order: exp.Order) -> bool:
    """Whether ORDER BY covers every output column, so tied rows are identical rows."""
    items = projection(node) if not isinstance(node, exp.Select) else node.expressions
    if not items or any(is_star(i) for i in items):
        return False
    keys = {o.this.sql().casefold() for o in order.expressions}
    for position, item in enumerate(items, start=1):
        candidates = {item.unalias().sql().casefold(), str(position)}
        if item.alias_or_name:
            candidates.add(exp.column(item.alias_or_name).sql().casefold())
            candidates.add(item.alias_or_name.casefold())
        if not candidates & keys:
            return False
    return True


def _is_order_sensitive_aggregate(node: exp.Expr) -> bool:
    name = function_name(node)
    if not (isinstance(node, _ORDER_SENSITIVE_AGG_CLASSES) or name in _ORDER_SENSITIVE_AGGS):
        return False
    if isinstance(node.parent, exp.Window):
        return False  # judged as a window function
    if isinstance(node.parent, exp.WithinGroup):
        return False
    if isinstance(node, (exp.AnyValue, exp.First, exp.Last)) or name in {
        "any_value", "first", "last", "arbitrary", "first_value", "last_value"
    }:  # fmt: skip
        return True
    return node.find(exp.Order) is None


def _is_order_sensitive_window(window: exp.Window) -> bool:
    function = window.this
    if not isinstance(function, _ORDER_SENSITIVE_WINDOW_CLASSES + _ORDER_SENSITIVE_AGG_CLASSES):
        return False
    return window.args.get("order") is None


def _display_function(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return f"{node.name}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name()}()"
    return node.sql()
