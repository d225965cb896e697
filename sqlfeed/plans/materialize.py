"""The ``materialize`` strategy, and the scratch tables it leaves behind.

The query runs once into a scratch table, and the partitions read ranges of it: on
PostgreSQL ranges of its pages (TID range scans, like ``ctid``: no row number, no index),
elsewhere row-number ranges (the row number indexed where the engine needs it). The choice
for expensive queries (joins, aggregations). It needs ``scratch``, a schema sqlfeed may
create tables in; ``auto`` uses :data:`DEFAULT_SCRATCH` on PostgreSQL and MySQL/MariaDB
when none is given and the user may create tables there. :func:`drop_scratch` drops a
plan's table; scratch tables older than :data:`SCRATCH_TTL_SECONDS` are dropped by the
next ``materialize`` plan; :func:`list_scratch` and :func:`drop_scratch_tables` list and
drop them by name (``sqlfeed scratch list|drop``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dialects import EngineError, InvalidArgumentError
from sqlfeed.io import Source, connect
from sqlfeed.plans.context import Built, PlanContext, expensive
from sqlfeed.plans.model import Partition, Plan
from sqlfeed.plans.physical import range_spans, range_sqls
from sqlfeed.sql import Template, numbered_sql

__all__ = [
    "DEFAULT_SCRATCH",
    "SCRATCH_PREFIX",
    "SCRATCH_TTL_SECONDS",
    "ScratchTable",
    "build",
    "default_scratch",
    "drop_expired_scratch",
    "drop_scratch",
    "drop_scratch_tables",
    "drop_scratch_with",
    "list_scratch",
    "problem",
    "reason",
    "scratch_created",
    "stored_rows",
]

SCRATCH_PREFIX = "sqlfeed_"
"""Scratch tables are named ``sqlfeed_<unix time>_<random>``."""
SCRATCH_TTL_SECONDS = 24 * 3600
"""Scratch tables older than this are dropped by the next ``materialize`` plan."""
DEFAULT_SCRATCH = "sqlfeed_scratch"
"""The schema (MySQL: database) ``auto`` materializes into on PostgreSQL and MySQL/MariaDB
when no ``scratch`` is given, created by sqlfeed when the user may."""
_ROW_NUMBER = "_sqlfeed_rn"
_DEFAULT_MEMO = "materialize:default scratch"
_TABLE_MEMO = "materialize:table"
_SCRATCH_NAME = re.compile(rf"^{SCRATCH_PREFIX}(\d+)_[0-9a-f]+$")


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Without a scratch schema there is nowhere to write.

    On PostgreSQL and MySQL/MariaDB :data:`DEFAULT_SCRATCH` is used when the user may create
    tables there (see :func:`default_scratch`), asked for or chosen by ``auto``; ``auto``
    also passes cheap queries.
    """
    if auto and not expensive(ctx.parsed):
        return "the query is cheap to run once per partition"
    unstorable = _unstorable(ctx)
    if unstorable:
        return unstorable
    if ctx.scratch is None and ctx.engine.CREATES_SCRATCH_SCHEMA:
        refused = default_scratch(ctx)
        if refused is None:
            return None
        return (
            f"sqlfeed may not write its scratch table into {DEFAULT_SCRATCH}: {refused}; "
            "pass scratch=SCHEMA (--scratch) naming a schema you may create tables in"
        )
    if ctx.scratch is None:
        return (
            f"strategy materialize needs scratch=SCHEMA (--scratch) on {ctx.engine.name}, a "
            "schema sqlfeed may create a table in (PostgreSQL and MySQL default to "
            f"{DEFAULT_SCRATCH})"
        )
    return None


def default_scratch(ctx: PlanContext) -> str | None:
    """Make :data:`DEFAULT_SCRATCH` the context's scratch schema, creating it if need be.

    None when done, else why the user may not (a read-only server or session, no CREATE
    privilege), as the server says it.
    """
    if _DEFAULT_MEMO not in ctx.memo:
        try:
            ctx.memo[_DEFAULT_MEMO] = _prepare_default(ctx.source)
        except EngineError as err:
            ctx.memo[_DEFAULT_MEMO] = str(err)
        if ctx.memo[_DEFAULT_MEMO] is None:
            ctx.scratch = DEFAULT_SCRATCH
    refused: str | None = ctx.memo[_DEFAULT_MEMO]
    return refused


def _prepare_default(source: Source) -> str | None:
    """Create :data:`DEFAULT_SCRATCH` where allowed; None when a table can be made in it.

    By the dialect's :meth:`~dialects.Dialect.prepare_scratch_schema`.
    """
    probe = f"{SCRATCH_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:8]}"
    return source.dialect.prepare_scratch_schema(source, DEFAULT_SCRATCH, probe)


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """Where the query runs once, and with ``auto`` what makes it worth it."""
    made = " (sqlfeed's default scratch schema: drop the table when done)"
    where = f"{ctx.scratch}{made if ctx.memo.get(_DEFAULT_MEMO, 1) is None else ''}"
    if auto:
        return (
            f"the query has {expensive(ctx.parsed)}, so it runs once into a scratch table in "
            f"{where} instead of once per partition"
        )
    return f"run once into a table in {where}"


