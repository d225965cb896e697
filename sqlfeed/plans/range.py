"""The ``range`` strategy: ranges of one numeric, date or timestamp key, plus a NULL branch.

The ranges are cut at in-database quantiles where the engine has them (PostgreSQL,
DuckDB), else evenly between MIN and MAX (MySQL, SQLite), exactly for integers. The key
is the one the user named, else the table's integer primary key (its leading column).

Each range joins the query's own WHERE where that provably selects the same rows
(:func:`sqlfeed.sql.range_pushdown`): a plain filter over one table, or a GROUP BY whose
key is one of its grouping columns, output unchanged, filtered before it groups (so an
aggregate is read once, by index ranges: :mod:`sqlfeed.sql.grouped` has the proof); else
the query is wrapped.

Ranges of the table's integer primary key on PostgreSQL and MySQL/MariaDB take their
bounds without a scan: MIN and MAX from the key's index, the rows from the catalog's
estimate, and on PostgreSQL the cuts from the column's ``pg_stats`` histogram.

On MySQL/MariaDB, ranges of the leading primary-key column pushed into a plain scan
without an ORDER BY are each ordered by the whole primary key, which InnoDB answers from
its clustered index without a sort: a query over two adjacent ranges then returns the
first range's rows followed by the second's, so the closed middle ranges carry spans
(:mod:`sqlfeed.plans.spans`) and a static Feeder reads adjacent ones by one query. The
open first and last ranges and the NULL one stay apart, as ctid's open ends do.
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
from sqlfeed.plans.spans import template
from sqlfeed.sql import bounds_sql, range_partition_sqls, range_pushdown

__all__ = ["build", "clustered_order", "problem", "pushdown", "range_key", "reason"]

_PUSHDOWN_MEMO = "range:pushdown"

Span = tuple[str, int, int] | None


def range_key(ctx: PlanContext) -> str | None:
    """The column to range-partition on: the one ordered key given, else the integer primary key.

    None when there is none.
    """
    if ctx.keys:
        if len(ctx.keys) == 1 and _orderable(ctx.schema.field(ctx.keys[0]).type):
            return ctx.keys[0]
        return None
    primary = ctx.integer_primary_key
    return primary if primary in ctx.columns else None


def pushdown(ctx: PlanContext) -> str:
    """Where the ranges go (:func:`sqlfeed.sql.range_pushdown`).

    ``query``, ``groups`` (before a GROUP BY), or an empty string (a wrap); empty without a
    key.
    """
    if _PUSHDOWN_MEMO not in ctx.memo:
        key = range_key(ctx)
        ctx.memo[_PUSHDOWN_MEMO] = (
            "" if key is None else range_pushdown(ctx.parsed, key, columns=ctx.columns)
        )
    where: str = ctx.memo[_PUSHDOWN_MEMO]
    return where


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Without an ordered key there are no ranges."""
    if range_key(ctx) is None and ctx.keys:  # given, but not one ordered column
        types = ", ".join(f"{k} is {ctx.schema.field(k).type}" for k in ctx.keys)
        if len(ctx.keys) > 1:
            return (
                f"strategy range takes one key column, not {len(ctx.keys)} ({types}): give "
                "one numeric, date or timestamp column as key=COLUMN, or use strategy=hash"
            )
        return (
            f"strategy range needs a numeric, date or timestamp key column, and {types}: "
            "give such a column as key=COLUMN, or use strategy=hash (any column)"
        )
    if range_key(ctx) is None:
        return (
            "strategy range needs key=COLUMN (a numeric, date or timestamp output column); "
            "no integer primary key was found to use instead"
        )
    return None


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """The key the ranges are of, and how they filter the query."""
    key = range_key(ctx)
    assert key is not None
    text = f"ranges of the ordered key {key} (each row read once)" if auto else f"ranges of {key}"
    if pushdown(ctx) == "groups":
        text += (
            ", each put into the query's own WHERE before its GROUP BY (a range of a "
            "grouping column keeps or drops whole groups: one read of the aggregate)"
        )
    if _indexed(ctx, key):
        text += "; bounds from the key's index and the catalog's row estimate (no scan)"
    order = clustered_order(ctx, key)
    if order:
        names = ", ".join(c.name for c in order)
        text += (
            f"; each range ordered by the primary key ({names}), the clustered index's "
            "own order, so adjacent ranges are read by one query"
        )
    return text


