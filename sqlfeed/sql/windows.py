"""What a window function's result depends on, and the aggregates that depend on row order.

Shared by :mod:`sqlfeed.sql.order` (which completes the orders that may tie) and
:mod:`sqlfeed.sql.stability`: which functions number or pick rows (so ties in their window
order change them), which frames end among tied rows (so a tie-breaker would change
them), a named window's definition copied into ``OVER name``, and what tells a window's
rows apart.
"""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects import Dialect
from sqlfeed.sql.syntax import function_name, is_constant

__all__ = [
    "ORDER_SENSITIVE_AGGREGATES",
    "ORDER_SENSITIVE_AGGREGATE_CLASSES",
    "frame_problem",
    "inline_named",
    "order_sensitive_aggregate",
    "spec_only",
    "unwrap",
    "whole_partition",
    "whole_partition_frame",
    "window_candidates",
    "window_kind",
]

ORDER_SENSITIVE_AGGREGATES = frozenset(
    (
        "string_agg listagg array_agg group_concat any_value first last arbitrary json_agg "
        "jsonb_agg json_arrayagg json_group_array list first_value last_value collect_list "
        "array_concat_agg xmlagg json_object_agg jsonb_object_agg json_objectagg "
        "json_group_object"
    ).split()
)
"""Aggregates whose result depends on the order rows arrive in (lower-case names)."""

ORDER_SENSITIVE_AGGREGATE_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.AnyValue,
    exp.First,
    exp.Last,
    exp.JSONArrayAgg,
    exp.JSONObjectAgg,
    exp.JSONBObjectAgg,
    exp.ArrayConcatAgg,
)
"""The sqlglot classes of :data:`ORDER_SENSITIVE_AGGREGATES`."""

# Window functions that number or pick rows, ignoring the frame (MariaDB refuses a frame).
_ROW_FUNCTIONS: tuple[type[exp.Expr], ...] = (exp.RowNumber, exp.Lag, exp.Lead, exp.Ntile)
# Window functions that pick a row of the frame.
_VALUE_FUNCTIONS: tuple[type[exp.Expr], ...] = (exp.FirstValue, exp.LastValue, exp.NthValue)


def unwrap(function: exp.Expr) -> exp.Expr:
    """The window's function without IGNORE NULLS / RESPECT NULLS around it."""
    while isinstance(function, (exp.IgnoreNulls, exp.RespectNulls)):
        function = function.this
    return function


def order_sensitive_aggregate(node: exp.Expr | None) -> bool:
    """Whether ``node`` is one of :data:`ORDER_SENSITIVE_AGGREGATES`."""
    return node is not None and (
        isinstance(node, ORDER_SENSITIVE_AGGREGATE_CLASSES)
        or function_name(node) in ORDER_SENSITIVE_AGGREGATES
    )


def window_kind(function: exp.Expr, spec: exp.Expr | None) -> str | None:
    """The window function's kind: ``rows``, ``value``, or None.

    ``rows`` (numbers rows, ignores the frame), ``value`` (picks from its frame), or None
    when ties in the window order cannot change the function's result.
    """
    if isinstance(function, _ROW_FUNCTIONS) or function_name(function) in {
        "row_number",
        "lag",
        "lead",
        "ntile",
    }:
        return "rows"
    if isinstance(function, _VALUE_FUNCTIONS) or order_sensitive_aggregate(function):
        return "value"
    rows_frame = isinstance(spec, exp.WindowSpec) and str(spec.args.get("kind")).upper() == "ROWS"
    if isinstance(function, exp.AggFunc) and rows_frame:
        return "value"  # a running aggregate over a ROWS frame: which rows it sums is order
    return None


