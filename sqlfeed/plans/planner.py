"""The planner: size a query, choose a strategy, and build its partitions.

Each strategy is a module with the :class:`~sqlfeed.plans.context.Strategy` functions
(every one keeps the invariant: the partitions add up to exactly the query's rows):

* ``fragments`` (:mod:`sqlfeed.plans.fragments`): stored pieces: a shardset dataset's
  shard files, or the files a DuckDB query reads (whole files, row groups, stripes, byte
  ranges).
* ``hash`` (:mod:`sqlfeed.plans.hash`): ``bucket(key or all columns) = k``; works for any
  stable query, but every partition re-runs the query.
* ``range`` (:mod:`sqlfeed.plans.range`): ranges of one numeric/date/timestamp key, with a
  NULL branch.
* ``ctid`` (:mod:`sqlfeed.plans.physical`): physical row ranges of one base table
  (PostgreSQL ctid pages, DuckDB and SQLite rowids). No key needed.
* ``materialize`` (:mod:`sqlfeed.plans.materialize`): run the query once into a scratch
  table, then read ranges of it (ctid pages on PostgreSQL, row numbers elsewhere); for
  expensive queries. Needs ``scratch``.
* ``auto``: the first of :data:`AUTO_ORDER` that applies: fragments where valid, else ctid,
  else range on the given key or the table's (leading) integer primary key (also for a GROUP
  BY over one table that groups by it and outputs it: the ranges filter the rows before
  grouping, see :mod:`sqlfeed.sql.grouped`), else materialize for an expensive query when
  ``scratch`` is given (on PostgreSQL and MySQL/MariaDB, without ``scratch``, into
  :data:`~sqlfeed.plans.materialize.DEFAULT_SCRATCH`, created when the user may; drop the
  table with :func:`sqlfeed.plans.drop_scratch`), else hash, the reason saying why it was
  not materialized and the fix.

M comes from ``partitions``, else from the row count: for a plain scan of one base
table (or ranges of a GROUP BY over one) the catalog's estimate (no ``COUNT(*)``;
``Plan.estimated_rows``), else a count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlfeed.dialects import InvalidArgumentError, get_dialect
from sqlfeed.io import connect
from sqlfeed.io.arrow import renamed_columns
from sqlfeed.plans import fragments, materialize, physical
from sqlfeed.plans import hash as hash_strategy
from sqlfeed.plans import range as range_strategy
from sqlfeed.plans.context import PlanContext, Strategy
from sqlfeed.plans.model import LIVE_STRATEGIES, SNAPSHOT_ENGINES, STRATEGIES, Plan
from sqlfeed.plans.prepare import deterministic_query, notes, partition_count
from sqlfeed.sql import ParsedQuery, check_partition_count, check_stable, count_sql, sample_sql

__all__ = [
    "AUTO_ORDER",
    "DEFAULT_TARGET_ROWS",
    "REREAD_WARNING",
    "STRATEGY_MODULES",
    "consistency",
    "plan",
    "rereads",
    "scan_cost",
]

DEFAULT_TARGET_ROWS = 100_000
"""Rows per partition when neither ``partitions`` nor ``target_rows`` is given."""

STRATEGY_MODULES: dict[str, Strategy] = {
    "fragments": fragments,
    "hash": hash_strategy,
    "range": range_strategy,
    "ctid": physical,
    "materialize": materialize,
}
"""The module that implements each strategy (every one of :data:`STRATEGIES` but auto)."""

AUTO_ORDER = ("fragments", "ctid", "range", "materialize", "hash")
"""The strategies ``auto`` tries, cheapest first; hash splits every query."""

REREAD_WARNING = 2.0
"""An auto plan that costs more reads of the query than this says so in its reason (and
the CLI prints a warning): a silent M-fold re-read is never what the user wanted."""


def plan(
    query: str | ParsedQuery,
    source: Any = None,
    *,
    partitions: int | None = None,
    target_rows: int = DEFAULT_TARGET_ROWS,
    strategy: str = "auto",
    key: str | Sequence[str] | None = None,
    workers: int | None = None,
    scratch: str | None = None,
    allow_unstable: bool = False,
    sample_rows: int = 10_000,
    strict: bool = False,
) -> Plan:
    """Split ``query`` into partitions on ``source``.

    Args:
        query: the SELECT.
        source: anything :func:`sqlfeed.connect` takes (default: in-memory DuckDB).
        partitions: the number of partitions M; by default ceil(rows / target_rows), at
            least 4 x workers (rows: see the module).
        target_rows: rows per partition when M is not given.
        strategy: one of ``auto``, ``hash``, ``range``, ``ctid``, ``materialize``,
            ``fragments`` (pieces of a shardset dataset's or a DuckDB query's files).
        key: the column(s) to hash, or the one column to range-partition on.
        workers: the expected number of workers.
        scratch: a schema sqlfeed may create tables in (``materialize``; auto's: see above).
        allow_unstable: partition a query whose result may change between runs anyway.
        sample_rows: rows in the plan's sample query.
        strict: refuse an ORDER BY that may tie instead of completing it (see the reason).

    Returns:
        A frozen, picklable :class:`Plan`; the chosen strategy and why are in it.
    """
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}"
        )
    _check_count(partitions, "partitions", optional=True)
    _check_count(target_rows, "target_rows")
    _check_count(workers, "workers", optional=True)
    keys = [key] if isinstance(key, str) else list(key) if key is not None else None
    src = connect(source)
    parsed = src.parse(query)
    if not allow_unstable:
        check_stable(parsed, orders=False)  # before anything runs on the database
    columns = src.output_columns(parsed)
    if keys is not None:
        keys = [_resolve(name, columns) for name in keys]
    schema = src.schema(parsed)
    ready = deterministic_query(src, parsed, columns, strict=strict, allow_unstable=allow_unstable)
    context = ready.context(src, columns, schema, keys, scratch)

    chosen, reason = choose(context, strategy)
    sizing = partition_count(context, chosen, partitions, target_rows, workers or 1)
    built, scratch_table = STRATEGY_MODULES[chosen].build(context, sizing.m, allow_unstable)
    if not built:
        raise AssertionError("a strategy built no partitions")  # every builder makes >= 1
    reason += notes(ready.tiebreaks, sizing.capped, sizing.m, len(built), chosen, sizing.note)
    reason += fragments.notes(context, len(built), REREAD_WARNING) if chosen == "fragments" else ""
    if renamed := renamed_columns(columns, schema):
        reason += "; " + renamed
    cost = scan_cost(chosen, len(built), context)
    reason += rereads(cost, chosen) if strategy == "auto" and cost > REREAD_WARNING else ""
    return Plan(
        sql=parsed.sql,
        dialect=src.dialect.name,
        strategy=chosen,
        reason=reason + consistency(chosen, src.dialect.name, len(built)),
        partitions=tuple(built),
        columns=tuple(columns),
        key=tuple(keys) if keys else None,
        rows=sizing.rows,
        estimated_rows=sizing.estimated_rows,
        count_sql=count_sql(parsed, columns=columns),
        sample_sql=sample_sql(context.parsed, sample_rows, columns=columns),
        schema=schema.serialize().to_pybytes(),
        scratch_table=scratch_table,
        cost=cost,
    )


def choose(ctx: PlanContext, strategy: str) -> tuple[str, str]:
    """The strategy to use and why.

    The one asked for (refused with its problem when it cannot split the query), or for
    ``auto`` the first of :data:`AUTO_ORDER` that applies.
    """
    if strategy != "auto":
        asked = STRATEGY_MODULES[strategy]
        problem = asked.problem(ctx)
        if problem is not None:
            raise InvalidArgumentError(problem)
        return strategy, "asked for: " + asked.reason(ctx)
    declined = ""
    for name in AUTO_ORDER:
        candidate = STRATEGY_MODULES[name]
        problem = candidate.problem(ctx, auto=True)
        if problem is None:
            return name, "auto: " + candidate.reason(ctx, auto=True) + declined
        if name == "materialize" and materialize.DEFAULT_SCRATCH in problem:
            declined = f"; not materialized: {problem}"  # what stopped it, and the fix
    raise AssertionError("hash partitions every query")


def scan_cost(strategy: str, partitions: int, ctx: PlanContext | None = None) -> float:
    """What reading all the partitions costs, in reads of the whole query (estimated).

    ``hash`` partitions each re-run the query (M reads); ``materialize`` runs it once
    into a scratch table and reads that once (2); ``fragments`` over plain files count
    the bytes each partition reads, its piece and every other table whole (given the
    plan's ``ctx``, see :func:`sqlfeed.plans.fragments.cost`); the others read each row
    once (1: ``range`` assuming an index or sorted data, as on a primary key).
    """
    if strategy == "fragments" and ctx is not None:
        return fragments.cost(ctx, partitions)
    if strategy == "hash":
        return float(partitions)
    return 2.0 if strategy == "materialize" else 1.0


def rereads(cost: float, strategy: str = "hash") -> str:
    """The warning ``plan.reason`` gets when an auto hash plan reads the query ``cost`` times.

    A fragments plan's is in :func:`sqlfeed.plans.fragments.notes`.
    """
    if strategy != "hash":
        return ""
    return (
        f"; WARNING: this plan reads the whole query about {cost:g} times (every hash "
        "partition re-runs it): give a key column (range partitions), a scratch schema "
        "(--scratch: materialize, one run), or write the rows as a shardset dataset "
        "(fragments) to read them once"
    )


def consistency(strategy: str, dialect: str, partitions: int) -> str:
    """What ``plan.reason`` says of how a read of the plan sees one state of its tables.

    That is, while they are written (see :mod:`sqlfeed.feed.snapshots`). Nothing when the
    partitions read a scratch copy, files, DuckDB, or are one query.
    """
    if partitions < 2 or strategy not in LIVE_STRATEGIES or dialect not in SNAPSHOT_ENGINES:
        return ""
    engine = get_dialect(dialect)
    if engine.EXPORTS_SNAPSHOTS:
        return (
            "; every read of the plan (a Feeder epoch, export, tf, torch, Ray, Dask) runs "
            "inside one exported snapshot: one state of the tables while they are written"
        )
    return (
        f"; {engine.TITLE} cannot export a snapshot, so a static read of the plan (a Feeder "
        "epoch, export, tf, torch) runs its queries on ONE connection inside one consistent "
        "transaction: one state of the tables while they are written, read by "
        f"{engine.PINNED_DRIVER} (several times slower than connectorx or ADBC, which open "
        "connections of their own; source.session_connections = N reads on N connections "
        f"begun at one state while {engine.SNAPSHOT_SYNC} holds writers off, which pays "
        "where the server does the work); snapshot=False reads on several connections at "
        "once, only for data that does not change meanwhile; jobs, Ray and Dask tasks read "
        "at different times"
    )


def _resolve(name: str, columns: list[str]) -> str:
    exact = [c for c in columns if c == name]
    matches = exact or [c for c in columns if c.casefold() == name.casefold()]
    if not matches:
        raise InvalidArgumentError(
            f"key column {name!r} is not in the query's output (output columns: "
            f"{', '.join(columns)})"
        )
    if len(matches) > 1:
        raise InvalidArgumentError(f"key column {name!r} names several output columns")
    return matches[0]


def _check_count(value: object, what: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{what} must be an integer >= 1, got {value!r}")
    if what == "partitions":
        check_partition_count(value, what)
