"""The ``range`` strategy: ranges of one numeric, date or timestamp key, plus a NULL branch.

The ranges are cut at in-database quantiles where the engine has them (PostgreSQL,
DuckDB), else evenly between MIN and MAX (MySQL, SQLite), exactly for integers. The key
is the one the user named, else the table's integer primary key (its leading column).
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.plans.context import Built, PlanContext
from sqlfeed.plans.model import Partition
from sqlfeed.sql import bounds_sql, range_partition_sqls

__all__ = ["build", "problem", "range_key", "reason"]


def range_key(ctx: PlanContext) -> str | None:
    """The column to range-partition on: the one ordered key given, else the integer
    primary key; None when there is none."""
    if ctx.keys:
        if len(ctx.keys) == 1 and _orderable(ctx.schema.field(ctx.keys[0]).type):
            return ctx.keys[0]
        return None
    primary = ctx.integer_primary_key
    return primary if primary in ctx.columns else None


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Without an ordered key there are no ranges."""
    if range_key(ctx) is None:
        return (
            "strategy range needs key=COLUMN (a numeric, date or timestamp output column); "
            "no integer primary key was found to use instead"
        )
    return None


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """The key the ranges are of."""
    if auto:
        return f"ranges of the ordered key {range_key(ctx)} (each row read once)"
    return f"ranges of {range_key(ctx)}"


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """Up to ``m`` ranges of the key (fewer when it has fewer distinct bounds), then the
    NULL rows when there are any."""
    key = range_key(ctx)
    assert key is not None
    indexed = _primary_key_extent(ctx, key)
    if indexed is not None:  # no scan: the key's index and the catalog's row count
        row: Sequence[Any] = indexed
    else:
        fractions = [i / m for i in range(1, m)]
        bounds_query = bounds_sql(ctx.parsed, key, fractions, columns=ctx.columns)
        row = ctx.source.rows(bounds_query, what="bounds query")[0]
    total, non_null, low, high = int(row[0]), int(row[1]), row[2], row[3]
    quantiles = list(row[4]) if len(row) > 4 and row[4] is not None else None
    if non_null == 0:
        bounds: list[Any] = []
    elif quantiles is not None:
        bounds = sorted({q for q in quantiles if q is not None and q > low})
    else:
        bounds = _even_bounds(low, high, m)
    sqls = range_partition_sqls(
        ctx.parsed,
        key,
        bounds,
        columns=ctx.columns,
        null_partition=total > non_null or indexed is not None,
        allow_unstable=allow_unstable,
        strict=ctx.strict,
        table_keys=ctx.table_keys,
    )
    ranges = len(bounds) + 1
    labels = _range_labels(key, bounds)
    built = [
        Partition(i, sql, non_null // ranges, labels[i]) for i, sql in enumerate(sqls[:ranges])
    ]
    if total > non_null or indexed is not None:
        built.append(Partition(ranges, sqls[-1], total - non_null, f"{key} IS NULL"))
    return built, None


def _primary_key_extent(ctx: PlanContext, key: str) -> tuple[int, int, Any, Any] | None:
    """MySQL/MariaDB, ranges of the table's primary key with the catalog's row estimate:
    (rows, rows, MIN, MAX) of the key over the whole table, which its index answers
    without a scan (a ``COUNT(*)`` would read every row; the planning count only sizes).
    The query's own rows lie within; the open first and last ranges take any outside, and
    the plan keeps a ``key IS NULL`` partition (an index lookup) whatever the catalog says.
    None: not this case (a key given, no estimate, another engine)."""
    if ctx.keys or ctx.engine.name != "mysql" or ctx.table is None:
        return None
    estimate = ctx.catalog_rows
    if estimate is None or key != ctx.integer_primary_key:
        return None
    column = exp.column(key).sql("mysql")
    low, high = ctx.source.rows(
        f"SELECT MIN({column}), MAX({column}) FROM {ctx.quoted_table_name()}",
        what="bounds query",
    )[0]
    return estimate[0], estimate[0], low, high


def _orderable(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_temporal(arrow_type)
    )


def _even_bounds(low: Any, high: Any, m: int) -> list[Any]:
    """m - 1 bounds spread evenly over [low, high], exact for integers, strictly increasing.

    >>> _even_bounds(0, 9, 4)
    [2, 5, 7]
    >>> _even_bounds("a", "z", 4)
    []
    """
    steps: Callable[[int], Any]
    if isinstance(low, bool) or type(low) is not type(high):
        return []
    if isinstance(low, int):
        span = high - low + 1
        steps = lambda i: low + span * i // m  # noqa: E731
    elif isinstance(low, (decimal.Decimal, float, dt.datetime)):
        steps = lambda i: low + (high - low) * i / m  # noqa: E731
    elif isinstance(low, dt.date):
        days = (high - low).days + 1
        steps = lambda i: low + dt.timedelta(days=days * i // m)  # noqa: E731
    else:
        return []  # text and others: one range (plus NULLs); use hash for balance
    return sorted({b for b in (steps(i) for i in range(1, m)) if low < b <= high})


def _range_labels(key: str, bounds: Sequence[Any]) -> list[str]:
    if not bounds:
        return [f"{key} IS NOT NULL"]
    labels = [f"{key} < {bounds[0]}"]
    labels += [f"{key} in [{a}, {b})" for a, b in itertools.pairwise(bounds)]
    labels.append(f"{key} >= {bounds[-1]}")
    return labels
