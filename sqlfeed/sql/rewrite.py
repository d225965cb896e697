"""Rewrite one SELECT into count, sample and partition queries, on the sqlglot AST.

Pure: no I/O, no drivers. Every query is built as AST nodes and rendered for its engine
with ``unsupported_level=RAISE``, so nothing an engine lacks is dropped silently.

The partition invariant: for any valid query ``q`` and any ``M >= 1``, the multiset union
of ``partition_sql(q, k, M)`` for ``k`` in ``0..M-1`` is exactly the result of ``q``.
It rests on three facts: the bucket of a row is computed from the row's own values only,
it is never NULL and always in [0, M) (see ``dialects.Dialect.bucket``), and ``q`` is
stable, i.e. returns the same rows every time it runs (see :func:`unstable_reasons`).

>>> q = parse("SELECT a, b FROM t WHERE a > 0 OR b < 0", "duckdb")
>>> partition_sql(q, 3, 8)
'SELECT a, b FROM t WHERE (a > 0 OR b < 0) AND HASH(a, b) % 8 = 3'
>>> count_sql(q)
'SELECT COUNT(*) FROM t WHERE a > 0 OR b < 0'
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import TokenError

from dialects import (
    Dialect,
    InvalidArgumentError,
    ParseError,
    QueryError,
    UnsafeQueryError,
    UnstableQueryError,
    UnsupportedError,
    get_dialect,
)

__all__ = [
    "SAMPLE_METHODS",
    "ParsedQuery",
    "bounds_sql",
    "check_stable",
    "count_sql",
    "literal",
    "numbered_sql",
    "parse",
    "partition_sql",
    "partition_sqls",
    "partitions_for",
    "physical_partition_sqls",
    "range_partition_sqls",
    "relation_sql",
    "sample_sql",
    "schema_sql",
    "single_table",
    "unstable_reasons",
]

SAMPLE_METHODS = ("limit", "bernoulli", "hash")
"""The sampling methods :func:`sample_sql` knows."""

HASH_SAMPLE_BUCKETS = 10_000
"""Resolution of ``method='hash'`` samples: fractions are rounded to 1 / this."""

_WRAP_ALIAS = "_sqlfeed_q"
_COLUMN_PREFIX = "_sqlfeed_c"

# Functions that change state or wait: never run them on the user's behalf.
_SIDE_EFFECT_FUNCTIONS = frozenset(
    (
        "nextval setval pg_advisory_lock pg_advisory_xact_lock pg_sleep pg_terminate_backend "
        "pg_cancel_backend pg_reload_conf pg_rotate_logfile lo_import lo_export lo_unlink "
        "dblink_exec set_config pg_create_restore_point pg_switch_wal get_lock release_lock "
        "release_all_locks sleep benchmark load_file sys_exec sys_eval xp_cmdshell"
    ).split()
)

# Functions whose value changes from one run to the next.
_VOLATILE_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.Rand,
    exp.Uuid,
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentDatetime,
    exp.Localtimestamp,
)
_VOLATILE_FUNCTIONS = frozenset(
    (
        "random rand now uuid gen_random_uuid uuid_generate_v1 uuid_generate_v4 random_uuid "
        "uuid_short newid newsequentialid clock_timestamp statement_timestamp "
        "transaction_timestamp timeofday getdate getutcdate sysdate systimestamp sysdatetime "
        "curdate curtime utc_timestamp utc_date utc_time localtime localtimestamp "
        "current_timestamp current_date current_time setseed currval lastval last_insert_id "
        "connection_id pg_backend_pid txid_current random_bytes gen_random_bytes randn "
        "randstr uniform normal"
    ).split()
)
# unix_timestamp() without arguments is "now"; with an argument it is a pure conversion.
_VOLATILE_WITHOUT_ARGS = frozenset({"unix_timestamp"})

# Aggregates whose result depends on the order rows arrive in, unless given an ORDER BY.
_ORDER_SENSITIVE_AGG_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.AnyValue,
    exp.First,
    exp.Last,
)
_ORDER_SENSITIVE_AGGS = frozenset(
    (
        "string_agg listagg array_agg group_concat any_value first last arbitrary json_agg "
        "jsonb_agg json_arrayagg json_group_array list first_value last_value collect_list "
        "array_concat_agg xmlagg"
    ).split()
)

# Window functions that pick or number rows, so ties in the window order make them unstable.
_ORDER_SENSITIVE_WINDOW_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.RowNumber,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.NthValue,
    exp.Ntile,
)


@dataclass(frozen=True)
class ParsedQuery:
    """A validated, single read-only query and the dialect it is written in.

    Build it with :func:`parse`. The tree is never mutated: every rewrite works on a copy.
    """

    sql: str
    """The SQL text as the user gave it."""

    dialect: Dialect
    """The engine the query is written for."""

    tree: exp.Expr = field(repr=False)
    """The parsed query: a SELECT, a set operation, or a VALUES list."""

    @property
    def output_names(self) -> list[str | None] | None:
        """The output column names as written, ``None`` for an unnamed expression.

        None as a whole when a ``*`` hides them (ask the engine: ``LIMIT 0``).

        >>> parse("SELECT a, b AS c, a + 1 FROM t").output_names
        ['a', 'c', None]
        """
        names = _ast_names(self.tree)
        return None if names is None else [n.name if n is not None else None for n in names]

    @property
    def output_width(self) -> int | None:
        """The number of output columns when the query text tells it (no ``*``)."""
        items = _projection(self.tree)
        if items is None:
            return None
        if any(_is_star(item) for item in items):
            return None
        return len(items)


def parse(sql: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> ParsedQuery:
    """Parse and validate ``sql``: exactly one read-only query.

    Refuses, before anything runs: empty input, several statements, anything that is not
    a query (DDL, DML, COPY, GRANT, SET, ...), DDL/DML anywhere in the tree (for example
    a data-modifying CTE), ``SELECT ... INTO``, locking clauses and functions with side
    effects.

    Args:
        sql: the SQL text (or an already parsed query, returned as is).
        dialect: the engine's dialect name or object.

    Raises:
        ParseError: the text does not parse (with line and column).
        UnsafeQueryError: the text would modify something.
        QueryError: the text is empty or not a query.
    """
    if isinstance(sql, ParsedQuery):
        return sql
    engine = get_dialect(dialect)
    if not isinstance(sql, str):
        raise QueryError(f"SQL must be a string, not {type(sql).__name__}")
    statements = _parse_statements(sql, engine)
    if not statements:
        raise QueryError("the SQL is empty (or only comments): give one SELECT statement")
    if len(statements) > 1:
        kinds = ", ".join(_statement_kind(s) for s in statements)
        raise UnsafeQueryError(
            f"expected exactly one statement, got {len(statements)} ({kinds}): "
            "sqlfeed runs a single SELECT; remove the others"
        )
    tree = statements[0]
    while isinstance(tree, exp.Subquery) and not tree.alias and _only_this(tree):
        tree = tree.this
    if not isinstance(tree, (exp.Query, exp.Values)):
        raise UnsafeQueryError(
            f"{_statement_kind(tree)} is not a query: sqlfeed only reads, give a SELECT "
            "(or WITH ... SELECT, UNION/INTERSECT/EXCEPT, VALUES)"
        )
    _refuse_unsafe_nodes(tree)
    return ParsedQuery(sql=sql, dialect=engine, tree=tree)


def _parse_statements(sql: str, engine: Dialect) -> list[exp.Expr]:
    # sqlglot logs a warning and falls back to an opaque Command for syntax it does not
    # know; such a statement is refused below, so the warning would only be noise.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        parsed = sqlglot.parse(sql, read=engine.sqlglot_dialect)
    except SqlglotParseError as err:
        first = err.errors[0] if err.errors else {}
        description = first.get("description") or "syntax error"
        near = (first.get("highlight") or "").strip()
        message = f"cannot parse the SQL: {description}" + (f" near {near!r}" if near else "")
        raise ParseError(message, first.get("line"), first.get("col")) from None
    except TokenError as err:
        raise ParseError(f"cannot parse the SQL: {_first_line(str(err))}") from None
    finally:
        logger.setLevel(level)
    return [statement for statement in parsed if statement is not None]


def _refuse_unsafe_nodes(tree: exp.Expr) -> None:
    for node in tree.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Returning)):
            raise UnsafeQueryError(
                f"the query contains {_statement_kind(node)}: sqlfeed only reads, "
                "remove the data-modifying part"
            )
        if isinstance(node, exp.Into):
            raise UnsafeQueryError(
                "SELECT ... INTO writes a table or variables: sqlfeed only reads, remove INTO"
            )
        if isinstance(node, exp.Lock):
            raise UnsafeQueryError(
                "the query takes row locks (FOR UPDATE/SHARE): remove the locking clause"
            )
        name = _function_name(node)
        if name in _SIDE_EFFECT_FUNCTIONS:
            raise UnsafeQueryError(
                f"the query calls {name}(), which has side effects: sqlfeed runs partition "
                "queries several times, so it refuses functions that change state"
            )


def unstable_reasons(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> list[str]:
    """Why the query's result may differ between two runs; empty when it is stable.

    Partition queries each re-run the query (and a failed partition is re-run by another
    worker), so a query must return the same rows every time to be partitioned.

    >>> unstable_reasons("SELECT a FROM t LIMIT 10")
    ['LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows']
    >>> unstable_reasons("SELECT a FROM t ORDER BY a LIMIT 10")
    []
    """
    tree = parse(query, dialect).tree
    reasons: list[str] = []

    def add(reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    for node in tree.walk():
        name = _function_name(node)
        if isinstance(node, _VOLATILE_CLASSES) or name in _VOLATILE_FUNCTIONS:
            add(f"{_display_function(node)} returns a different value on every run")
        elif name in _VOLATILE_WITHOUT_ARGS and not node.expressions and not node.this:
            add(f"{name}() without an argument is the current time")
        elif isinstance(node, exp.TableSample) and node.args.get("seed") is None:
            add("TABLESAMPLE without a seed (REPEATABLE) draws a different sample every run")
        elif _is_order_sensitive_aggregate(node):
            add(
                f"{_display_function(node)} without ORDER BY concatenates rows in an "
                "arbitrary order; add ORDER BY inside the aggregate"
            )
        elif isinstance(node, exp.Window) and _is_order_sensitive_window(node):
            add(
                f"{_display_function(node.this)} OVER (...) without ORDER BY numbers or picks "
                "rows in an arbitrary order; add ORDER BY to the window"
            )
        if isinstance(node, (exp.Select, exp.SetOperation)):
            reason = _limit_reason(node)
            if reason:
                add(reason)
    return reasons


def check_stable(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> None:
    """Raise :class:`UnstableQueryError` with every reason when the query is not stable."""
    reasons = unstable_reasons(query, dialect)
    if reasons:
        raise UnstableQueryError(
            "cannot partition this query consistently, because "
            + "; ".join(reasons)
            + ". Make it deterministic, materialize it first, or pass allow_unstable=True "
            "(--allow-unstable) if you accept rows lost or repeated across partitions"
        )


def count_sql(
    query: str | ParsedQuery,
    dialect: str | Dialect = "duckdb",
    *,
    columns: Sequence[str] | None = None,
    pretty: bool = False,
) -> str:
    """``SELECT COUNT(*)`` of the query's result.

    Where the query is a plain filter over one table, the count replaces its projection
    (provably the same number); otherwise the query is wrapped, its ORDER BY dropped when
    it has no LIMIT.

    Args:
        query: SQL text or a parsed query.
        dialect: the engine (when ``query`` is text).
        columns: the output column names as the engine reports them, when known; needed
            only for queries whose output names repeat on engines such as MySQL.
        pretty: render on several lines.

    >>> count_sql("SELECT DISTINCT a FROM t ORDER BY a", "postgres")
    'SELECT COUNT(*) FROM (SELECT DISTINCT a FROM t) AS _sqlfeed_q'
    """
    parsed = parse(query, dialect)
    frame = _Frame.build(parsed, columns, pushdown=True)
    select = frame.select
    select.set("expressions", [parsed.dialect.count_star()])
    select.set("order", None)
    return parsed.dialect.sql(select, pretty=pretty)


def sample_sql(
    query: str | ParsedQuery,
    n: int | None = None,
    *,
    dialect: str | Dialect = "duckdb",
    method: str = "limit",
    fraction: float | None = None,
    seed: int | None = 0,
    key: str | Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    text_columns: Collection[str] = (),
    pretty: bool = False,
) -> str:
    """A sample of the query's result, for statistics.

    Methods:
        ``limit``: the first ``n`` rows (cheap; not random).
        ``bernoulli``: each row kept with probability ``fraction``, by the engine's
            TABLESAMPLE (an error where the engine has none: never a silent full scan).
        ``hash``: the rows whose bucket is below ``fraction``; deterministic, any engine.
    ``n`` caps the number of rows for every method.

    >>> sample_sql("SELECT a FROM t", 100)
    'SELECT a FROM t LIMIT 100'
    >>> sample_sql("SELECT a FROM t", dialect="postgres", method="bernoulli", fraction=0.1)
    'SELECT a FROM t TABLESAMPLE BERNOULLI (10) REPEATABLE (0)'
    """
    parsed = parse(query, dialect)
    engine = parsed.dialect
    if method not in SAMPLE_METHODS:
        raise InvalidArgumentError(
            f"unknown sample method {method!r}; use one of {', '.join(SAMPLE_METHODS)}"
        )
    if n is not None:
        _check_positive_int(n, "the sample size n", allow_zero=True)
    if method == "limit":
        if n is None:
            raise InvalidArgumentError("method='limit' needs n, the number of rows")
        if fraction is not None:
            raise InvalidArgumentError("method='limit' takes n, not fraction")
        tree = parsed.tree
        if isinstance(tree, (exp.Select, exp.SetOperation)) and not _has_limit(tree):
            return engine.sql(tree.copy().limit(n), pretty=pretty)
        select = _Frame.build(parsed, columns, pushdown=False).select
        return engine.sql(select.limit(n), pretty=pretty)
    if fraction is None or isinstance(fraction, bool) or not 0 < float(fraction) <= 1:
        raise InvalidArgumentError(
            f"method={method!r} needs fraction, the share of rows to keep, in (0, 1]; "
            f"got {fraction!r}"
        )
    if method == "bernoulli":
        select = _bernoulli_sample(parsed, columns, float(fraction), seed)
    else:
        keys = _normalize_key(key)
        frame = _Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
        frame.text_columns = frozenset(text_columns)
        threshold = max(1, round(float(fraction) * HASH_SAMPLE_BUCKETS))
        bucket = frame.bucket(keys, HASH_SAMPLE_BUCKETS)
        select = frame.with_condition(exp.LT(this=bucket, expression=exp.Literal.number(threshold)))
    if n is not None:
        select = select.limit(n)
    return engine.sql(select, pretty=pretty)


def _bernoulli_sample(
    parsed: ParsedQuery, columns: Sequence[str] | None, fraction: float, seed: int | None
) -> exp.Select:
    engine = parsed.dialect
    percent = fraction * 100
    tree = parsed.tree
    if fraction >= 1:  # every row: no sample clause at all
        return _Frame.build(parsed, columns, pushdown=True).select
    if isinstance(tree, exp.Select) and _pushdown_blocker(tree) is None:
        select = tree.copy()
        table = select.args["from_"].this
        engine.tablesample(table, percent, seed)
        return select
    if not engine.TABLESAMPLE_BERNOULLI:
        raise UnsupportedError(
            f"{engine.name} has no row-level TABLESAMPLE; use method='hash' (deterministic) "
            "or method='limit'"
        )
    if not engine.SAMPLE_DERIVED_TABLES:
        raise UnsupportedError(
            f"{engine.name} samples base tables only, and this query is more than a filter "
            "over one table; use method='hash' (deterministic) or method='limit'"
        )
    frame = _Frame.build(parsed, columns, pushdown=False)
    engine.tablesample(frame.select.args["from_"].this, percent, seed)
    return frame.select


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

    Raises:
        UnstableQueryError: the query is not stable and ``allow_unstable`` is False.
        InvalidArgumentError: ``k``/``m`` out of range, or a key not in the output.
    """
    _check_positive_int(m, "the number of partitions M")
    _check_partition_index(k, m)
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
) -> list[str]:
    """All ``m`` hash partition queries (or just partition ``only``), in order.

    With ``m == 1`` the single partition is the query itself.

    >>> partition_sqls("SELECT a FROM t UNION SELECT b FROM u", 2, dialect="postgres")[1]
    'SELECT * FROM (SELECT a FROM t UNION SELECT b FROM u) AS _sqlfeed_q WHERE ((HASH_RECORD_EXTENDED(ROW(_sqlfeed_q.a), 0) % 2) + 2) % 2 = 1'
    """  # noqa: E501
    parsed = parse(query, dialect)
    _check_positive_int(m, "the number of partitions M")
    if only is not None:
        _check_partition_index(only, m)
    if not allow_unstable:
        check_stable(parsed)
    keys = _normalize_key(key)
    indices = range(m) if only is None else [only]
    engine = parsed.dialect
    tree = parsed.tree
    if keys is None and isinstance(tree, exp.Select) and _single_aggregate_row(tree):
        # At most one row: partition 0 holds it, the others are the query cut to no rows.
        empty = tree.copy().limit(0)
        empty.set("offset", None)
        return [engine.sql(tree if k == 0 else empty, pretty=pretty) for k in indices]
    frame = _Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
    frame.text_columns = frozenset(text_columns)
    bucket = frame.bucket(keys, m)  # validates the key even when m == 1
    if m == 1:
        return [engine.sql(tree, pretty=pretty)]
    return [
        engine.sql(
            frame.with_condition(exp.EQ(this=bucket.copy(), expression=exp.Literal.number(k))),
            pretty=pretty,
        )
        for k in indices
    ]


