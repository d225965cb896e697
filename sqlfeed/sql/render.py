"""Render many queries that differ only in a few values, and the user's own query faithfully.

:class:`Template` renders the many queries; the user's own query is rendered without
changing what it means.

Where a query wraps the user's (``SELECT * FROM (q) AS _sqlfeed_q WHERE ...``) it embeds
the user's text itself (:func:`statement_text`, :func:`without_order`), so the engine
parses exactly what the user wrote. Only where a rewrite must go inside the query (a
predicate pushed into its WHERE, tie-breakers added to its ORDER BYs) is it rendered from
the AST, and then :func:`render_problem` checks that the rendering reads back as the same
tree and uses no function, type or keyword the user did not write (sqlglot renders
SQLite's ``CAST(x AS NUMERIC)`` as ``REAL``, MariaDB's ``a REGEXP b`` as
``REGEXP_LIKE(a, b)``, a function MariaDB lacks).

M partition queries differ only in the partition's number (or its bounds). Rendering the
whole AST once per partition costs M renders of the user's query (47 s for 10,000
partitions of a large query); a :class:`Template` renders it once with numbered slots and
fills each partition's values in as text.

>>> from dialects import get_dialect
>>> template = Template(get_dialect("duckdb"), lambda s: exp.select("a").from_("t").where(
...     exp.EQ(this=exp.column("k"), expression=s[0])))
>>> template.fill(3)
'SELECT a FROM t WHERE k = 3'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.parser import Parser
from sqlglot.tokenizer_core import Token, TokenType

from sqlfeed.dialects import Dialect, SqlfeedError

__all__ = [
    "Template",
    "Value",
    "checked_render",
    "new_words",
    "render_problem",
    "reparse",
    "statement_text",
    "with_order",
    "without_modifiers",
    "without_order",
]

Value = int | str | exp.Expr
"""What fills a slot: an integer, SQL text (inserted as is), or an expression."""

# Slots render as these numbers (+ the slot's index); a base the query's own text happens
# to contain is skipped, and if all are taken every fill renders the whole AST instead.
_SENTINEL_BASES = (7_319_026_458_100_000_000, 6_120_887_345_900_000_000, 5_902_114_736_200_000_000)


class Template:
    """A query rendered once for its engine, with numbered slots filled in by text.

    Args:
        engine: the dialect to render for.
        build: makes the query AST from one expression per slot (called once, or on every
            :meth:`fill` when the fast path is not available).
        slots: the number of slots.
        pretty: render on several lines (line breaks depend on the values: rendered per fill).
        render: how to render the AST (default: the engine's ``sql``); a frame that embeds
            the user's text passes its own.
    """

    def __init__(
        self,
        engine: Dialect,
        build: Callable[[list[exp.Expr]], exp.Expr],
        slots: int = 1,
        *,
        pretty: bool = False,
        render: Callable[[exp.Expr, bool], str] | None = None,
    ) -> None:
        self._engine = engine
        self._build = build
        self._pretty = pretty
        self._renderer = render or (lambda tree, pretty: engine.sql(tree, pretty=pretty))
        self._parts: list[str] | None = None
        self._order: list[int] = []
        self.renders = 0
        """How many times the whole query was rendered (tests check it stays constant)."""
        if pretty:
            return
        for base in _SENTINEL_BASES:
            tokens = [str(base + i) for i in range(slots)]
            text = self._render([exp.Literal.number(t) for t in tokens])
            if self._split(text, tokens):
                return

    def _render(self, values: list[exp.Expr]) -> str:
        self.renders += 1
        return self._renderer(self._build(values), self._pretty)

    def _split(self, text: str, tokens: list[str]) -> bool:
        """Cut ``text`` at each token (each must occur exactly once, as a whole number)."""
        found = []
        for index, token in enumerate(tokens):
            at = text.find(token)
            if at < 0 or text.find(token, at + 1) >= 0:
                return False
            end = at + len(token)
            if (at > 0 and text[at - 1].isdigit()) or (end < len(text) and text[end].isdigit()):
                return False
            found.append((at, end, index))
        found.sort()
        parts, last = [], 0
        for at, end, _ in found:
            parts.append(text[last:at])
            last = end
        parts.append(text[last:])
        self._parts = parts
        self._order = [index for _, _, index in found]
        return True

    def fill(self, *values: Value) -> str:
        """The query with slot ``i`` replaced by ``values[i]``."""
        if self._parts is None:
            return self._render([_expression(v) for v in values])
        texts = [self._text(values[i]) for i in self._order]
        out = [self._parts[0]]
        for text, part in zip(texts, self._parts[1:], strict=True):
            out.append(text)
            out.append(part)
        return "".join(out)

    def _text(self, value: Value) -> str:
        if isinstance(value, bool):
            raise TypeError("a slot takes an integer, SQL text or an expression, not a bool")
        if isinstance(value, int | str):
            return str(value)
        if isinstance(value, exp.Literal) and not value.is_string:
            return value.name
        return self._engine.sql(value)


def _expression(value: Value) -> exp.Expr:
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, str):
        return exp.Literal.number(value) if _number(value) else exp.var(value)
    return value


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _tokens(text: str, engine: Dialect) -> list[Token] | None:
    try:
        return list(sqlglot.Dialect.get_or_raise(engine.sqlglot_dialect).tokenize(text))
    except SqlglotError:
        return None


def statement_text(sql: str, engine: Dialect) -> str:
    r"""The user's query text as it can be embedded in another query.

    Without its trailing semicolon(s) (and what follows them), on lines of its own (a
    trailing ``--`` comment cannot swallow what follows it).

    >>> from dialects import get_dialect
    >>> statement_text("SELECT 1; -- done", get_dialect("duckdb"))
    'SELECT 1'
    >>> statement_text("SELECT 1 -- one", get_dialect("duckdb"))
    '\nSELECT 1 -- one\n'
    """
    tokens = _tokens(sql, engine) or []
    end = len(sql)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        end = tokens.pop().start
    text = sql[:end].strip()
    pad = "\n" if "--" in text or "#" in text else ""  # a line comment ends at a line end
    return pad + text + pad


def reparse(text: str, engine: Dialect) -> exp.Expr | None:
    """``text`` parsed as one statement in the engine's dialect, outer parentheses removed.

    As :func:`sqlfeed.sql.parse` does; None when it does not parse as one.
    """
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        statements = [s for s in sqlglot.parse(text, read=engine.sqlglot_dialect) if s is not None]
    except SqlglotError:
        return None
    finally:
        logger.setLevel(level)
    if len(statements) != 1:
        return None
    tree = statements[0]
    while isinstance(tree, exp.Subquery) and not tree.alias and _only_this(tree):
        tree = tree.this
    return tree


def _only_this(node: exp.Expr) -> bool:
    return all(v is None or k == "this" for k, v in node.args.items() if v != [])


def without_order(text: str, engine: Dialect, expected: exp.Expr) -> str | None:
    """``text`` with its outermost ORDER BY (the last clause) cut off.

    When what is left parses as exactly ``expected`` (the query's tree without its ORDER
    BY); else None.
    """
    tokens = _tokens(text, engine)
    if tokens is None:
        return None
    depth, cut = 0, None
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif token.token_type == TokenType.ORDER_BY and depth == 0:
            cut = token.start
    if cut is None:
        return None
    candidate = text[:cut].rstrip()
    candidate += "\n" if "--" in candidate or "#" in candidate else ""
    reparsed = reparse(candidate, engine)
    return candidate if reparsed is not None and reparsed == expected else None


def with_order(
    text: str,
    engine: Dialect,
    original: exp.Expr,
    rewritten: exp.Expr,
    *,
    render_user_order: bool = True,
) -> str | None:
    """``text`` (which parses as ``original``) with ``rewritten``'s outermost ORDER BY.

    When that ORDER BY is the only difference (tie-breakers added to the ORDER BY of a
    LIMIT or a DISTINCT ON) and the result parses as exactly ``rewritten``; else None.
    The user's words are not rendered again: the tie-breakers are appended to the user's
    own ORDER BY text, and an ORDER BY that sqlfeed adds starts with the DISTINCT ON
    expressions as written (PostgreSQL matches them with the ORDER BY's as written:
    ``date_trunc('week', ts)`` rendered ``DATE_TRUNC('WEEK', ts)`` would not match). Only
    sqlfeed's own keys are rendered; a user's ORDER BY that itself changed is rendered
    whole, if ``render_user_order`` (never under DISTINCT ON).
    """
    old, new = original.args.get("order"), rewritten.args.get("order")
    if new is None or old == new:
        return None
    same = rewritten.copy()
    same.set("order", old.copy() if old is not None else None)
    tokens = _tokens(text, engine)
    if tokens is None or same != original:
        return None
    outer = _outer_tokens(tokens)
    at_order = [i for i, t in enumerate(outer) if t.token_type == TokenType.ORDER_BY][-1:]
    first = at_order[0] if at_order else 0
    after = [i for i, t in enumerate(outer) if t.token_type in _AFTER_ORDER and i > first]
    stop = after[0] if after else len(outer)
    if stop == 0 or bool(at_order) != (old is not None):
        return None
    kept = len(old.expressions) if old is not None else 0
    on = _distinct_on(original, tokens, text)
    try:
        if old is not None and new.expressions[:kept] != old.expressions:
            if on or not render_user_order:  # DISTINCT ON: matched as written
                return None
            begin, end = outer[first].start, outer[stop].start if after else len(text)
            rest = text[end:]
            order = engine.sql(new).strip()
            candidate = f"{text[:begin]}{order}{' ' + rest if rest.strip() else rest}"
        else:
            keys = _key_texts(new.expressions[kept:], on if old is None else [], engine)
            at = outer[stop - 1].end + 1  # after the last word (a trailing comment stays)
            joint = ", " if old is not None else " ORDER BY "
            candidate = f"{text[:at]}{joint}{', '.join(keys)}{text[at:]}"
    except SqlfeedError:
        return None
    reparsed = reparse(candidate, engine)
    return candidate if reparsed is not None and reparsed == rewritten else None


def _outer_tokens(tokens: list[Token]) -> list[Token]:
    """The tokens outside every parenthesis and bracket: the outermost query's own."""
    depth, out = 0, []
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0:
            out.append(token)
    return out


def _key_texts(
    keys: list[exp.Expr], written: list[tuple[exp.Expr, str]], engine: Dialect
) -> list[str]:
    """``keys`` as ORDER BY text; those that start them with ``written``'s trees, its text.

    ``written``: the DISTINCT ON expressions (tree, text as written) an added ORDER BY
    starts with; the keys after them are sqlfeed's own, rendered.
    """
    out = []
    for key, own in zip(keys, written, strict=False):
        if not (isinstance(key, exp.Ordered) and key.this == own[0]):
            break
        direction = " DESC" if key.args.get("desc") else " ASC"
        nulls = key.args.get("nulls_first")
        direction += "" if nulls is None else " NULLS FIRST" if nulls else " NULLS LAST"
        out.append(f"{own[1]}{direction}")
    rest = [key.copy() for key in keys[len(out) :]]
    if rest:  # sqlfeed's own keys, rendered together: one render whatever their number
        order = engine.sql(exp.Order(expressions=rest)).strip()
        out.append(order.removeprefix("ORDER BY").strip())
    return out


def _distinct_on(tree: exp.Expr, tokens: list[Token], text: str) -> list[tuple[exp.Expr, str]]:
    """The outermost SELECT's DISTINCT ON expressions: each one's tree and text as written.

    Empty when it has none (or its text does not split into as many expressions).
    """
    distinct = tree.args.get("distinct")
    on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
    if on is None:
        return []
    depth, at = 0, None
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.DISTINCT:
            kinds = [t.token_type for t in tokens[i + 1 : i + 3]]
            at = i + 3 if kinds == [TokenType.ON, TokenType.L_PAREN] else None
            break
    if at is None:
        return []
    texts: list[str] = []
    depth, begin = 0, at
    for i in range(at, len(tokens)):
        kind = tokens[i].token_type
        if depth == 0 and kind in (TokenType.COMMA, TokenType.R_PAREN):
            if i == begin:
                return []
            texts.append(text[tokens[begin].start : tokens[i - 1].end + 1])
            if kind == TokenType.R_PAREN:
                break
            begin = i + 1
        elif kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
    if len(texts) != len(on.expressions):
        return []
    return list(zip(on.expressions, texts, strict=True))


_AFTER_ORDER = (TokenType.LIMIT, TokenType.OFFSET, TokenType.FETCH)


def without_modifiers(
    text: str, engine: Dialect, names: frozenset[str], expected: exp.Expr
) -> str | None:
    """``text`` without the words ``names`` (upper case) right after its outermost SELECT.

    Such as MySQL's ``SQL_NO_CACHE``, which no derived table may have; when what is left
    parses as exactly ``expected``; else None.
    """
    tokens = _tokens(text, engine)
    if tokens is None:
        return None
    depth, select, cuts = 0, False, []
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.SELECT and not select:
            select = True
        elif select and depth == 0 and token.text.upper() in names:
            cuts.append(token)
        elif select and token.token_type not in (TokenType.DISTINCT, TokenType.ALL):
            break
    if not cuts:
        return None
    kept, last = [], 0
    for token in cuts:
        kept.append(text[last : token.start])
        last = token.end + 1
    candidate = "".join(kept) + text[last:]
    reparsed = reparse(candidate, engine)
    return candidate if reparsed is not None and reparsed == expected else None


# Words sqlglot writes in place of what the user wrote with the same meaning: the AS of
# an alias, CAST for ``x::type``, OFFSET for ``LIMIT o, n``, the tie-breakers' direction,
# CROSS JOIN for a comma, NOT for a negated operator (!~).
_SAME_MEANING = frozenset("AS CAST OFFSET LIMIT ASC DESC NULLS FIRST LAST CROSS JOIN NOT".split())
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_NOT_WORDS = (TokenType.STRING, TokenType.NUMBER, TokenType.IDENTIFIER, TokenType.NATIONAL_STRING)


def _words(tokens: list[Token]) -> set[str]:
    """The keywords and function names of a token list.

    Not its column names, and not its type names: sqlglot writes INT for INTEGER, and a type
    it changes, such as SQLite's NUMERIC into REAL, reads back as another type, which the
    round trip catches.
    """
    words: set[str] = set()
    for index, token in enumerate(tokens):
        parts = token.text.split()  # a keyword may be several words (ORDER BY)
        if token.token_type in _NOT_WORDS or token.token_type in Parser.TYPE_TOKENS:
            continue
        if not all(_WORD.fullmatch(part) for part in parts):
            continue
        if token.token_type == TokenType.VAR:
            following = tokens[index + 1] if index + 1 < len(tokens) else None
            if following is None or following.token_type != TokenType.L_PAREN:
                continue  # a name, not a function call
        words.update(part.upper() for part in parts)
    return words


def render_problem(engine: Dialect, tree: exp.Expr, text: str) -> str | None:
    """Why rendering ``tree`` may not mean what the user wrote; None when it is faithful.

    ``tree`` is the query the user wrote as ``text``, or sqlfeed's rewrite of it.

    Faithful: the rendering of ``tree`` parses back as the same tree (sqlglot renders
    SQLite's ``CAST(x AS NUMERIC)`` as ``CAST(x AS REAL)``, which does not), and the
    rendering of the user's own query uses no function, type or keyword that ``text``
    lacks (MariaDB has no ``REGEXP_LIKE``, which sqlglot writes for ``a REGEXP b``); type
    names are left to the round trip.
    """
    return checked_render(engine, tree, text)[1]


def checked_render(engine: Dialect, tree: exp.Expr, text: str) -> tuple[str, str | None]:
    """``tree`` rendered for the engine, and :func:`render_problem`'s answer for it."""
    try:
        rendered = engine.sql(tree)
    except SqlfeedError as err:
        return "", str(err)
    reparsed = reparse(rendered, engine)
    if reparsed is None or reparsed != tree:
        return rendered, f"sqlglot renders it as {_short(rendered)!r}, which reads back differently"
    original = reparse(text, engine)
    if original is None:
        return rendered, "its text does not parse on its own"
    try:
        own = rendered if original == tree else engine.sql(original)
    except SqlfeedError as err:
        return rendered, str(err)
    new = new_words(engine, own, text)
    if new is None:
        return rendered, "its text does not tokenize"
    if new:
        return rendered, (
            f"sqlglot renders it with {', '.join(new)}, which the query does not use "
            f"({_short(own)!r})"
        )
    return rendered, None


def new_words(engine: Dialect, rendered: str, text: str) -> list[str] | None:
    """The keywords and function names ``rendered`` uses that the user's ``text`` does not.

    Nor a synonym of them; None when either does not tokenize.
    """
    written, ours = _tokens(text, engine), _tokens(rendered, engine)
    if written is None or ours is None:
        return None
    user = _words(written)
    synonyms = engine.RENDERED_SYNONYMS  # a word sqlglot writes -> the user's synonyms
    return sorted(
        word
        for word in _words(ours) - user - _SAME_MEANING
        if not synonyms.get(word, frozenset()) & user
    )


def _short(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."
