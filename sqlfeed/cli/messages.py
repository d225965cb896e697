"""What the command line says besides results: errors in its own terms, and warnings.

An error names the command's flags instead of Python's parameter names
(:func:`cli_wording`, with the names :func:`sqlfeed.cli.parsers.name_flags` recorded), a
package that is not installed is one line saying what to install
(:func:`missing_module_hint`), and warnings wait until the command succeeds
(:func:`warn`). Cheap to import: :mod:`sqlfeed.cli.run` says a refusal with it before the
command's own module is imported.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import TextIO

from sqlfeed.dialects.optional import install_hint

__all__ = ["cli_wording", "drop_warnings", "flush_warnings", "missing_module_hint", "warn"]

_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_]\w*)=('([^']*)'|\"([^\"]*)\"|\.\.\.|[^\s,;:)]+)?")


def cli_wording(message: str, names: Mapping[str, str]) -> str:
    """``message`` with the Python names that ``names`` maps written as the CLI flags.

    ``name=value`` becomes ``--flag value``; a name with an underscore becomes its flag
    wherever it stands; a message that starts with a name or phrase starts with its flag.

    >>> cli_wording("lease_ttl must be > 0; use method='hash'", {"lease_ttl": "--lease-ttl",
    ...     "method": "--method"})
    '--lease-ttl must be > 0; use --method hash'
    """
    if not names:
        return message

    def assignment(match: re.Match[str]) -> str:
        flag = names.get(match.group(1))
        if flag is None:
            return match.group(0)
        value = next((g for g in (match.group(3), match.group(4)) if g is not None), None)
        value = value if value is not None else match.group(2)
        return flag if value in (None, "...", "True") else f"{flag} {value}"

    message = _ASSIGNMENT.sub(assignment, message)
    message = re.sub(r"(--[\w-]+), \1(?![\w-])", r"\1", message)  # "key=..., --key"
    message = re.sub(r"(--[\w-]+) \(\1\)", r"\1", message)  # "x=True (--x)"
    for name, flag in names.items():
        if "_" in name and " " not in name:
            message = re.sub(rf"(?<![\w-]){re.escape(name)}(?!\w)", flag, message)
    for name in sorted(names, key=len, reverse=True):
        if message.startswith(f"{name} "):
            return names[name] + message[len(name) :]
    return message


_URL_INSTEAD = {"psycopg2": "postgresql+psycopg://", "MySQLdb": "mysql+pymysql://"}
"""The drivers SQLAlchemy's plain ``postgresql://`` and ``mysql://`` ask for, which no
extra installs: the URL of the driver that the extra (:data:`sqlfeed.dialects.optional.EXTRAS`)
installs."""


def missing_module_hint(err: ImportError) -> str:
    """One line for a package that is not installed: which, and what to install or use."""
    module = (err.name or "").split(".")[0]
    if not module:
        return f"a Python package is missing: {' '.join(str(err).split())}"
    hint = install_hint(module)
    if module in _URL_INSTEAD:
        hint = f"use a {_URL_INSTEAD[module]} URL ({hint})"
    return f"the Python package {module} is not installed: {hint}"


_WARNINGS: list[str] = []


def warn(message: str) -> None:
    """A ``sqlfeed: warning: MESSAGE`` line for stderr, shown once the command succeeds.

    Or at :func:`flush_warnings`: a failed command prints its one error line alone.
    """
    _WARNINGS.append(message)


def flush_warnings(stream: TextIO | None = None) -> None:
    """Print the warnings so far (a long-running command does before it waits)."""
    for message in _WARNINGS:
        print(f"sqlfeed: warning: {message}", file=stream or sys.stderr)
    _WARNINGS.clear()


def drop_warnings() -> None:
    """Forget the warnings so far (the command failed: its error says what matters)."""
    _WARNINGS.clear()
