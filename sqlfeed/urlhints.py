"""The fix for a database URL whose scheme SQLAlchemy does not know.

``postgres://`` (SQLAlchemy spells it ``postgresql://``), a misspelt scheme, or a dialect
that comes in a package of its own (``snowflake://``): :func:`scheme_hint` says what to
write or install, for :func:`sqlfeed.connect` and the command line's ``--db`` alike.
"""

from __future__ import annotations

import difflib

import sqlalchemy

__all__ = ["scheme_hint"]

_RENAMED = {
    "postgres": "postgresql",
    "pg": "postgresql",
    "pgsql": "postgresql",
    "psql": "postgresql",
    "sqlite3": "sqlite",
    "maria": "mariadb",
}
"""URL schemes people write that SQLAlchemy spells otherwise."""
_PLUGINS = {
    "snowflake": "snowflake-sqlalchemy",
    "bigquery": "sqlalchemy-bigquery",
    "clickhouse": "clickhouse-sqlalchemy",
    "trino": "'trino[sqlalchemy]'",
    "databricks": "databricks-sqlalchemy",
    "hive": "'pyhive[hive]'",
    "redshift": "sqlalchemy-redshift",
    "presto": "'pyhive[presto]'",
}
"""SQLAlchemy dialects that come in a package of their own: the package to install."""
_KNOWN = ("postgresql", "mysql", "mariadb", "sqlite", "oracle", "mssql", "duckdb")
_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
"""The driver sqlfeed's extras install, in the URL a did-you-mean suggests."""


def scheme_hint(url: str) -> str | None:
    """What to write or install when SQLAlchemy has no dialect for ``url``'s scheme.

    None when it has one, or when nothing better can be said (the URL's own error then).

    >>> scheme_hint("postgres://me:pw@db/x")
    "SQLAlchemy has no 'postgres' dialect; did you mean postgresql+psycopg://me:***@db/x?"
    >>> scheme_hint("snowflake://me@account/db")
    "SQLAlchemy's snowflake dialect is a package of its own: pip install snowflake-sqlalchemy"
    """
    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.get_dialect()
        return None
    except sqlalchemy.exc.NoSuchModuleError:
        pass
    except (sqlalchemy.exc.ArgumentError, ValueError, ImportError):
        return None
    backend = parsed.drivername.partition("+")[0].lower()
    if backend in _PLUGINS:
        return (
            f"SQLAlchemy's {backend} dialect is a package of its own: pip install "
            f"{_PLUGINS[backend]}"
        )
    better = _RENAMED.get(backend)
    if better is None:
        close = difflib.get_close_matches(backend, _KNOWN, n=1, cutoff=0.6)
        better = close[0] if close else None
    if better is None:
        return None
    rest = parsed.render_as_string(hide_password=True).partition("://")[2]
    return f"SQLAlchemy has no {backend!r} dialect; did you mean {_DRIVERS.get(better, better)}://{rest}?"
