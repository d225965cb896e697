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

from dialects import Dialect, SqlfeedError

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


def with_order(text: str, engine: Dialect, original: exp.Expr, rewritten: exp.Expr) -> str | None:
    """``text`` (which parses as ``original``) with ``rewritten``'s outermost ORDER BY.

    It replaces the outermost ORDER BY when that is the only difference (tie-breakers added
    to the ORDER BY of its LIMIT) and the result parses as exactly ``rewritten``; else None.
    Only sqlfeed's ORDER BY is rendered: the rest of the query stays as the user wrote it.
    """
    old, new = original.args.get("order"), rewritten.args.get("order")
    if old is None or new is None:
        return None
    same = rewritten.copy()
    same.set("order", old.copy())
    tokens = _tokens(text, engine)
    if tokens is None or same != original:
        return None
    depth, start, end = 0, None, len(text)
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.ORDER_BY:
            start, end = token.start, len(text)
        elif depth == 0 and start is not None and token.token_type in _AFTER_ORDER:
            end = min(end, token.start)
    if start is None:
        return None
    try:
        order = engine.sql(new)
    except SqlfeedError:
        return None
    rest = text[end:]
    candidate = f"{text[:start]}{order.strip()}{' ' + rest if rest.strip() else rest}"
    reparsed = reparse(candidate, engine)
    return candidate if reparsed is not None and reparsed == rewritten else None


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
