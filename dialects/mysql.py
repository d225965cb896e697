"""MySQL and MariaDB."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from sqlglot import exp

from sqlfeed.dialects import effects
from sqlfeed.dialects.base import (
    EXACT_UNITS,
    MICROSECONDS,
    Dialect,
    QueueBounds,
    check_sink_kind,
    conv_md5_head,
    decimal_type,
    sink_identifier,
)
from sqlfeed.dialects.catalog import SqlRunner

MYSQL_SINK_TYPES = MappingProxyType(
    {
        "bool": "BOOLEAN",
        "int8": "TINYINT",
        "int16": "SMALLINT",
        "int32": "INT",
        "int64": "BIGINT",
        "uint8": "TINYINT UNSIGNED",
        "uint16": "SMALLINT UNSIGNED",
        "uint32": "INT UNSIGNED",
        "uint64": "BIGINT UNSIGNED",
        "float32": "DOUBLE",
        "float64": "DOUBLE",
        "binary": "LONGBLOB",
        "date": "DATE",
    }
)
"""MySQL/MariaDB's column type per value kind that needs no parameter (:meth:`MySQL.sink_type`).
A ``float32`` goes into a DOUBLE: the text protocol writes a FLOAT with 6 digits."""

SINK_TEXT_COLLATION = "utf8mb4_bin"
"""The text columns' collation where the server's version is not known: binary, which every
MySQL and MariaDB has, but PAD SPACE ('a' = 'a ')."""


class MySQL(Dialect):
    """MySQL / MariaDB: ``CRC32(CONCAT_WS(sep, ...))``.

    ``CONCAT_WS`` skips NULL arguments (it returns NULL only for a NULL separator), so the
    hash input is never NULL; ``ISNULL(x)`` is added before each value so that NULL and
    the empty string hash apart. CRC32 is unsigned 32-bit. Derived tables cannot rename
    their columns, but CTEs can (MySQL 8, MariaDB 10.2).
    """

    name = "mysql"
    aliases = ("mariadb",)
    sqlglot_dialect = "mysql"
    HASH_FUNCTION = "CRC32"
    HASH_IS_UNSIGNED = True
    TITLE = "MySQL/MariaDB"
    EXACT_SUMS = True
    EMBEDS_QUERY_TEXT = True
    RENDERED_SYNONYMS = MappingProxyType({"COALESCE": frozenset({"IFNULL"})})
    KEY_BOUNDS_FROM_INDEX = True
    CLUSTERED_PRIMARY_KEY = True
    WRITTEN_WHILE_READ = True
    PINNED_DRIVER = "pymysql"
    SNAPSHOT_SYNC = "LOCK TABLES ... READ on the tables read (else FLUSH TABLES WITH READ LOCK)"
    CREATES_SCRATCH_SCHEMA = True
    FLOAT_NAN = False
    FLOAT_INFINITY = False
    OUTER_MODIFIERS = frozenset(
        ("SQL_NO_CACHE", "SQL_CACHE", "SQL_CALC_FOUND_ROWS", "HIGH_PRIORITY", "SQL_BUFFER_RESULT")
    )
    """Taken only in the outermost SELECT; they change no row (a cache, a priority,
    FOUND_ROWS()), so a derived table leaves them out."""
    GROUPED_PUSHDOWN_FENCE = True
    QUEUE_NOW = "UNIX_TIMESTAMP(NOW(6))"
    QUEUE_LOCK_CLAUSE = " FOR UPDATE SKIP LOCKED"
    QUEUE_ISOLATION = "READ COMMITTED"
    SERVER_VERSION_SQL = "SELECT VERSION()"
    SINK_TZ_AS_UTC = True
    SIDE_EFFECT_FUNCTIONS = effects.MYSQL

    def collation_tiebreak(self, arg: exp.Expr) -> exp.Expr | None:
        """``CAST(x AS BINARY)``: the default collations hold 'a' = 'A' = 'a ' in ORDER BY."""
        return exp.cast(arg, exp.DataType.build("BINARY", dialect="mysql"))

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        parts: list[exp.Expr] = [exp.Literal.string("|")]
        for arg in args:
            parts.append(exp.Anonymous(this="ISNULL", expressions=[arg.copy()]))
            parts.append(arg)
        return exp.Anonymous(
            this="CRC32", expressions=[exp.Anonymous(this="CONCAT_WS", expressions=parts)]
        )

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """``CAST(CONV(SUBSTRING(MD5(t), 1, 7), 16, 10) AS SIGNED)``.

        MD5 of the text's bytes in its character set (UTF-8 for utf8mb4 columns and
        sqlfeed's connections).
        """
        return conv_md5_head(text)

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
        """MySQL/MariaDB's types (:data:`MYSQL_SINK_TYPES`).

        ``DECIMAL(p,s)`` up to p 65 and s 30; ``DATETIME(6)`` for every timestamp, a
        zone-aware one written as the naive UTC time of its instant (:attr:`SINK_TZ_AS_UTC`;
        TIMESTAMP would shift by the session's zone and ends in 2038); ``TIME(6)`` for a
        time of day, which reads back as the duration since midnight; microseconds at most
        (``ns`` units: None); no duration (a TIME spans +-838 hours). Text (and a column of
        NULLs) in utf8mb4 with the binary NO PAD collation of :meth:`queue_name_collation`
        for ``version`` (MariaDB's ``utf8mb4_nopad_bin``, MySQL 8's ``utf8mb4_0900_bin``):
        a key compares like Arrow, 'a', 'A' and 'a ' apart (``utf8mb4_bin`` pads: 'a' =
        'a '), and the trailing spaces are kept; without a ``version``,
        :data:`SINK_TEXT_COLLATION`. With a ``length`` (a key column: LONGTEXT and LONGBLOB
        cannot be indexed whole), text is ``VARCHAR(length)`` and binary
        ``VARBINARY(length)``.
        """
        check_sink_kind(kind)
        if kind in ("string", "null"):
            long = "LONGTEXT" if length is None else f"VARCHAR({length})"
            text = "TEXT" if kind == "null" else long
            collation = self.queue_name_collation(version) if version else SINK_TEXT_COLLATION
            return f"{text} CHARACTER SET utf8mb4 COLLATE {collation}"
        if length is not None and kind == "binary":
            return f"VARBINARY({length})"
        if kind == "decimal":
            found = decimal_type("DECIMAL", precision, scale, 65)
            return found if found and (scale or 0) <= 30 else None
        if kind in ("timestamp", "time"):
            if unit not in EXACT_UNITS:
                return None
            return "DATETIME(6)" if kind == "timestamp" else "TIME(6)"
        return MYSQL_SINK_TYPES.get(kind)

    def rename_sql(self, table: exp.Table, new_name: str | exp.Identifier) -> list[str]:
        """``RENAME TABLE db.t TO db.n``."""
        return [f"RENAME TABLE {self.sql(table)} TO {self.sql(_beside(table, new_name))}"]

    def swap_sql(
        self, table: exp.Table, staging: exp.Table, old_name: str | exp.Identifier
    ) -> list[str]:
        """``RENAME TABLE t TO old, staging TO t``: one statement, atomic (DDL commits)."""
        old = self.sql(_beside(table, old_name))
        target = self.sql(_beside(staging, table.this))
        return [f"RENAME TABLE {self.sql(table)} TO {old}, {self.sql(staging)} TO {target}"]

    def add_key_sql(self, table: exp.Table, columns: list[str], unique: bool) -> str | None:
        """``ALTER TABLE t ADD PRIMARY KEY (...)``, or ``ADD UNIQUE KEY sqlfeed_key (...)``.

        Named, so a finish run again after one killed between this implicitly committed
        statement and the rename is told the key is there (MySQL error 1068 or 1061) instead
        of adding a second index.
        """
        names = ", ".join(self.sql(exp.to_identifier(c, quoted=True)) for c in columns)
        kind = "UNIQUE KEY `sqlfeed_key`" if unique else "PRIMARY KEY"
        return f"ALTER TABLE {self.sql(table)} ADD {kind} ({names})"

    def finish_lock_sql(self, name: str) -> tuple[str, str] | None:
        """``GET_LOCK(name, 60)`` / ``RELEASE_LOCK(name)``: a session's lock.

        ``name`` is at most 64 characters.
        """
        literal = _literal(name)
        return f"SELECT GET_LOCK({literal}, 60)", f"SELECT RELEASE_LOCK({literal})"

    # -- catalog ------------------------------------------------------------------------

    def catalog_row_estimate(self, source: SqlRunner, table: exp.Table) -> tuple[int, str] | None:
        """``information_schema.tables.table_rows``: exact for MyISAM, an estimate for InnoDB.

        0 (maybe stale statistics) is no estimate.
        """
        schema = _literal(table.db) if table.db else "DATABASE()"
        found = source.rows(
            "SELECT table_rows, engine FROM information_schema.tables WHERE table_schema = "
            f"{schema} AND table_name = {_literal(table.name)} AND table_type = 'BASE TABLE'",
            what="catalog query",
        )
        if not found or not found[0][0]:  # 0: maybe stale statistics; count instead
            return None
        kind = "an estimate" if str(found[0][1]).lower() == "innodb" else "exact"
        return int(found[0][0]), f"information_schema.tables.table_rows, {kind}"

    def primary_key_sql(self, table: exp.Table, quoted: str) -> str | None:
        return (
            "SELECT k.COLUMN_NAME, c.DATA_TYPE FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND "
            "c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME "
            "WHERE k.CONSTRAINT_NAME = 'PRIMARY' AND k.TABLE_SCHEMA = DATABASE() "
            f"AND k.TABLE_NAME = {_literal(table.name)} ORDER BY k.ORDINAL_POSITION"
        )

    def unique_keys_sql(self, table: exp.Table) -> str | None:
        """A prefix index (``SUB_PART``) is no key of the whole value."""
        schema = _literal(table.db) if table.db else "DATABASE()"
        return (
            "SELECT INDEX_NAME, COLUMN_NAME, CASE WHEN NULLABLE = 'YES' OR SUB_PART IS NOT "
            "NULL THEN 0 ELSE 1 END FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 "
            f"AND TABLE_SCHEMA = {schema} AND TABLE_NAME = {_literal(table.name)}"
        )

    # -- scratch tables -----------------------------------------------------------------

    def prepare_scratch_schema(self, source: SqlRunner, schema: str, probe: str) -> str | None:
        """The database created if missing, then a probe table created and dropped in it.

        What the server refuses (a read-only server, no privilege) is raised.
        """
        name = exp.to_identifier(schema)
        source.execute(f"CREATE DATABASE IF NOT EXISTS {name.sql('mysql')}", what="scratch schema")
        table = exp.table_(probe, db=name)
        source.execute(f"CREATE TABLE {table.sql('mysql')} (x INT)", what="scratch probe")
        drop = exp.Drop(kind="TABLE", tables=[table], exists=True)
        source.execute(self.sql(drop), what="scratch clean-up")
        return None

    def scratch_tables_sql(self, schema: str) -> str:
        return (
            "SELECT table_name, data_length + index_length, table_rows, "
            "NULLIF(table_comment, '') "
            f"FROM information_schema.tables WHERE table_schema = {_literal(schema)}"
        )

    def scratch_comment_sql(self, table: exp.Table, text: str) -> str | None:
        """``ALTER TABLE ... COMMENT``: a change of the table's metadata only (no copy)."""
        return f"ALTER TABLE {self.sql(table)} COMMENT = {_literal(text)}"

    # -- values -------------------------------------------------------------------------

    def epoch_days(self, column: exp.Expr) -> exp.Expr | None:
        return exp.Anonymous(
            this="DATEDIFF", expressions=[column.copy(), exp.Literal.string("1970-01-01")]
        )

    def epoch_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        return exp.Anonymous(
            this="TIMESTAMPDIFF",
            expressions=[
                exp.var("MICROSECOND"),
                exp.Literal.string("1970-01-01 00:00:00"),
                column.copy(),
            ],
        )

    def clock_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        return self.duration_microseconds(column)

    def duration_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """A TIME, which is a duration (HOUR() and the others are unsigned: the sign apart)."""
        parts: exp.Expr = exp.Anonymous(this="MICROSECOND", expressions=[column.copy()])
        for field, factor in MICROSECONDS.items():
            value = exp.Anonymous(this=field, expressions=[column.copy()])
            scaled = exp.Mul(this=value, expression=exp.Literal.number(factor))
            parts = exp.Add(this=parts, expression=scaled)
        negative = exp.LT(this=column.copy(), expression=exp.Literal.string("00:00:00"))
        sign = exp.Case(
            ifs=[exp.If(this=negative, true=exp.Literal.number(-1))], default=exp.Literal.number(1)
        )
        return exp.Mul(this=sign, expression=exp.paren(parts))

    # -- the lease queue ----------------------------------------------------------------

    def insert_ignoring(self, table: str, values: str) -> str:
        return f"INSERT IGNORE INTO {table} VALUES {values}"

    def queue_connect_args(self, bounds: QueueBounds, driver: str = "") -> dict[str, Any]:
        """The socket read and write timeouts of pymysql and mysqlclient (none by default).

        A connection the server ended without a word (a killed session on a loaded server,
        a network gone) then fails after ``bounds.socket_s`` seconds as a lost one, and the
        queue call is tried again. Other drivers: none.
        """
        if driver not in ("pymysql", "mysqldb"):
            return {}
        return {
            "read_timeout": bounds.socket_s,
            "write_timeout": bounds.socket_s,
            "connect_timeout": min(bounds.socket_s, 10),
        }

    def queue_session_sql(self, version: str, bounds: QueueBounds) -> list[str]:
        """``innodb_lock_wait_timeout``; MariaDB's ``idle_transaction_timeout``.

        MySQL (which has none) ends a silent session by ``wait_timeout`` instead.
        """
        statements = [f"SET SESSION innodb_lock_wait_timeout = {bounds.lock_wait_s}"]
        if "mariadb" in version.lower():
            statements.append(f"SET SESSION idle_transaction_timeout = {bounds.idle_transaction_s}")
        else:
            statements.append(f"SET SESSION wait_timeout = {bounds.silent_session_s}")
        return statements

    def queue_name_collation(self, version: str) -> str | None:
        """MariaDB's ``utf8mb4_nopad_bin``, MySQL 8's ``utf8mb4_0900_bin``.

        The default ``_ci`` collations ignore case and both ignore trailing spaces
        (``utf8mb4_bin`` is PAD SPACE too): ``ISO-A`` would name job ``iso-a``.
        """
        return "utf8mb4_nopad_bin" if "mariadb" in version.lower() else "utf8mb4_0900_bin"

    def queue_collations_sql(self, tables: Sequence[str]) -> str | None:
        names = ", ".join(_literal(t) for t in tables)
        return (
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({names}) "
            "AND COLLATION_NAME IS NOT NULL"
        )

    def modify_columns_sql(self, table: str, definitions: Sequence[str]) -> str | None:
        """``ALTER TABLE t MODIFY ..., MODIFY ...``: one copy of the table for all."""
        quoted = self.sql(exp.to_identifier(table, quoted=True))
        return f"ALTER TABLE {quoted} " + ", ".join(f"MODIFY {d}" for d in definitions)


def _literal(text: str) -> str:
    return exp.Literal.string(text).sql("mysql")


def _beside(table: exp.Table, name: str | exp.Identifier) -> exp.Table:
    """A table named ``name`` in ``table``'s database."""
    found = table.copy()
    found.set("this", sink_identifier(name))
    return found
