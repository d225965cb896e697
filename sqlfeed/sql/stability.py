"""Whether a query returns the same rows on every run: :func:`unstable_reasons`.

Partition queries each re-run the query (and a failed partition is re-run elsewhere), so
only a stable query partitions consistently. Unstable are: volatile functions (random,
now, uuid, ...), TABLESAMPLE without a seed, aggregates that concatenate or pick rows in
arrival order without an ORDER BY of their own, and every ORDER BY that may tie where the
order decides the rows: a LIMIT/OFFSET's, a window's (``ROW_NUMBER``, ``LAG``, ...), an
ordered aggregate's.

The ORDER BYs need not be refused: :func:`sqlfeed.sql.order.complete_orders` completes them
with tie-breakers, so the query returns one valid result every time. ``strict=False`` asks
only for what no such completion fixes; ``strict=True`` (the default here) judges the
query as it is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dialects import Dialect, UnstableQueryError
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


def _is_order_sensitive_aggregate(node: exp.Expr) -> bool:
    name = function_name(node)
    if not (
        isinstance(node, ORDER_SENSITIVE_AGGREGATE_CLASSES) or name in ORDER_SENSITIVE_AGGREGATES
    ):
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


def _display_function(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return f"{node.name}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name()}()"
    return node.sql()
