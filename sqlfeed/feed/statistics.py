"""Feature statistics of a query: the bridge from sources and plans to the ``stats`` package.

>>> import sqlfeed
>>> stats = sqlfeed.compute_stats("SELECT range AS x FROM range(10)")
>>> stats["x"].mean, stats["x"].boundaries[:3]
(4.5, [0, 1, 2])
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.options import resolve_plan
from sqlfeed.io import Source, connect
from sqlfeed.io.arrow import without_hints
from sqlfeed.io.views import plain, plain_schema
from sqlfeed.plans.materialize import drop_scratch_with
from sqlfeed.sql import ParsedQuery, relation_sql, sample_sql
from sqlfeed.stats.accumulate import StatsAccumulator
from sqlfeed.stats.model import FeatureStats, StatsSpec
from sqlfeed.stats.pushdown import compute_pushdown
from sqlfeed.stats.sqlvalues import Relation

__all__ = ["STATS_METHODS", "compute_stats"]

STATS_METHODS = ("pushdown", "sample", "accumulate")


def compute_stats(
    query: str | ParsedQuery,
    source: Any = None,
    *,
    spec: StatsSpec | None = None,
    method: str = "pushdown",
    sample_rows: int | None = None,
    sample_method: str = "limit",
    fraction: float | None = None,
    seed: int = 0,
    readers: int = 2,
    progress: Callable[[str], None] | None = None,
    **plan_options: Any,
) -> FeatureStats:
    """Statistics of the query's columns.

    Methods:
        ``pushdown``: aggregate SQL run by the engine over all rows (two scans, and two
            per list column; see :mod:`sqlfeed.stats.pushdown`): the first with the dialect's
            ``STATS_SETTINGS`` (PostgreSQL: ``SET LOCAL work_mem``) in its transaction,
            the grouped one, whose rows hold the columns' values, read by the feeds' own
            readers, so that the values described are the values fed (a PostgreSQL
            ``jsonb`` as its JSON text; ``json``, ``xml``, ``uuid`` and other types read as
            text are grouped by their text).
        ``sample``: the same over the query's sample (``sample_rows`` and ``sample_method``
            ``limit`` / ``bernoulli`` / ``hash`` with ``fraction``), for large tables.
        ``accumulate``: the rows streamed partition by partition (plan options apply),
            one mergeable accumulator per reader thread, merged at the end; exact while
            the data fits the sketches (see ``sqlfeed.stats.accumulate``).
    """
    if method not in STATS_METHODS:
        raise InvalidArgumentError(
            f"unknown statistics method {method!r}; use one of {', '.join(STATS_METHODS)}"
        )
    src: Source = connect(source)
    parsed = src.parse(query)
    columns = src.output_columns(parsed)
    folded = [c.casefold() for c in columns]
    if len(set(folded)) != len(folded):
        raise InvalidArgumentError(
            "statistics are per column name, and the query's output names repeat: alias them apart"
        )
    spec = spec or StatsSpec()
    spec.check_columns(columns)  # before any scan
    schema = src.schema(parsed)
    if method == "accumulate":
        return _accumulate(parsed, src, schema, spec, readers, progress, plan_options)
    relation = _as_text(src, relation_sql(parsed, columns=columns), schema)
    sampled = None
    if method == "sample":
        if sample_rows is None and fraction is None:
            raise InvalidArgumentError("method='sample' needs sample_rows and/or fraction")
        relation = _as_text(
            src,
            sample_sql(
                parsed,
                sample_rows,
                method=sample_method,
                fraction=fraction,
                seed=seed,
                columns=columns,
            ),
            schema,
        )
        sampled = sample_rows
    result = compute_pushdown(
        _embedded(src, relation),
        schema,
        lambda sql: src.arrow(sql, what="statistics query", settings=src.dialect.STATS_SETTINGS),
        spec,
        dialect=src.dialect,
        method=method,
        progress=progress,
        read=lambda sql: _read_values(src, sql),
    )
    result.sql = parsed.sql
    result.sample_rows = sampled
    return result


_STRING_TYPES = frozenset({25, 1042, 1043, 19})
"""PostgreSQL text, char(n), varchar and name: grouped as they are."""
_STRING_ARRAYS = frozenset({1009, 1014, 1015})
"""PostgreSQL text[], char(n)[] and varchar[]."""


def _embedded(src: Source, relation: str) -> str | exp.Expr:
    """The relation as the statistics statements hold it.

    Its text, embedded as written (the user's own text inside it, as partitions embed it:
    sqlglot never re-renders a query it might change), or, on the engines whose queries
    sqlfeed renders from their tree anyway (:attr:`~sqlfeed.dialects.Dialect.EMBEDS_QUERY_TEXT`
    aside), that tree, which sqlglot writes with each statement (T-SQL's CTEs hoisted above
    it).
    """
    if src.dialect.EMBEDS_QUERY_TEXT:
        return relation
    return exp.maybe_parse(relation, dialect=src.dialect.sqlglot_dialect)


def _as_text(src: Source, relation: str, schema: pa.Schema) -> str:
    """The relation with the PostgreSQL columns the feeds read as text given as that text.

    Such columns (``json``, ``xml``, ``money``, ``inet``, ``uuid``, ...: an Arrow string
    that is no string type) become the text PostgreSQL prints for them (``format('%s',
    x)``), and each such array becomes ``text[]``: what the feeds give, and what can be
    grouped where the type itself cannot (``json`` and ``xml`` have no equality).
    """
    column_types = getattr(src, "column_types", None)  # PostgreSQL's sources: type OIDs
    if column_types is None:
        return relation
    types = column_types(relation)
    casts: dict[str, str] = {}
    for field, oid in zip(schema, types, strict=True):
        strings = pa.types.is_list(field.type) and pa.types.is_string(field.type.value_type)
        if pa.types.is_string(field.type) and oid not in _STRING_TYPES:
            casts[field.name] = "text"
        elif strings and oid not in _STRING_ARRAYS:
            casts[field.name] = "array"
    if not casts:
        return relation
    inner = Relation(relation, "_stats_text", src.dialect)  # the text as written
    outputs = []
    for name in schema.names:
        column: exp.Expr = exp.column(exp.to_identifier(name, quoted=True))
        if casts.get(name) == "array":  # each element by its output
            column = exp.cast(column, exp.DataType.build("TEXT[]", dialect="postgres"))
        elif name in casts:  # the type's output function (a cast to text may differ:
            # inet's adds the netmask), NULL kept
            printed = exp.Anonymous(
                this="format", expressions=[exp.Literal.string("%s"), column.copy()]
            )
            null = exp.Is(this=column.copy(), expression=exp.null())
            column = exp.Case(ifs=[exp.If(this=null, true=exp.null())], default=printed)
        outputs.append(column.as_(exp.to_identifier(name, quoted=True)))
    return inner.render(exp.select(*outputs).from_(inner.node))


def _read_values(src: Source, sql: str) -> pa.Table:
    """The rows of a statistics query read as the feeds read a query's rows.

    The same readers and conversions, so that its values are the values fed: a PostgreSQL
    ``jsonb`` as its JSON text, a ``uuid`` as text, an ``interval`` as a duration.
    """
    schema = src.schema(sql)
    batches = list(src.read(sql, schema=schema))
    return pa.Table.from_batches(batches, schema=without_hints(schema))


def _accumulate(
    parsed: ParsedQuery,
    src: Source,
    schema: Any,
    spec: StatsSpec,
    readers: int,
    progress: Callable[[str], None] | None,
    plan_options: dict[str, Any],
) -> FeatureStats:
    plan = resolve_plan(parsed, src, **plan_options)  # the plan options checked there
    schema = plain_schema(plan.arrow_schema() or schema)  # view types: no kernels
    partitions = list(plan.partitions)
    lock = threading.Lock()
    done = [0]

    def one(index: int) -> StatsAccumulator:
        accumulator = StatsAccumulator(schema, spec)
        for batch in src.read(partitions[index].sql, schema=schema):
            accumulator.update(plain(batch))
        with lock:
            done[0] += 1
            if progress is not None:
                progress(f"partition {done[0]}/{len(partitions)}")
        return accumulator

    try:
        with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="sqlfeed-stats") as pool:
            parts = list(pool.map(one, range(len(partitions))))
    finally:  # an auto plan may have materialized the query: its table is ours to drop
        drop_scratch_with(plan, plan, src)()
    merged = StatsAccumulator(schema, spec)
    for part in parts:  # the partitions' statistics merge into the query's
        merged.merge(part)
    return merged.result("accumulate", dialect=src.dialect.name, sql=parsed.sql)
