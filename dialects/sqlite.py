"""SQLite, with a deterministic hash function registered on the connection."""

from __future__ import annotations

import struct
import zlib
from types import MappingProxyType
from typing import Any

from sqlglot import exp

from sqlfeed.dialects import effects
from sqlfeed.dialects.base import EXACT_UNITS, Dialect, QueueBounds, check_sink_kind
from sqlfeed.dialects.catalog import Extent, SqlRunner

HASH_FUNCTION_NAME = "sqlfeed_hash"
"""The SQL name under which :func:`row_hash` is registered on a SQLite connection."""


def row_hash(*values: Any) -> int:
    """A stable, non-negative 32-bit hash of a row's values (SQLite has no hash function).

    Stable across processes and Python versions (unlike ``hash()``, which is salted),
    and distinguishes NULL from every value and each storage class from the others.

    >>> row_hash(1, None, "a") == row_hash(1, None, "a")
    True
    >>> row_hash(None) != row_hash("")
    True
    """
    crc = 0
    for value in values:
        if value is None:
            chunk = b"\x00"
        elif isinstance(value, int):
            # SQLite integers are 64-bit signed; the byte form keeps 1 and 1.0 apart.
            chunk = b"\x01" + struct.pack("<q", value)
        elif isinstance(value, float):
            chunk = b"\x02" + struct.pack("<d", value)
        elif isinstance(value, str):
            chunk = b"\x03" + value.encode("utf-8", "surrogatepass")
        else:
            chunk = b"\x04" + bytes(value)
        crc = zlib.crc32(struct.pack("<I", len(chunk)) + chunk, crc)
    return crc


QUEUE_CAVEAT = (
    "a SQLite queue serves the processes of one machine, and cannot take a lease over "
    "from a worker that is frozen (SIGSTOP, swapped out) inside one of its queue "
    "transactions: every other worker waits until it resumes or dies; a PostgreSQL or "
    "MariaDB queue ends such a session within seconds"
)
"""What a SQLite lease queue cannot guarantee: the write lock belongs to a process, and no
server can end it, so a worker frozen inside a write transaction stalls every writer until
it resumes or dies."""


SQLITE_SINK_TYPES = MappingProxyType(
    {
        "bool": "BOOLEAN",
        "int8": "INTEGER",
        "int16": "INTEGER",
        "int32": "INTEGER",
        "int64": "INTEGER",
        "uint8": "INTEGER",
        "uint16": "INTEGER",
        "uint32": "INTEGER",
        "float32": "REAL",
        "float64": "REAL",
        "decimal": "TEXT",
        "string": "TEXT",
        "binary": "BLOB",
        "null": "TEXT",
    }
)
"""SQLite's declared column type per value kind (:meth:`SQLite.sink_type`)."""


