"""MySQL and MariaDB: :class:`MySQLSource`, its readers, session settings and column types.

A read takes the first reader of :attr:`MySQLSource.readers` that can carry every column
of the query (its readers' table: :data:`READER_TABLE`): connectorx
(:class:`MySQLConnectorx`: its Arrow stream over the binary protocol, or a partition
estimated small read whole) or pymysql's unbuffered ``SSCursor`` (:class:`PymysqlReader`),
which carries them all. connectorx is taken only for the columns it was checked to return
exactly (:data:`CONNECTORX_TYPES`; decimals of at most 18 integer and 10 fractional
digits), on a plain ``host:port`` URL, and its failures never reach the caller (the one
fallback chain, :func:`sqlfeed.io.readers.read_in_order`). The column types
that choice needs come with the plan: the schema a source derives carries each column's
type code, precision and scale in its field metadata (:data:`MYSQL_HINT`), so a partition
costs no query of its own; a schema without them (the caller's own) costs one ``LIMIT 0``
query per distinct SQL. Every read, by
either reader, runs :data:`MYSQL_SESSION` first: the hash of a row is taken over its
text, so every worker must render ``TIMESTAMP`` values alike. connectorx and pymysql are
optional and imported when used.

MySQL/MariaDB cannot export a snapshot: a read that must see one state of changing tables
reads its queries on one connection inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT``
(:meth:`MySQLSource.pin_session`, :mod:`sqlfeed.io.pinned`), by pymysql (connectorx opens
connections of its own: such a read is several times slower); with
``session_connections`` N, on N connections begun while ``LOCK TABLES ... READ`` on the
tables read (else ``FLUSH TABLES WITH READ LOCK``) holds writers off.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import sqlalchemy

from sqlfeed.dialects.optional import require
from sqlfeed.io.arrow import READER_HINT
from sqlfeed.io.cxread import ConnectorxReader
from sqlfeed.io.pinned import Batches, PinnedReads, Sync, SyncRefused, cursor_batches
from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.io.silence import ALIVE, GONE, GUARD, UNKNOWN, UNREACHABLE, Watch, probe_seconds
from sqlfeed.io.sqlalchemy import CursorReader, SQLAlchemySource, release
from sqlfeed.io.writes import DbapiSession
from sqlfeed.sql import schema_sql
from sqlfeed.sql.keys import base_tables

__all__ = [
    "CONNECTORX_TYPES",
    "MYSQL_CONSISTENT",
    "MYSQL_HINT",
    "MYSQL_SESSION",
    "READERS",
    "READERS_VARIABLE",
    "READER_TABLE",
    "MySQLConnectorx",
    "MySQLSource",
    "PymysqlReader",
    "mysql_description_schema",
    "mysql_hints",
]

MYSQL_SESSION = ("SET time_zone = '+00:00'",)
"""Run on every connection a read uses: ``TIMESTAMP`` values (and their text, which hash
partitions hash) in UTC, whatever the server's own time zone."""

MYSQL_CONSISTENT = (
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
)
"""What begins a consistent read session: every query of its transaction (InnoDB tables)
sees the state of its start."""

SYNC_LOCK_WAIT = 10
"""Seconds the lock that lets several connections begin at one state waits for writers
already in a transaction on the tables read (MySQL's own default is a year); past it the
read runs on one connection."""

READERS_VARIABLE = "SQLFEED_MYSQL_READERS"
"""Environment variable: the readers to try, in order, comma-separated (e.g. ``pymysql``)."""

CONNECTORX_TYPES = frozenset({1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 15, 246, 247, 248})
CONNECTORX_TYPES |= frozenset({249, 250, 251, 252, 253, 254})
"""MySQL field types connectorx returns exactly (integers signed and unsigned, floats,
decimals, dates, datetimes, timestamps, years, text in any character set, enums, sets,
blobs); not ``TIME`` (it panics on negative or 24-hour-plus values), ``BIT`` (raw
bytes), MySQL's ``JSON`` (re-serialized), ``GEOMETRY`` nor ``NULL``."""

_CONNECTORX_DECIMAL = (18, 10)
"""connectorx reads decimals as 28-digit ``rust_decimal`` rescaled to 10 places: at most
this many integer and fractional digits."""

