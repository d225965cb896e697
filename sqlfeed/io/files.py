"""File URLs (``duckdb:``, ``sqlite:``, ``dataset:``): the path they name, and missing files.

Every file URL follows SQLAlchemy's convention: after ``scheme://`` comes an (empty) host
and a slash, then the path, so ``duckdb:///data.duckdb`` is ``data.duckdb`` relative to
the current folder and ``duckdb:////srv/data.duckdb`` is the absolute ``/srv/data.duckdb``
(as ``sqlite:///rel.db`` and ``sqlite:////abs/path.db``). Reading never creates a
database: :func:`require_file` refuses a path with nothing there, naming it.
"""

from __future__ import annotations

import os

from sqlfeed.dialects import InvalidArgumentError

__all__ = ["MEMORY", "require_file", "url_path"]

MEMORY = ":memory:"
"""The path of an in-memory database (``duckdb://``, ``sqlite://``)."""


def url_path(url: str, scheme: str) -> str:
    """The path a ``scheme:`` URL names (its ``?query`` part left out).

    Args:
        url: ``scheme://`` (in memory), ``scheme:///relative/path``,
            ``scheme:////absolute/path``, optionally followed by ``?options``.
        scheme: the URL scheme (``duckdb``, ``dataset``); matched case-insensitively.

    Returns:
        The path, or :data:`MEMORY` for ``scheme://`` and ``scheme:///:memory:``.

    Raises:
        InvalidArgumentError: the URL is not of that form (``duckdb:/x``,
            ``duckdb://x``): the message shows the relative and the absolute form.
    """
    head, sep, rest = url.partition("://")
    rest = rest.split("?", 1)[0]
    if head.lower() == scheme and sep and (not rest or rest.startswith("/")):
        return rest[1:] or MEMORY
    written = url.split(":", 1)[1].split("?", 1)[0].lstrip("/") if ":" in url else url
    raise InvalidArgumentError(
        f"{url!r} is not a {scheme} URL: write {scheme}:///{written} for the path "
        f"{written!r} relative to the current folder, or {scheme}:////{written} for "
        f"/{written} (three slashes before a relative path, four before an absolute one)"
    )


def require_file(path: str, url: str, what: str, *, folder: bool = False) -> None:
    """Refuse a ``path`` with no file (or ``folder``) there: reading never creates one.

    Args:
        path: the path the URL names.
        url: the URL, for the message.
        what: what should be there (``DuckDB database``, ``SQLite database``, ``dataset``).
        folder: a folder is expected, not a file.

    Raises:
        InvalidArgumentError: nothing of that kind at ``path``; the message names the path
            as the URL resolved it, and the absolute form when that one exists.
    """
    exists = os.path.isdir(path) if folder else os.path.isfile(path)
    if exists:
        return
    resolved = os.path.abspath(path)
    hint = "check the path"
    if not os.path.isabs(path) and os.path.exists("/" + path):
        scheme = url.partition(":")[0]
        hint = f"for the absolute path /{path}, write {scheme}:////{path} (four slashes)"
    elif not os.path.isabs(path) and "://" in url:
        hint = "check the path (three slashes before a relative path, four before an absolute one)"
    raise InvalidArgumentError(
        f"no {what} at {resolved} (from {url}): reading never creates one; {hint}"
    )