def range_partition_sqls(
    query: str | ParsedQuery,
    key: str,
    bounds: Sequence[object],
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
    null_partition: bool = True,
    allow_unstable: bool = False,
) -> list[str]:
    """Range partitions of the query on one key column, split at ``bounds``.

    ``n`` increasing bounds make ``n + 1`` ranges: ``key < b1``, ``b1 <= key < b2``, ...,
    ``key >= bn`` (the first and last are open, so values outside the planned minimum and
    maximum still land somewhere), plus a last ``key IS NULL`` partition when
    ``null_partition``. Adjacent ranges compare against the same literal, so every row is
    in exactly one partition whatever the literal's rounding. Integers are exact.

    >>> range_partition_sqls("SELECT id, v FROM t", "id", [10, 20], dialect="postgres")
    ['SELECT id, v FROM t WHERE id < 10', 'SELECT id, v FROM t WHERE id >= 10 AND id < 20', \
'SELECT id, v FROM t WHERE id >= 20', 'SELECT id, v FROM t WHERE id IS NULL']
    """
    parsed = parse(query, dialect)
    if not allow_unstable:
        check_stable(parsed)
    keys = _normalize_key(key)
    assert keys is not None
    if len(keys) != 1:
        raise InvalidArgumentError("range partitions take exactly one key column")
    frame = _Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
    column = frame.hash_args(keys)
    assert column is not None
    target = column[0]
    literals = [literal(value) for value in bounds]
    conditions: list[exp.Expr] = []
    if not literals:
        conditions.append(exp.Not(this=exp.Is(this=target.copy(), expression=exp.null())))
    for position in range(len(literals) + 1):
        parts: list[exp.Expr] = []
        if position > 0:
            parts.append(exp.GTE(this=target.copy(), expression=literals[position - 1].copy()))
        if position < len(literals):
            parts.append(exp.LT(this=target.copy(), expression=literals[position].copy()))
        if parts:
            conditions.append(exp.and_(*parts) if len(parts) > 1 else parts[0])
    if null_partition:
        conditions.append(exp.Is(this=target.copy(), expression=exp.null()))
    engine = parsed.dialect
    return [engine.sql(frame.with_condition(condition)) for condition in conditions]


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
    """
    parsed = parse(query, dialect)
    engine = parsed.dialect
    keys = _normalize_key(key)
    assert keys is not None
    frame = _Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
    column = frame.hash_args(keys)
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
    return engine.sql(select)


def physical_partition_sqls(
    query: str | ParsedQuery,
    conditions: Sequence[exp.Expr],
    *,
    dialect: str | Dialect = "duckdb",
    allow_unstable: bool = False,
) -> list[str]:
    """The query's own WHERE extended with each of ``conditions`` (ctid or row ranges).

    Only for a plain filter over one table (see :func:`single_table`), where a condition on
    the table's physical rows selects the same output rows.
    """
    parsed = parse(query, dialect)
    if not allow_unstable:
        check_stable(parsed)
    if single_table(parsed) is None:
        raise InvalidArgumentError(
            "physical partitions need a plain filter over one table (no join, aggregate, "
            "DISTINCT, LIMIT, window or set operation)"
        )
    select = parsed.tree.copy()
    assert isinstance(select, exp.Select)
    frame = _Frame(select, parsed.dialect, None, None, None, alias="")
    return [parsed.dialect.sql(frame.with_condition(c.copy())) for c in conditions]


def numbered_sql(
    query: str | ParsedQuery,
    row_number: str,
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
) -> exp.Select:
    """``SELECT ROW_NUMBER() OVER () AS row_number, <columns> FROM (query)``, to materialize.

    The numbering is arbitrary but fixed once stored; the output names must be distinct.
    """
    parsed = parse(query, dialect)
    frame = _Frame.build(parsed, columns, pushdown=False)
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
    select.set("expressions", [numbered, *outputs])
    return select


def relation_sql(
    query: str | ParsedQuery,
    *,
    dialect: str | Dialect = "duckdb",
    columns: Sequence[str] | None = None,
) -> str:
    """The query as a SELECT whose output names are exactly ``columns`` (or as written).

    For code that wraps the query again and refers to its columns by name (statistics):
    unnamed columns are renamed by position and given their engine names back.
    """
    parsed = parse(query, dialect)
    return parsed.dialect.sql(_Frame.build(parsed, columns, pushdown=False).select)


def single_table(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> exp.Table | None:
    """The table a plain single-table filter reads (None for anything else).

    >>> single_table("SELECT a FROM s.t AS x WHERE a > 1").sql()
    's.t AS x'
    """
    tree = parse(query, dialect).tree
    if not isinstance(tree, exp.Select) or _pushdown_blocker(tree) is not None:
        return None
    table = tree.args["from_"].this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None  # a table function such as read_parquet(...)
    return table.copy()


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


# -- the frame: a SELECT over the query's rows that a WHERE can be added to ----------------


@dataclass
class _Frame:
    """A SELECT returning exactly the query's rows, and how to refer to its output columns.

    Three shapes, cheapest first:

    * pushdown: the query itself, when it is a plain filter over one table and the hashed
      columns are plain columns; the bucket predicate joins its WHERE.
    * wrap: ``SELECT * FROM (q) AS _sqlfeed_q``, columns referred to by name.
    * rename: when output names repeat (or are unnamed), the wrapped relation renames its
      columns by position (``AS _sqlfeed_q(_sqlfeed_c0, ...)`` or a CTE column list) and
      the outer SELECT gives each its original name back.
    """

    select: exp.Select
    dialect: Dialect
    columns: list[exp.Expr] | None
    """Expressions for the output columns usable in a WHERE; None: unknown (``*``)."""
    names: list[str | None] | None
    """Output names for key look-up, aligned with ``columns``."""
    hashable: list[bool] | None
    """Per output column: True unless it is an aggregate or window result."""
    alias: str = _WRAP_ALIAS
    text_columns: frozenset[str] = frozenset()
    """Output names of columns to hash through their text form."""

    @classmethod
    def build(
        cls,
        parsed: ParsedQuery,
        engine_columns: Sequence[str] | None,
        pushdown: bool,
        hashing: bool = False,
        key: list[str] | None = None,
    ) -> _Frame:
        """The cheapest frame; with ``hashing``, one that can hash ``key`` (or all columns).

        A pushed-down predicate may only hash plain columns: the engine may evaluate a
        computed one (``a / b``) on rows the query's own WHERE excludes (``b <> 0``).
        """
        tree = parsed.tree
        engine = parsed.dialect
        if engine_columns is not None:
            engine_columns = [str(c) for c in engine_columns]
            width = parsed.output_width
            if width is not None and width != len(engine_columns):
                raise InvalidArgumentError(
                    f"columns has {len(engine_columns)} names but the query returns {width}"
                )
        hashable = _hashable_outputs(tree)
        frame: _Frame | None = None
        if pushdown and isinstance(tree, exp.Select) and _pushdown_blocker(tree) is None:
            frame = cls._pushdown(tree, engine, engine_columns, hashable)
            if frame is not None and hashing:
                args = frame.hash_args(key)
                if args is None or not all(isinstance(a, exp.Column) for a in args):
                    frame = None
        if frame is None:
            frame = cls._wrap(parsed, engine_columns, hashable)
        return frame

    @classmethod
    def _pushdown(
        cls,
        tree: exp.Select,
        engine: Dialect,
        engine_columns: Sequence[str] | None,
        hashable: list[bool] | None,
    ) -> _Frame | None:
        items = tree.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            if engine_columns is None:
                return None
            columns: list[exp.Expr] = [
                exp.column(exp.to_identifier(c, quoted=True)) for c in engine_columns
            ]
            names: list[str | None] = list(engine_columns)
        elif any(_is_star(item) for item in items):
            return None
        else:
            columns = [item.unalias() for item in items]
            if engine_columns is not None:
                names = list(engine_columns)
            else:
                names = [n.name if n is not None else None for n in _item_names(items)]
        select = tree.copy()
        return cls(select, engine, columns, names, hashable, alias="")

    @classmethod
    def _wrap(
        cls, parsed: ParsedQuery, engine_columns: Sequence[str] | None, hashable: list[bool] | None
    ) -> _Frame:
        tree = parsed.tree
        engine = parsed.dialect
        body = tree.copy()
        ctes = body.args.get("with_")
        if ctes is not None:
            body.set("with_", None)
        if not _has_limit(body):
            body.set("order", None)
        alias = _free_alias(tree)
        idents: list[exp.Identifier | None] | None
        if engine_columns is not None:
            idents = [exp.to_identifier(c, quoted=True) for c in engine_columns]
        else:
            idents = _ast_names(tree)
        # Engines name an unnamed column after its text (MySQL, SQLite: the text as typed,
        # which differs from the rendered SQL), so such columns are renamed by position.
        items = _projection(tree)
        unnamed = items is None or any(
            not (_is_star(i) or isinstance(i, (exp.Alias, exp.Column))) for i in items
        )
        unique = idents is not None and all(i is not None for i in idents) and not unnamed
        if unique and idents is not None:
            folded = [i.name.casefold() for i in idents if i is not None]
            unique = len(set(folded)) == len(folded)
        if idents is None or unique:
            # Plain wrap: names unknown (a * the engine was not asked about) or unique.
            select = exp.select("*").from_(
                exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )
            columns: list[exp.Expr] | None = None
            names: list[str | None] | None = None
            if idents is not None:
                columns = [exp.column(i.copy(), table=alias) for i in idents if i is not None]
                names = [i.name for i in idents if i is not None]
            frame = cls(select, engine, columns, names, hashable, alias=alias)
        else:
            frame = cls._rename(engine, body, idents, hashable, alias, tree)
        if ctes is not None:
            frame.select = _with_ctes(frame.select, ctes)
        return frame

    @classmethod
    def _rename(
        cls,
        engine: Dialect,
        body: exp.Expr,
        idents: list[exp.Identifier | None],
        hashable: list[bool] | None,
        alias: str,
        tree: exp.Expr,
    ) -> _Frame:
        for position, ident in enumerate(idents):
            if ident is None:
                item = _projection(tree)
                text = item[position].sql(engine.sqlglot_dialect) if item else "?"
                raise QueryError(
                    f"output column {position + 1} ({text}) has no name, and its name is needed "
                    "to keep the output columns apart: give it an alias (AS name), or let "
                    "sqlfeed read the names from the database (columns=..., or --db)"
                )
        inner = [exp.to_identifier(f"{_COLUMN_PREFIX}{i}") for i in range(len(idents))]
        table_alias = exp.TableAlias(this=exp.to_identifier(alias), columns=inner)
        projections = [
            exp.alias_(exp.column(inner[i].copy()), ident.copy())
            for i, ident in enumerate(idents)
            if ident is not None
        ]
        if engine.DERIVED_COLUMN_LIST:
            select = exp.select(*projections).from_(exp.Subquery(this=body, alias=table_alias))
        elif engine.CTE_COLUMN_LIST:
            cte = exp.CTE(this=body, alias=table_alias)
            select = exp.select(*projections).from_(exp.table_(alias))
            select.set("with_", exp.With(expressions=[cte]))
        else:
            raise UnsupportedError(
                f"{engine.name} cannot rename the columns of a subquery, and this query's "
                "output names repeat: give every output column a distinct alias"
            )
        columns: list[exp.Expr] = [exp.column(i.copy()) for i in inner]
        names = [i.name if i is not None else None for i in idents]
        return cls(select, engine, columns, names, hashable, alias=alias)

    def bucket(self, key: list[str] | None, m: int) -> exp.Expr:
        """The bucket expression over ``key`` (or all hashable output columns)."""
        args = self.hash_args(key)
        if args is None:
            return self.dialect.bucket_of_hash(self.dialect.whole_row_hash(self.alias), m)
        return self.dialect.bucket(args, m)

    def hash_args(self, key: list[str] | None) -> list[exp.Expr] | None:
        """What the bucket hashes; None for the whole row (dialects that can)."""
        if key is not None:
            return [self._key_column(name) for name in key]
        if self.columns is None:
            if self.dialect.WHOLE_ROW_HASH:
                return None
            raise QueryError(
                "the query's output columns are hidden behind *, so sqlfeed cannot hash them: "
                "name the key column(s) (key=..., --key), or let sqlfeed read the output "
                "columns from the database (columns=..., or --db)"
            )
        args = [self._hash_input(i) for i in range(len(self.columns))]
        if self.hashable is not None and len(self.hashable) == len(args):
            # Aggregates may differ in the last float bit between runs of a parallel
            # engine; grouping columns identify the row as well and are exact.
            args = [a for a, ok in zip(args, self.hashable, strict=True) if ok] or args
        return args

    def _hash_input(self, position: int) -> exp.Expr:
        assert self.columns is not None
        column = self.columns[position].copy()
        name = self.names[position] if self.names is not None else None
        if name is not None and name in self.text_columns:
            return self.dialect.hashable(column)
        return column

    def _key_column(self, name: str) -> exp.Expr:
        if self.columns is None or self.names is None:
            # Output names unknown: trust the key; the engine reports a wrong name.
            return exp.column(exp.to_identifier(name), table=self.alias or None)
        exact = [i for i, n in enumerate(self.names) if n == name]
        matches = exact or [
            i for i, n in enumerate(self.names) if n is not None and n.casefold() == name.casefold()
        ]
        if not matches:
            known = ", ".join(n for n in self.names if n is not None) or "none"
            raise InvalidArgumentError(
                f"key column {name!r} is not in the query's output (output columns: {known})"
            )
        if len(matches) > 1:
            raise InvalidArgumentError(
                f"key column {name!r} names {len(matches)} output columns; alias them apart"
            )
        return self._hash_input(matches[0])

    def with_condition(self, condition: exp.Expr) -> exp.Select:
        """A copy of the frame's SELECT with ``condition`` added to its WHERE."""
        select = self.select.copy()
        where = select.args.get("where")
        if where is None:
            select.set("where", exp.Where(this=condition))
        else:
            combined = exp.And(this=exp.paren(where.this.copy()), expression=condition)
            select.set("where", exp.Where(this=combined))
        return select


