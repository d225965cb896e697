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

A run that makes several plans (a training) owns the scratch tables they make inside
:func:`owned_scratch`: each is listed for the run to drop on every exit path, and its comment
names the run and its process (:class:`ScratchOwner`, where the engine keeps table
comments), so ``scratch list`` shows whose it is and the next run of the same owner drops
what a killed one left (:func:`drop_orphaned_scratch`). The expiry sweep leaves owned tables
to their owner.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io import Source, connect
from sqlfeed.plans.context import Built, PlanContext, expensive
from sqlfeed.plans.model import Partition, Plan
from sqlfeed.plans.physical import range_spans, range_sqls
from sqlfeed.sql import Template, numbered_sql

__all__ = [
    "DEFAULT_SCRATCH",
    "SCRATCH_PREFIX",
    "SCRATCH_TTL_SECONDS",
    "OwnedScratch",
    "ScratchOwner",
    "ScratchTable",
    "build",
    "default_scratch",
    "drop_expired_scratch",
    "drop_orphaned_scratch",
    "drop_scratch",
    "drop_scratch_tables",
    "drop_scratch_with",
    "list_scratch",
    "owned_scratch",
    "problem",
    "reason",
    "run_table_names",
    "scratch_created",
    "stored_rows",
    "write_back_table",
]

SCRATCH_PREFIX = "sqlfeed_"
"""Scratch tables are named ``sqlfeed_<unix time>_<random>``."""
SCRATCH_TTL_SECONDS = 24 * 3600
"""Scratch tables older than this are dropped by the next ``materialize`` plan (unless a
run owns them: :func:`owned_scratch`)."""
DEFAULT_SCRATCH = "sqlfeed_scratch"
"""The schema (MySQL: database) ``auto`` materializes into on PostgreSQL and MySQL/MariaDB
when no ``scratch`` is given, created by sqlfeed when the user may."""
_ROW_NUMBER = "_sqlfeed_rn"
_DEFAULT_MEMO = "materialize:default scratch"
_TABLE_MEMO = "materialize:table"
_SCRATCH_NAME = re.compile(rf"^{SCRATCH_PREFIX}(\d+)_[0-9a-f]+$")
_RUN_HEX = 10
_WRITE_BACK_NAME = re.compile(rf"^{SCRATCH_PREFIX}\d+_[0-9a-f]{{{_RUN_HEX}}}[0cd]$")
"""A write-back run's staging (``0``), commits (``c``) or swapped-out (``d``) table: see
:func:`run_table_names`. A materialize plan's scratch table has 8 hex digits."""
_OWNER_COMMENT = re.compile(r"^sqlfeed (?P<what>.+) \(pid (?P<pid>\d+) on (?P<host>[^()]*)\)$")


@dataclass(frozen=True)
class ScratchOwner:
    """Whose scratch table it is: what made it, in which process of which machine.

    Written as the table's comment (``sqlfeed train --out /m (pid 12 on host)``) and
    read back by :func:`list_scratch`.
    """

    what: str
    """What made it, as a user would say it: ``train --out /abs/model``."""
    pid: int
    host: str

    @classmethod
    def here(cls, what: str) -> ScratchOwner:
        """``what`` in this process on this machine."""
        return cls(" ".join(what.split()), os.getpid(), socket.gethostname())

    def comment(self) -> str:
        """The table comment that names this owner."""
        return f"sqlfeed {self.what} (pid {self.pid} on {self.host})"

    @classmethod
    def from_comment(cls, text: str | None) -> ScratchOwner | None:
        """The owner a table comment names; None: not such a comment."""
        match = _OWNER_COMMENT.match(text or "")
        if not match:
            return None
        return cls(match["what"], int(match["pid"]), match["host"])

    def gone(self) -> bool:
        """Whether its process is known to have ended (on this machine, no such process)."""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # another user's process: alive
            return False
        return False


@dataclass
class OwnedScratch:
    """The scratch tables made inside :func:`owned_scratch`, and their owner."""

    owner: ScratchOwner
    tables: list[str] = field(default_factory=list)
    """Each table made, as the engine spells it (``schema.name``), in order."""