MYSQL_HINT = READER_HINT + b"mysql"
"""Field metadata key: the column's MySQL type code, precision and scale (``b"246,15,2"``),
for :class:`MySQLConnectorx`'s choice."""

_TYPE_CACHE_SIZE = 1024

# MySQL field type codes -> Arrow types; text/blob types are told apart by their values.
_MYSQL_TYPES: dict[int, pa.DataType] = {
    1: pa.int8(),
    2: pa.int16(),
    3: pa.int32(),
    4: pa.float32(),
    5: pa.float64(),
    7: pa.timestamp("us"),
    8: pa.int64(),
    9: pa.int32(),
    10: pa.date32(),
    11: pa.duration("us"),
    12: pa.timestamp("us"),
    13: pa.int16(),
    # 16 (BIT): pymysql returns its bytes, so its type is inferred from them (binary).
    245: pa.string(),
}
_MYSQL_UNSIGNED = {1: pa.uint8(), 2: pa.uint16(), 3: pa.uint32(), 8: pa.uint64(), 9: pa.uint32()}
_MYSQL_DECIMAL = (0, 246)
_MYSQL_UNSIGNED_FLAG = 32


class MySQLConnectorx(ConnectorxReader):
    """connectorx, for the column types it returns exactly, on a plain ``host:port`` URL.

    The types are :data:`CONNECTORX_TYPES`, as the plan's schema hints say;
    :data:`MYSQL_SESSION` runs first on its session.
    """

    source: MySQLSource

    def url(self) -> str | None:
        """The engine's URL for connectorx: ``mysql://`` on a host, no options but a charset."""
        url = self.source.engine.url
        if not url.host or set(url.query) - {"charset"}:
            return None
        return str(url.set(drivername="mysql", query={}).render_as_string(hide_password=False))

    def settings(self, request: ReadRequest) -> Sequence[str]:
        return MYSQL_SESSION

    def carries_types(self, request: ReadRequest) -> bool:
        if self.source.driver != "pymysql":  # the column types come through pymysql
            return False
        fields = self.source.column_fields(request.sql, request.schema)
        return all(_connectorx_carries(*field) for field in fields)


class PymysqlReader(CursorReader):
    """pymysql's unbuffered ``SSCursor`` (another driver's own cursor), which carries every type."""

    name = "pymysql"


READER_TABLE: tuple[type[Reader], ...] = (MySQLConnectorx, PymysqlReader)
"""The MySQL/MariaDB readers, fastest first; pymysql, last, carries every type."""

READERS = tuple(reader.name for reader in READER_TABLE)
"""Their names: the default order of :attr:`MySQLSource.readers`."""