# -- AST helpers ---------------------------------------------------------------------------


def _with_ctes(select: exp.Select, ctes: exp.With) -> exp.Select:
    """Put the user's CTEs first in the outer WITH (nested WITH is not valid everywhere)."""
    own = select.args.get("with_")
    merged = ctes.copy()
    if own is not None:
        merged.set("expressions", [*merged.expressions, *own.expressions])
    select.set("with_", merged)
    return select


def _leftmost_select(tree: exp.Expr) -> exp.Select | None:
    node = tree
    while True:
        if isinstance(node, exp.Select):
            return node
        if isinstance(node, (exp.SetOperation, exp.Subquery)):
            node = node.this
        else:
            return None


def _selects(tree: exp.Expr) -> list[exp.Select]:
    """Every SELECT whose rows form the output (all branches of set operations)."""
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.SetOperation):
        return _selects(tree.this) + _selects(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _selects(tree.this)
    return []


def _projection(tree: exp.Expr) -> list[exp.Expr] | None:
    select = _leftmost_select(tree)
    return None if select is None else list(select.expressions)


def _is_star(item: exp.Expr) -> bool:
    return isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star)


def _item_names(items: Sequence[exp.Expr]) -> list[exp.Identifier | None]:
    names: list[exp.Identifier | None] = []
    for item in items:
        if isinstance(item, exp.Alias):
            names.append(item.args["alias"])
        elif isinstance(item, exp.Column):
            names.append(item.this if isinstance(item.this, exp.Identifier) else None)
        else:
            names.append(None)
    return names


