"""Helpers for SQL text that is embedded as written (never re-rendered by sqlglot)."""

from __future__ import annotations

__all__ = ["unused_name"]


def unused_name(text: str, stem: str) -> str:
    """A name that ``text`` does not contain (case-insensitively).

    ``stem``, else ``stem`` followed by the first number that is free. It marks where a
    query's own text goes in SQL rendered around it.

    >>> unused_name("SELECT 1", "_q")
    '_q'
    >>> unused_name("SELECT _Q, _q1 FROM t", "_q")
    '_q2'
    """
    name, number = stem, 0
    while name.casefold() in text.casefold():
        number += 1
        name = f"{stem}{number}"
    return name