_OWNED: ContextVar[OwnedScratch | None] = ContextVar("sqlfeed_owned_scratch", default=None)


@contextlib.contextmanager
def owned_scratch(what: str) -> Iterator[OwnedScratch]:
    """Inside, every scratch table a plan makes is ``what``'s (in this context and thread).

    Each is listed in the yielded :class:`OwnedScratch` as soon as it exists (the caller
    drops them on every exit path), and its comment names ``what``, this process and this
    machine, where the engine keeps table comments, so that ``scratch list`` says whose it
    is, :func:`drop_orphaned_scratch` finds it once the process is gone, and the expiry
    sweep leaves it alone.
    """
    owned = OwnedScratch(ScratchOwner.here(what))
    token = _OWNED.set(owned)
    try:
        yield owned
    finally:
        _OWNED.reset(token)


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

    By the dialect's :meth:`~sqlfeed.dialects.Dialect.prepare_scratch_schema`.
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
    owned = _OWNED.get()
    try:
        if owned is not None:  # the owner drops it, on every exit path
            owned.tables.append(engine.sql(table))
            comment = engine.scratch_comment_sql(table, owned.owner.comment())
            if comment is not None:
                ctx.source.execute(comment, what="scratch table comment")
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


def run_table_names() -> tuple[str, str]:
    """A new write-back run's staging and commits table names (:mod:`sqlfeed.sink.table`).

    Named like scratch tables, so ``sqlfeed scratch list|drop`` shows an abandoned run's,
    but told apart from a plan's by their shape (:func:`write_back_table`): the expiry of a
    plan's scratch tables never drops a run that waits, for days perhaps, for its workers.
    """
    stem = f"{SCRATCH_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:_RUN_HEX]}"
    return f"{stem}0", f"{stem}c"


def write_back_table(name: str) -> bool:
    """Whether ``name`` is a write-back run's table (see :func:`run_table_names`)."""
    return _WRITE_BACK_NAME.match(name) is not None


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
    owner: ScratchOwner | None = None
    """The run that owns it (see :func:`owned_scratch`); None: no run's (or the engine
    keeps no table comments)."""

    def age(self, now: float | None = None) -> float:
        """Seconds since it was created."""
        return (time.time() if now is None else now) - self.created


def list_scratch(source: Source, scratch: str) -> list[ScratchTable]:
    """The sqlfeed scratch tables in the schema ``scratch``, oldest first."""
    found = []
    catalog = source.dialect.scratch_tables_sql(scratch)
    for name, size, rows, comment in source.rows(catalog, what="catalog query"):
        created = scratch_created(str(name))
        if created is not None:
            found.append(
                ScratchTable(
                    scratch,
                    str(name),
                    created,
                    None if size is None else int(size),
                    None if rows is None else int(rows),
                    ScratchOwner.from_comment(comment),
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
    """Drop sqlfeed's scratch tables in ``scratch`` created more than ``older_than`` s ago.

    Except those a run owns (:func:`owned_scratch`): a training may read its table for
    days, or resume from it; its owner drops it (or ``sqlfeed scratch drop``). And never a
    write-back run's staging or commits table (:func:`write_back_table`): a job may wait
    for its workers for days, and without them it would take its run for finished.
    """
    cutoff = time.time() - older_than
    doomed = [
        t.name
        for t in list_scratch(source, scratch)
        if t.created < cutoff and t.owner is None and not write_back_table(t.name)
    ]
    drop_scratch_tables(source, scratch, doomed)
    return doomed


def drop_orphaned_scratch(
    source: Source, scratch: str, what: str, keep: tuple[str, ...] = ()
) -> list[str]:
    """Drop the scratch tables in ``scratch`` that ``what`` made in a process now gone.

    Those of a killed run, found by its next run (the same ``what``, on the same machine);
    ``keep``: names to leave (a table the new run reuses). A table whose process still
    runs is left alone.
    """
    what = " ".join(what.split())
    doomed = [
        t.name
        for t in list_scratch(source, scratch)
        if t.owner is not None and t.owner.what == what and t.owner.gone() and t.name not in keep
    ]
    drop_scratch_tables(source, scratch, doomed)
    return doomed
