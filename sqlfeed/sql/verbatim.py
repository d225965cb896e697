"""The user's query as a wrap embeds it, and whether sqlfeed may render it itself.

A wrap (``SELECT * FROM (q) AS _sqlfeed_q WHERE ...``) embeds the user's own text
(:func:`embedded_text`, :func:`wrap_body`), so the engine parses exactly what the user
wrote; only a query sqlfeed rewrote inside (tie-breakers) is rendered from its tree, and
then refused where the rendering would change it. A predicate goes inside the user's query
only where sqlglot renders it faithfully (:func:`faithful`, see
:func:`sqlfeed.sql.render.render_problem`). On MariaDB a grouped query is fenced with a
LIMIT that keeps every row (see :data:`EMBEDDING_ENGINES` for the engines this applies to).
"""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects import Dialect, SqlfeedError, UnsupportedError, dialect_names, get_dialect
from sqlfeed.dialects.text import unused_name
from sqlfeed.sql.parse import ParsedQuery
from sqlfeed.sql.render import (
    checked_render,
    new_words,
    render_problem,
    reparse,
    statement_text,
    with_order,
    without_modifiers,
    without_order,
)
from sqlfeed.sql.syntax import computes_aggregate, has_limit

__all__ = [
    "EMBEDDING_ENGINES",
    "droppable_order",
    "embedded_text",
    "faithful",
    "rendering_problem",
    "whole_text",
    "wrap_body",
]

# The engines whose own text is embedded and whose renderings are checked (both vetted by
# tests/engines/test_corpus_engines.py: each takes any query text as a derived table, WITH
# included): Dialect.EMBEDS_QUERY_TEXT. Elsewhere the query is rendered from its tree as
# sqlglot writes it for the engine (transpiled: T-SQL's TOP for a LIMIT), its CTEs hoisted
# above the wrap (T-SQL has no nested WITH), unchecked.
EMBEDDING_ENGINES = frozenset(
    name for name in dialect_names() if get_dialect(name).EMBEDS_QUERY_TEXT
)
"""The engines whose own text is embedded and whose renderings are checked (their
dialects' :attr:`~sqlfeed.dialects.Dialect.EMBEDS_QUERY_TEXT`)."""


def faithful(parsed: ParsedQuery) -> bool:
    """Whether sqlglot renders the query for its engine without changing what it means.

    Only then is it rewritten inside (see :func:`sqlfeed.sql.render.render_problem`).
    """
    return rendering_problem(parsed) is None


def rendering_problem(parsed: ParsedQuery) -> str | None:
    """Why sqlglot cannot render the query for its engine without changing what it means.

    None: it can. For a refusal; see :func:`sqlfeed.sql.render.render_problem`.
    """
    if not parsed.dialect.EMBEDS_QUERY_TEXT:
        return None  # not checked: rendered from the tree, as sqlglot writes it
    return render_problem(parsed.dialect, parsed.tree, parsed.sql)


def droppable_order(tree: exp.Expr) -> bool:
    """Whether the outermost ORDER BY may be dropped where the rows are only filtered or counted.

    It may when the query has one and it decides no rows (no LIMIT/OFFSET/FETCH, no DISTINCT
    ON, which keeps the first row of each group in that order).
    """
    if not tree.args.get("order") or has_limit(tree):
        return False
    distinct = tree.args.get("distinct")
    return not (isinstance(distinct, exp.Distinct) and distinct.args.get("on"))


def embedded_text(parsed: ParsedQuery) -> str:
    """The query's text for a wrap to embed.

    The user's own text (its outermost ORDER BY cut off where :func:`droppable_order`, and
    the cut is provably exact), so the engine parses what the user wrote; a query sqlfeed
    rewrote inside (tie-breakers) is rendered from its tree, checked not to change what the
    user wrote.

    Raises:
        UnsupportedError: the rewritten query cannot be rendered without changing it.
    """
    engine, tree = parsed.dialect, parsed.tree
    drop = droppable_order(tree)
    target = _without_outer_modifiers(tree, engine)
    if drop:
        target = target.copy() if target is tree else target
        target.set("order", None)
    text = statement_text(parsed.sql, engine)
    if reparse(text, engine) != tree:  # rewritten inside (tie-breakers): rendered, checked
        if _pushdown_fence(parsed) and isinstance(target, (exp.Select, exp.SetOperation)):
            target = target.limit(_NO_LIMIT)
        return _rewritten(parsed, target)
    engine.sql(tree)  # what the engine lacks is refused here, before anything runs
    # The user's own text: what can be cut is cut off it, each cut checked by a re-parse.
    expected = tree
    if drop and (cut := without_order(text, engine, _without_order(tree))) is not None:
        text, expected = cut, _without_order(tree)
    unmodified = _without_outer_modifiers(expected, engine)
    if unmodified is not expected:
        cut = without_modifiers(text, engine, engine.OUTER_MODIFIERS, unmodified)
        text, expected = (cut, unmodified) if cut is not None else (text, expected)
    if not _pushdown_fence(parsed):
        return text
    fenced = _fenced(text, engine, expected)
    if fenced is None:
        raise UnsupportedError(
            "MariaDB filters a grouped derived table wrongly (JSON_ARRAYAGG in a pushed "
            "condition) and sqlfeed cannot fence this query off with a LIMIT: use "
            "strategy materialize, or a key of grouping columns (key=..., --key)"
        )
    return fenced


def _without_order(tree: exp.Expr) -> exp.Expr:
    cut = tree.copy()
    cut.set("order", None)
    return cut


