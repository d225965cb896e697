"""Queries that look at a query's result without partitioning it.

Its row count (:func:`count_sql`), a sample of its rows for statistics
(:func:`sample_sql`), its output columns and types (:func:`schema_sql`), and the query
under the names the engine gives its columns (:func:`relation_sql`).

>>> q = parse("SELECT a, b FROM t WHERE a > 0 OR b < 0", "duckdb")
>>> count_sql(q)
'SELECT COUNT(*) FROM (SELECT a, b FROM t WHERE a > 0 OR b < 0) AS _sqlfeed_q'
>>> count_sql(q, columns=["a", "b"])
'SELECT COUNT(*) FROM t WHERE a > 0 OR b < 0'
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError, UnsupportedError
from sqlfeed.sql.arguments import check_positive_int, normalize_key
from sqlfeed.sql.frame import Frame, output_alias_referenced, pushdown_blocker
from sqlfeed.sql.order import complete_orders
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import has_limit
from sqlfeed.sql.verbatim import faithful

__all__ = [
    "HASH_SAMPLE_BUCKETS",
    "SAMPLE_METHODS",
    "count_sql",
    "relation_sql",
    "sample_sql",
    "schema_sql",
]

SAMPLE_METHODS = ("limit", "bernoulli", "hash")
"""The sampling methods :func:`sample_sql` knows."""

HASH_SAMPLE_BUCKETS = 10_000
"""Resolution of ``method='hash'`` samples: fractions are rounded to 1 / this."""


def count_sql(
    query: str | ParsedQuery,
    dialect: str | Dialect = "duckdb",
    *,
    columns: Sequence[str] | None = None,
    pretty: bool = False,
) -> str:
    """``SELECT COUNT(*)`` of the query's result; it fails exactly when the query would.

    The query is wrapped with its select list, so a wrong column fails the count as it
    fails the query (its ORDER BY dropped when it has no LIMIT; repeated or unnamed output
    columns renamed by position: a count needs no names). Only when ``columns`` is given,
    i.e. the engine has already described the query (so it binds), does a plain filter over
    one table count with its projection replaced (provably the same number).

    Args:
        query: SQL text or a parsed query.
        dialect: the engine (when ``query`` is text).
        columns: the output column names as the engine reported them, when known.
        pretty: render on several lines.

    >>> count_sql("SELECT DISTINCT a FROM t ORDER BY a", "postgres")
    'SELECT COUNT(*) FROM (SELECT DISTINCT a FROM t) AS _sqlfeed_q'
    """
    parsed = parse(query, dialect)
    select = _star_count(parsed.tree) if columns is None and faithful(parsed) else None
    if select is not None:
        select.set("expressions", [parsed.dialect.count_star()])
        select.set("order", None)
        return parsed.dialect.sql(select, pretty=pretty)
    pushdown = columns is not None and not output_alias_referenced(parsed.tree)
    frame = Frame.build(parsed, columns, pushdown=pushdown, names=False)
    frame.select.set("expressions", [parsed.dialect.count_star()])
    frame.select.set("order", None)
    return frame.render(frame.select, pretty)


def _star_count(tree: exp.Expr) -> exp.Select | None:
    """``SELECT *`` over joins and filters counts its rows without the ``*`` (which always binds).

    So repeated names (MySQL refuses them in a derived table) need no renaming.
    """
    if not isinstance(tree, exp.Select) or not tree.expressions:
        return None
    if not all(isinstance(item, exp.Star) for item in tree.expressions):
        return None
    if any(tree.args.get(a) for a in ("distinct", "group", "having", "qualify", "windows")):
        return None
    if has_limit(tree):
        return None
    return tree.copy()


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
        check_positive_int(n, "the sample size n", allow_zero=True)
    if method == "limit":
        if n is None:
            raise InvalidArgumentError("method='limit' needs n, the number of rows")
        if fraction is not None:
            raise InvalidArgumentError("method='limit' takes n, not fraction")
        tree = parsed.tree
        plain = isinstance(tree, (exp.Select, exp.SetOperation)) and not has_limit(tree)
        if plain and faithful(parsed) and isinstance(tree, (exp.Select, exp.SetOperation)):
            return engine.sql(tree.copy().limit(n), pretty=pretty)
        wrap = Frame.build(parsed, columns, pushdown=False)
        return wrap.render(wrap.select.limit(n), pretty)
    if fraction is None or isinstance(fraction, bool) or not 0 < float(fraction) <= 1:
        raise InvalidArgumentError(
            f"method={method!r} needs fraction, the share of rows to keep, in (0, 1]; "
            f"got {fraction!r}"
        )
    if method == "bernoulli":
        select, frame = _bernoulli_sample(parsed, columns, float(fraction), seed)
    else:
        keys = normalize_key(key)
        parsed = complete_orders(parsed, columns=columns).parsed  # the same rows every run
        frame = Frame.build(parsed, columns, pushdown=True, hashing=True, key=keys)
        frame.text_columns = frozenset(text_columns)
        threshold = max(1, round(float(fraction) * HASH_SAMPLE_BUCKETS))
        bucket = frame.bucket(keys, HASH_SAMPLE_BUCKETS)
        select = frame.with_condition(exp.LT(this=bucket, expression=exp.Literal.number(threshold)))
    if n is not None:
        select = select.limit(n)
    return frame.render(select, pretty) if frame is not None else engine.sql(select, pretty=pretty)


def _bernoulli_sample(
    parsed: ParsedQuery, columns: Sequence[str] | None, fraction: float, seed: int | None
) -> tuple[exp.Select, Frame | None]:
    """The sample's SELECT, and the frame that renders it (None: the engine's ``sql``)."""
    engine = parsed.dialect
    percent = fraction * 100
    tree = parsed.tree
    if fraction >= 1:  # every row: no sample clause at all
        whole = Frame.build(parsed, columns, pushdown=True)
        return whole.select, whole
    if isinstance(tree, exp.Select) and pushdown_blocker(tree) is None and faithful(parsed):
        select = tree.copy()
        table = select.args["from_"].this
        engine.tablesample(table, percent, seed)
        return select, None
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
    frame = Frame.build(parsed, columns, pushdown=False)
    engine.tablesample(frame.select.args["from_"].this, percent, seed)
    return frame.select, frame


def schema_sql(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> str:
    """The query cut to no rows, to learn its output columns and types from the engine.

    Its own LIMIT/OFFSET becomes ``LIMIT 0`` (the columns do not depend on them): a
    wrapped query could not repeat output names on MySQL.

    >>> schema_sql("SELECT a FROM t ORDER BY a")
    'SELECT a FROM t ORDER BY a LIMIT 0'
    >>> schema_sql("SELECT a FROM t ORDER BY a LIMIT 5 OFFSET 2")
    'SELECT a FROM t ORDER BY a LIMIT 0'
    """
    parsed = parse(query, dialect)
    tree = parsed.tree
    if isinstance(tree, (exp.Select, exp.SetOperation)) and faithful(parsed):
        cut = tree.copy()
        for arg in ("limit", "offset", "fetch"):
            cut.set(arg, None)
        return parsed.dialect.sql(cut.limit(0))
    wrap = Frame.plain(parsed)
    return wrap.render(wrap.select.limit(0))


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
    frame = Frame.build(parsed, columns, pushdown=False)
    return frame.render(frame.select)