class MySQLSource(PinnedReads, SQLAlchemySource):
    """MySQL/MariaDB through SQLAlchemy, read with connectorx or pymysql's unbuffered cursor.

    Attributes:
        readers: the readers a read may take, in order (default :data:`READERS`, or the
            ``SQLFEED_MYSQL_READERS`` environment variable); pymysql, which carries every
            type, is taken when connectorx cannot (and with any other driver, the
            driver's own cursor).
    """

    session_settings = MYSQL_SESSION
    READER_TABLE = READER_TABLE
    READERS_VARIABLE = READERS_VARIABLE

    @classmethod
    def install_hooks(cls, engine: Any, dialect: Any) -> None:
        """The session settings, and pymysql's connections watched for a dead session.

        pymysql waits for its server's bytes for ever: every new connection is watched by
        :data:`sqlfeed.io.silence.GUARD`, which probes a read silent for
        :func:`~sqlfeed.io.silence.probe_seconds` and shuts the socket of a session the
        server no longer has (:func:`watch_pymysql`).
        """
        super().install_hooks(engine, dialect)
        if engine.dialect.driver != "pymysql":
            return
        label = f"{dialect.TITLE} read"

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            watch_pymysql(dbapi_connection, label)

        sqlalchemy.event.listen(engine, "connect", on_connect)

    def _session_for(self) -> tuple[Any, tuple[str, ...], Batches]:
        """A consistent read session (:mod:`sqlfeed.io.pinned`).

        A pooled connection (its session settings ran) in ``START TRANSACTION WITH
        CONSISTENT SNAPSHOT``, read by the driver's unbuffered cursor.
        """
        return (
            self.engine.raw_connection(),
            MYSQL_CONSISTENT,
            cursor_batches(self._streaming_cursor),
        )

    def _snapshot_sync(self, sql: str | None) -> Sync | None:
        """Several sessions begin while a lock holds writers of the tables read off.

        ``LOCK TABLES t READ, ...`` on the tables ``sql`` reads (a view locks its own), else
        ``FLUSH TABLES WITH READ LOCK``, on a connection of its own, waiting at most
        :data:`SYNC_LOCK_WAIT` seconds for writers already in a transaction; released as
        soon as every session's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` ran.
        """
        tables = self._tables_read(sql)
        return lambda: self._lock_for_sync(tables)

    def _tables_read(self, sql: str | None) -> list[str]:
        if sql is None:
            return []
        try:
            tree = self.parse(sql).tree
        except Exception:  # the read itself says what is wrong with its query
            return []
        return [table.sql(dialect="mysql", identify=True) for table in base_tables(tree)]

    @contextlib.contextmanager
    def _lock_for_sync(self, tables: Sequence[str]) -> Iterator[str]:
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            cursor.execute(f"SET SESSION lock_wait_timeout = {SYNC_LOCK_WAIT}")
            refusals = []
            how = ""
            for statement in _sync_statements(tables):
                try:
                    cursor.execute(statement)
                except Exception as err:
                    refusals.append(f"{statement.split(' ', 2)[0]} {_refusal(err)}")
                    continue
                how = statement
                break
            if not how:
                raise SyncRefused(
                    f"{self.dialect.TITLE}: the connections of this consistent read cannot "
                    f"begin at one state ({'; '.join(refusals)}), so it reads on ONE "
                    "connection; grant LOCK TABLES on the tables read (or RELOAD) to read on "
                    "several at once"
                )
            try:
                yield f"{how} held while they began"
            finally:
                cursor.execute("UNLOCK TABLES")
        finally:
            with contextlib.suppress(Exception):  # the pooled connection's next user waits
                connection.cursor().execute("SET SESSION lock_wait_timeout = DEFAULT")
            release(connection)

    def __init__(self, engine: Any, dialect: Any, *, owned: bool, label: str) -> None:
        super().__init__(engine, dialect, owned=owned, label=label)
        self._fields: dict[str, tuple[tuple[int, int, int], ...]] = {}

    def _description_schema(self, cursor: Any) -> pa.Schema | None:
        if self.driver == "pymysql":
            return mysql_description_schema(cursor)
        return None

    def column_fields(
        self, sql: str, schema: pa.Schema | None = None
    ) -> tuple[tuple[int, int, int], ...]:
        """(type code, precision, scale) of each output column of ``sql``.

        From ``schema``'s hints (:func:`mysql_hints`) when it has them, else one ``LIMIT 0``
        query through pymysql, remembered per SQL text.
        """
        hinted = mysql_hints(schema)
        if hinted is not None:
            return hinted
        fields = self._fields.get(sql)
        if fields is None:
            with self._errors("schema query"), self._raw() as connection:
                cursor = connection.cursor()
                try:
                    cursor.execute(schema_sql(self.parse(sql)))
                    metas = cursor._result.fields
                    fields = tuple(
                        (meta.type_code, *_decimal_digits(meta, description))
                        for meta, description in zip(metas, cursor.description, strict=True)
                    )
                    cursor.fetchall()
                finally:
                    cursor.close()
                    connection.commit()
            if len(self._fields) >= _TYPE_CACHE_SIZE:
                self._fields.clear()
            self._fields[sql] = fields
        return fields

    def write_session(self) -> MysqlSession:
        """A session writing in strict SQL mode (:class:`MysqlSession`)."""
        return MysqlSession(self.engine.raw_connection(), self.dialect, self._paramstyle())

    def write_grant(self, schema: str | None, *, read_only: bool = False) -> str:
        """CREATE, INSERT, ALTER and DROP on the database (staging tables renamed, dropped)."""
        if read_only:
            return "the server or transaction is read-only (read_only): write on a primary"
        user = self.engine.url.username or "the_user"
        where = schema or self.engine.url.database or "the_database"
        return (
            f"the user needs CREATE, INSERT, ALTER and DROP on the database {where} "
            f"(GRANT CREATE, INSERT, ALTER, DROP ON {where}.* TO '{user}')"
        )

    def _streaming_cursor(self, connection: Any, batch_rows: int) -> Any:
        if self.driver != "pymysql":
            return super()._streaming_cursor(connection, batch_rows)
        cursors = require("pymysql.cursors", "the MySQL reader")
        return connection.driver_connection.cursor(cursors.SSCursor)