class SQLite(Dialect):
    """SQLite: :func:`row_hash` registered as a deterministic SQL function."""

    name = "sqlite"
    aliases = ("sqlite3",)
    sqlglot_dialect = "sqlite"
    HASH_FUNCTION = HASH_FUNCTION_NAME
    HASH_IS_UNSIGNED = True
    TITLE = "SQLite"
    EMBEDS_QUERY_TEXT = True
    RENDERED_SYNONYMS = MappingProxyType(
        {"COALESCE": frozenset({"IFNULL"}), "SUBSTRING": frozenset({"SUBSTR"})}
    )
    FILE_DATABASE = True
    WRITTEN_WHILE_READ = True
    PHYSICAL_ADDRESS = True
    ROWS_FROM_EXTENT = True
    PINNED_DRIVER = "sqlite3"
    SNAPSHOT_SYNC = "BEGIN IMMEDIATE (a memory database: one session)"
    FLOAT_NAN = False  # a NaN is stored as NULL
    ORDERED_AGGREGATES_SINCE = "SQLite 3.44"
    QUEUE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
    QUEUE_CAVEAT = QUEUE_CAVEAT
    QUEUE_WRITE_BEGIN = "BEGIN IMMEDIATE"
    TRANSACTIONAL_DDL = True
    SIDE_EFFECT_FUNCTIONS = effects.SQLITE
    SINK_TZ_AS_UTC = True
    SINK_AS_TEXT = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this=HASH_FUNCTION_NAME, expressions=args)

    def integer_division(self, dividend: exp.Expr, divisor: exp.Expr) -> exp.Expr:
        """``a / b``: SQLite divides integers as integers (sqlglot's form goes through REAL)."""
        return exp.Div(this=dividend, expression=divisor, typed=True)

    def register_functions(self, connection: Any) -> None:
        """Register ``sqlfeed_hash`` on a ``sqlite3`` connection (or one that wraps it)."""
        connection.create_function(HASH_FUNCTION_NAME, -1, row_hash, deterministic=True)

    # -- the table sink -----------------------------------------------------------------

    def sink_type(
        self,
        kind: str,
        *,
        precision: int | None = None,
        scale: int | None = None,
        unit: str | None = None,
        tz: str | None = None,
        length: int | None = None,
        version: str = "",
    ) -> str | None:
        """SQLite's declared types (:data:`SQLITE_SINK_TYPES`).

        SQLite types values, not columns, and sqlfeed reads them by their values: a ``bool``
        reads back as the integer 0 or 1. Where SQLite has no value of the kind, the column
        is TEXT (TEXT affinity: a value stays text) and the writer binds the value's text,
        which keeps it exactly and reads back as a string: a ``decimal``'s digits
        (``str(Decimal)``; REAL would keep 15 of them); a ``date``, ``timestamp`` or
        ``time`` in ISO 8601 (``YYYY-MM-DD``, ``YYYY-MM-DD HH:MM:SS.ffffff``,
        ``HH:MM:SS.ffffff``), SQLite's date functions' form, a zone-aware timestamp as its
        naive UTC time (:attr:`SINK_TZ_AS_UTC`). No ``uint64`` (an integer is 64-bit
        signed), no duration, microseconds at most (``ns`` units: None). NaN would be
        stored as NULL: the sink refuses it (:attr:`FLOAT_NAN`).
        """
        check_sink_kind(kind)
        if kind in ("date", "timestamp", "time"):
            return "TEXT" if unit in EXACT_UNITS else None
        return SQLITE_SINK_TYPES.get(kind)

    # -- catalog ------------------------------------------------------------------------

    def swap_sql(
        self, table: exp.Table, staging: exp.Table, old_name: str | exp.Identifier
    ) -> list[str]:
        """The two renames, with ``legacy_alter_table`` on first.

        Else SQLite rewrites the views and triggers naming the table to name the old one,
        which is then dropped (they break); so they name the new table.
        """
        return ["PRAGMA legacy_alter_table = ON", *super().swap_sql(table, staging, old_name)]

    def add_key_sql(self, table: exp.Table, columns: list[str], unique: bool) -> str | None:
        """None: SQLite cannot add a key to a table, so the staging table is made with it.

        Its writers take turns anyway: an attempt that loses never commits.
        """
        return None

    def physical_extent(self, source: SqlRunner, table: exp.Table, quoted: str) -> Extent | str:
        """Rowids from ``MIN(rowid)`` to ``MAX(rowid)``, both read off the b-tree's ends."""
        literal = _literal(table.name)
        where = f"WHERE lower(schema) = lower({_literal(table.db)}) " if table.db else ""
        found = source.rows(
            f"SELECT type, wr, schema FROM pragma_table_list({literal}) {where}ORDER BY CASE "
            "schema WHEN 'temp' THEN 0 WHEN 'main' THEN 1 ELSE 2 END LIMIT 1",  # SQLite's order
            what="catalog query",
        )
        if not found or found[0][0] != "table":
            return f"{quoted} is not a base table (a view, or not found)"
        if found[0][1]:
            return f"{quoted} is a WITHOUT ROWID table: it has no rowid to cut ranges of"
        columns = {
            str(r[0]).casefold()
            for r in source.rows(
                f"SELECT name FROM pragma_table_info({literal}, {_literal(str(found[0][2]))})",
                what="catalog query",
            )
        }
        address = next((a for a in ("rowid", "_rowid_", "oid") if a not in columns), None)
        if address is None:
            return f"{quoted} has columns named rowid, _rowid_ and oid: they hide its rowid"
        # One aggregate per query: SQLite reads MIN or MAX of the rowid off the b-tree's end
        # only when it is alone; together they scan the table.
        low = source.scalar(f"SELECT MIN({address}) FROM {quoted}", what="catalog query")
        high = source.scalar(f"SELECT MAX({address}) FROM {quoted}", what="catalog query")
        if low is None or high is None:
            return Extent(0, 0, 0.0, "its rowid span", address, "rowids")
        return Extent(
            int(low),
            int(high) + 1,
            float(int(high) - int(low) + 1),
            "its rowid span, an upper bound after deletes",
            address,
            "rowids",
        )

    def primary_key_sql(self, table: exp.Table, quoted: str) -> str | None:
        return (
            f"SELECT name, type FROM pragma_table_info({_literal(table.name)}) WHERE pk > 0 "
            "ORDER BY pk"
        )

    def unique_keys_sql(self, table: exp.Table) -> str | None:
        """An INTEGER PRIMARY KEY alone is the rowid: never NULL, whatever it declares."""
        name = _literal(table.name)
        return (
            'SELECT il.name, ii.name, ti."notnull" OR (ti.pk = 1 AND lower(ti.type) = '
            "'integer' AND (SELECT COUNT(*) FROM pragma_table_info(" + name + ") WHERE pk > 0) "
            f"= 1) FROM pragma_index_list({name}) il, pragma_index_info(il.name) ii "
            f"JOIN pragma_table_info({name}) ti ON ti.name = ii.name "
            'WHERE il."unique" = 1 AND il.partial = 0 UNION ALL '
            "SELECT 'primary key', name, \"notnull\" OR (lower(type) = 'integer' AND "
            f"(SELECT COUNT(*) FROM pragma_table_info({name}) WHERE pk > 0) = 1) "
            f"FROM pragma_table_info({name}) WHERE pk > 0"
        )

    # -- scratch tables -----------------------------------------------------------------

    def scratch_index(self, table: exp.Table, name: str, schema: str, column: str) -> exp.Create:
        """SQLite qualifies the index with the schema, not its table."""
        return exp.Create(
            kind="INDEX",
            this=exp.Index(
                this=exp.table_(f"{name}_rn", db=schema),
                table=exp.table_(name),
                params=exp.IndexParameters(columns=[exp.column(column)]),
            ),
        )

    def scratch_tables_sql(self, schema: str) -> str:
        return (
            f"SELECT name, NULL, NULL, NULL FROM {self.sql(exp.to_identifier(schema))}"
            ".sqlite_master WHERE type = 'table'"
        )

    def table_names_sql(self, schema: str) -> str:
        return f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'"

    # -- values -------------------------------------------------------------------------

    def infinity(self) -> exp.Expr:
        """``9e999``: SQLite reads an overflowing literal as infinity."""
        return exp.Literal.number("9e999")

    # -- the lease queue ----------------------------------------------------------------

    def insert_ignoring(self, table: str, values: str) -> str:
        return f"INSERT OR IGNORE INTO {table} VALUES {values}"

    def queue_connect_args(self, bounds: QueueBounds, driver: str = "") -> dict[str, Any]:
        """sqlite3's busy timeout, and the connection usable from the queue's threads."""
        return {"timeout": bounds.busy_ms / 1000, "check_same_thread": False}

    def queue_session_sql(self, version: str, bounds: QueueBounds) -> list[str]:
        """A short busy timeout and WAL, so that reads never wait for the writer.

        The queue retries with jittered pauses.
        """
        return [f"PRAGMA busy_timeout={bounds.busy_ms}", "PRAGMA journal_mode=WAL"]


def _literal(text: str) -> str:
    return exp.Literal.string(text).sql("sqlite")
