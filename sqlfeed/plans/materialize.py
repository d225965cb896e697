"""The ``materialize`` strategy, and the scratch tables it leaves behind.

The query runs once into a scratch table with a row number (indexed where the engine
needs it), and the partitions read row-number ranges of it: the choice for expensive
queries (joins, aggregations). It needs ``scratch``, a schema sqlfeed may create tables
in. :func:`drop_scratch` drops a plan's table; scratch tables older than
:data:`SCRATCH_TTL_SECONDS` are dropped by the next ``materialize`` plan;
:func:`list_scratch` and :func:`drop_scratch_tables` list and drop them by name
(``sqlfeed scratch list|drop``).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dialects import InvalidArgumentError
from sqlfeed.io import Source, connect
from sqlfeed.plans.context import Built, PlanContext, expensive
from sqlfeed.plans.model import Partition, Plan
from sqlfeed.sql import Template, numbered_sql

__all__ = [
    "SCRATCH_PREFIX",
    "SCRATCH_TTL_SECONDS",
    "ScratchTable",
    "build",
    "drop_expired_scratch",
    "drop_scratch",
    "drop_scratch_tables",
    "list_scratch",
    "problem",
    "reason",
    "scratch_created",
]

SCRATCH_PREFIX = "sqlfeed_"
"""Scratch tables are named ``sqlfeed_<unix time>_<random>``."""
SCRATCH_TTL_SECONDS = 24 * 3600
"""Scratch tables older than this are dropped by the next ``materialize`` plan."""
_ROW_NUMBER = "_sqlfeed_rn"
_SCRATCH_NAME = re.compile(rf"^{SCRATCH_PREFIX}(\d+)_[0-9a-f]+$")


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Without ``scratch`` there is nowhere to write; ``auto`` also passes cheap queries."""
    if ctx.scratch is None:
        return (
            "strategy materialize needs scratch=SCHEMA (--scratch), a schema sqlfeed may "
            "create a table in"
        )
    if auto and not expensive(ctx.parsed):
        return "the query is cheap to run once per partition"
    return None


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """Where the query runs once, and with ``auto`` what makes it worth it."""
    if auto:
        return (
            f"the query has {expensive(ctx.parsed)}, so it runs once into a scratch table in "
            f"{ctx.scratch} instead of once per partition"
        )
    return f"run once into a table in {ctx.scratch}"


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """Run the query into a new scratch table, then up to ``m`` row-number ranges of it."""
    assert ctx.scratch is not None
    folded = [c.casefold() for c in ctx.columns]
    if len(set(folded)) != len(folded):
        raise InvalidArgumentError(
            "materialize stores the rows in a table, so the output column names must differ: "
            "alias the repeated ones apart"
        )
    if _ROW_NUMBER in ctx.columns:
        raise InvalidArgumentError(f"the query may not have an output column named {_ROW_NUMBER}")
    drop_expired_scratch(ctx.source, ctx.scratch)
    engine = ctx.engine
    name = f"{SCRATCH_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:8]}"
    table = exp.table_(name, db=ctx.scratch)
    rows = _fill(ctx, table, name)
    parts = max(1, min(m, rows))
    cuts = [rows * i // parts for i in range(parts + 1)]
    projection = [exp.column(exp.to_identifier(c, quoted=True)) for c in ctx.columns]
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


def _fill(ctx: PlanContext, table: exp.Table, name: str) -> int:
    """Create ``table`` from the numbered query, index its row numbers; its row count."""
    assert ctx.scratch is not None
    engine = ctx.engine
    numbered = numbered_sql(ctx.parsed, _ROW_NUMBER, columns=ctx.columns)
    create = exp.Create(kind="TABLE", this=table, expression=numbered)
    if engine.name == "postgres":  # a scratch copy needs no write-ahead log: about 2x faster
        create.set("properties", exp.Properties(expressions=[exp.UnloggedProperty()]))
    ctx.source.execute(engine.sql(create), what="materialize statement")
    try:
        if engine.name != "duckdb":  # DuckDB prunes row ranges with its zone maps
            index_table = table.copy()
            index_name: exp.Expr = exp.to_identifier(f"{name}_rn")
            if engine.name == "sqlite":  # SQLite qualifies the index, not its table
                index_table = exp.table_(name)
                index_name = exp.table_(f"{name}_rn", db=ctx.scratch)
            index = exp.Create(
                kind="INDEX",
                this=exp.Index(
                    this=index_name,
                    table=index_table,
                    params=exp.IndexParameters(columns=[exp.column(_ROW_NUMBER)]),
                ),
            )
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


def _catalog_sql(source: Source, scratch: str) -> str:
    """Name, bytes and rows of every table in ``scratch`` (NULL where the engine keeps none)."""
    engine = source.dialect
    schema = exp.Literal.string(scratch).sql(engine.sqlglot_dialect)
    if engine.name == "sqlite":
        return (
            f"SELECT name, NULL, NULL FROM {engine.sql(exp.to_identifier(scratch))}"
            ".sqlite_master WHERE type = 'table'"
        )
    if engine.name == "postgres":
        return (
            "SELECT c.relname, pg_total_relation_size(c.oid), GREATEST(c.reltuples, 0)::bigint "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = {schema} AND c.relkind IN ('r', 'p')"
        )
    if engine.name == "mysql":
        return (
            "SELECT table_name, data_length + index_length, table_rows "
            f"FROM information_schema.tables WHERE table_schema = {schema}"
        )
    if engine.name == "duckdb":
        return (
            "SELECT table_name, NULL, estimated_size FROM duckdb_tables() "
            f"WHERE schema_name = {schema}"
        )
    return (
        "SELECT table_name, NULL, NULL FROM information_schema.tables "
        f"WHERE table_schema = {schema}"
    )


def list_scratch(source: Source, scratch: str) -> list[ScratchTable]:
    """sqlfeed's scratch tables in the schema ``scratch``, oldest first."""
    found = []
    for name, size, rows in source.rows(_catalog_sql(source, scratch), what="catalog query"):
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
    schema = exp.Literal.string(scratch).sql(engine.sqlglot_dialect)
    if engine.name == "sqlite":
        sql = f"SELECT name FROM {scratch}.sqlite_master WHERE type = 'table'"
    else:
        sql = f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}"
    dropped = []
    cutoff = time.time() - older_than
    for (name,) in source.rows(sql, what="catalog query"):
        created = scratch_created(str(name))
        if created is not None and created < cutoff:
            table = exp.table_(str(name), db=scratch)
            source.execute(engine.sql(_drop(table)), what="scratch clean-up")
            dropped.append(str(name))
    return dropped