def watch_pymysql(connection: Any, label: str) -> None:
    """Watch a new pymysql ``connection`` (:mod:`sqlfeed.io.silence`).

    Its packet reads are counted. Its probe connects anew with the connection's own
    arguments (host, port or socket, user, database, TLS context), within short timeouts,
    and reads the server's name and port and whether ``information_schema.PROCESSLIST``
    (where a user sees its own sessions without a privilege) has the session. Only a
    connection whose handshake id is the server's ``CONNECTION_ID()`` is watched: behind a
    proxy (ProxySQL, MaxScale) the id pymysql holds is the proxy's, and a probe could not
    find the session; and only an answer from the same server (``@@hostname``, ``@@port``)
    can say the session is gone (a balancer may send the probe to another one).
    """
    if probe_seconds() <= 0:
        return
    try:
        cursor = connection.cursor()
        try:
            cursor.execute("SELECT CONNECTION_ID(), @@hostname, @@port")
            session, host, port = cursor.fetchone()
        finally:
            cursor.close()
            connection.commit()
    except Exception:  # a server without them (a look-alike): not watched, as before
        return
    if int(session) != connection.thread_id():
        return
    server = (str(host), int(port))
    owner = weakref.ref(connection)

    def sock() -> Any:
        alive = owner()
        return None if alive is None else getattr(alive, "_sock", None)

    def probe() -> str:
        alive = owner()
        if alive is None:
            return UNKNOWN
        return _probe_session(_reconnect_arguments(alive), int(session), server)

    watch = Watch(sock, probe, label)
    connection._read_packet = watch.wrap(connection._read_packet)
    GUARD.watch(connection, watch)


def _reconnect_arguments(connection: Any) -> dict[str, Any]:
    """``pymysql.connect`` arguments that reach the server ``connection`` reached."""
    arguments: dict[str, Any] = {
        "host": connection.host,
        "port": connection.port,
        "user": connection.user,
        "password": connection.password,
        "database": connection.db,
        "unix_socket": connection.unix_socket,
        "bind_address": connection.bind_address,
    }
    if getattr(connection, "_ssl_required", False):
        arguments["ssl"] = connection.ctx
    return arguments


_UNREACHABLE = frozenset((2003, 2006, 2013))
"""Client error codes of a server that cannot be reached (refused, gone, lost, timed out)."""


def _probe_session(arguments: dict[str, Any], session: int, server: tuple[str, int]) -> str:
    """Whether ``server`` still has the session ``session`` (a silence probe's verdict)."""
    pymysql = require("pymysql", "the MySQL reader")
    wait = min(10.0, max(2.0, probe_seconds()))
    timeouts = {"connect_timeout": wait, "read_timeout": wait, "write_timeout": wait}
    try:
        connection = pymysql.connect(**arguments, **timeouts)
    except pymysql.err.OperationalError as err:
        return UNREACHABLE if err.args and err.args[0] in _UNREACHABLE else UNKNOWN
    except OSError:
        return UNREACHABLE
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT @@hostname, @@port, (SELECT COUNT(*) FROM "
                "information_schema.PROCESSLIST WHERE ID = %s)",
                (session,),
            )
            host, port, found = cursor.fetchone()
        if (str(host), int(port)) != server:
            return UNKNOWN  # another server answered: it cannot tell
        return ALIVE if found else GONE
    except pymysql.err.OperationalError as err:
        return UNREACHABLE if err.args and err.args[0] in _UNREACHABLE else UNKNOWN
    except pymysql.err.MySQLError:
        return UNKNOWN
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def _connectorx_carries(code: int, precision: int, scale: int) -> bool:
    if code in (0, 246):
        integer_digits, fraction_digits = _CONNECTORX_DECIMAL
        return scale <= fraction_digits and precision - scale <= integer_digits
    return code in CONNECTORX_TYPES