def _without_outer_modifiers(tree: exp.Expr, engine: Dialect) -> exp.Expr:
    """The SELECT without the modifiers the engine takes only in the outermost SELECT.

    :attr:`~sqlfeed.dialects.Dialect.OUTER_MODIFIERS`, MySQL's ``SQL_NO_CACHE``...: they change no
    row, so a derived table leaves them out. A copy, ``tree`` itself when it has none.
    """
    if not engine.OUTER_MODIFIERS:
        return tree
    modifiers = tree.args.get("operation_modifiers") or []
    kept = [m for m in modifiers if m.name.upper() not in engine.OUTER_MODIFIERS]
    if len(kept) == len(modifiers):
        return tree
    cut = tree.copy()
    cut.set("operation_modifiers", kept or None)
    return cut


# MariaDB pushes a WHERE on a grouped derived table's outputs into its HAVING, where
# JSON_ARRAYAGG(... ORDER BY ...) compares wrongly (a hash filter keeps no group: rows
# lost). A LIMIT that keeps every row stops the push-down; the groups are stored in a
# temporary table either way.
_NO_LIMIT = 18446744073709551615
_JSON_AGGREGATES = ("json_arrayagg", "json_objectagg")


def _pushdown_fence(parsed: ParsedQuery) -> bool:
    """Whether a MySQL/MariaDB wrap must keep its WHERE out of the query (see above)."""
    tree = parsed.tree
    if not parsed.dialect.GROUPED_PUSHDOWN_FENCE or has_limit(tree):
        return False
    text = parsed.sql.casefold()
    if any(name in text for name in _JSON_AGGREGATES):
        return True
    branches = [tree] if isinstance(tree, exp.Select) else list(tree.find_all(exp.Select))
    return any(
        branch.args.get("group") or any(computes_aggregate(i) for i in branch.expressions)
        for branch in branches
    )


def _fenced(text: str, engine: Dialect, tree: exp.Expr) -> str | None:
    """``text`` with ``LIMIT <all rows>`` appended.

    When it provably reads as ``tree`` with that LIMIT; else None.
    """
    fenced = f"{text.rstrip()}\nLIMIT {_NO_LIMIT}"
    expected = tree.copy()
    if not isinstance(expected, (exp.Select, exp.SetOperation)):
        return None
    return fenced if reparse(fenced, engine) == expected.limit(_NO_LIMIT) else None


def whole_text(parsed: ParsedQuery, pretty: bool = False) -> str:
    """The whole query as it runs alone (one partition).

    The user's own text, or the checked rendering of what sqlfeed rewrote inside (see
    :func:`embedded_text`).

    Raises:
        UnsupportedError: the rewritten query cannot be rendered without changing it.
    """
    text = statement_text(parsed.sql, parsed.dialect)
    if not parsed.dialect.EMBEDS_QUERY_TEXT:
        return parsed.dialect.sql(parsed.tree, pretty=pretty)
    if reparse(text, parsed.dialect) == parsed.tree:
        parsed.dialect.sql(parsed.tree)  # what the engine lacks is refused before it runs
        return text.lstrip()  # a line comment at its end keeps its line end
    return _rewritten(parsed, parsed.tree, pretty)


def _rewritten(parsed: ParsedQuery, tree: exp.Expr, pretty: bool = False) -> str:
    """``tree``, a rewrite of the user's query, as text.

    The user's text with sqlfeed's tie-breakers spliced into its outermost ORDER BY (see
    :func:`~sqlfeed.sql.render.with_order`), or the whole tree rendered once checked to be
    faithful.
    """
    engine = parsed.dialect
    text = statement_text(parsed.sql, engine)
    original = reparse(text, engine)
    if engine.EMBEDS_QUERY_TEXT and original is not None:
        rerender = _order_words_written(parsed, original)
        spliced = with_order(text, engine, original, tree, render_user_order=rerender)
        if spliced is not None:
            return spliced
    rendered, problem = checked_render(engine, tree, parsed.sql)
    # Only the engines the corpus runs on are refused: elsewhere sqlglot's round trip
    # differs in harmless ways (T-SQL aliases every CTE column), and nothing checks it.
    if problem is not None and engine.EMBEDS_QUERY_TEXT:
        raise UnsupportedError(
            "sqlfeed must rewrite this query inside (tie-breakers for an ORDER BY that may "
            f"tie) but cannot write it for {engine.name} without changing it: {problem}; "
            "end that ORDER BY with a unique column so it needs no tie-breaker"
        )
    return engine.sql(tree, pretty=True) if pretty or not rendered else rendered


def _order_words_written(parsed: ParsedQuery, original: exp.Expr) -> bool:
    """Whether sqlglot writes the user's own ORDER BY with the user's words only.

    Then :func:`with_order` may render it whole (where the tie-breakers are not only
    appended to it).
    """
    order = original.args.get("order")
    if order is None:
        return False
    try:
        rendered = parsed.dialect.sql(order)
    except SqlfeedError:
        return False
    return new_words(parsed.dialect, rendered, parsed.sql) == []


def wrap_body(parsed: ParsedQuery) -> tuple[exp.Expr, exp.With | None, tuple[str, str] | None]:
    """What a wrap (:class:`sqlfeed.sql.frame.Frame`) puts in its derived table.

    A placeholder for the embedded text (and the placeholder's name and text), or, on other
    engines, the query's tree and the CTEs to hoist above the wrap.
    """
    if parsed.dialect.EMBEDS_QUERY_TEXT:
        placeholder = unused_name(parsed.sql, "_sqlfeed_query_7c1e")
        return exp.var(placeholder), None, (placeholder, embedded_text(parsed))
    body = parsed.tree.copy()
    if droppable_order(body):
        body.set("order", None)
    ctes = body.args.get("with_")
    body.set("with_", None)
    return body, ctes, None
