"""Checks the command line makes before anything runs, and its errors in its own terms.

Output paths (a file's folder exists and is writable, a folder can be made), the flags
an error names instead of Python's parameter names (:func:`name_flags`,
:func:`cli_wording`), and one line for a package that is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from dialects import InvalidArgumentError, MissingDependencyError
from dialects.optional import install_hint
from sqlfeed.io import redact_url
from sqlfeed.io.urlhints import scheme_hint

# -- output paths, checked before anything runs ------------------------------------------


def check_output_file(path: str, flag: str, *, overwrite: bool = False) -> Path:
    """Check that the file ``path`` (given as ``flag``) can be written.

    Its folder exists and is writable, and it is not a folder (nor an existing file, unless
    ``overwrite``).

    Raises:
        InvalidArgumentError: it cannot; the message says why and what to do.
    """
    target = Path(path)
    if not str(path).strip():
        raise InvalidArgumentError(f"{flag} needs a file name")
    if target.is_dir():
        raise InvalidArgumentError(f"{flag} {path} is a folder: give a file name")
    if target.exists() and not overwrite:
        raise InvalidArgumentError(f"{flag} {path} exists; pass --overwrite to replace it")
    _check_writable_folder(target.parent, flag, path, create=False)
    return target


def check_output_folder(path: str, flag: str) -> Path:
    """Check that the folder ``path`` (given as ``flag``) exists or can be made.

    It is not a file, and its nearest existing ancestor is a writable folder.

    Raises:
        InvalidArgumentError: it cannot.
    """
    target = Path(path)
    if not str(path).strip():
        raise InvalidArgumentError(f"{flag} needs a folder name")
    if target.exists() and not target.is_dir():
        raise InvalidArgumentError(f"{flag} {path} is a file, not a folder")
    _check_writable_folder(target, flag, path, create=True)
    return target


def _check_writable_folder(folder: Path, flag: str, given: str, *, create: bool) -> None:
    existing = folder if str(folder) else Path(".")
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != folder and not create:
        raise InvalidArgumentError(
            f"{flag} {given}: the folder {folder} does not exist; create it first"
        )
    if not existing.is_dir():
        raise InvalidArgumentError(f"{flag} {given}: {existing} is a file, not a folder")
    try:  # an unnamed file (O_TMPFILE on Linux): nothing shows, nothing is left behind
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{flag} {given}: cannot write in the folder {existing} ({err.strerror or err})"
        ) from None


# -- errors in the command line's own terms ----------------------------------------------

_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_]\w*)=('([^']*)'|\"([^\"]*)\"|\.\.\.|[^\s,;:)]+)?")


def name_flags(parser: argparse.ArgumentParser, **aliases: str) -> None:
    """Let errors raised under this command name its flags, not Python's parameter names.

    Each option's destination (``lease_ttl``) maps to its long flag (``--lease-ttl``);
    ``aliases`` add the library's own names and phrases (``top_k="--top-k"``,
    ``shard rows="--shard-rows"``, passed through a dict). See :func:`cli_wording`.
    """
    names: dict[str, str] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in ("help", "version"):
            names.setdefault(action.dest, longs[0])
    names.update(aliases)
    parser.set_defaults(flag_names=names)


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


# -- database URLs, before anything connects ----------------------------------------------

_NATIVE = ("duckdb", "dataset", "iceberg", "delta", "memory")
"""Schemes sqlfeed opens itself (DuckDB files, shardset datasets, lakehouse tables), not through
SQLAlchemy."""


def db_url(text: str) -> str:
    """``--db`` (argparse ``type=``): a URL whose kind SQLAlchemy knows, else the fix.

    A scheme SQLAlchemy spells otherwise (``postgres://``) gets a did-you-mean, one whose
    dialect is a package of its own (``snowflake://``) the package to install
    (:func:`~sqlfeed.io.urlhints.scheme_hint`); anything else is left to the command
    (which says what is wrong with it).

    Raises:
        argparse.ArgumentTypeError: the scheme is one of those.
    """
    backend = text.strip().partition(":")[0].partition("+")[0].lower()
    if "://" not in text or backend in _NATIVE:
        return text
    fix = scheme_hint(text)
    if fix is not None:
        raise argparse.ArgumentTypeError(f"{redact_url(text)}: {fix}")
    return text


_URL_INSTEAD = {"psycopg2": "postgresql+psycopg://", "MySQLdb": "mysql+pymysql://"}
"""The drivers SQLAlchemy's plain ``postgresql://`` and ``mysql://`` ask for, which no
extra installs: the URL of the driver that the extra (:data:`dialects.optional.EXTRAS`)
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


@contextlib.contextmanager
def missing_package(what: str) -> Iterator[None]:
    """Inside: a package that is not installed (a URL's driver, say) is one error line.

    One :class:`~dialects.errors.MissingDependencyError` line, ``what`` first (a flag and
    its value), then :func:`missing_module_hint`.
    """
    try:
        yield
    except MissingDependencyError:
        raise
    except ImportError as err:
        raise MissingDependencyError(f"{what}: {missing_module_hint(err)}") from None
