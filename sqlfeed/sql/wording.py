"""sqlglot's parse and tokenizer errors, said in SQL terms.

sqlglot describes a syntax error by its own classes (``Required keyword: 'expression'
missing for <class 'sqlglot.expressions.core.Mul'>``) and a tokenizer error by the text
before it, without a position. :func:`syntax_problem` says what is wrong in the words of
SQL (``'*' has no right-hand operand``); :func:`unclosed` finds the string, quoted name
or comment left open, with its line and column.
"""

from __future__ import annotations

import difflib
import re

import sqlglot
from sqlglot import Token, TokenType
from sqlglot.errors import TokenError

__all__ = ["misspelt_keyword", "syntax_problem", "unclosed"]

_LEADING = ("SELECT", "WITH", "VALUES", "FROM", "TABLE")
"""Keywords a query starts with."""
_CLAUSE_WORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "QUALIFY",
    "WINDOW",
    "DISTINCT",
    "BETWEEN",
    "INNER",
    "OUTER",
    "CROSS",
    "LEFT",
    "RIGHT",
)
"""Keywords a misspelling of which leaves a word the parser cannot place."""

_OPERATORS = {
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "IntDiv": "//",
    "Mod": "%",
    "DPipe": "||",
    "EQ": "=",
    "NEQ": "<>",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "NullSafeEQ": "<=>",
    "And": "AND",
    "Or": "OR",
    "Xor": "XOR",
    "Like": "LIKE",
    "ILike": "ILIKE",
    "Is": "IS",
    "Glob": "GLOB",
    "RegexpLike": "REGEXP",
    "SimilarTo": "SIMILAR TO",
    "BitwiseAnd": "&",
    "BitwiseOr": "|",
    "BitwiseXor": "^",
    "BitwiseLeftShift": "<<",
    "BitwiseRightShift": ">>",
    "Escape": "ESCAPE",
    "Overlaps": "OVERLAPS",
    "Distance": "<->",
}
"""Binary operators: a missing ``expression`` is their right-hand operand."""

_CLAUSES = {
    "Where": ("WHERE", "a condition"),
    "Having": ("HAVING", "a condition"),
    "Qualify": ("QUALIFY", "a condition"),
    "Limit": ("LIMIT", "a row count"),
    "Offset": ("OFFSET", "a row count"),
    "Fetch": ("FETCH", "a row count"),
    "Not": ("NOT", "an expression"),
    "Neg": ("'-'", "a number or expression"),
    "Paren": ("'('", "an expression (and a ')')"),
    "In": ("IN", "a list or a subquery"),
    "Between": ("BETWEEN", "its bounds (BETWEEN low AND high)"),
    "Cast": ("CAST", "a type"),
    "Exists": ("EXISTS", "a subquery"),
    "Any": ("ANY", "a subquery"),
    "All": ("ALL", "a subquery"),
    "Order": ("ORDER BY", "columns"),
    "Group": ("GROUP BY", "columns"),
    "Join": ("JOIN", "a table"),
    "From": ("FROM", "a table"),
    "Alias": ("AS", "a name"),
    "Distinct": ("DISTINCT", "columns"),
    "Case": ("CASE", "WHEN ... THEN ... END"),
    "If": ("WHEN", "a condition and THEN"),
    "Union": ("UNION", "a query"),
    "Intersect": ("INTERSECT", "a query"),
    "Except": ("EXCEPT", "a query"),
}
"""Clauses and prefix operators: the keyword and what must follow it."""