def _ast_names(tree: exp.Expr) -> list[exp.Identifier | None] | None:
    items = _projection(tree)
    if items is None or any(_is_star(item) for item in items):
        return None
    return _item_names(items)


def _hashable_outputs(tree: exp.Expr) -> list[bool] | None:
    """Per output position, False when some branch computes it with an aggregate/window."""
    selects = _selects(tree)
    if not selects or any(_is_star(i) for s in selects for i in s.expressions):
        return None
    width = len(selects[0].expressions)
    flags = [True] * width
    for select in selects:
        if len(select.expressions) != width:
            return None
        for position, item in enumerate(select.expressions):
            if _computes_aggregate(item):
                flags[position] = False
    return flags


def _computes_aggregate(item: exp.Expr) -> bool:
    def nested_query(node: exp.Expr) -> bool:
        return node is not item and isinstance(node, (exp.Subquery, exp.Query))

    for node in item.walk(prune=nested_query):
        if isinstance(node, (exp.AggFunc, exp.Window)):
            return True
    return False


def _pushdown_blocker(select: exp.Select) -> str | None:
    """Why the bucket predicate may not join this SELECT's own WHERE (None: it may).

    Only a select-project-filter over one table qualifies: then each output row comes
    from exactly one input row, and a predicate on the output values filters the same rows.
    """
    for arg in ("with_", "joins", "laterals", "group", "having", "qualify", "distinct",
                "limit", "offset", "fetch", "windows", "connect", "prewhere", "sample",
                "settings", "pivots", "kind", "match"):  # fmt: skip
        if select.args.get(arg):
            return arg
    source = select.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return "source"
    table = source.this
    if table.args.get("sample") or table.args.get("joins") or table.args.get("pivots"):
        return "table"
    for item in select.expressions:
        if _computes_aggregate(item):
            return "aggregate"
    return None