def stored_rows(ctx: PlanContext) -> int:
    """Run the query into its scratch table (once per plan); the table's row count."""
    if _TABLE_MEMO not in ctx.memo:
        assert ctx.scratch is not None
        if _unstorable(ctx):
            raise InvalidArgumentError(_unstorable(ctx))
        drop_expired_scratch(ctx.source, ctx.scratch)
        name = f"{SCRATCH_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:8]}"
        table = exp.table_(name, db=ctx.scratch)
        ctx.memo[_TABLE_MEMO] = (table, _fill(ctx, table, name))
    rows: int = ctx.memo[_TABLE_MEMO][1]
    return rows


def _unstorable(ctx: PlanContext) -> str:
    """Why the query's rows cannot be stored in a table as they are (empty: they can)."""
    folded = [c.casefold() for c in ctx.columns]
    if len(set(folded)) != len(folded):
        return (
            "materialize stores the rows in a table, so the output column names must differ: "
            "alias the repeated ones apart"
        )
    if _ROW_NUMBER in ctx.columns:
        return f"the query may not have an output column named {_ROW_NUMBER}"
    return ""


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """Run the query into a new scratch table (unless :func:`stored_rows` did).

    Then up to ``m`` ranges of it: ctid pages on PostgreSQL, row numbers elsewhere.
    """
    rows = stored_rows(ctx)
    table: exp.Table = ctx.memo[_TABLE_MEMO][0]
    projection = [exp.column(exp.to_identifier(c, quoted=True)) for c in ctx.columns]
    if ctx.engine.SCRATCH_BY_PAGES:
        return _page_ranges(ctx, table, projection, rows, m), ctx.engine.sql(table)
    parts = max(1, min(m, rows))
    cuts = [rows * i // parts for i in range(parts + 1)]
    engine = ctx.engine
    built = []

    def rows_after(bounded: bool) -> Template:
        """``row number > s0`` (and ``<= s1``), rendered once for all partitions."""

        def build(slots: list[exp.Expr]) -> exp.Select:
            number = exp.column(_ROW_NUMBER)
            condition: exp.Expr = exp.GT(this=number, expression=slots[0])
            if bounded:
                condition = exp.and_(condition, exp.LTE(this=number.copy(), expression=slots[1]))
            return exp.select(*[p.copy() for p in projection]).from_(table.copy()).where(condition)

        return Template(engine, build, slots=2 if bounded else 1)

    middle, last = rows_after(True), rows_after(False)
    for i in range(parts):
        sql = middle.fill(cuts[i], cuts[i + 1]) if i < parts - 1 else last.fill(cuts[i])
        built.append(Partition(i, sql, cuts[i + 1] - cuts[i], f"rows ({cuts[i]}, {cuts[i + 1]}]"))
    return built, engine.sql(table)


def _page_ranges(
    ctx: PlanContext, table: exp.Table, projection: list[exp.Column], rows: int, m: int
) -> list[Partition]:
    """PostgreSQL: ranges of the scratch table's pages (TID range scans, no index)."""
    engine = ctx.engine
    pages_sql = engine.relation_pages_sql(engine.sql(table))
    pages = int(ctx.source.scalar(pages_sql, what="catalog query") or 0)
    parts = max(1, min(m, pages))
    cuts = [pages * i // parts for i in range(1, parts)]
    query = exp.select(*[p.copy() for p in projection]).from_(table.copy())
    address = exp.column("ctid", table=table.name)
    sqls = range_sqls(engine.sql(query), engine, address, cuts)
    merged = range_spans(engine.sql(query), engine, address, cuts)
    spans = list(zip([0, *cuts], [*cuts, pages], strict=True))
    return [
        Partition(
            i,
            sql,
            round(rows * (hi - lo) / pages) if pages else 0,
            f"pages [{lo}, {hi}){' and beyond' if i == len(sqls) - 1 else ''}",
            span=merged[i],
        )
        for i, (sql, (lo, hi)) in enumerate(zip(sqls, spans, strict=True))
    ]


def _fill(ctx: PlanContext, table: exp.Table, name: str) -> int:
    """Create ``table`` from the query; its row count.

    It is numbered and indexed on its row numbers, except on PostgreSQL, read by ctid pages.
    """
    assert ctx.scratch is not None
    engine = ctx.engine
    # Read by pages (PostgreSQL): no ROW_NUMBER() (a window: no parallel plan), no index.
    # The query's text is embedded as written (numbered_sql), so the CREATE is rendered
    # without it.
    number = not engine.SCRATCH_BY_PAGES
    numbered = numbered_sql(ctx.parsed, _ROW_NUMBER, columns=ctx.columns, number=number)
    create = exp.Create(kind="TABLE", this=table)
    properties = engine.scratch_properties()  # PostgreSQL: UNLOGGED, about 2x faster
    if properties:
        create.set("properties", exp.Properties(expressions=properties))
    statement = f"{engine.sql(create)} AS {numbered}"
    ctx.source.execute(statement, what="materialize statement")
    try:
        if engine.SCRATCH_ROW_NUMBER_INDEX:  # not DuckDB: it prunes with its zone maps
            index = engine.scratch_index(table, name, ctx.scratch, _ROW_NUMBER)
            ctx.source.execute(engine.sql(index), what="materialize index")
        return int(ctx.source.scalar(f"SELECT COUNT(*) FROM {engine.sql(table)}") or 0)
    except Exception:
        ctx.source.execute(engine.sql(_drop(table)), what="scratch clean-up")
        raise


def _drop(table: exp.Table) -> exp.Drop:
    return exp.Drop(kind="TABLE", tables=[table], exists=True)


def drop_scratch(plan_: Plan, source: Any) -> None:
    """Drop the scratch table of a ``materialize`` plan (nothing for other plans)."""
    if plan_.scratch_table is None:
        return
    src = connect(source)
    table = exp.to_table(plan_.scratch_table, dialect=src.dialect.sqlglot_dialect)
    src.execute(src.dialect.sql(_drop(table)), what="scratch clean-up")


def drop_scratch_with(owner: object, plan_: Plan, source: Source | str) -> Callable[[], None]:
    """Drop ``plan_``'s scratch table when ``owner`` is garbage-collected or the process exits.

    Whichever comes first: for the plans sqlfeed makes itself from SQL (a Feeder's, a
    dataset's, a statistics pass's), which the user never sees to drop. ``source`` is a live
    source or a URL (opened for the drop).

    Returns the finalizer: call it to drop the table now (later calls do nothing). Only
    the process that registered it drops (a forked worker holding a copy of ``owner`` never
    does); a failure to drop is silent, as the next plan's expiry sweep removes old tables.
    """
    if plan_.scratch_table is None:
        return lambda: None
    return weakref.finalize(owner, _drop_quietly, plan_, source, os.getpid())


def _drop_quietly(plan_: Plan, source: Source | str, pid: int) -> None:
    if os.getpid() != pid:
        return
    with contextlib.suppress(Exception):  # a closed source, a lost server: expiry sweeps it
        if isinstance(source, str):  # a URL: opened for the drop only
            with connect(source) as opened:
                drop_scratch(plan_, opened)
        else:
            drop_scratch(plan_, source)


def scratch_created(name: str) -> int | None:
    """The unix time a scratch table named ``name`` was created; None: not a scratch table."""
    match = _SCRATCH_NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ScratchTable:
    """One of sqlfeed's scratch tables, as the engine's catalog describes it."""

    schema: str
    name: str
    created: int
    """Unix time of its creation (from its name)."""
    bytes: int | None = None
    """Its size on disk with its indexes, where the engine tells (PostgreSQL, MySQL)."""
    rows: int | None = None
    """The engine's row estimate, where it keeps one (PostgreSQL, MySQL, DuckDB)."""

    def age(self, now: float | None = None) -> float:
        """Seconds since it was created."""
        return (time.time() if now is None else now) - self.created


def list_scratch(source: Source, scratch: str) -> list[ScratchTable]:
    """The sqlfeed scratch tables in the schema ``scratch``, oldest first."""
    found = []
    catalog = source.dialect.scratch_tables_sql(scratch)
    for name, size, rows in source.rows(catalog, what="catalog query"):
        created = scratch_created(str(name))
        if created is not None:
            found.append(
                ScratchTable(
                    scratch,
                    str(name),
                    created,
                    None if size is None else int(size),
                    None if rows is None else int(rows),
                )
            )
    return sorted(found, key=lambda t: (t.created, t.name))


def drop_scratch_tables(source: Source, scratch: str, names: list[str]) -> None:
    """Drop the scratch tables ``names`` of the schema ``scratch``.

    Raises:
        InvalidArgumentError: a name is not a sqlfeed scratch table name (nothing else is
            ever dropped).
    """
    for name in names:
        if scratch_created(name) is None:
            raise InvalidArgumentError(
                f"{name!r} is not a sqlfeed scratch table name ({SCRATCH_PREFIX}<unix time>"
                "_<hex>): sqlfeed drops only its own tables"
            )
    for name in names:
        table = exp.table_(exp.to_identifier(name), db=exp.to_identifier(scratch))
        source.execute(source.dialect.sql(_drop(table)), what="scratch clean-up")


def drop_expired_scratch(
    source: Source, scratch: str, older_than: float = SCRATCH_TTL_SECONDS
) -> list[str]:
    """Drop sqlfeed's scratch tables in ``scratch`` created more than ``older_than`` s ago."""
    engine = source.dialect
    sql = engine.table_names_sql(scratch)
    dropped = []
    cutoff = time.time() - older_than
    for (name,) in source.rows(sql, what="catalog query"):
        created = scratch_created(str(name))
        if created is not None and created < cutoff:
            table = exp.table_(str(name), db=scratch)
            source.execute(engine.sql(_drop(table)), what="scratch clean-up")
            dropped.append(str(name))
    return dropped