def clustered_order(ctx: PlanContext, key: str) -> list[exp.Column]:
    """The primary key's columns to order each range by, or empty.

    Given for MySQL/MariaDB ranges of the leading primary-key column pushed into a plain
    scan without an ORDER BY; empty otherwise. The columns are qualified by the table, so no
    output alias can stand for them.
    """
    if not ctx.engine.CLUSTERED_PRIMARY_KEY or ctx.table is None or ctx.keys:
        return []
    if key != ctx.integer_primary_key or ctx.parsed.tree.args.get("order"):
        return []
    if pushdown(ctx) != "query":
        return []
    alias = ctx.table.args.get("alias")
    qualifier = alias.this if alias is not None else ctx.table.this
    return [
        exp.column(exp.to_identifier(name, quoted=True), table=qualifier.copy())
        for name in ctx.primary_key
    ]


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """Up to ``m`` ranges of the key, then the NULL rows when there are any.

    Fewer ranges when the key has fewer distinct bounds.
    """
    key = range_key(ctx)
    assert key is not None
    indexed = _index_extent(ctx, key, m)
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
        bounds = sorted({q for q in quantiles if q is not None and low < q <= high})
    else:
        bounds = _even_bounds(low, high, m)
    nulls = total > non_null or indexed is not None
    order = clustered_order(ctx, key)
    sqls = range_partition_sqls(
        ctx.parsed,
        key,
        bounds,
        columns=ctx.columns,
        null_partition=nulls,
        allow_unstable=allow_unstable,
        strict=ctx.strict,
        table_keys=ctx.table_keys,
        order_by=order,
    )
    ranges = len(bounds) + 1
    labels = _range_labels(key, bounds)
    spans = _key_spans(ctx, key, bounds, order, allow_unstable)
    built = [
        Partition(i, sql, non_null // ranges, labels[i], span=spans[i])
        for i, sql in enumerate(sqls[:ranges])
    ]
    if nulls:
        built.append(Partition(ranges, sqls[-1], total - non_null, f"{key} IS NULL"))
    return built, None


def _key_spans(
    ctx: PlanContext, key: str, bounds: list[Any], order: list[exp.Column], allow_unstable: bool
) -> list[Span]:
    """The span of each range.

    For :func:`clustered_order` ranges: the closed middle ones share one template; the open
    first and last have none.
    """
    none: list[Span] = [None] * (len(bounds) + 1)
    integers = all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
    if not order or len(bounds) < 3 or not integers:  # fewer than two closed ranges
        return none

    def render(low: int, high: int) -> str:
        return range_partition_sqls(
            ctx.parsed,
            key,
            [low, high],
            columns=ctx.columns,
            null_partition=False,
            allow_unstable=allow_unstable,
            strict=ctx.strict,
            table_keys=ctx.table_keys,
            order_by=order,
        )[1]

    text = template(render, bounds[0], bounds[1])
    if text is None:
        return none
    return [None, *((text, low, high) for low, high in itertools.pairwise(bounds)), None]


def _indexed(ctx: PlanContext, key: str) -> bool:
    """Whether the bounds come from the key's index (see :func:`_index_extent`)."""
    if ctx.keys or not ctx.engine.KEY_BOUNDS_FROM_INDEX or ctx.base_table is None:
        return False
    return key == ctx.integer_primary_key and ctx.catalog_rows is not None


def _index_extent(
    ctx: PlanContext, key: str, m: int
) -> tuple[int, int, Any, Any, list[int] | None] | None:
    """(rows, rows, MIN, MAX, cuts) of the integer primary key over the whole table.

    For PostgreSQL and MySQL/MariaDB, ranges of the table's integer primary key with the
    catalog's row estimate. Its index answers MIN and MAX without a scan (a ``COUNT(*)``
    would read every row; the planning count only sizes), and on PostgreSQL the cuts come
    from the column's histogram (None: cut evenly). The query's own rows (for a GROUP BY,
    its groups' keys) lie within; the open first and last ranges take any outside, and the
    plan keeps a ``key IS NULL`` partition (an index lookup) whatever the catalog says.
    None: not this case (a key given, no estimate, another engine).
    """
    if not _indexed(ctx, key):
        return None
    assert ctx.catalog_rows is not None
    assert ctx.base_table is not None
    rows = ctx.catalog_rows[0]
    column = exp.column(exp.to_identifier(ctx.primary_key[0], quoted=True))
    table = ctx.base_table.copy()
    table.set("alias", None)
    extremes = exp.select(exp.Min(this=column), exp.Max(this=column.copy())).from_(table)
    low, high = ctx.source.rows(ctx.engine.sql(extremes), what="bounds query")[0]
    cuts = None
    if isinstance(low, int) and isinstance(high, int):  # PostgreSQL keeps a histogram
        quoted = ctx.quoted_table_name()
        histogram = ctx.engine.key_histogram(ctx.source, quoted, ctx.primary_key[0])
        cuts = _histogram_cuts(histogram, m) if histogram else None
    return rows, rows, low, high, cuts


def _histogram_cuts(histogram: Sequence[int], m: int) -> list[int]:
    """The m - 1 cuts at the fractions 1/m, ..., (m-1)/m of an equal-count histogram's bounds.

    Exact integers, interpolated within a bucket.

    >>> _histogram_cuts([0, 10, 20, 100], 6)
    [5, 10, 15, 20, 60]
    """
    buckets = len(histogram) - 1
    if buckets < 1:
        return []
    cuts = []
    for i in range(1, m):
        bucket, rest = divmod(i * buckets, m)
        low, high = histogram[bucket], histogram[min(bucket + 1, buckets)]
        cuts.append(low + (high - low) * rest // m)
    return cuts


def _orderable(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_temporal(arrow_type)
    )


def _even_bounds(low: Any, high: Any, m: int) -> list[Any]:
    """The m - 1 bounds spread evenly over [low, high], exact for integers, strictly increasing.

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
