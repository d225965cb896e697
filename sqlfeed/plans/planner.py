"""The planner: size a query, choose a strategy, and build its partitions.

Strategies (each keeps the invariant: the partitions add up to exactly the query's rows):

* ``hash``: ``bucket(key or all columns) = k``; works for any stable query, but every
  partition re-runs the query, so M partitions cost up to M times one run.
* ``range``: ranges of one numeric/date/timestamp key, split at in-database quantiles
  (PostgreSQL, DuckDB) or evenly between MIN and MAX (MySQL, SQLite), with a NULL branch.
* ``ctid``: physical row ranges of one base table: PostgreSQL ctid pages (a TID range
  scan reads only its pages), DuckDB rowid ranges. No key needed.
* ``materialize``: run the query once into a scratch table with a row number, then read
  row-number ranges; for expensive queries (joins, aggregations). Needs ``scratch``.
* ``auto``: ctid where valid, else range on the given key or the table's integer primary
  key, else materialize for an expensive query when ``scratch`` is given, else hash.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from sqlglot import exp

from dialects import InvalidArgumentError
from sqlfeed.io.sources import Source, connect
from sqlfeed.plans.model import STRATEGIES, Partition, Plan
from sqlfeed.sql import (
    ParsedQuery,
    bounds_sql,
    check_stable,
    count_sql,
    numbered_sql,
    partition_sqls,
    partitions_for,
    physical_partition_sqls,
    range_partition_sqls,
    sample_sql,
    single_table,
)

__all__ = ["DEFAULT_TARGET_ROWS", "drop_scratch", "plan"]

DEFAULT_TARGET_ROWS = 100_000
"""Rows per partition when neither ``partitions`` nor ``target_rows`` is given."""

SCRATCH_PREFIX = "sqlfeed_"
SCRATCH_TTL_SECONDS = 24 * 3600
"""Scratch tables older than this are dropped by the next ``materialize`` plan."""

_ROW_NUMBER = "_sqlfeed_rn"

DUCKDB_ROW_GROUP = 122_880
"""Rows in a DuckDB row group: rowid partitions are cut at multiples of it."""


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
) -> Plan:
    """Split ``query`` into partitions on ``source``.

    Args:
        query: the SELECT.
        source: anything :func:`sqlfeed.connect` takes (default: in-memory DuckDB).
        partitions: the number of partitions M; by default ceil(COUNT / target_rows), at
            least 4 x workers.
        target_rows: rows per partition when M is not given.
        strategy: one of ``auto``, ``hash``, ``range``, ``ctid``, ``materialize``,
            ``fragments`` (a shardset dataset's files, row groups, stripes, byte ranges).
        key: the column(s) to hash, or the one column to range-partition on.
        workers: the expected number of workers.
        scratch: a schema sqlfeed may create tables in (``materialize``).
        allow_unstable: partition a query whose result may change between runs anyway.
        sample_rows: rows in the plan's sample query.

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
        check_stable(parsed)  # before anything runs on the database
    columns = src.output_columns(parsed)
    if keys is not None:
        keys = [_resolve(name, columns) for name in keys]
    schema = src.schema(parsed)
    text_columns = src.text_columns(parsed)
    context = _Context(src, parsed, columns, schema, text_columns, keys, scratch)

    chosen, reason = _choose(context, strategy)
    if chosen == "fragments":  # sized by the files' own row counts: no COUNT(*) scan
        rows = None
        stored = context.source.dataset.main.rows  # type: ignore[attr-defined]
        m = partitions or partitions_for(stored, target_rows, workers or 1)
    else:
        rows = None if partitions is not None else src.count(parsed, columns=columns)
        m = partitions or partitions_for(rows or 0, target_rows, workers or 1)
    built, scratch_table = _BUILDERS[chosen](context, m, allow_unstable)
    if not built:
        raise AssertionError("a strategy built no partitions")  # every builder makes >= 1
    return Plan(
        sql=parsed.sql,
        dialect=src.dialect.name,
        strategy=chosen,
        reason=reason,
        partitions=tuple(built),
        columns=tuple(columns),
        key=tuple(keys) if keys else None,
        rows=rows,
        count_sql=count_sql(parsed, columns=columns),
        sample_sql=sample_sql(parsed, sample_rows, columns=columns),
        schema=schema.serialize().to_pybytes(),
        scratch_table=scratch_table,
    )


class _Context:
    def __init__(
        self,
        source: Source,
        parsed: ParsedQuery,
        columns: list[str],
        schema: pa.Schema,
        text_columns: list[str],
        keys: list[str] | None,
        scratch: str | None,
    ) -> None:
        self.source = source
        self.parsed = parsed
        self.columns = columns
        self.schema = schema
        self.text_columns = text_columns
        self.keys = keys
        self.scratch = scratch
        self.engine = source.dialect
        self.table = single_table(parsed)


# -- choosing ------------------------------------------------------------------------------


def _choose(ctx: _Context, strategy: str) -> tuple[str, str]:
    fragments = _fragments_problem(ctx)
    if strategy == "fragments":
        if fragments:
            raise InvalidArgumentError(f"strategy fragments: {fragments}")
        return "fragments", "asked for: the dataset's shard files, row groups and stripes"
    if strategy == "auto" and fragments is None:
        return "fragments", (
            "auto: a row-by-row query over a shardset dataset, so each partition reads its "
            "own shard files (or row groups / stripes / byte ranges of one)"
        )
    if strategy == "hash":
        return "hash", "asked for: " + _hash_what(ctx)
    if strategy == "ctid":
        problem = _ctid_problem(ctx)
        if problem:
            raise InvalidArgumentError(f"strategy ctid: {problem}")
        return "ctid", f"asked for: physical row ranges of {ctx.table.sql() if ctx.table else ''}"
    if strategy == "range":
        key = _range_key(ctx)
        if key is None:
            raise InvalidArgumentError(
                "strategy range needs key=COLUMN (a numeric, date or timestamp output column); "
                "no integer primary key was found to use instead"
            )
        ctx.keys = [key]
        return "range", f"asked for: ranges of {key}"
    if strategy == "materialize":
        if ctx.scratch is None:
            raise InvalidArgumentError(
                "strategy materialize needs scratch=SCHEMA (--scratch), a schema sqlfeed may "
                "create a table in"
            )
        return "materialize", f"asked for: run once into a table in {ctx.scratch}"
    # auto
    if _ctid_problem(ctx) is None:
        assert ctx.table is not None
        return "ctid", (
            f"auto: a plain scan of table {ctx.table.sql(ctx.engine.sqlglot_dialect)}, so "
            "each partition reads its own physical rows (one scan in all)"
        )
    key = _range_key(ctx)
    if key is not None:
        ctx.keys = [key]
        return "range", f"auto: ranges of the ordered key {key} (each row read once)"
    expensive = _expensive(ctx.parsed)
    if expensive and ctx.scratch is not None:
        return "materialize", (
            f"auto: the query has {expensive}, so it runs once into a scratch table in "
            f"{ctx.scratch} instead of once per partition"
        )
    why = f" ({expensive}: pass scratch=SCHEMA to run it only once)" if expensive else ""
    return "hash", "auto: " + _hash_what(ctx) + why


def _fragments_problem(ctx: _Context) -> str | None:
    from sqlfeed.shards.source import DatasetSource, fragment_problem

    if not isinstance(ctx.source, DatasetSource):
        return "the source is not a shardset dataset (open one with sqlfeed.shards.datasets)"
    if ctx.keys:
        return "a key was given"
    return fragment_problem(ctx.parsed, ctx.source.view)


def _build_fragments(ctx: _Context, m: int, allow_unstable: bool) -> tuple[list[Partition], None]:
    from sqlfeed.shards.source import DatasetSource

    assert isinstance(ctx.source, DatasetSource)
    stored = max(ctx.source.dataset.main.rows, 1)
    target = max(1, -(-stored // m))
    built = ctx.source.fragment_partitions(ctx.parsed, target)
    return [
        Partition(index, sql, fragment.rows, fragment.label, file=fragment.file)
        for index, (sql, fragment) in enumerate(built)
    ], None


def _hash_what(ctx: _Context) -> str:
    over = f"key {', '.join(ctx.keys)}" if ctx.keys else "all output columns"
    return f"hash partitions over {over}"


def _ctid_problem(ctx: _Context) -> str | None:
    if ctx.engine.name not in ("postgres", "duckdb"):
        return f"{ctx.engine.name} has no physical row address (PostgreSQL ctid, DuckDB rowid)"
    if ctx.table is None:
        return (
            "needs a plain filter over one table (no join, aggregate, DISTINCT, LIMIT, window, "
            "CTE or set operation)"
        )
    if ctx.keys:
        return "a key was given"
    if _base_table_info(ctx) is None:
        return f"{ctx.table.sql()} is not a base table (a view, or not found)"
    return None


def _range_key(ctx: _Context) -> str | None:
    if ctx.keys:
        if len(ctx.keys) == 1 and _orderable(ctx.schema.field(ctx.keys[0]).type):
            return ctx.keys[0]
        return None
    primary = _integer_primary_key(ctx)
    return primary if primary in ctx.columns else None


def _orderable(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_temporal(arrow_type)
    )


def _expensive(parsed: ParsedQuery) -> str:
    tree = parsed.tree
    if isinstance(tree, exp.SetOperation):
        return "a set operation"
    for node, what in (
        (exp.Join, "a join"),
        (exp.Group, "a GROUP BY"),
        (exp.AggFunc, "an aggregate"),
        (exp.Window, "a window function"),
        (exp.Distinct, "DISTINCT"),
        (exp.Subquery, "a subquery"),
    ):
        if tree.find(node) is not None:
            return what
    return ""


# -- catalog look-ups ----------------------------------------------------------------------


def _quoted_name(ctx: _Context) -> str:
    assert ctx.table is not None
    plain = ctx.table.copy()
    plain.set("alias", None)
    return plain.sql(ctx.engine.sqlglot_dialect)


def _base_table_info(ctx: _Context) -> tuple[int, float] | None:
    """(pages or max rowid + 1, estimated rows) of a base table; None if not one."""
    name = exp.Literal.string(_quoted_name(ctx)).sql(ctx.engine.sqlglot_dialect)
    if ctx.engine.name == "postgres":
        rows = ctx.source.rows(
            "SELECT c.relkind, pg_relation_size(c.oid) / current_setting('block_size')::int, "
            f"c.reltuples FROM pg_class c WHERE c.oid = to_regclass({name})",
            what="catalog query",
        )
        if not rows or rows[0][0] not in ("r", "m"):
            return None
        return int(rows[0][1]), max(float(rows[0][2]), 0.0)
    assert ctx.table is not None
    schema = ctx.table.db or "main"
    found = ctx.source.rows(
        "SELECT estimated_size FROM duckdb_tables() WHERE lower(table_name) = lower("
        f"{exp.Literal.string(ctx.table.name).sql('duckdb')}) AND lower(schema_name) = lower("
        f"{exp.Literal.string(schema).sql('duckdb')})",
        what="catalog query",
    )
    if not found:
        return None
    span = ctx.source.scalar(f"SELECT MAX(rowid) FROM {_quoted_name(ctx)}", what="catalog query")
    return (int(span) + 1 if span is not None else 0), float(found[0][0] or 0)


def _integer_primary_key(ctx: _Context) -> str | None:
    if ctx.table is None:
        return None
    engine = ctx.engine.name
    table = exp.Literal.string(ctx.table.name).sql(ctx.engine.sqlglot_dialect)
    if engine == "postgres":
        name = exp.Literal.string(_quoted_name(ctx)).sql("postgres")
        sql = (
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indrelid = to_regclass({name}) AND i.indisprimary"
        )
    elif engine == "duckdb":
        sql = (
            "SELECT c.column_name, c.data_type FROM duckdb_constraints() k, "
            "unnest(k.constraint_column_names) AS u(column_name) JOIN duckdb_columns() c "
            "ON c.table_name = k.table_name AND c.column_name = u.column_name "
            f"WHERE k.constraint_type = 'PRIMARY KEY' AND lower(k.table_name) = lower({table})"
        )
    elif engine == "mysql":
        sql = (
            "SELECT k.COLUMN_NAME, c.DATA_TYPE FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND "
            "c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME "
            "WHERE k.CONSTRAINT_NAME = 'PRIMARY' AND k.TABLE_SCHEMA = DATABASE() "
            f"AND k.TABLE_NAME = {table}"
        )
    elif engine == "sqlite":
        sql = f"SELECT name, type FROM pragma_table_info({table}) WHERE pk > 0"
    else:
        return None
    rows = ctx.source.rows(sql, what="catalog query")
    if len(rows) != 1 or "int" not in str(rows[0][1]).lower():
        return None
    name_in_table = str(rows[0][0])
    # The output column that is this table column, as the query names it.
    for column in ctx.columns:
        if column.casefold() == name_in_table.casefold():
            return column
    return None


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


# -- builders ------------------------------------------------------------------------------


def _build_hash(ctx: _Context, m: int, allow_unstable: bool) -> tuple[list[Partition], None]:
    sqls = partition_sqls(
        ctx.parsed,
        m,
        key=ctx.keys,
        columns=ctx.columns,
        text_columns=ctx.text_columns,
        allow_unstable=allow_unstable,
    )
    return [Partition(k, sql, None, f"hash bucket {k} of {m}") for k, sql in enumerate(sqls)], None


def _build_range(ctx: _Context, m: int, allow_unstable: bool) -> tuple[list[Partition], None]:
    assert ctx.keys is not None
    key = ctx.keys[0]
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
        null_partition=total > non_null,
        allow_unstable=allow_unstable,
    )
    ranges = len(bounds) + 1
    labels = _range_labels(key, bounds)
    built = [
        Partition(i, sql, non_null // ranges, labels[i]) for i, sql in enumerate(sqls[:ranges])
    ]
    if total > non_null:
        built.append(Partition(ranges, sqls[-1], total - non_null, f"{key} IS NULL"))
    return built, None


def _even_bounds(low: Any, high: Any, m: int) -> list[Any]:
    """m - 1 bounds spread evenly over [low, high], exact for integers, strictly increasing."""
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


def _build_ctid(ctx: _Context, m: int, allow_unstable: bool) -> tuple[list[Partition], None]:
    info = _base_table_info(ctx)
    assert info is not None
    assert ctx.table is not None
    extent, estimated = info
    parts = max(1, min(m, extent))
    cuts = [extent * i // parts for i in range(1, parts)]
    if ctx.engine.name == "duckdb" and extent >= parts * DUCKDB_ROW_GROUP:
        # Cut at row-group edges: a range across a row group decompresses all of it twice.
        aligned = {round(c / DUCKDB_ROW_GROUP) * DUCKDB_ROW_GROUP for c in cuts}
        cuts = sorted(c for c in aligned if 0 < c < extent)
    alias = ctx.table.alias_or_name
    if ctx.engine.name == "postgres":
        address = exp.column("ctid", table=alias)
        unit = "pages"

        def at(value: int) -> exp.Expr:
            kind = exp.DataType.build("tid", dialect="postgres", udt=True)
            return exp.cast(exp.Literal.string(f"({value},0)"), kind)
    else:
        address = exp.column("rowid", table=alias)
        unit = "rowids"

        def at(value: int) -> exp.Expr:
            return exp.Literal.number(value)

    conditions: list[exp.Expr] = []
    edges = [None, *cuts, None]
    for lo, hi in itertools.pairwise(edges):
        terms: list[exp.Expr] = []
        if lo is not None:
            terms.append(exp.GTE(this=address.copy(), expression=at(lo)))
        if hi is not None:
            terms.append(exp.LT(this=address.copy(), expression=at(hi)))
        conditions.append(exp.and_(*terms) if terms else exp.true())
    sqls = physical_partition_sqls(
        ctx.parsed, conditions, dialect=ctx.engine, allow_unstable=allow_unstable
    )
    spans = list(zip([0, *cuts], [*cuts, extent], strict=True))
    return [
        Partition(
            i,
            sql,
            round(estimated * (hi - lo) / extent) if extent else 0,
            f"{unit} [{lo}, {hi}){' and beyond' if i == len(sqls) - 1 else ''}",
        )
        for i, (sql, (lo, hi)) in enumerate(zip(sqls, spans, strict=True))
    ], None


def _build_materialize(ctx: _Context, m: int, allow_unstable: bool) -> tuple[list[Partition], str]:
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
    numbered = numbered_sql(ctx.parsed, _ROW_NUMBER, columns=ctx.columns)
    create = exp.Create(kind="TABLE", this=table, expression=numbered)
    if engine.name == "postgres":  # a scratch copy needs no write-ahead log: about 2x faster
        create.set("properties", exp.Properties(expressions=[exp.UnloggedProperty()]))
    ctx.source.execute(engine.sql(create), what="materialize statement")
    rows = 0
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
        rows = int(ctx.source.scalar(f"SELECT COUNT(*) FROM {engine.sql(table)}") or 0)
    except Exception:
        ctx.source.execute(engine.sql(_drop(table)), what="scratch clean-up")
        raise
    parts = max(1, min(m, rows))
    cuts = [rows * i // parts for i in range(parts + 1)]
    projection = [exp.column(exp.to_identifier(c, quoted=True)) for c in ctx.columns]
    built = []
    for i in range(parts):
        number = exp.column(_ROW_NUMBER)
        condition: exp.Expr = exp.GT(this=number, expression=exp.Literal.number(cuts[i]))
        if i < parts - 1:
            condition = exp.and_(
                condition,
                exp.LTE(this=number.copy(), expression=exp.Literal.number(cuts[i + 1])),
            )
        select = exp.select(*[p.copy() for p in projection]).from_(table.copy()).where(condition)
        built.append(
            Partition(
                i, engine.sql(select), cuts[i + 1] - cuts[i], f"rows ({cuts[i]}, {cuts[i + 1]}]"
            )
        )
    return built, engine.sql(table)


_BUILDERS: dict[str, Callable[[_Context, int, bool], tuple[list[Partition], str | None]]] = {
    "fragments": _build_fragments,
    "hash": _build_hash,
    "range": _build_range,
    "ctid": _build_ctid,
    "materialize": _build_materialize,
}


def _drop(table: exp.Table) -> exp.Drop:
    return exp.Drop(kind="TABLE", tables=[table], exists=True)


def drop_scratch(plan_: Plan, source: Any) -> None:
    """Drop the scratch table of a ``materialize`` plan (nothing for other plans)."""
    if plan_.scratch_table is None:
        return
    src = connect(source)
    table = exp.to_table(plan_.scratch_table, dialect=src.dialect.sqlglot_dialect)
    src.execute(src.dialect.sql(_drop(table)), what="scratch clean-up")


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
        parts = str(name).split("_")
        if not str(name).startswith(SCRATCH_PREFIX) or len(parts) < 3 or not parts[1].isdigit():
            continue
        if int(parts[1]) < cutoff:
            table = exp.table_(str(name), db=scratch)
            source.execute(engine.sql(_drop(table)), what="scratch clean-up")
            dropped.append(str(name))
    return dropped


def _check_count(value: object, what: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{what} must be an integer >= 1, got {value!r}")
