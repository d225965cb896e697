"""Any SQLAlchemy engine: :class:`SQLAlchemySource`, engine creation and session hooks.

The generic path runs DB-API cursors on the engine's raw connections and streams with
``fetchmany`` (:class:`CursorReader`, any engine without a module of its own). Engine
families with faster or server-side readers subclass :class:`SQLAlchemySource` and list
their readers in their own table (:attr:`SQLAlchemySource.READER_TABLE`:
:mod:`sqlfeed.io.postgres`, :mod:`sqlfeed.io.mysql`, :mod:`sqlfeed.io.sqlite`).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import sqlalchemy

from sqlfeed.dialects import Dialect, EngineError, InvalidArgumentError, MissingDependencyError
from sqlfeed.io.arrow import iterate_rows
from sqlfeed.io.readers import Reader, ReadRequest, readers_from_environment
from sqlfeed.io.source import Source, connection_lost, driver_message, redact_url
from sqlfeed.io.writes import DbapiSession, WriteSession
from sqlfeed.urlhints import scheme_hint

__all__ = [
    "CursorReader",
    "SQLAlchemySource",
    "create_engine",
    "dead",
    "discard",
    "driver_hint",
    "install_session_hooks",
    "release",
    "statement",
]


class CursorReader(Reader):
    """The DB-API driver's cursor on one of the engine's pooled connections.

    Its rows are fetched with ``fetchmany`` and built into batches of the plan's types: it
    carries every type, so it ends every engine's reader table.
    """

    name = "dbapi"
    source: SQLAlchemySource

    def carries(self, request: ReadRequest) -> bool:
        return True

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        with self.source._raw() as connection:
            with statement(connection, commit=False) as setup:
                self.begin(setup, request)
            cursor = self.cursor(connection, request.batch_rows)
            with statement(connection, cursor) as cursor:
                self.prepare(cursor, request)
                cursor.execute(request.sql)
                rows = cursor.fetchmany
                yield from iterate_rows(rows, request.schema, request.batch_rows, request.stop)

    def begin(self, cursor: Any, request: ReadRequest) -> None:
        """The first statements of a read's transaction, before its query (none here)."""

    def cursor(self, connection: Any, batch_rows: int) -> Any:
        """The cursor the read fetches its rows from (the source's streaming cursor)."""
        return self.source._streaming_cursor(connection, batch_rows)

    def prepare(self, cursor: Any, request: ReadRequest) -> None:
        """Set up the read's cursor before it runs the query (nothing here)."""


