"""The command's SELECT, checked before its handler loads anything heavy.

A command that reads a SELECT says so in its parser (``set_defaults(precheck=...)``,
:data:`PRECHECKS`): :func:`precheck` then reads the SQL argument (itself, ``-`` for stdin,
``@file.sql``), parses it for the engine of ``--db`` (or ``--dialect``) and, where the
command refuses an unstable query, checks it. Bad SQL is refused in one line before the
handler connects, loads a model (``predict``, ``evaluate``: TensorFlow takes seconds to
import) or plans. The SQL text read replaces the argument, so the handler reads it again
from ``args.sql`` as it is (stdin is read once).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from sqlfeed.dialects import Dialect, InvalidArgumentError, dialect_for, get_dialect
from sqlfeed.sql import check_stable, parse

__all__ = ["PRECHECKS", "precheck", "read_sql"]

PRECHECKS = ("select", "stable_select", "stable_unless_allowed")
"""What a parser may ask for: the SELECT parsed; parsed and refused when unstable (as
``train`` and ``evaluate`` refuse it); that unless ``--allow-unstable`` (``plan``,
``export``, ``job create``)."""


def read_sql(argument: str, stdin: TextIO | None = None) -> str:
    """The SQL text of a command-line argument: itself, ``-`` for stdin, ``@path`` for a file.

    Raises:
        InvalidArgumentError: the file cannot be read, or is not UTF-8 text.
    """
    if argument == "-":
        return (stdin or sys.stdin).read()
    if argument.startswith("@"):
        path = Path(argument[1:])
        try:
            return path.read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidArgumentError(f"cannot read SQL from {path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"cannot read SQL from {path}: not UTF-8 text") from None
    return argument


def precheck(args: argparse.Namespace) -> None:
    """Check the command's SELECT as its handler will, before the handler runs.

    Nothing when the command takes no SELECT, or was given none (a saved ``--plan``,
    ``--finish``, ``evaluate --predictions``: the handler says what is missing or extra).

    Raises:
        SqlfeedError: the SQL cannot be read or parsed, is not one read-only SELECT, or is
            unstable where the command refuses that.
    """
    what = getattr(args, "precheck", None)
    text = getattr(args, "sql", None)
    if what is None or text is None or _given(args, "plan", "finish", "predictions"):
        return
    sql = read_sql(text)
    args.sql = sql
    parsed = parse(sql, _engine(args), allow_side_effects=_given(args, "allow_side_effects"))
    if what == "stable_select" or (what == "stable_unless_allowed" and not args.allow_unstable):
        check_stable(parsed, orders=False)


def _given(args: argparse.Namespace, *names: str) -> bool:
    return any(getattr(args, name, None) not in (None, False) for name in names)


def _engine(args: argparse.Namespace) -> Dialect:
    if getattr(args, "db", None):
        return dialect_for(args.db)
    return get_dialect(getattr(args, "dialect", None) or "duckdb")
