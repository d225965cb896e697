"""Partition queries of a SELECT: hash, range and physical partitions, and their planning.

What sqlfeed adds is built as AST nodes and rendered for its engine with
``unsupported_level=RAISE``, so nothing an engine lacks is dropped silently; the user's
query inside a wrap is the user's own text (:mod:`sqlfeed.sql.verbatim`), and a rewrite
inside it is rendered only where that provably keeps its meaning.

The partition invariant: for any valid query ``q`` and any ``M >= 1``, the multiset union
of ``partition_sql(q, k, M)`` for ``k`` in ``0..M-1`` is exactly the result of ``q``.
It rests on three facts: the bucket of a row is computed from the row's own values only,
it is never NULL and always in [0, M) (see ``sqlfeed.dialects.Dialect.bucket``), and ``q`` is
stable, i.e. returns the same rows every time it runs (see
:func:`sqlfeed.sql.stability.unstable_reasons`): an ORDER BY that may tie where it decides
the rows (a LIMIT's, a window's) is completed with tie-breakers first
(:func:`sqlfeed.sql.order.complete_orders`), unless ``strict``.

The queries are rendered once per shape and filled in per partition
(:class:`sqlfeed.sql.render.Template`), so M partitions cost about one render.

>>> q = parse("SELECT a, b FROM t WHERE a > 0 OR b < 0", "duckdb")
>>> partition_sql(q, 3, 8)
'SELECT a, b FROM t WHERE (a > 0 OR b < 0) AND HASH(a, b) % 8 = 3'
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Collection, Sequence

from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError, QueryError, UnsupportedError
from sqlfeed.sql.arguments import (
    check_partition_count,
    check_partition_index,
    check_positive_int,
    normalize_key,
)
from sqlfeed.sql.frame import Frame, output_alias_referenced, single_table
from sqlfeed.sql.grouped import grouped_frame
from sqlfeed.sql.keys import TableKeys
from sqlfeed.sql.order import complete_orders
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.render import Template, Value, render_problem
from sqlfeed.sql.stability import check_stable
from sqlfeed.sql.syntax import single_aggregate_row
from sqlfeed.sql.verbatim import faithful, whole_text

__all__ = [
    "bounds_sql",
    "literal",
    "numbered_sql",
    "partition_sql",
    "partition_sqls",
    "partitions_for",
    "physical_partition_sqls",
    "range_partition_sqls",
    "range_pushdown",
]


def partition_sql(
    query: str | ParsedQuery,
    k: int,
    m: int,
    *,
    dialect: str | Dialect = "duckdb",
    key: str | Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    text_columns: Collection[str] = (),
    allow_unstable: bool = False,
    pretty: bool = False,
    strict: bool = False,
    table_keys: TableKeys | None = None,
) -> str:
    """Partition ``k`` of ``m`` hash partitions of the query.

    Args:
        query: SQL text or a parsed query.
        k: the partition, in [0, m).
        m: the number of partitions, at least 1.
        dialect: the engine (when ``query`` is text).
        key: output column(s) to hash; by default all output columns (aggregates and
            window results are left out when other columns remain, since a parallel
            engine may sum floats in a different order on each run).
        columns: the output column names as the engine reports them, when known.
        text_columns: output columns whose type the engine cannot hash (PostgreSQL json,
            xml, point, ...): they are hashed through their text form.
        allow_unstable: partition a query whose result may change between runs anyway.
        pretty: render on several lines.
        strict: refuse an ORDER BY that may tie (LIMIT, window) instead of completing it
            with tie-breakers (see :func:`~sqlfeed.sql.order.complete_orders`).
        table_keys: the primary/unique keys of the query's only base table (catalog
            facts: an ORDER BY over one needs no tie-breaker).

    Raises:
        UnstableQueryError: the query is not stable and ``allow_unstable`` is False.
        InvalidArgumentError: ``k``/``m`` out of range, or a key not in the output.
    """
    check_partition_count(m)
    check_partition_index(k, m)
    return partition_sqls(
        query,
        m,
        dialect=dialect,
        key=key,
        columns=columns,
        text_columns=text_columns,
        allow_unstable=allow_unstable,
        pretty=pretty,
        only=k,
        strict=strict,
        table_keys=table_keys,
    )[0]


def partition_sqls(
    query: str | ParsedQuery,
    m: int,
    *,
    dialect: str | Dialect = "duckdb",
    key: str | Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    text_columns: Collection[str] = (),
    allow_unstable: bool = False,
    pretty: bool = False,
    only: int | None = None,
    strict: bool = False,
    table_keys: TableKeys | None = None,
) -> list[str]:
    """All ``m`` hash partition queries (or just partition ``only``), in order.

    With ``m == 1`` the single partition is the query itself (its ORDER BYs completed).
    The arguments are those of :func:`partition_sql`.

    >>> partition_sqls("SELECT a FROM t UNION SELECT b FROM u", 2, dialect="postgres")[1]
    'SELECT * FROM (SELECT a FROM t UNION SELECT b FROM u) AS _sqlfeed_q WHERE ((HASH_RECORD_EXTENDED(ROW(_sqlfeed_q.a), 0) % 2) + 2) % 2 = 1'
    """  # noqa: E501
    parsed = deterministic(
        query, dialect, columns, allow_unstable=allow_unstable, strict=strict, table_keys=table_keys
    )
    check_partition_count(m)
    if only is not None:
        check_partition_index(only, m)
    keys = normalize_key(key)
    indices = range(m) if only is None else [only]
    engine = parsed.dialect
    tree = parsed.tree
    if keys is None and isinstance(tree, exp.Select) and single_aggregate_row(tree):
        # At most one row: partition 0 holds it, the others are the query cut to no rows.
        whole = whole_text(parsed, pretty)
        if faithful(parsed):
            empty = tree.copy().limit(0)
            empty.set("offset", None)
            none = engine.sql(empty, pretty=pretty)
        else:
            wrap = Frame.plain(parsed)
            none = wrap.render(wrap.with_condition(exp.false()), pretty)
        return [whole if k == 0 else none for k in indices]
    frame = Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
    frame.text_columns = frozenset(text_columns)
    bucket = frame.bucket(keys, m)  # validates the key even when m == 1
    if m == 1:
        return [whole_text(parsed, pretty)]
    template = Template(
        engine,
        lambda slot: frame.with_condition(exp.EQ(this=bucket.copy(), expression=slot[0])),
        pretty=pretty,
        render=frame.render,
    )
    return [template.fill(k) for k in indices]


def deterministic(
    query: str | ParsedQuery,
    dialect: str | Dialect,
    columns: Sequence[str] | None,
    *,
    allow_unstable: bool,
    strict: bool,
    table_keys: TableKeys | None = None,
) -> ParsedQuery:
    """The query made to return the same rows every run, or an error saying why it cannot.

    Refuses (unless ``allow_unstable``) what no rewrite fixes (volatile functions, unseeded
    samples, unordered order-sensitive aggregates) and, with ``strict``, every ORDER BY
    that may tie; without ``strict`` those ORDER BYs come back completed.

    Raises:
        UnstableQueryError: the query is not stable and ``allow_unstable`` is False.
    """
    parsed = parse(query, dialect)
    if not allow_unstable:
        check_stable(parsed, strict=strict, columns=columns, table_keys=table_keys)
    if strict:
        return parsed
    return complete_orders(parsed, columns=columns, table_keys=table_keys).parsed


def range_partition_sqls(
    query: str | ParsedQuery,
    key: str,
    bounds: Sequence[object],
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
    null_partition: bool = True,
    allow_unstable: bool = False,
    strict: bool = False,
    table_keys: TableKeys | None = None,
    order_by: Sequence[exp.Expr] = (),
) -> list[str]:
    """Range partitions of the query on one key column, split at ``bounds``.

    ``n`` increasing bounds make ``n + 1`` ranges: ``key < b1``, ``b1 <= key < b2``, ...,
    ``key >= bn`` (the first and last are open, so values outside the planned minimum and
    maximum still land somewhere), plus a last ``key IS NULL`` partition when
    ``null_partition``. Adjacent ranges compare against the same literal, so every row is
    in exactly one partition whatever the literal's rounding. Integers are exact.
    ``strict`` and ``table_keys`` are those of :func:`partition_sql`.

    The range joins the query's own WHERE where that provably selects the same rows
    (:func:`range_pushdown`): a plain filter over one table, or a GROUP BY whose key is a
    grouping column (filtered before it groups, see :mod:`sqlfeed.sql.grouped`); else the
    query is wrapped. ``order_by``: expressions (of the table's columns) every partition
    is ordered by, only for a plain filter over one table without an ORDER BY of its own.

    >>> range_partition_sqls("SELECT id, v FROM t", "id", [10, 20], dialect="postgres")
    ['SELECT id, v FROM t WHERE id < 10', 'SELECT id, v FROM t WHERE id >= 10 AND id < 20', \
'SELECT id, v FROM t WHERE id >= 20', 'SELECT id, v FROM t WHERE id IS NULL']
    >>> range_partition_sqls("SELECT g AS k, COUNT(*) AS n FROM t GROUP BY g", "k", [5])[0]
    'SELECT g AS k, COUNT(*) AS n FROM t WHERE g < 5 GROUP BY g'

    Raises:
        InvalidArgumentError: not one key column, or ``order_by`` where it cannot apply.
    """
    parsed = deterministic(
        query, dialect, columns, allow_unstable=allow_unstable, strict=strict, table_keys=table_keys
    )
    frame, _ = _range_frame(parsed, key, columns, ordered=bool(order_by))
    column = frame.hash_args(normalize_key(key))
    assert column is not None
    target = column[0]
    engine = parsed.dialect
    values = [_bound_value(value) for value in bounds]

    def where(condition: exp.Expr) -> exp.Select:
        select = frame.with_condition(condition)
        if order_by:  # the query has no ORDER BY of its own (checked above)
            select.order_by(*(e.copy() for e in order_by), copy=False)
        return select

    def ranges(low: bool, high: bool) -> Template:
        """The query for ranges of one shape: ``key >= s0`` and/or ``key < s1``."""

        def build(slots: list[exp.Expr]) -> exp.Select:
            parts: list[exp.Expr] = []
            if low:
                parts.append(exp.GTE(this=target.copy(), expression=slots[0]))
            if high:
                parts.append(exp.LT(this=target.copy(), expression=slots[-1]))
            return where(exp.and_(*parts) if len(parts) > 1 else parts[0])

        return Template(engine, build, slots=int(low) + int(high), render=frame.render)

    sqls: list[str] = []
    if not values:
        not_null = exp.Not(this=exp.Is(this=target.copy(), expression=exp.null()))
        sqls.append(frame.render(where(not_null)))
    else:
        sqls.append(ranges(False, True).fill(values[0]))
        if len(values) > 1:
            middle = ranges(True, True)
            sqls += [middle.fill(values[i - 1], values[i]) for i in range(1, len(values))]
        sqls.append(ranges(True, False).fill(values[-1]))
    if null_partition:
        is_null = exp.Is(this=target.copy(), expression=exp.null())
        sqls.append(frame.render(where(is_null)))
    return sqls


def range_pushdown(
    query: str | ParsedQuery,
    key: str,
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
) -> str:
    """Where :func:`range_partition_sqls` puts the range of ``key``.

    ``query`` (the query's own WHERE: a plain filter over one table, ``key`` a plain
    column), ``groups`` (the WHERE of a GROUP BY, before it groups: see
    :mod:`sqlfeed.sql.grouped`), or an empty string (a wrap around the query).

    >>> range_pushdown("SELECT g, COUNT(*) AS n FROM t WHERE x > 0 GROUP BY g", "g")
    'groups'
    >>> range_pushdown("SELECT g, COUNT(*) AS n FROM t GROUP BY g LIMIT 3", "g")
    ''
    """
    return _range_frame(parse(query, dialect), key, columns)[1]


def _range_frame(
    parsed: ParsedQuery, key: str, columns: Sequence[str] | None, ordered: bool = False
) -> tuple[Frame, str]:
    """The frame a range of ``key`` filters, and :func:`range_pushdown`'s answer.

    With ``ordered``, checked to be a plain filter over one table without an ORDER BY.
    """
    keys = normalize_key(key)
    assert keys is not None
    if len(keys) != 1:
        raise InvalidArgumentError("range partitions take exactly one key column")
    # A range of a grouping column goes inside the GROUP BY only where sqlglot renders
    # the query faithfully; elsewhere the query is wrapped.
    rendered_faithfully = faithful(parsed)
    grouped = grouped_frame(parsed, keys[0], columns) if rendered_faithfully else None
    frame = grouped or Frame.build(
        parsed, columns, True, hashing=True, key=keys, rendered_faithfully=rendered_faithfully
    )
    pushed = "groups" if grouped is not None else "" if frame.alias else "query"
    if ordered and (pushed != "query" or parsed.tree.args.get("order")):
        raise InvalidArgumentError(
            "ordered range partitions need a plain filter over one table without ORDER BY"
        )
    return frame, pushed


def _bound_value(value: object) -> Value:
    """A bound as a template value: integers and decimals as their exact text."""
    expression = literal(value)  # validates: no NaN, no infinity, a supported type
    if isinstance(value, int | decimal.Decimal) and not isinstance(value, bool):
        return str(value)
    return expression


def bounds_sql(
    query: str | ParsedQuery,
    key: str,
    fractions: Sequence[float] = (),
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
) -> str:
    """``SELECT COUNT(*), COUNT(key), MIN(key), MAX(key)[, quantiles]`` over the query.

    The quantiles (discrete: values that occur in the data) come only where the dialect
    has a quantile aggregate (``Dialect.quantiles``); elsewhere plan from MIN and MAX.

    For a GROUP BY whose ranges of ``key`` join its WHERE (:func:`range_pushdown` says
    ``groups``) they are taken over the rows it groups, without grouping them: the groups'
    keys are among those rows' (HAVING only drops groups), and the counts are of rows, an
    upper bound of the groups.

    >>> bounds_sql("SELECT g, SUM(v) AS s FROM t WHERE v > 0 GROUP BY g HAVING SUM(v) > 9", "g")
    'SELECT COUNT(*), COUNT(g), MIN(g), MAX(g) FROM t WHERE v > 0'
    """
    parsed = parse(query, dialect)
    engine = parsed.dialect
    frame, pushed = _range_frame(parsed, key, columns)
    if pushed and output_alias_referenced(parsed.tree):
        # Its select list is replaced below: a WHERE naming an output alias would break.
        frame = Frame.build(parsed, columns, pushdown=False, hashing=True, key=[key])
        pushed = ""
    column = frame.hash_args(normalize_key(key))
    assert column is not None
    target = column[0]
    aggregates: list[exp.Expr] = [
        engine.count_star(),
        exp.Count(this=target.copy()),
        exp.Min(this=target.copy()),
        exp.Max(this=target.copy()),
    ]
    if fractions:
        quantiles = engine.quantiles(target.copy(), list(fractions))
        if quantiles is not None:
            aggregates.append(quantiles)
    select = frame.select
    select.set("expressions", aggregates)
    select.set("order", None)
    if pushed == "groups":  # the rows it groups: no aggregate to run for the bounds
        select.set("group", None)
        select.set("having", None)
    return frame.render(select)


def physical_partition_sqls(
    query: str | ParsedQuery,
    conditions: Sequence[exp.Expr],
    *,
    dialect: str | Dialect = "duckdb",
    allow_unstable: bool = False,
) -> list[str]:
    """The query's own WHERE extended with each of ``conditions`` (ctid or row ranges).

    Only for a plain filter over one table (see :func:`single_table`), where a condition on
    the table's physical rows selects the same output rows. The query is rendered once;
    each condition alone is rendered into it.
    """
    parsed = deterministic(query, dialect, None, allow_unstable=allow_unstable, strict=False)
    problem = render_problem(parsed.dialect, parsed.tree, parsed.sql)
    if isinstance(parsed.tree, exp.Select) and problem is not None:
        raise UnsupportedError(
            "physical partitions put a row range inside the query, but sqlglot cannot "
            f"write this query for {parsed.dialect.name} without changing it: {problem}; "
            "use strategy hash or range, which wrap the query as written"
        )
    if single_table(parsed) is None:
        raise InvalidArgumentError(
            "physical partitions need a plain filter over one table (no join, aggregate, "
            "DISTINCT, LIMIT, window or set operation)"
        )
    select = parsed.tree.copy()
    assert isinstance(select, exp.Select)
    frame = Frame(select, parsed.dialect, None, None, None, alias="")
    template = Template(parsed.dialect, lambda slot: frame.with_condition(slot[0]))
    return [template.fill(exp.paren(c) if isinstance(c, exp.Or) else c) for c in conditions]


def numbered_sql(
    query: str | ParsedQuery,
    row_number: str,
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
    number: bool = True,
) -> str:
    """``SELECT ROW_NUMBER() OVER () AS row_number, <columns> FROM (query)``, to materialize.

    Without the number when not ``number``: PostgreSQL reads its scratch table by pages.

    The numbering is arbitrary but fixed once stored; the output names must be distinct.
    The query is embedded as the user wrote it (see :class:`Frame`).
    """
    parsed = parse(query, dialect)
    frame = Frame.build(parsed, columns, pushdown=False)
    if frame.columns is None or frame.names is None:
        raise QueryError("materialize needs the output column names: pass columns=...")
    numbered = exp.alias_(
        exp.Window(this=exp.RowNumber()), exp.to_identifier(row_number), copy=False
    )
    outputs = [
        exp.alias_(c.copy(), exp.to_identifier(n, quoted=True), copy=False)
        for c, n in zip(frame.columns, frame.names, strict=True)
        if n is not None
    ]
    select = frame.select
    select.set("expressions", [numbered, *outputs] if number else outputs)
    return frame.render(select)


def literal(value: object) -> exp.Expr:
    """A SQL literal for a Python value (bounds): exact for integers and decimals.

    >>> literal(2**63 - 1).sql()
    '9223372036854775807'
    >>> literal(dt.date(2024, 2, 29)).sql()
    "CAST('2024-02-29' AS DATE)"
    """
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise InvalidArgumentError(f"cannot use {value} as a partition bound")
        return exp.Literal.number(repr(value))
    if isinstance(value, dt.datetime):
        kind = exp.DataType.Type.TIMESTAMPTZ if value.tzinfo else exp.DataType.Type.TIMESTAMP
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), kind)
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.Type.DATE)
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise InvalidArgumentError(f"cannot use a {type(value).__name__} as a partition bound")


def partitions_for(rows: int, target_rows: int, workers: int = 1) -> int:
    """The default partition count: ceil(rows / target_rows), at least 4 x workers.

    >>> partitions_for(1_000_000, 100_000, workers=4)
    16
    """
    check_positive_int(target_rows, "target_rows")
    check_positive_int(workers, "workers")
    return max(math.ceil(max(rows, 0) / target_rows), 4 * workers, 1)
