"""Render many queries that differ only in a few values: :class:`Template`.

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

from collections.abc import Callable

from sqlglot import exp

from dialects import Dialect

__all__ = ["Template", "Value"]

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
    """

    def __init__(
        self,
        engine: Dialect,
        build: Callable[[list[exp.Expr]], exp.Expr],
        slots: int = 1,
        *,
        pretty: bool = False,
    ) -> None:
        self._engine = engine
        self._build = build
        self._pretty = pretty
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
        return self._engine.sql(self._build(values), pretty=self._pretty)

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