def frame_problem(function: exp.Expr, kind: str, window: exp.Window) -> str | None:
    """Why completing the order would change a RANGE/GROUPS frame (its bounds follow ties)."""
    if kind != "value" or window.args.get("order") is None:
        return None
    spec = window.args.get("spec")
    mode = str(spec.args.get("kind") or "RANGE").upper() if spec is not None else "RANGE"
    if mode == "ROWS":
        return None
    start = _bound(spec, "start", "UNBOUNDED PRECEDING")
    end = _bound(spec, "end", "CURRENT ROW")
    whole_start = start == "UNBOUNDED PRECEDING"
    whole_end = end == "UNBOUNDED FOLLOWING"
    if isinstance(function, exp.FirstValue) and whole_start:
        return None
    if isinstance(function, exp.LastValue) and whole_end:
        return None
    if whole_start and whole_end:
        return None
    return (
        f"its {mode} frame ends among the tied rows; order the window by a unique key, or "
        "give it a ROWS frame"
    )


def _bound(spec: exp.Expr | None, which: str, default: str) -> str:
    if spec is None or spec.args.get(which) is None:
        return default
    value = spec.args[which]
    text = value if isinstance(value, str) else value.sql()
    side = spec.args.get(f"{which}_side")
    return f"{text} {side}".strip().upper() if side else str(text).upper()


def whole_partition(spec: exp.Expr | None) -> bool:
    """Whether a window without ORDER BY has the whole partition as its frame (the default)."""
    return spec is None or str(spec.args.get("kind") or "").upper() in ("RANGE", "GROUPS")


def whole_partition_frame() -> exp.WindowSpec:
    """``ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING``."""
    return exp.WindowSpec(
        kind="ROWS",
        start="UNBOUNDED",
        start_side="PRECEDING",
        end="UNBOUNDED",
        end_side="FOLLOWING",
    )


def inline_named(window: exp.Window, select: exp.Select) -> bool:
    """Copy a named window's definition into ``OVER name``; False if it is not defined here."""
    name = window.args["alias"].name.casefold()
    for definition in select.args.get("windows") or []:
        if isinstance(definition.this, exp.Identifier) and definition.this.name.casefold() == name:
            for arg in ("partition_by", "order", "spec"):
                if not window.args.get(arg) and definition.args.get(arg):
                    value = definition.args[arg]
                    window.set(
                        arg, [v.copy() for v in value] if isinstance(value, list) else value.copy()
                    )
            window.set("alias", None)
            return True
    return False


def spec_only(window: exp.Window, engine: Dialect) -> str:
    """The window's PARTITION BY / ORDER BY / frame as the engine writes it, for messages."""
    dialect = engine.sqlglot_dialect
    parts: list[str] = []
    if window.args.get("partition_by"):
        parts.append(
            "PARTITION BY " + ", ".join(p.sql(dialect) for p in window.args["partition_by"])
        )
    for arg in ("order", "spec"):
        if window.args.get(arg) is not None:
            parts.append(window.args[arg].sql(dialect).strip())
    text = " ".join(parts)
    return text if len(text) <= 100 else text[:97] + "..."


def window_candidates(select: exp.Select) -> list[exp.Expr]:
    """What tells the rows of a non-grouped SELECT apart for its windows.

    Its output expressions (window results aside), then what every window reads or orders
    by.
    """
    candidates = [
        item.unalias().copy() for item in select.expressions if item.find(exp.Window) is None
    ]
    for other in select.find_all(exp.Window):
        if other.find_ancestor(exp.Select) is not select or isinstance(other.this, exp.Identifier):
            continue
        function = unwrap(other.this)
        for value in function.args.values():
            for arg in value if isinstance(value, list) else [value]:
                if isinstance(arg, exp.Expr) and not is_constant(arg):
                    candidates.append(arg.copy())
        order = other.args.get("order")
        candidates += [p.copy() for p in other.args.get("partition_by") or []]
        candidates += [o.this.copy() for o in (order.expressions if order else [])]
    group = select.args.get("group")
    if group is not None:  # ROLLUP / CUBE / GROUPING SETS: their columns too
        candidates += [c.copy() for c in group.find_all(exp.Column)]
    return candidates
