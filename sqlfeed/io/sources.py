"""Sources: where a query runs. ``connect`` turns a URL, engine or connection into one.

A :class:`Source` knows its dialect, runs small queries (a count, the output columns),
derives a query's Arrow schema once, and streams a query's rows as record batches
(see :mod:`sqlfeed.io.arrow`). Driver errors never escape as they are: they become a
one-line :class:`EngineError`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dialects import (
    Dialect,
    EngineError,
    InvalidArgumentError,
    MissingDependencyError,
    UnsupportedError,
    dialect_for,
    get_dialect,
)
from sqlfeed.io import arrow as readers
from sqlfeed.sql import ParsedQuery, count_sql, parse, sample_sql, schema_sql

if TYPE_CHECKING:
    import duckdb
    import sqlalchemy

__all__ = ["Source", "connect"]

SCHEMA_SAMPLE_ROWS = 1_000
"""Rows read to infer the Arrow types a driver does not report."""


class Source:
    """A database to run queries on. Made by :func:`connect`; safe to share across threads."""

    dialect: Dialect
    label: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections this source opened."""

    def parse(self, sql: str | ParsedQuery) -> ParsedQuery:
        """Parse and validate ``sql`` in this source's dialect."""
        return parse(sql, self.dialect)

    # -- small queries --------------------------------------------------------------------

    def rows(self, sql: str, *, what: str = "query") -> list[tuple[Any, ...]]:
        """All rows of a small query (counts, bounds, catalog look-ups)."""
        with self._errors(what):
            return self._rows(sql)

    def scalar(self, sql: str, *, what: str = "query") -> Any:
        """The first column of the first row of a small query."""
        result = self.rows(sql, what=what)
        return result[0][0] if result else None

    def execute(self, sql: str, *, what: str = "statement") -> None:
        """Run a statement that returns no rows (sqlfeed's own scratch tables only)."""
        with self._errors(what):
            self._execute(sql)

    def output_columns(self, query: str | ParsedQuery) -> list[str]:
        """The query's output column names as the engine reports them (a LIMIT 0 query)."""
        with self._errors("schema query"):
            names, _ = self._describe(schema_sql(self.parse(query)))
        return names

    def text_columns(self, query: str | ParsedQuery) -> list[str]:
        """Output columns whose type the engine cannot hash, to hash through their text.

        Only PostgreSQL has such types (json, xml, point, money, ...); elsewhere none.
        """
        if self.dialect.name != "postgres":
            return []
        with self._errors("schema query"):
            return self._unhashable(schema_sql(self.parse(query)))

    def _unhashable(self, sql: str) -> list[str]:
        return []

    def count(self, query: str | ParsedQuery, *, columns: list[str] | None = None) -> int:
        """The number of rows the query returns."""
        parsed = self.parse(query)
        return int(self.scalar(count_sql(parsed, columns=columns), what="count query") or 0)

    # -- Arrow ----------------------------------------------------------------------------

    def schema(self, query: str | ParsedQuery) -> pa.Schema:
        """The Arrow schema of the query's rows, derived once for all its partitions.

        From the driver's column types where it reports them; the rest from a sample of
        rows (a column with no value in the sample is read as text).
        """
        parsed = self.parse(query)
        with self._errors("schema query"):
            names, typed = self._describe(schema_sql(parsed))
            if typed is not None and not any(pa.types.is_null(f.type) for f in typed):
                return typed
            sample = self._rows(sample_sql(parsed, SCHEMA_SAMPLE_ROWS, columns=names))
        inferred = readers.infer_schema(names, sample)
        schema = readers.merge_schemas(typed, inferred) if typed is not None else inferred
        return pa.schema(
            [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in schema]
        )

    def read(
        self,
        sql: str,
        *,
        schema: pa.Schema | None = None,
        batch_rows: int = readers.DEFAULT_BATCH_ROWS,
        stop: threading.Event | None = None,
        ordered: bool = False,
        snapshot: str | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the rows of ``sql`` (already validated) as record batches of ``schema``.

        Memory stays within a few batches, whatever the result's size. With ``ordered``,
        the engine is asked to return the rows in the same order on every read (for
        resuming a partition after its acknowledged batches). With ``snapshot`` (a
        PostgreSQL snapshot id, see :meth:`export_snapshot`), the rows are read inside it.
        """
        if schema is None:
            schema = self.schema(sql)
        if snapshot is not None and self.dialect.name != "postgres":
            raise UnsupportedError(f"{self.dialect.name} cannot share a snapshot across sessions")
        with self._errors("partition query"):
            yielded = False
            for batch in self._read(sql, schema, batch_rows, stop, ordered, snapshot):
                if batch.num_rows:
                    yielded = True
                    yield readers.conform(batch, schema)
            if not yielded:
                yield readers.empty_batch(schema)

    def arrow(self, sql: str, *, what: str = "query") -> pa.Table:
        """A small result (aggregates, catalog look-ups) as a table, types from its values."""
        with self._errors(what):
            return self._arrow(sql)

    def _arrow(self, sql: str) -> pa.Table:
        names, rows = self._rows_with_names(sql)
        return readers.rows_table(names, rows)

    def _rows_with_names(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        raise NotImplementedError

    def read_table(self, sql: str, *, schema: pa.Schema | None = None) -> pa.Table:
        """All rows of ``sql`` as one table (for small results)."""
        batches = list(self.read(sql, schema=schema))
        return pa.Table.from_batches(batches, schema=batches[0].schema)

    # -- backend hooks --------------------------------------------------------------------

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _execute(self, sql: str) -> None:
        raise NotImplementedError

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        """Run a LIMIT 0 query: its column names, and its Arrow schema if known."""
        raise NotImplementedError

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def export_snapshot(self) -> SnapshotHolder:
        """Export a snapshot other sessions can read inside (PostgreSQL only).

        The snapshot lives as long as the returned holder's transaction: keep it open
        until every reader is done, then close it.
        """
        raise UnsupportedError(f"{self.dialect.name} cannot share a snapshot across sessions")

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except EngineError:
            raise
        except Exception as err:
            if not _is_driver_error(err):
                raise
            raise EngineError(
                f"{self.dialect.name} failed running the {what}: {_driver_message(err)}"
            ) from None


class DuckDBSource(Source):
    """DuckDB through its own Python API: native Arrow, a cursor per thread."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, owned: bool, label: str) -> None:
        self.dialect = get_dialect("duckdb")
        self.connection = connection
        self._owned = owned
        self.label = label

    def close(self) -> None:
        if self._owned:
            self.connection.close()

    def _cursor(self, sql: str = "") -> duckdb.DuckDBPyConnection:
        """A cursor (its own DuckDB connection) to run ``sql`` on."""
        return self.connection.cursor()

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self._cursor(sql) as cursor:
            return cursor.execute(sql).fetchall()

    def _execute(self, sql: str) -> None:
        with self._cursor(sql) as cursor:
            cursor.execute(sql)

    def _arrow(self, sql: str) -> pa.Table:
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table: pa.Table = to_table()
        return table

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            # DuckDB 2 renamed arrow() / fetch_record_batch() to to_arrow_table/_reader().
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table = to_table()
        return list(table.column_names), table.schema

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        # DuckDB preserves insertion order by default: reads are ordered already.
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
            reader = to_reader(batch_rows)
            while stop is None or not stop.is_set():
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as err:
                    # DuckDB's errors surface through the Arrow stream as OSError.
                    raise EngineError(
                        f"duckdb failed running the partition query: {_driver_message(err)}"
                    ) from None
                yield batch


class SQLAlchemySource(Source):
    """Any SQLAlchemy engine; streaming through the driver's server-side cursor."""

    def __init__(
        self, engine: sqlalchemy.Engine, dialect: Dialect, *, owned: bool, label: str
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self._owned = owned
        self.label = label
        self.driver = engine.dialect.driver

    def close(self) -> None:
        if self._owned:
            self.engine.dispose()

    @contextlib.contextmanager
    def _raw(self) -> Iterator[Any]:
        connection = self.engine.raw_connection()
        try:
            yield connection
        finally:
            connection.close()

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
                return [tuple(row) for row in cursor.fetchall()]
            finally:
                cursor.close()
                connection.commit()

    def _rows_with_names(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
                names = [d[0] for d in cursor.description]
                return names, [tuple(row) for row in cursor.fetchall()]
            finally:
                cursor.close()
                connection.commit()

    def _execute(self, sql: str) -> None:
        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
            finally:
                cursor.close()
            connection.commit()

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
                names = [d[0] for d in cursor.description]
                if self.dialect.name == "postgres" and self.driver == "psycopg":
                    typed = readers.postgres_description_schema(cursor.description)
                elif self.dialect.name == "mysql" and self.driver == "pymysql":
                    typed = readers.mysql_description_schema(cursor)
                else:
                    typed = None
                cursor.fetchall()
            finally:
                cursor.close()
                connection.commit()
        return names, typed

    def _unhashable(self, sql: str) -> list[str]:
        from dialects.postgres import HASHABLE_TYPE_OIDS

        with self._raw() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql)
                description = cursor.description
                cursor.fetchall()
            finally:
                cursor.close()
                connection.commit()
        return [d[0] for d in description if d[1] not in HASHABLE_TYPE_OIDS]

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        postgres = self.dialect.name == "postgres"
        settings = [*readers.POSTGRES_SESSION, *(readers.POSTGRES_ORDERED if ordered else ())]
        if postgres and snapshot is None and _connectorx() is not None:
            yield from self._read_connectorx(sql, batch_rows, stop, settings)
            return
        if postgres and snapshot is None and _adbc_postgres() is not None:
            yield from self._read_adbc(sql, batch_rows, stop, settings)
            return
        with self._raw() as connection:
            setup = connection.cursor()
            if snapshot is not None:  # the first statements of this transaction
                setup.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                setup.execute(f"SET TRANSACTION SNAPSHOT {_quote(snapshot)}")
            if postgres and ordered:
                for setting in readers.POSTGRES_ORDERED:  # for this transaction only
                    setup.execute(setting.replace("SET ", "SET LOCAL ", 1))
            setup.close()
            cursor = self._streaming_cursor(connection, batch_rows)
            try:
                cursor.execute(sql)
                yield from readers.iterate_rows(cursor.fetchmany, schema, batch_rows, stop)
            finally:
                cursor.close()
                connection.commit()

    def export_snapshot(self) -> SnapshotHolder:
        if self.dialect.name != "postgres":
            return super().export_snapshot()
        with self._errors("snapshot export"):
            connection = self.engine.raw_connection()
            cursor = connection.cursor()
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT pg_export_snapshot()")
            row = cursor.fetchone()
            assert row is not None
            snapshot = str(row[0])
            cursor.close()
        return SnapshotHolder(snapshot, connection)

    def _streaming_cursor(self, connection: Any, batch_rows: int) -> Any:
        driver_connection = connection.driver_connection
        if self.driver == "psycopg":
            cursor = driver_connection.cursor(name=f"sqlfeed_{threading.get_ident()}")
            cursor.itersize = batch_rows
            return cursor
        if self.driver == "pymysql":
            import pymysql.cursors

            return driver_connection.cursor(pymysql.cursors.SSCursor)
        return connection.cursor()

    def _read_adbc(
        self, sql: str, batch_rows: int, stop: threading.Event | None, settings: list[str]
    ) -> Iterator[pa.RecordBatch]:
        dbapi = _adbc_postgres()
        assert dbapi is not None
        url = self.engine.url.set(drivername="postgresql")
        uri = url.render_as_string(hide_password=False)
        with dbapi.connect(uri) as connection, connection.cursor() as cursor:
            for setting in settings:
                cursor.execute(setting)
            cursor.adbc_statement.set_options(
                **{"adbc.postgresql.batch_size_hint_bytes": str(batch_rows * 64)}
            )
            cursor.execute(sql)
            for batch in cursor.fetch_record_batch():
                if stop is not None and stop.is_set():
                    return
                yield batch

    def _read_connectorx(
        self, sql: str, batch_rows: int, stop: threading.Event | None, settings: list[str]
    ) -> Iterator[pa.RecordBatch]:
        connectorx = _connectorx()
        url = self.engine.url.set(drivername="postgresql")
        reader = connectorx.read_sql(
            url.render_as_string(hide_password=False),
            sql,
            return_type="arrow_stream",
            batch_size=batch_rows,
            pre_execution_query=settings,
        )
        for batch in reader:
            if stop is not None and stop.is_set():
                return
            yield batch


class SnapshotHolder:
    """Keeps an exported PostgreSQL snapshot alive: its transaction stays open until close."""

    def __init__(self, snapshot: str, connection: Any) -> None:
        self.snapshot = snapshot
        self._connection = connection

    def __enter__(self) -> SnapshotHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the transaction: readers can no longer start inside the snapshot."""
        if self._connection is not None:
            self._connection.rollback()
            self._connection.close()
            self._connection = None


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _connectorx() -> Any:
    try:
        import connectorx
    except ImportError:
        return None
    return connectorx


def _adbc_postgres() -> Any:
    try:
        import adbc_driver_postgresql.dbapi as dbapi
    except ImportError:
        return None
    return dbapi


_SCHEMES: dict[str, Callable[[str], Source]] = {}


def register_scheme(scheme: str, opener: Callable[[str], Source]) -> None:
    """Let :func:`connect` open ``scheme:...`` URLs with ``opener(url)``.

    Layers above ``io`` plug their sources in this way (``sqlfeed.shards`` registers
    ``dataset:``), so ``io`` never imports them.
    """
    _SCHEMES[scheme.lower()] = opener


def connect(target: Any = None, *, dialect: str | None = None) -> Source:
    """A :class:`Source` for ``target``.

    Args:
        target: ``None`` or ``"duckdb://"`` (an in-memory DuckDB, the embedded default),
            ``"duckdb:///path.duckdb"``, ``"dataset:///path/to/dataset"`` (a shardset
            dataset as the view ``dataset``), a :class:`~sqlfeed.shards.datasets.Dataset`, any
            SQLAlchemy URL (``postgresql+psycopg://...``, ``mysql+pymysql://...``,
            ``sqlite:///file.db``), a DuckDB connection, or a SQLAlchemy engine.
        dialect: force the dialect (for URLs whose backend name is not a dialect name).

    Raises:
        EngineError: the database cannot be reached.
        UnknownDialectError: the target's kind is not known.
    """
    if isinstance(target, Source):
        return target
    if target is None:
        target = "duckdb://"
    if type(target).__name__ == "Dataset" and hasattr(target, "shardsets"):
        return target.source()  # type: ignore[no-any-return]
    if isinstance(target, str):
        url = target.strip()
        opener = _SCHEMES.get(url.partition(":")[0].lower())
        if opener is not None:
            return opener(url)
        engine_dialect = get_dialect(dialect) if dialect else dialect_for(url)
        if engine_dialect.name == "duckdb":
            return _duckdb_source(url)
        return _sqlalchemy_source(url, engine_dialect)
    engine_dialect = get_dialect(dialect) if dialect else dialect_for(target)
    module = type(target).__module__ or ""
    if module.split(".")[0] in ("duckdb", "_duckdb"):
        return DuckDBSource(target, owned=False, label="duckdb connection")
    if hasattr(target, "raw_connection") and hasattr(target, "dialect"):
        _install_session_hooks(target, engine_dialect)
        return SQLAlchemySource(
            target, engine_dialect, owned=False, label=_redact(str(getattr(target, "url", "")))
        )
    raise InvalidArgumentError(
        f"cannot read from a {module}.{type(target).__name__}: pass a URL, a SQLAlchemy "
        "engine or a DuckDB connection"
    )


def _duckdb_source(url: str) -> Source:
    import duckdb

    path = url.partition("://")[2] if "://" in url else url
    path = path[1:] if path.startswith("/") else path  # duckdb:///x.duckdb -> x.duckdb
    path = path.split("?", 1)[0] or ":memory:"
    try:
        conn = duckdb.connect(path)
    except duckdb.Error as err:
        raise EngineError(f"cannot open DuckDB database {path!r}: {_driver_message(err)}") from None
    return DuckDBSource(conn, owned=True, label=f"duckdb:{path}")


def _sqlalchemy_source(url: str, engine_dialect: Dialect) -> Source:
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, pool_pre_ping=True)
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as err:
        raise InvalidArgumentError(f"bad database URL {_redact(url)!r}: {err}") from None
    except ImportError as err:
        extra = {"postgres": "postgres", "mysql": "mysql"}.get(engine_dialect.name)
        hint = f"pip install 'sqlfeed[{extra}]'" if extra else "install the driver the URL names"
        raise MissingDependencyError(
            f"the driver for {_redact(url)} is not installed ({err.name or err}): {hint}"
        ) from None
    _install_session_hooks(engine, engine_dialect)
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.DBAPIError as err:
        engine.dispose()
        raise EngineError(f"cannot connect to {_redact(url)}: {_driver_message(err)}") from None
    return SQLAlchemySource(engine, engine_dialect, owned=True, label=_redact(url))


def _install_session_hooks(engine: Any, engine_dialect: Dialect) -> None:
    """On every new DB-API connection: the dialect's functions and fixed session settings."""
    import sqlalchemy

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        engine_dialect.register_functions(dbapi_connection)
        if engine_dialect.name == "postgres":
            cursor = dbapi_connection.cursor()
            for setting in readers.POSTGRES_SESSION:
                cursor.execute(setting)
            cursor.close()
            dbapi_connection.commit()

    sqlalchemy.event.listen(engine, "connect", on_connect)


def _is_driver_error(err: Exception) -> bool:
    module = type(err).__module__ or ""
    return module.split(".")[0] in (
        "sqlalchemy", "duckdb", "_duckdb", "psycopg", "psycopg2", "pymysql", "MySQLdb",
        "sqlite3", "adbc_driver_manager", "adbc_driver_postgresql", "connectorx",
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