class SQLAlchemySource(Source):
    """Any SQLAlchemy engine; streaming through the driver's server-side cursor."""

    session_settings: tuple[str, ...] = ()
    """Statements run on every new connection of the engine (see :func:`install_session_hooks`)."""

    READER_TABLE: ClassVar[tuple[type[Reader], ...]] = (CursorReader,)
    """The engine's readers, fastest first; the last one carries every type. Each is made
    with the source (``reader(source)``)."""

    READERS_VARIABLE: ClassVar[str | None] = None
    """The environment variable naming the readers to try, comma-separated (None: all)."""

    def __init__(
        self, engine: sqlalchemy.Engine, dialect: Dialect, *, owned: bool, label: str
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self._owned = owned
        self.label = label
        self.driver = engine.dialect.driver
        self._readers = {kind.name: kind(self) for kind in self.READER_TABLE}
        names = tuple(self._readers)
        variable = self.READERS_VARIABLE
        self.readers = readers_from_environment(variable, names) if variable else names

    def reader_table(self) -> dict[str, Reader]:
        return self._readers

    @classmethod
    def check_url(cls, url: str) -> None:
        """Refuse a URL this engine would misread, before connecting (nothing here)."""

    @classmethod
    def open(cls, url: str, dialect: Dialect) -> SQLAlchemySource:
        """A source owning a new engine for ``url``, checked by connecting once.

        Raises:
            InvalidArgumentError: SQLAlchemy does not accept the URL, or a SQLite URL names
                a file that does not exist (reading never creates one).
            MissingDependencyError: the URL's driver is not installed.
            EngineError: the database cannot be reached.
        """
        cls.check_url(url)
        engine = create_engine(url, dialect)
        cls.install_hooks(engine, dialect)
        try:
            with engine.connect():
                pass
        except sqlalchemy.exc.DBAPIError as err:
            engine.dispose()
            raise EngineError(
                f"cannot connect to {redact_url(url)}: {driver_message(err)}"
            ) from None
        except TypeError as err:  # the driver's connect() takes no such URL option
            engine.dispose()
            raise InvalidArgumentError(
                f"bad database URL {redact_url(url)}: the driver refuses its options ({err})"
            ) from None
        return cls(engine, dialect, owned=True, label=redact_url(url))

    @classmethod
    def wrap(cls, engine: Any, dialect: Dialect) -> SQLAlchemySource:
        """A source on the caller's ``engine`` (left open on close), its session hooks installed."""
        cls.install_hooks(engine, dialect)
        return cls(engine, dialect, owned=False, label=redact_url(str(getattr(engine, "url", ""))))

    @classmethod
    def install_hooks(cls, engine: Any, dialect: Dialect) -> None:
        """What every new connection of ``engine`` gets (:func:`install_session_hooks`)."""
        install_session_hooks(engine, dialect, cls.session_settings)

    def close(self) -> None:
        if self._owned:
            self.engine.dispose()

    @contextlib.contextmanager
    def _raw(self) -> Iterator[Any]:
        """A pooled DB-API connection, back to the pool after use.

        A dead one (lost mid-use) is invalidated instead (:func:`release`).
        """
        connection = self.engine.raw_connection()
        failed: BaseException | None = None
        try:
            yield connection
        except BaseException as err:
            failed = err
            raise
        finally:
            release(connection, failed)

    @contextlib.contextmanager
    def _query(self) -> Iterator[Any]:
        """A cursor on a pooled connection (:meth:`_raw`); its transaction committed at the end.

        After an error, the cursor is discarded (:func:`discard`) and the error raised as it
        is.
        """
        with self._raw() as connection, statement(connection) as cursor:
            yield cursor

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self._query() as cursor:
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]

    def _rows_with_names(
        self, sql: str, settings: tuple[str, ...] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        with self._query() as cursor:
            for setting in settings:  # SET LOCAL: ends with this transaction
                cursor.execute(setting)
            cursor.execute(sql)
            names = [d[0] for d in cursor.description]
            return names, [tuple(row) for row in cursor.fetchall()]

    def _execute(self, sql: str) -> None:
        with self._query() as cursor:
            cursor.execute(sql)

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        with self._query() as cursor:
            cursor.execute(sql)
            names = [d[0] for d in cursor.description]
            typed = self._description_schema(cursor)
            cursor.fetchall()
        return names, typed

    def _description_schema(self, cursor: Any) -> pa.Schema | None:
        """The Arrow schema from an executed cursor's column type codes, if the driver has them."""
        return None

    def _streaming_cursor(self, connection: Any, batch_rows: int) -> Any:
        """The cursor a read fetches its rows from (here the connection's plain cursor)."""
        return connection.cursor()

    def write_session(self) -> WriteSession:
        """A session writing into this database (:mod:`sqlfeed.io.writes`).

        A pooled DB-API connection, rows inserted with ``executemany``.
        """
        return DbapiSession(self.engine.raw_connection(), self.dialect, self._paramstyle())

    def _paramstyle(self) -> str:
        return str(getattr(self.engine.dialect, "paramstyle", "format"))


@contextlib.contextmanager
def statement(connection: Any, cursor: Any = None, *, commit: bool = True) -> Iterator[Any]:
    """``cursor`` (default: a new one) of the pooled ``connection``.

    Closed at the end and the transaction committed (with ``commit``). After an error (a
    consumer closing a read early included) the cursor is discarded (:func:`discard`) and
    nothing is committed: the error raised is the one the body raised, never a failure to
    clean up after it on a connection that is gone.
    """
    cursor = connection.cursor() if cursor is None else cursor
    try:
        yield cursor
    except BaseException:
        discard(cursor, connection)
        raise
    cursor.close()
    if commit:
        connection.commit()


def discard(cursor: Any, connection: Any) -> None:
    """Close ``cursor`` after a failure, quietly.

    On a live connection it is closed as usual (pymysql's unbuffered cursor reads the rest
    of its rows); where that fails, or the connection is gone, nothing is read from it any
    more (pymysql would raise, also later from its finalizers) and the connection is
    invalidated.
    """
    if not dead(connection):
        try:
            cursor.close()
            return
        except Exception:
            pass
    result: Any = getattr(cursor, "_result", None)
    if hasattr(result, "unbuffered_active"):
        result.unbuffered_active = False  # pymysql: no rows left to read from a dead socket
    with contextlib.suppress(Exception):
        cursor.close()
    with contextlib.suppress(Exception):
        connection.invalidate()


def dead(connection: Any) -> bool:
    """Whether a pooled connection's DB-API connection was closed or lost, or invalidated already.

    Also for a DB-API connection itself (psycopg: ``closed``, pymysql: not ``open``).
    """
    driver = getattr(connection, "driver_connection", connection)  # or a DB-API one
    if driver is None:
        return True
    closed = getattr(driver, "closed", False)
    if isinstance(closed, bool | int) and closed:
        return True
    return getattr(driver, "open", True) is False


def release(connection: Any, failed: BaseException | None = None) -> None:
    """Give a pooled connection back: to the pool (its transaction rolled back), or invalidated.

    It is invalidated when it is gone (``failed`` by a lost connection, or :func:`dead`),
    without that rollback, which would fail and log a traceback ("Exception during reset").
    The rollback is made here first, so a connection killed after the last statement (a
    server terminating it between the check and the pool's reset) is invalidated quietly too;
    the pool's own reset then finds no transaction open (psycopg sends nothing).
    """
    if hasattr(connection, "dbapi_connection") and connection.dbapi_connection is None:
        return  # invalidated already (:func:`discard`): back in the pool
    if (failed is not None and connection_lost(failed)) or dead(connection):
        _invalidate(connection)
        return
    try:
        connection.rollback()
    except Exception:
        _invalidate(connection)
        return
    connection.close()


def _invalidate(connection: Any) -> None:
    with contextlib.suppress(Exception):
        connection.invalidate()


def create_engine(url: str, dialect: Dialect) -> sqlalchemy.Engine:
    """A SQLAlchemy engine for ``url`` (pre-ping on), not connected yet.

    Raises:
        InvalidArgumentError: SQLAlchemy does not accept the URL.
        MissingDependencyError: the URL's driver is not installed (with the pip extra to
            install for PostgreSQL and MySQL).
    """
    try:
        return sqlalchemy.create_engine(url, pool_pre_ping=True)
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as err:
        fix = scheme_hint(url)  # postgres://: did you mean postgresql://; snowflake://: pip
        raise InvalidArgumentError(f"bad database URL {redact_url(url)!r}: {fix or err}") from None
    except ImportError as err:
        raise MissingDependencyError(
            f"the driver for {redact_url(url)} is not installed ({err.name or err}): "
            f"{driver_hint(url, dialect.name)}"
        ) from None


_DRIVERS = {
    "postgres": ("postgresql+psycopg", "psycopg", "postgres"),
    "mysql": ("mysql+pymysql", "pymysql", "mysql"),
}
"""Per dialect: the URL scheme of the driver sqlfeed's extra installs, its module, the extra."""


def driver_hint(url: str, dialect_name: str) -> str:
    """What to do when the driver a URL names is missing.

    Name the installed driver's URL scheme (``mysql://`` asks for MySQLdb;
    ``mysql+pymysql://`` is what the ``mysql`` extra installs), or the extra to install.
    """
    known = _DRIVERS.get(dialect_name)
    if known is None:
        return "install the driver the URL names"
    scheme, module, extra = known
    rest = redact_url(url).partition("://")[2]
    if importlib.util.find_spec(module) is not None:
        return f"use {scheme}://{rest} ({module} is installed)"
    return f"pip install 'sqlfeed[{extra}]' and use {scheme}://..."


def install_session_hooks(engine: Any, dialect: Dialect, settings: Sequence[str] = ()) -> None:
    """On every new DB-API connection of ``engine``: the dialect's functions and ``settings``.

    Args:
        engine: a SQLAlchemy engine.
        dialect: its dialect, whose :meth:`~sqlfeed.dialects.Dialect.register_functions` runs first.
        settings: statements (``SET ...``) run and committed on each new connection.
    """

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dialect.register_functions(dbapi_connection)
        if settings:
            cursor = dbapi_connection.cursor()
            for setting in settings:
                cursor.execute(setting)
            cursor.close()
            dbapi_connection.commit()

    sqlalchemy.event.listen(engine, "connect", on_connect)
