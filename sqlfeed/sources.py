"""Sources: where a query runs. ``connect`` turns a URL, engine or connection into one.

A :class:`Source` knows its dialect and runs small queries (a count, the output columns).
Driver errors never escape as they are: they become a one-line :class:`EngineError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dialects import Dialect, EngineError, InvalidArgumentError, dialect_for, get_dialect
from sqlfeed.rewrite import ParsedQuery, count_sql, parse, schema_sql

if TYPE_CHECKING:
    import duckdb
    import sqlalchemy

__all__ = ["Source", "connect"]


class Source:
    """A database to run queries on: DuckDB (native) or anything SQLAlchemy reaches."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        duckdb_connection: duckdb.DuckDBPyConnection | None = None,
        engine: sqlalchemy.Engine | None = None,
        owned: bool = False,
        label: str = "",
    ) -> None:
        self.dialect = dialect
        self._duckdb = duckdb_connection
        self._engine = engine
        self._owned = owned
        self.label = label or dialect.name

    def __repr__(self) -> str:
        return f"Source({self.label!r}, dialect={self.dialect.name!r})"

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the connection (only when this source opened it)."""
        if not self._owned:
            return
        if self._duckdb is not None:
            self._duckdb.close()
        if self._engine is not None:
            self._engine.dispose()

    def parse(self, sql: str | ParsedQuery) -> ParsedQuery:
        """Parse and validate ``sql`` in this source's dialect."""
        return parse(sql, self.dialect)

    def scalar(self, sql: str, *, what: str = "query") -> Any:
        """Run ``sql`` and return the first column of its first row."""
        with self._cursor(sql, what) as (_, rows):
            row = next(rows, None)
        return None if row is None else row[0]

    def output_columns(self, query: str | ParsedQuery) -> list[str]:
        """The query's output column names as the engine reports them (runs it with LIMIT 0)."""
        with self._cursor(schema_sql(self.parse(query)), "schema query") as (names, _):
            return names

    def count(self, query: str | ParsedQuery, *, columns: list[str] | None = None) -> int:
        """The number of rows the query returns."""
        parsed = self.parse(query)
        value = self.scalar(count_sql(parsed, columns=columns), what="count query")
        return int(value or 0)

    @contextmanager
    def _cursor(self, sql: str, what: str) -> Iterator[tuple[list[str], Iterator[tuple[Any, ...]]]]:
        try:
            if self._duckdb is not None:
                result = self._duckdb.execute(sql)
                names = [d[0] for d in result.description or []]
                yield names, iter(result.fetchall())
                return
            assert self._engine is not None
            with self._engine.connect() as conn:
                cursor = conn.exec_driver_sql(sql)
                names = list(cursor.keys())
                yield names, iter(cursor.fetchall())
        except EngineError:
            raise
        except Exception as err:  # any driver's error class
            if not _is_driver_error(err):
                raise
            raise EngineError(
                f"{self.dialect.name} failed running the {what}: {_driver_message(err)}"
            ) from None


def connect(target: Any = None, *, dialect: str | None = None) -> Source:
    """A :class:`Source` for ``target``.

    Args:
        target: ``None`` or ``"duckdb://"`` (an in-memory DuckDB, the embedded default),
            ``"duckdb:///path.duckdb"``, any SQLAlchemy URL (``postgresql+psycopg://...``,
            ``mysql+pymysql://...``, ``sqlite:///file.db``), a DuckDB connection, or a
            SQLAlchemy engine.
        dialect: force the dialect (for URLs whose backend name is not a dialect name).

    Raises:
        EngineError: the database cannot be reached.
        UnknownDialectError: the target's kind is not known.
    """
    if target is None:
        target = "duckdb://"
    if isinstance(target, str):
        url = target.strip()
        engine_dialect = get_dialect(dialect) if dialect else dialect_for(url)
        if engine_dialect.name == "duckdb":
            return _duckdb_source(url, engine_dialect)
        return _sqlalchemy_source(url, engine_dialect)
    engine_dialect = get_dialect(dialect) if dialect else dialect_for(target)
    module = type(target).__module__ or ""
    if module.split(".")[0] in ("duckdb", "_duckdb"):
        return Source(engine_dialect, duckdb_connection=target, label="duckdb connection")
    if hasattr(target, "connect") and hasattr(target, "dialect"):
        _install_functions(target, engine_dialect)
        return Source(engine_dialect, engine=target, label=str(getattr(target, "url", "")))
    raise InvalidArgumentError(
        f"cannot read from a {module}.{type(target).__name__}: pass a URL, a SQLAlchemy "
        "engine or a DuckDB connection"
    )


def _duckdb_source(url: str, engine_dialect: Dialect) -> Source:
    import duckdb

    path = url.partition("://")[2] if "://" in url else url
    path = path[1:] if path.startswith("/") else path  # duckdb:///x.duckdb -> x.duckdb
    path = path.split("?", 1)[0] or ":memory:"
    try:
        conn = duckdb.connect(path)
    except duckdb.Error as err:
        raise EngineError(f"cannot open DuckDB database {path!r}: {_driver_message(err)}") from None
    return Source(engine_dialect, duckdb_connection=conn, owned=True, label=f"duckdb:{path}")


def _sqlalchemy_source(url: str, engine_dialect: Dialect) -> Source:
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, pool_pre_ping=True)
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as err:
        raise InvalidArgumentError(f"bad database URL {_redact(url)!r}: {err}") from None
    except ImportError as err:
        raise EngineError(
            f"the driver for {_redact(url)!r} is not installed ({err.name or err}); "
            "install sqlfeed[postgres] or sqlfeed[mysql], or the driver the URL names"
        ) from None
    _install_functions(engine, engine_dialect)
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.DBAPIError as err:
        engine.dispose()
        raise EngineError(f"cannot connect to {_redact(url)}: {_driver_message(err)}") from None
    return Source(engine_dialect, engine=engine, owned=True, label=_redact(url))


def _install_functions(engine: Any, engine_dialect: Dialect) -> None:
    """Register the dialect's functions on every new DB-API connection of ``engine``."""
    import sqlalchemy

    if type(engine_dialect).register_functions is Dialect.register_functions:
        return

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        engine_dialect.register_functions(dbapi_connection)

    sqlalchemy.event.listen(engine, "connect", on_connect)


def _is_driver_error(err: Exception) -> bool:
    module = type(err).__module__ or ""
    return module.split(".")[0] in (
        "sqlalchemy", "duckdb", "_duckdb", "psycopg", "psycopg2", "pymysql", "MySQLdb",
        "sqlite3", "adbc_driver_manager", "connectorx",
    )  # fmt: skip


def _driver_message(err: BaseException) -> str:
    """The driver's own message, on one line, without SQLAlchemy's boilerplate."""
    inner = getattr(err, "orig", None) or err
    args: tuple[Any, ...] = tuple(getattr(inner, "args", ()))
    if type(inner).__module__.split(".")[0] == "pymysql" and len(args) >= 2:
        text = str(args[1])
    else:
        text = str(inner)
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", text)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(inner).__name__


def _redact(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)