_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_EXPECTED_TOKEN = re.compile(
    r"^Expected (.+?) but got <Token token_type: TokenType\.(\w+), text: (.*?), line"
)
_CLASS = re.compile(r"<class '[\w.]*?(\w+)'>")
_TOKEN = re.compile(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>")


def syntax_problem(description: str) -> str:
    """The sqlglot description of a syntax error, in SQL terms.

    >>> syntax_problem("Required keyword: 'expression' missing for <class 'x.core.Mul'>")
    "'*' has no right-hand operand"
    >>> syntax_problem("Required keyword: 'this' missing for <class 'x.query.Where'>")
    'WHERE is not followed by a condition'
    """
    required = _REQUIRED.search(description)
    if required:
        part, kind = required.groups()
        if kind in _OPERATORS:
            side = "right-hand" if part == "expression" else "left-hand"
            symbol = _OPERATORS[kind]
            shown = symbol if symbol[0].isalpha() else f"'{symbol}'"
            return f"{shown} has no {side} operand"
        if kind in _CLAUSES:
            keyword, follows = _CLAUSES[kind]
            if kind == "Between":
                return f"BETWEEN has no {'upper' if part == 'high' else 'lower'} bound"
            return f"{keyword} is not followed by {follows}"
        return f"an incomplete {kind.upper()}: something is missing"
    expected = _EXPECTED_TOKEN.search(description)
    if expected:
        wanted, token, text = expected.groups()
        if token == "SENTINEL":
            return f"expected {wanted}, but the SQL ends"
        return f"expected {wanted}, got {text!r}"
    if description.startswith("Invalid expression / Unexpected token"):
        return "syntax error"
    if description.startswith("Expecting "):
        return f"expected {description.removeprefix('Expecting ').strip()!r}"
    text = _TOKEN.sub(lambda m: repr(m.group(1)), description)
    return _CLASS.sub(lambda m: m.group(1).upper(), text)


def misspelt_keyword(
    sql: str, read: str | None, line: int | None, col: int | None
) -> tuple[str, int, int] | None:
    r"""A misspelt keyword where a query failed to parse: what, its line and column.

    The query's first word when it is no keyword (``SELEC``), else the plain word right
    before the parser stopped at ``line``/``col`` (``FORM`` in ``SELECT a FORM t``), when
    it is close to a keyword; None otherwise (the parser's own description then).

    >>> misspelt_keyword("SELEC * FROM t", "duckdb", 1, 12)
    ("'SELEC' is not a keyword: did you mean SELECT?", 1, 1)
    >>> misspelt_keyword("SELECT a\nFORM t", "duckdb", 2, 6)
    ("'FORM' is not a keyword: did you mean FROM?", 2, 1)
    """
    try:
        tokens = sqlglot.tokenize(sql, read=read)
    except TokenError:
        return None
    if not tokens:
        return None
    if tokens[0].token_type == TokenType.VAR:
        return _near_keyword(tokens[0], _LEADING)
    if line is None or col is None:
        return None
    before = [t for t in tokens if (t.line, t.col) < (line, col)]
    if len(before) < len(tokens) and before and before[-1].token_type == TokenType.VAR:
        return _near_keyword(before[-1], _CLAUSE_WORDS)
    return None


def _near_keyword(token: Token, keywords: tuple[str, ...]) -> tuple[str, int, int] | None:
    word = token.text.upper()
    close = difflib.get_close_matches(word, keywords, n=1, cutoff=0.75)
    if not close or close[0] == word:
        return None
    column = token.col - len(token.text) + 1
    return f"{token.text!r} is not a keyword: did you mean {close[0]}?", token.line, column


def unclosed(sql: str) -> tuple[str, int, int] | None:
    r"""The string, quoted name or comment that ``sql`` leaves open: what, line, column.

    None when every one is closed (the tokenizer failed for another reason).

    >>> unclosed("SELECT a\nFROM t WHERE b = 'x")
    ("a string (') is not closed", 2, 18)
    """
    closers = {
        "'": ("'", "a string (')"),
        '"': ('"', 'a quoted name (")'),
        "`": ("`", "a quoted name (`)"),
        "/*": ("*/", "a /* comment"),
        "$$": ("$$", "a $$ string"),
    }
    i = 0
    while i < len(sql):
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end + 1
            continue
        opener = next((o for o in ("/*", "$$", "'", '"', "`") if sql.startswith(o, i)), None)
        if opener is None:
            i += 1
            continue
        closer, what = closers[opener]
        j = i + len(opener)
        while True:
            end = sql.find(closer, j)
            if end < 0:
                line = sql.count("\n", 0, i) + 1
                column = i - (sql.rfind("\n", 0, i) + 1) + 1
                return f"{what} is not closed", line, column
            if len(closer) == 1 and sql.startswith(closer * 2, end):  # '' inside a string
                j = end + 2
                continue
            i = end + len(closer)
            break
    return None
