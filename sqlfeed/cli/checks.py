"""Checks the command line makes before anything runs, and its errors in its own terms.

Output paths (a file's folder exists and is writable, a folder can be made), the flags
an error names instead of Python's parameter names (:func:`name_flags`,
:func:`cli_wording`), and one line for a package that is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sqlfeed.cli.messages import cli_wording as cli_wording
from sqlfeed.cli.messages import missing_module_hint as missing_module_hint
from sqlfeed.cli.parsers import DB_VARIABLE as DB_VARIABLE
from sqlfeed.cli.parsers import add_db as add_db
from sqlfeed.cli.parsers import name_flags as name_flags
from sqlfeed.dialects import InvalidArgumentError, MissingDependencyError
from sqlfeed.urlhints import scheme_hint
from sqlfeed.urlsecrets import check_url_secrets, redact_url, resolve_url

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


# -- database URLs, before anything connects ----------------------------------------------

_NATIVE = ("duckdb", "dataset", "iceberg", "delta", "memory")
"""Schemes sqlfeed opens itself (DuckDB files, shardset datasets, lakehouse tables), not through
SQLAlchemy."""


def db_url(text: str) -> str:
    """``--db`` and every URL option (argparse ``type=``): the URL, checked before it is used.

    ``env:NAME`` and ``@PATH`` are read first (:func:`~sqlfeed.urlsecrets.resolve_url`:
    the password stays off the command line). A scheme SQLAlchemy spells otherwise
    (``postgres://``) gets a did-you-mean, one whose dialect is a package of its own
    (``snowflake://``) the package to install (:func:`~sqlfeed.urlhints.scheme_hint`);
    anything else is left to the command (which says what is wrong with it). Every message
    shows the URL without its password.

    Raises:
        argparse.ArgumentTypeError: the variable or file holds no URL, or the scheme is one
            of those.
    """
    try:
        text = resolve_url(text, flag="")
        check_url_secrets(text)
    except InvalidArgumentError as err:
        raise argparse.ArgumentTypeError(str(err).strip()) from None
    backend = text.strip().partition(":")[0].partition("+")[0].lower()
    if "://" not in text or backend in _NATIVE:
        return text
    fix = scheme_hint(text)
    if fix is not None:
        raise argparse.ArgumentTypeError(f"{redact_url(text)}: {fix}")
    return text


@contextlib.contextmanager
def missing_package(what: str) -> Iterator[None]:
    """Inside: a package that is not installed (a URL's driver, say) is one error line.

    One :class:`~sqlfeed.dialects.errors.MissingDependencyError` line, ``what`` first (a flag and
    its value), then :func:`missing_module_hint`.
    """
    try:
        yield
    except MissingDependencyError:
        raise
    except ImportError as err:
        raise MissingDependencyError(f"{what}: {missing_module_hint(err)}") from None
