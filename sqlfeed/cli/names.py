"""The names the command line takes beside the SQL, read as names before a command runs.

``--into``, ``--predictions`` (tables), ``--key``, ``--keep``, ``--label``,
``--watermark`` (columns), ``--schema``/``--scratch`` (a schema) and ``--job`` are read by
:mod:`sqlfeed.sql.names`'s one rule (a plain name, or a quoted part taken verbatim), never
as SQL: a comment, a semicolon, a space or a third part is refused in one line naming the
option (exit 2), before anything connects. Column names are handed to the command without
their quotes; a table name as given (the library reads it by the same rule, in the
engine's dialect); a job name as given.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sqlfeed.sql.names import column_name, column_names, job_name, name_parts, schema_name

__all__ = ["NAME_OPTIONS", "check_names"]


def _table(text: str, flag: str) -> str:
    name_parts(text, flag)
    return text.strip()


def _columns(text: str, flag: str) -> list[str]:
    return column_names(text, flag)


NAME_OPTIONS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "into": ("--into", _table),
    "predictions": ("--predictions", _table),
    "key": ("--key", column_name),
    "keep": ("--keep", _columns),
    "label": ("--label", column_name),
    "watermark": ("--watermark", column_name),
    "schema": ("--schema", schema_name),
    "scratch": ("--scratch", schema_name),
    "job": ("--job", job_name),
}
"""Parsed argument (``dest``) -> the flag and the reader of its value (a text; a list of
texts, or of lists of texts, is read item by item, keeping its shape)."""

_LISTS = {("predict", "key")}
"""(command, dest) whose one text is a comma-separated list (``predict --key a,b``)."""


def check_names(args: argparse.Namespace) -> None:
    """Read every name option ``args`` holds, in place (see the module's docstring).

    Raises:
        InvalidArgumentError: a value that is not such a name, in one line.
    """
    command = getattr(args, "command", None)
    for dest, (flag, read) in NAME_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool):
            continue
        if (command, dest) in _LISTS:
            read = _columns
        setattr(args, dest, _read(value, flag, read))


def _read(value: Any, flag: str, read: Callable[[Any, str], Any]) -> Any:
    if isinstance(value, list):  # repeated, or split at commas already (--key a,b --key c)
        return [_read(item, flag, read) for item in value]
    return read(value, flag)