def _decimal_digits(meta: Any, description: Sequence[Any]) -> tuple[int, int]:
    """A column's declared precision and scale (decimals; else its length and 0).

    pymysql reports a decimal's display length as its precision: one more for the sign
    (unless unsigned), one more for the point (when it has a scale).
    """
    length, scale = int(description[4] or 0), int(description[5] or 0)
    if meta.type_code not in _MYSQL_DECIMAL:
        return length, 0
    signed = not meta.flags & _MYSQL_UNSIGNED_FLAG
    return length - int(signed) - int(scale > 0), scale


def mysql_hints(schema: pa.Schema | None) -> tuple[tuple[int, int, int], ...] | None:
    """(type code, precision, scale) of every column from ``schema``'s field metadata.

    From its :data:`MYSQL_HINT` field metadata, or None when a column has none (not a schema
    a MySQL source derived).
    """
    if schema is None:
        return None
    fields = []
    for field in schema:
        hint = (field.metadata or {}).get(MYSQL_HINT)
        if hint is None:
            return None
        code, precision, scale = (int(part) for part in hint.split(b","))
        fields.append((code, precision, scale))
    return tuple(fields)


def _sync_statements(tables: Sequence[str]) -> list[str]:
    """The locks to try, least first: the tables read, then the whole server."""
    first = [f"LOCK TABLES {', '.join(f'{table} READ' for table in tables)}"] if tables else []
    return [*first, "FLUSH TABLES WITH READ LOCK"]


def _refusal(err: BaseException) -> str:
    """Why a lock was not taken, in a few words."""
    code = err.args[0] if err.args and isinstance(err.args[0], int) else None
    if code == 1205:
        return f"waited over {SYNC_LOCK_WAIT}s for a transaction writing the tables"
    words = str(err.args[1]) if len(err.args) > 1 else str(err)
    return f"refused: {words.splitlines()[0] if words else type(err).__name__}"


def mysql_description_schema(cursor: Any) -> pa.Schema | None:
    """Arrow types from a pymysql cursor's field metadata; ``null`` for types to infer.

    Each field carries its type code, precision and scale as :data:`MYSQL_HINT` metadata.

    Args:
        cursor: an executed pymysql cursor (its result's field type codes and flags).

    Returns:
        The schema, or None when the cursor has no field metadata.
    """
    result = getattr(cursor, "_result", None)
    fields_meta = getattr(result, "fields", None)
    if not fields_meta:
        return None
    fields = []
    for meta, description in zip(fields_meta, cursor.description, strict=True):
        code = meta.type_code
        unsigned = bool(meta.flags & _MYSQL_UNSIGNED_FLAG)
        precision, scale = _decimal_digits(meta, description)
        if code in _MYSQL_DECIMAL:
            arrow_type = (
                pa.decimal128(precision, scale) if precision and precision <= 38 else pa.float64()
            )
        elif unsigned and code in _MYSQL_UNSIGNED:
            arrow_type = _MYSQL_UNSIGNED[code]
        else:
            arrow_type = _MYSQL_TYPES.get(code, pa.null())
        hint = f"{code},{precision},{scale}".encode()
        fields.append(pa.field(description[0], arrow_type, metadata={MYSQL_HINT: hint}))
    return pa.schema(fields)


class MysqlSession(DbapiSession):
    """A pooled pymysql connection writing with ``executemany`` in strict SQL mode.

    A value too long or out of range fails instead of being cut to fit; the connection's
    mode is put back when the session closes.
    """

    def __init__(self, connection: Any, dialect: Any, paramstyle: str) -> None:
        super().__init__(connection, dialect, paramstyle)
        try:
            self.mode = self.rows("SELECT @@SESSION.sql_mode")[0][0]
            self.cursor.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'")
        except BaseException:
            self.broken = True  # lost while starting: let go, not given back
            super().close()
            raise

    def close(self) -> None:
        try:
            self.rollback()
            self.cursor.execute("SET SESSION sql_mode = %s", (self.mode,))
        except Exception:
            self.broken = True  # lost, or its mode unknown: let go, not given back
        super().close()
