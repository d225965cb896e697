"""``connect``: a URL, engine or connection to the :class:`Source` of its engine family.

Also the scheme registry (:func:`register_scheme`) through which layers above ``io``
plug in sources of their own without ``io`` importing them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from sqlfeed.dialects import Dialect, InvalidArgumentError, dialect_for, get_dialect
from sqlfeed.io.duckdb import DuckDBSource, is_duckdb_connection, make_duckdb_file, open_duckdb
from sqlfeed.io.mysql import MySQLSource
from sqlfeed.io.postgres import PostgresSource
from sqlfeed.io.source import Source
from sqlfeed.io.sqlalchemy import SQLAlchemySource
from sqlfeed.io.sqlite import SQLiteSource
from sqlfeed.urlsecrets import check_url_secrets

__all__ = ["connect", "connect_output", "register_scheme"]

_SCHEMES: dict[str, Callable[[str], Source]] = {}
SCHEME_HOMES = {"dataset": "sqlfeed.shards", "iceberg": "sqlfeed.lake", "delta": "sqlfeed.lake"}
"""The package that registers each scheme of the layers above.

Imported when a URL of it is opened first (a Ray or Dask task, a DataLoader worker, a script
importing only ``sqlfeed.torch`` have not imported it).
"""

_FAMILIES: dict[str, type[SQLAlchemySource]] = {
    "postgres": PostgresSource,
    "mysql": MySQLSource,
    "sqlite": SQLiteSource,
}
"""The SQLAlchemy source class of each dialect with reader specifics; others are generic."""

_NATIVE: dict[str, Callable[[str], Source]] = {"duckdb": open_duckdb}
"""The dialects whose URLs a source of their own opens, without SQLAlchemy."""


def register_scheme(scheme: str, opener: Callable[[str], Source]) -> None:
    """Let :func:`connect` open ``scheme:...`` URLs with ``opener(url)``.

    Layers above ``io`` plug their sources in this way (``sqlfeed.shards`` registers
    ``dataset:``), so ``io`` never imports them.
    """
    _SCHEMES[scheme.lower()] = opener


def connect(
    target: Any = None, *, dialect: str | None = None, readers: Sequence[str] | None = None
) -> Source:
    """A :class:`Source` for ``target``.

    Args:
        target: ``None`` or ``"duckdb://"`` (an in-memory DuckDB, the embedded default),
            ``"duckdb:///relative.duckdb"`` or ``"duckdb:////absolute/path.duckdb"`` (opened
            read-only, so many processes read it at once; see :mod:`sqlfeed.io.duckdb`),
            ``"dataset:///relative/folder"`` (a shardset dataset as the view ``dataset``),
            a :class:`~sqlfeed.shards.datasets.Dataset`, any SQLAlchemy URL
            (``postgresql+psycopg://...``, ``mysql+pymysql://...``, ``sqlite:///file.db``),
            a DuckDB connection (read through as it is), or a SQLAlchemy engine. File URLs
            follow SQLAlchemy's slashes (:mod:`sqlfeed.io.files`).
        dialect: force the dialect (for URLs whose backend name is not a dialect name).
        readers: the readers to read with, in order (e.g. ``["copy", "psycopg"]`` on
            PostgreSQL; see :attr:`Source.readers <sqlfeed.io.Source.readers>`): beside
            the engine's environment variable (``SQLFEED_POSTGRES_READERS``,
            ``SQLFEED_MYSQL_READERS``, ``SQLFEED_SQLITE_READERS``), which this overrides.

    Raises:
        EngineError: the database cannot be reached.
        InvalidArgumentError: a file URL names no file (reading never creates one), or is
            malformed (a password's ``@`` not percent-encoded); ``readers`` names a reader
            the engine does not have.
        MissingDependencyError: the URL's driver is not installed.
        UnknownDialectError: the target's kind is not known.
    """
    source = _open(target, dialect)
    if readers is not None:
        source.use_readers(readers)
    return source


def _open(target: Any, dialect: str | None) -> Source:
    if isinstance(target, Source):
        return target
    if target is None:
        target = "duckdb://"
    if type(target).__name__ == "Dataset" and hasattr(target, "shardsets"):
        return target.source()  # type: ignore[no-any-return]
    if isinstance(target, str):
        url = target.strip()
        check_url_secrets(url)
        scheme = url.partition(":")[0].lower()
        if scheme not in _SCHEMES and scheme in SCHEME_HOMES:
            importlib.import_module(SCHEME_HOMES[scheme])  # it registers its schemes
        opener = _SCHEMES.get(scheme)
        if opener is not None:
            return opener(url)
        engine_dialect = get_dialect(dialect) if dialect else dialect_for(url)
        native = _NATIVE.get(engine_dialect.name)
        if native is not None:
            return native(url)
        return _family(engine_dialect).open(url, engine_dialect)
    engine_dialect = get_dialect(dialect) if dialect else dialect_for(target)
    module = type(target).__module__ or ""
    if is_duckdb_connection(target):
        return DuckDBSource(target, owned=False, label="duckdb connection")
    if hasattr(target, "raw_connection") and hasattr(target, "dialect"):
        return _family(engine_dialect).wrap(target, engine_dialect)
    raise InvalidArgumentError(
        f"cannot read from a {module}.{type(target).__name__}: pass a URL, a SQLAlchemy "
        "engine or a DuckDB connection"
    )


def connect_output(target: Any) -> Source:
    """:func:`connect` for a database written to.

    A SQLite or DuckDB file named by the URL that does not exist yet is made first (reading
    never makes one).
    """
    if isinstance(target, str) and _SCHEMES.get(target.partition(":")[0].lower()) is None:
        engine_dialect = dialect_for(target.strip())
        make = _MAKE_FILE.get(engine_dialect.name)
        if make is not None:
            make(target.strip())
    return connect(target)


_MAKE_FILE: dict[str, Callable[[str], None]] = {
    "sqlite": SQLiteSource.make_file,
    "duckdb": make_duckdb_file,
}
"""How a file database named by a URL is made when missing."""


def _family(engine_dialect: Dialect) -> type[SQLAlchemySource]:
    return _FAMILIES.get(engine_dialect.name, SQLAlchemySource)
