"""What the planner does to a query before a strategy splits it, and says in ``plan.reason``.

* :func:`deterministic_query`: every partition re-runs the query, so it must return the
  same rows every run. ORDER BYs that may tie (a LIMIT's, a window's) are completed with
  tie-breakers (:func:`sqlfeed.sql.complete_orders`), after asking the catalog for the
  unique keys of the query's only base table (an ORDER BY over one needs none); with
  ``strict`` they are refused instead, as are volatile functions unless ``allow_unstable``.
* :func:`partition_count`: M from the row count: the files' own counts, the scratch
  table's, the catalog's estimate for a plain scan of one base table (or for ranges that
  filter a GROUP BY over one before it groups), else a ``COUNT(*)``; capped at
  :data:`~sqlfeed.sql.MAX_PARTITIONS`.
* :func:`notes`: what the reason adds: which ORDER BY was completed with what, and that M
  was capped (by the limit, or because the strategy could not cut the data finer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from sqlfeed.io import Source
from sqlfeed.plans import fragments, materialize
from sqlfeed.plans import range as range_strategy
from sqlfeed.plans.context import PlanContext, unique_keys
from sqlfeed.sql import (
    MAX_PARTITIONS,
    ParsedQuery,
    check_stable,
    complete_orders,
    only_base_table,
    partitions_for,
)

__all__ = [
    "Deterministic",
    "Sizing",
    "catalog_estimate",
    "deterministic_query",
    "notes",
    "partition_count",
]


@dataclass(frozen=True)
class Deterministic:
    """A query made to return the same rows every run (see :func:`deterministic_query`)."""

    parsed: ParsedQuery
    """The query, its ORDER BYs completed (as given with ``strict``)."""
    tiebreaks: list[str]
    """One line per completed ORDER BY: which one, with what."""
    table_keys: list[list[str]] | None
    """The unique keys of the query's only base table, when the catalog was asked."""
    strict: bool = False
    """Whether ORDER BYs that may tie were refused rather than completed."""

    def context(
        self,
        source: Source,
        columns: list[str],
        schema: pa.Schema,
        keys: list[str] | None,
        scratch: str | None,
    ) -> PlanContext:
        """The strategies' :class:`PlanContext` for this query (see its arguments)."""
        text_columns = source.text_columns(self.parsed)
        context = PlanContext(source, self.parsed, columns, schema, text_columns, keys, scratch)
        context.strict, context.table_keys = self.strict, self.table_keys
        return context


def deterministic_query(
    source: Source,
    parsed: ParsedQuery,
    columns: Sequence[str],
    *,
    strict: bool,
    allow_unstable: bool,
) -> Deterministic:
    """The query with its ORDER BYs completed (or, with ``strict``, checked).

    The catalog is asked for keys only when an ORDER BY may tie without them.

    Raises:
        UnstableQueryError: it cannot return the same rows every run, and not
            ``allow_unstable``.
    """
    completion = complete_orders(parsed, columns=columns)
    table_keys = None
    if completion.ties:
        table = only_base_table(parsed.tree)
        if table is not None:
            table_keys = unique_keys(source, table) or None
        if table_keys is not None:
            completion = complete_orders(parsed, columns=columns, table_keys=table_keys)
    if not allow_unstable:
        check_stable(parsed, strict=strict, columns=columns, table_keys=table_keys)
    if strict:
        return Deterministic(parsed, [], table_keys, strict=True)
    return Deterministic(completion.parsed, list(completion.completed), table_keys)


@dataclass(frozen=True)
class Sizing:
    """How many rows the planner expects and the M it chose (see :func:`partition_count`)."""

    rows: int | None
    """The exact row count, when counted (``Plan.rows``)."""
    estimated_rows: int | None
    """The count M was sized from (``Plan.estimated_rows``)."""
    m: int
    capped: str
    """A note when M was capped at :data:`MAX_PARTITIONS`."""
    note: str = ""
    """Where an estimate came from, for the reason (empty when counted)."""


def partition_count(
    context: PlanContext, chosen: str, partitions: int | None, target_rows: int, workers: int
) -> Sizing:
    """M from ``partitions``, else from the rows; capped at :data:`MAX_PARTITIONS`.

    The rows: the files' own counts (``fragments``), the scratch table's count
    (``materialize``: the query ran once already), the catalog's estimate for a plain scan
    of one base table (see :func:`catalog_estimate`), else a ``COUNT(*)`` of the query.
    """
    if partitions is not None:
        if chosen == "materialize":  # the scratch table's count costs little: keep it
            stored = materialize.stored_rows(context)
            return Sizing(stored, stored, partitions, "")
        return Sizing(None, None, partitions, "")
    rows: int | None = None
    note = ""
    if chosen == "fragments":  # sized by the files' own row counts: no COUNT(*) scan
        estimated = fragments.stored_rows(context)
    elif chosen == "materialize":
        rows = estimated = materialize.stored_rows(context)
    else:
        found = catalog_estimate(context, chosen)
        if found is not None:
            estimated, note = found
        else:
            rows = estimated = context.source.count(context.parsed, columns=context.columns)
            context.counted_rows = rows
    m = partitions_for(estimated, target_rows, workers)
    if m <= MAX_PARTITIONS:
        return Sizing(rows, estimated, m, "", note)
    capped = (
        f"M capped at {MAX_PARTITIONS} (the most a plan may have) instead of {m}; raise "
        "target_rows (--target-rows)"
    )
    return Sizing(rows, estimated, MAX_PARTITIONS, capped, note)


def catalog_estimate(context: PlanContext, chosen: str) -> tuple[int, str] | None:
    """(rows, note) from the catalog instead of a ``COUNT(*)``, or None to count.

    Only for a plain scan of one base table (the count only picks M), or for ranges that
    filter a GROUP BY over one table before it groups. Without a WHERE the table's size is
    a plain scan's; with one, and for the groups, it is an upper bound: used for ``ctid``
    and ``range`` (more, smaller partitions still read each row once) but not ``hash``,
    whose every partition re-runs the query.
    """
    grouped = context.table is None
    if grouped and (chosen != "range" or context.grouped is None):
        return None
    if grouped and range_strategy.pushdown(context) != "groups":
        return None
    filtered = context.parsed.tree.args.get("where") is not None
    if filtered and chosen not in ("ctid", "range"):
        return None
    if context.catalog_rows is None:
        return None
    rows, where = context.catalog_rows
    bound = ", an upper bound: the query filters the table" if filtered else ""
    if grouped:
        bound = ", an upper bound: the query groups the table's rows"
    return rows, f"M sized from the catalog's {rows} rows ({where}{bound}), not a COUNT(*)"


def notes(
    tiebreaks: Sequence[str], capped: str, m: int, built: int, strategy: str, sized: str = ""
) -> str:
    """What ``plan.reason`` adds after the strategy's own reason (empty, or ``; ...``).

    ``sized`` says where the rows M was sized from came from, when not a count.
    """
    parts = []
    if tiebreaks:
        parts.append(
            "tie-breakers added so every run returns the same rows: " + "; ".join(tiebreaks)
        )
    if capped:
        parts.append(capped)
    if built < m:
        parts.append(
            f"{built} partitions instead of the {m} asked for: {strategy} cannot cut this "
            "data finer"
        )
    if sized:
        parts.append(sized)
    return "".join(f"; {p}" for p in parts)