def _has_limit(tree: exp.Expr) -> bool:
    return any(tree.args.get(arg) for arg in ("limit", "offset", "fetch"))


def _limit_reason(node: exp.Expr) -> str | None:
    if not _has_limit(node):
        return None
    limit = node.args.get("limit")
    if isinstance(limit, exp.Limit) and _is_zero(limit.expression):
        return None
    if isinstance(node, exp.Select) and _single_aggregate_row(node):
        return None
    order = node.args.get("order")
    if order is None:
        return "LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows"
    if not _order_is_total(node, order):
        ordered = ", ".join(o.this.sql() for o in order.expressions)
        return (
            f"LIMIT/OFFSET with ORDER BY {ordered} may cut between rows that tie on it; "
            "order by every output column"
        )
    return None


def _single_aggregate_row(select: exp.Select) -> bool:
    return (
        not select.args.get("group")
        and bool(select.expressions)
        and all(_computes_aggregate(i) for i in select.expressions)
    )


def _is_zero(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and node.name == "0"


def _order_is_total(node: exp.Expr, order: exp.Order) -> bool:
    """Whether ORDER BY covers every output column, so tied rows are identical rows."""
    items = _projection(node) if not isinstance(node, exp.Select) else node.expressions
    if not items or any(_is_star(i) for i in items):
        return False
    keys = {o.this.sql().casefold() for o in order.expressions}
    for position, item in enumerate(items, start=1):
        candidates = {item.unalias().sql().casefold(), str(position)}
        if item.alias_or_name:
            candidates.add(exp.column(item.alias_or_name).sql().casefold())
            candidates.add(item.alias_or_name.casefold())
        if not candidates & keys:
            return False
    return True


def _is_order_sensitive_aggregate(node: exp.Expr) -> bool:
    name = _function_name(node)
    if not (isinstance(node, _ORDER_SENSITIVE_AGG_CLASSES) or name in _ORDER_SENSITIVE_AGGS):
        return False
    if isinstance(node.parent, exp.Window):
        return False  # judged as a window function
    if isinstance(node.parent, exp.WithinGroup):
        return False
    if isinstance(node, (exp.AnyValue, exp.First, exp.Last)) or name in {
        "any_value", "first", "last", "arbitrary", "first_value", "last_value"
    }:  # fmt: skip
        return True
    return node.find(exp.Order) is None


def _is_order_sensitive_window(window: exp.Window) -> bool:
    function = window.this
    if not isinstance(function, _ORDER_SENSITIVE_WINDOW_CLASSES + _ORDER_SENSITIVE_AGG_CLASSES):
        return False
    return window.args.get("order") is None


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return ""


def _display_function(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return f"{node.name}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name()}()"
    return node.sql()


def _statement_kind(node: exp.Expr) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if isinstance(node, (exp.Create, exp.Drop)):
        kind = node.args.get("kind")
        verb = type(node).__name__.upper()
        return f"{verb} {kind}" if kind else verb
    if isinstance(node, exp.TruncateTable):
        return "TRUNCATE"
    if isinstance(node, exp.Returning):
        return "RETURNING"
    return type(node).__name__.upper()


def _only_this(node: exp.Expr) -> bool:
    return all(v is None or k == "this" for k, v in node.args.items() if v != [])


def _free_alias(tree: exp.Expr) -> str:
    taken = {ident.name.casefold() for ident in tree.find_all(exp.Identifier)}
    alias = _WRAP_ALIAS
    suffix = 0
    while alias.casefold() in taken:
        suffix += 1
        alias = f"{_WRAP_ALIAS}{suffix}"
    return alias


def _normalize_key(key: str | Sequence[str] | None) -> list[str] | None:
    if key is None:
        return None
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or any(not isinstance(k, str) or not k.strip() for k in keys):
        raise InvalidArgumentError(f"key must be a column name or a list of them, not {key!r}")
    return keys


def _check_positive_int(value: object, what: str, allow_zero: bool = False) -> None:
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InvalidArgumentError(f"{what} must be an integer >= {lowest}, got {value!r}")


def _check_partition_index(k: object, m: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < m:
        raise InvalidArgumentError(f"partition index must be in [0, {m}), got {k!r}")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def schema_sql(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> str:
    """The query cut to no rows, to learn its output columns and types from the engine.

    >>> schema_sql("SELECT a FROM t ORDER BY a")
    'SELECT a FROM t ORDER BY a LIMIT 0'
    """
    parsed = parse(query, dialect)
    tree = parsed.tree
    if isinstance(tree, (exp.Select, exp.SetOperation)) and not _has_limit(tree):
        return parsed.dialect.sql(tree.copy().limit(0))
    body = tree.copy()
    ctes = body.args.get("with_")
    body.set("with_", None)
    alias = exp.TableAlias(this=exp.to_identifier(_free_alias(tree)))
    select = exp.select("*").from_(exp.Subquery(this=body, alias=alias)).limit(0)
    if ctes is not None:
        select = _with_ctes(select, ctes)
    return parsed.dialect.sql(select)


def partitions_for(rows: int, target_rows: int, workers: int = 1) -> int:
    """The default partition count: ceil(rows / target_rows), at least 4 x workers.

    >>> partitions_for(1_000_000, 100_000, workers=4)
    16
    """
    _check_positive_int(target_rows, "target_rows")
    _check_positive_int(workers, "workers")
    return max(math.ceil(max(rows, 0) / target_rows), 4 * workers, 1)
