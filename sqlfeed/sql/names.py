r"""Names a user gives beside the SQL (tables, schemas, columns, jobs): identifiers, never SQL.

A table to write, a key, a label, a watermark column, a scratch schema or a job is named on
the command line or in Python as text, and that text is read by one rule, the same on every
engine, never by a SQL parser (which would drop a comment, split at a semicolon, or read
``victim -- copy`` as the table ``victim``):

* a table is ``name`` or ``schema.name``; a column or a schema is one ``name``;
* an unquoted part is a plain name: a letter or ``_``, then letters, digits and ``_``
  (Unicode letters too). It means what it means unquoted in SQL: PostgreSQL folds it to
  lower case, the other engines compare it as their rules say;
* a part in double quotes (or backquotes) is taken verbatim, whatever it holds: dots,
  spaces, quotes (doubled inside: ``"say ""hi"" twice"``), ``--``; so is its case;
* nothing else: spaces, comments, semicolons, a third part are refused in one line that
  says what is wrong and how to write the name.

A quoted part is written quoted, so what is made is exactly what was named:

>>> table_name('data."it\'s"', "postgres").sql(dialect="postgres")
'data."it\'s"'
>>> table_name("data.victim -- copy", "duckdb")  # doctest: +ELLIPSIS
Traceback (most recent call last):
  ...
sqlfeed...InvalidArgumentError: 'data.victim -- copy' is not a table name: a comment ('--') ...
>>> column_names('id, "order id"')
['id', 'order id']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError, get_dialect

__all__ = [
    "NamePart",
    "column_name",
    "column_names",
    "job_name",
    "name_parts",
    "schema_name",
    "table_name",
]

_PLAIN = re.compile(r"[^\W\d]\w*")
"""An unquoted part: a letter or _, then letters, digits and _ (``str.isidentifier``'s set)."""

_QUOTES = '"`'
"""The characters that quote a part (on every engine: the rule is sqlfeed's, not SQL's)."""

_JOB = re.compile(r"\w[\w.@-]*")
"""A job name: letters, digits, ``_``, ``-``, ``.`` and ``@`` (``JOB@k`` names epoch k)."""

_JOB_LENGTH = 200
"""The longest job name the lease queue keeps."""

_ONE_NAME = (
    "a name",
    'give a name (letters, digits and _), or double-quote it to take it verbatim ("my name")',
)
"""What a one-part name is called, and how to write one."""

_TABLE_NAME = (
    "a table name",
    "give name or schema.name (letters, digits and _), or double-quote a part to take it "
    'verbatim (data."my table")',
)
"""What a table name is called, and how to write one."""


@dataclass(frozen=True)
class NamePart:
    """One part of a name (``schema`` or ``name`` of ``schema.name``)."""

    name: str
    """The part as named: an unquoted part as written, a quoted one without its quotes."""

    quoted: bool
    """Whether the part was quoted (verbatim) or is a plain name (the engine's case rule)."""


def name_parts(text: str, what: str | None = None, *, most: int = 2) -> list[NamePart]:
    """The parts of one name: dot-separated plain or quoted parts, at most ``most`` of them.

    Args:
        text: the name as the user gave it (surrounding spaces are ignored).
        what: the option or argument it was given as (``--into``), for the error.
        most: the parts allowed (2: ``schema.name``; 1: a single name).

    Raises:
        InvalidArgumentError: anything but such a name, in one line.
    """
    items = _scan(text, what, most, separator=None)
    return items[0]


def table_name(text: str | exp.Table, dialect: str | Dialect, what: str | None = None) -> exp.Table:
    """The table ``text`` names (``name`` or ``schema.name``), as an identifier-only tree.

    Rendered for the engine, a quoted part is quoted; a plain part is left as written (the
    engine's case rule applies to it), quoted only where sqlglot knows the engine reserves
    the word.
    A :class:`sqlglot.exp.Table` is returned as is.

    Raises:
        InvalidArgumentError: ``text`` is not such a name.
    """
    if isinstance(text, exp.Table):
        return text
    get_dialect(dialect)  # a name for an engine sqlfeed knows
    parts = [_identifier(part) for part in name_parts(_text(text, what), what)]
    return exp.Table(this=parts[-1], db=parts[0] if len(parts) == 2 else None)


def column_name(text: str, what: str | None = None) -> str:
    """The one column ``text`` names (a plain name, or a quoted one without its quotes).

    Raises:
        InvalidArgumentError: ``text`` is not one name.
    """
    return name_parts(_text(text, what), what, most=1)[0].name


def column_names(text: str, what: str | None = None) -> list[str]:
    """The columns of a comma-separated list of names (``id, "order id"``).

    Raises:
        InvalidArgumentError: an item is not one name, or is empty.
    """
    return [parts[0].name for parts in _scan(_text(text, what), what, 1, separator=",")]


def schema_name(text: str, what: str | None = None) -> str:
    """The one schema ``text`` names (a plain name, or a quoted one without its quotes).

    Raises:
        InvalidArgumentError: ``text`` is not one name.
    """
    return column_name(text, what)


def job_name(text: str, what: str | None = None) -> str:
    """A lease-queue job's name: letters, digits and ``_ - . @``, 1 to 200 characters.

    Raises:
        InvalidArgumentError: anything else (spaces, quotes, semicolons, comments, ...).
    """
    name = _text(text, what)  # never stripped: 'iso-a ' is not job iso-a
    if _JOB.fullmatch(name) and len(name) <= _JOB_LENGTH:
        return name
    shown = f"{what} {name!r}" if what else repr(name)
    raise InvalidArgumentError(
        f"{shown} is not a job name: give 1 to {_JOB_LENGTH} letters, digits, _, -, . and @ "
        "(nightly-2024.06)"
    )


def _text(text: object, what: str | None) -> str:
    if not isinstance(text, str):
        shown = f"{what} " if what else ""
        raise InvalidArgumentError(f"{shown}must be a name (text), not {type(text).__name__}")
    return text


def _identifier(part: NamePart) -> exp.Identifier:
    """``part`` as an identifier: a quoted part quoted, a plain one as written.

    A plain part holds only letters, digits and ``_``, so it can say nothing but a name;
    sqlglot quotes it where it is a word the engine reserves (``select`` on MySQL, DuckDB).
    """
    return exp.Identifier(this=part.name, quoted=part.quoted)


def _scan(text: str, what: str | None, most: int, separator: str | None) -> list[list[NamePart]]:
    """The names of ``text``: parts split at dots, names at ``separator`` (None: one name)."""
    fail = _Failure(text, what, most)
    body = text.strip()
    if not body:
        fail("it is empty")
    items: list[list[NamePart]] = [[]]
    i = 0
    while True:
        i = _skip_spaces(body, i) if separator else i
        if i < len(body) and body[i] in _QUOTES:
            part, i = _quoted(body, i, fail)
        else:
            found = _PLAIN.match(body, i)
            if found is None:
                fail(*_what_is_at(body, i))
            part, i = NamePart(found.group(), quoted=False), found.end()
        items[-1].append(part)
        if len(items[-1]) > most:
            fail("a dot in an unquoted name" if most == 1 else f"more than {most} parts")
        following = _skip_spaces(body, i) if separator else i
        if following == len(body):
            return items
        if separator is not None and body[following] == separator:
            items.append([])
        elif body[i] != ".":
            fail(*_what_is_at(body, i))
        i = following + 1


def _quoted(body: str, start: int, fail: _Failure) -> tuple[NamePart, int]:
    """The quoted part starting at ``start`` (its quote doubled inside) and where it ends."""
    quote, chunks, i = body[start], [], start + 1
    while True:
        end = body.find(quote, i)
        if end < 0:
            fail(f"the quote {quote} is not closed")
        chunks.append(body[i:end])
        if body.startswith(quote * 2, end):
            chunks.append(quote)
            i = end + 2
            continue
        name = "".join(chunks)
        if not name or "\0" in name:
            fail("an empty quoted part" if not name else "a NUL character in a quoted part")
        return NamePart(name, quoted=True), end + 1


def _skip_spaces(body: str, i: int) -> int:
    while i < len(body) and body[i].isspace():
        i += 1
    return i


def _what_is_at(body: str, i: int) -> tuple[str, str | None]:
    """What stands at ``body[i]`` where a name or a dot should, in words.

    With the name the user may have meant, quoted, where that is a name at all (not a
    comment, not ``;``).
    """
    after = _skip_spaces(body, i)
    shown = f" after {body[:i].strip()!r}" if body[:i].strip(" .,") else ""
    if after >= len(body):
        return f"nothing after the last {body.rstrip()[-1]!r}", None
    if body.startswith(("--", "/*", "#"), after):
        marker = "#" if body[after] == "#" else body[after : after + 2]
        return f"a comment ({marker!r}){shown}", None
    if body[after] == ";":
        return f"a ';' (a second statement){shown}", None
    if body[i] in ".,":
        return f"an empty part before {body[i]!r}", None
    if body[i].isdigit() and (i == 0 or body[i - 1] in ".,"):
        return "a part that starts with a digit", _suggestion(body, i)
    what = "a space" if body[i].isspace() else f"{body[i]!r}"
    return f"{what}{shown}", _suggestion(body, i)


def _suggestion(body: str, i: int) -> str | None:
    """``body`` with the part around ``body[i]`` double-quoted, as the user may have meant."""
    start = max(body.rfind(".", 0, i), body.rfind(",", 0, i)) + 1
    ends = [end for end in (body.find(".", i), body.find(",", i)) if end >= 0]
    end = min(ends) if ends else len(body)
    part = body[start:end].strip()
    if any(quote in part for quote in _QUOTES):
        return None
    return f'{body[:start]}"{part}"{body[end:]}'


class _Failure:
    """Raises the one-line error about one name."""

    def __init__(self, text: str, what: str | None, most: int) -> None:
        self.text, self.what, self.most = text, what, most

    def __call__(self, problem: str, meant: str | None = None) -> NoReturn:
        kind, hint = _ONE_NAME if self.most == 1 else _TABLE_NAME
        shown = f"{self.what} {self.text!r}" if self.what else repr(self.text)
        if meant is not None:
            hint = f"to keep it, quote the part: {meant}"
        raise InvalidArgumentError(f"{shown} is not {kind}: {problem}; {hint}")
