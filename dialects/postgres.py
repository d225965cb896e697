"""PostgreSQL."""

from __future__ import annotations

from types import MappingProxyType

from sqlglot import exp

from sqlfeed.dialects import effects
from sqlfeed.dialects.base import (
    EXACT_UNITS,
    MICROSECONDS,
    Dialect,
    QueueBounds,
    check_sink_kind,
    days_since_1970,
    decimal_type,
    md5_hex_head,
)
from sqlfeed.dialects.catalog import Extent, SqlRunner

HASHABLE_TYPE_OIDS = frozenset(
    {
        16,
        17,
        18,
        19,
        20,
        21,
        23,
        25,
        26,
        700,
        701,
        869,
        1042,
        1043,
        1082,
        1083,
        1114,
        1184,
        1186,
        1266,
        1700,
        2950,
        3802,  # bool bytea char name ints oid floats inet
        # text varchar date time timestamp(tz) interval timetz numeric uuid jsonb
        1000,
        1001,
        1005,
        1007,
        1009,
        1014,
        1015,
        1016,
        1021,
        1022,
        1028,
        1115,
        1182,
        1183,
        1185,
        1187,
        1231,
        2951,
        3807,  # arrays of the above
    }
)
"""Type OIDs with an extended hash function (a hash opclass): usable by hash_record_extended.

Columns of other types (json, xml, point, money, bit, tsvector, user types) are cast to
text before hashing.
"""


POSTGRES_SINK_TYPES = MappingProxyType(
    {
        "bool": "BOOLEAN",
        "int8": "SMALLINT",
        "int16": "SMALLINT",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "uint8": "SMALLINT",
        "uint16": "INTEGER",
        "uint32": "BIGINT",
        "uint64": "NUMERIC(20,0)",
        "float32": "REAL",
        "float64": "DOUBLE PRECISION",
        "string": "TEXT",
        "binary": "BYTEA",
        "date": "DATE",
        "null": "TEXT",
    }
)
"""PostgreSQL's column type per value kind that needs no parameter (:meth:`Postgres.sink_type`)."""


class Postgres(Dialect):
    """PostgreSQL 14+: ``hash_record_extended(ROW(...), 0)``, a signed 64-bit hash.

    It hashes each value's binary form with the type's own hash function: NULL-safe (a
    NULL field hashes as 0), independent of session settings (unlike the text form of a
    row, which follows TimeZone, DateStyle and extra_float_digits), and about twice as
    cheap as hashing ``ROW(...)::text``. Types without a hash function are hashed through
    their text form (the rewriter's ``text_columns``).
    """

    name = "postgres"
    aliases = ("postgresql", "pg")
    sqlglot_dialect = "postgres"
    HASH_FUNCTION = "hash_record_extended"
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    DERIVED_COLUMN_LIST = True
    WHOLE_ROW_HASH = True
    GROUPING_SETS = True
    STATS_SETTINGS = ("SET LOCAL work_mem = '128MB'",)
    """The statistics' hash aggregations (one hash table per column's distinct values) and
    sorts of distinct values stay in memory; PostgreSQL's default 4MB would spill them."""
    TITLE = "PostgreSQL"
    EMBEDS_QUERY_TEXT = True
    PHYSICAL_ADDRESS = True
    ROWS_FROM_EXTENT = True
    KEY_BOUNDS_FROM_INDEX = True
    EXPORTS_SNAPSHOTS = True
    WRITTEN_WHILE_READ = True
    CREATES_SCRATCH_SCHEMA = True
    SCRATCH_BY_PAGES = True
    SCRATCH_ROW_NUMBER_INDEX = False
    FLOAT_UNDERFLOW_RAISES = True
    EXACT_SUMS = True
    QUEUE_NOW = "EXTRACT(EPOCH FROM clock_timestamp())"
    QUEUE_LOCK_CLAUSE = " FOR UPDATE SKIP LOCKED"
    TRANSACTIONAL_DDL = True
    SIDE_EFFECT_FUNCTIONS = effects.POSTGRES

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return self._hash_record(exp.Anonymous(this="ROW", expressions=args))

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """A hex bit string literal, its leading bit 0, read as an integer.

        ``CAST(CAST('x' || LPAD(SUBSTRING(MD5(t) FROM 1 FOR 7), 8, '0') AS BIT(32)) AS
        INT)``.
        """
        padded = exp.Anonymous(
            this="LPAD",
            expressions=[
                md5_hex_head(exp.MD5(this=text)),
                exp.Literal.number(8),
                exp.Literal.string("0"),
            ],
        )
        bits = exp.cast(
            exp.DPipe(this=exp.Literal.string("x"), expression=padded),
            exp.DataType.build("BIT(32)", dialect="postgres"),
        )
        return exp.cast(bits, exp.DataType.Type.INT)

    def whole_row_hash(self, alias: str | exp.Identifier) -> exp.Expr:
        """``hash_record_extended(q, 0)``: the row of relation ``q`` as a record.

        Every column's type needs a hash function: json, xml, point... fail.
        """
        ident = exp.to_identifier(alias, quoted=True) if isinstance(alias, str) else alias
        return self._hash_record(exp.column(ident.copy()))

    def quantiles(self, arg: exp.Expr, fractions: list[float]) -> exp.Expr | None:
        points = exp.Array(expressions=[exp.Literal.number(repr(f)) for f in fractions])
        order = exp.Order(expressions=[exp.Ordered(this=arg, nulls_first=False)])
        return exp.WithinGroup(this=exp.PercentileDisc(this=points), expression=order)

    @staticmethod
    def _hash_record(record: exp.Expr) -> exp.Expr:
        return exp.Anonymous(
            this="hash_record_extended", expressions=[record, exp.Literal.number(0)]
        )

    # -- catalog ------------------------------------------------------------------------

    def physical_extent(self, source: SqlRunner, table: exp.Table, quoted: str) -> Extent | str:
        """Its pages, and ``reltuples`` scaled to its current size as the planner does.

        None when never analyzed.
        """
        name = _literal(quoted)
        rows = source.rows(
            "SELECT c.relkind, pg_relation_size(c.oid) / current_setting('block_size')::int, "
            f"c.reltuples, c.relpages FROM pg_class c WHERE c.oid = to_regclass({name})",
            what="catalog query",
        )
        if not rows or rows[0][0] not in ("r", "m"):
            return f"{quoted} is not a base table (a view, a partitioned table, or not found)"
        pages, tuples, analyzed_pages = int(rows[0][1]), float(rows[0][2]), int(rows[0][3])
        estimate = None
        if tuples > 0:  # -1: never analyzed (0 before PostgreSQL 14): count instead
            estimate = tuples * pages / analyzed_pages if analyzed_pages > 0 else tuples
        return Extent(0, pages, estimate, "pg_class.reltuples", "ctid", "pages")

    def row_address(self, value: int) -> exp.Expr:
        """``'(page,0)'::tid``: the first tuple of a page (a TID range scan, PostgreSQL 14+)."""
        kind = exp.DataType.build("tid", dialect="postgres", udt=True)
        return exp.cast(exp.Literal.string(f"({value},0)"), kind)

    def primary_key_sql(self, table: exp.Table, quoted: str) -> str | None:
        return (
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indrelid = to_regclass({_literal(quoted)}) AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)"
        )

    def unique_keys_sql(self, table: exp.Table) -> str | None:
        plain = table.copy()
        plain.set("alias", None)
        return (
            "SELECT i.indexrelid::regclass::text, a.attname, a.attnotnull FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = "
            "ANY((i.indkey::int2[])[0:i.indnkeyatts - 1]) "
            f"WHERE i.indrelid = to_regclass({_literal(plain.sql('postgres'))}) AND "
            "i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL"
        )

    def key_histogram(self, source: SqlRunner, quoted: str, column: str) -> list[int] | None:
        """The column's ``pg_stats.histogram_bounds`` (equal-count buckets of a sample).

        None when ANALYZE left none (a column of few distinct values has its most common
        values instead).
        """
        found = source.rows(
            "SELECT s.histogram_bounds::text FROM pg_stats s JOIN pg_namespace n ON n.nspname "
            "= s.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = "
            f"s.tablename WHERE c.oid = to_regclass({_literal(quoted)}) AND s.attname = "
            f"{_literal(column)} AND NOT s.inherited",
            what="catalog query",
        )
        if not found or found[0][0] is None:
            return None
        try:
            return [int(value) for value in str(found[0][0]).strip("{}").split(",")]
        except ValueError:
            return None

    # -- scratch tables -----------------------------------------------------------------

    def prepare_scratch_schema(self, source: SqlRunner, schema: str, probe: str) -> str | None:
        """The scratch schema, created when missing.

        Refused on a standby, in a read-only session, or without the CREATE privilege (on
        the schema, or on the database to create it).
        """
        recovery, read_only, exists, allowed, user, database = source.rows(
            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), "
            "n.oid IS NOT NULL, CASE WHEN n.oid IS NULL THEN has_database_privilege("
            "current_database(), 'CREATE') ELSE has_schema_privilege(n.oid, 'CREATE') END, "
            "current_user, current_database() FROM (SELECT 1) AS one LEFT JOIN pg_namespace n "
            f"ON n.nspname = '{schema}'",
            what="catalog query",
        )[0]
        if recovery:
            return "the server is a read-only standby (in recovery)"
        if read_only == "on":
            return "the session is read-only (default_transaction_read_only)"
        if not allowed and exists:
            return f"no CREATE privilege on it (GRANT CREATE ON SCHEMA {schema} TO {user})"
        if not allowed:
            return (
                f"it does not exist and {user} may not create schemas (CREATE SCHEMA "
                f"{schema} AUTHORIZATION {user}, or GRANT CREATE ON DATABASE {database} "
                f"TO {user})"
            )
        if not exists:
            name = exp.to_identifier(schema).sql("postgres")
            source.execute(f"CREATE SCHEMA IF NOT EXISTS {name}", what="scratch schema")
        return None

    def scratch_properties(self) -> list[exp.Expr]:
        """UNLOGGED: a scratch copy needs no write-ahead log (about 2x faster)."""
        return [exp.UnloggedProperty()]

    def relation_pages_sql(self, quoted: str) -> str:
        return (
            f"SELECT pg_relation_size(to_regclass({_literal(quoted)})) / "
            "current_setting('block_size')::int"
        )

    def scratch_tables_sql(self, schema: str) -> str:
        return (
            "SELECT c.relname, pg_total_relation_size(c.oid), GREATEST(c.reltuples, 0)::bigint, "
            "obj_description(c.oid, 'pg_class') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = {_literal(schema)} AND c.relkind IN ('r', 'p')"
        )

    def scratch_comment_sql(self, table: exp.Table, text: str) -> str | None:
        return f"COMMENT ON TABLE {self.sql(table)} IS {_literal(text)}"

    # -- values -------------------------------------------------------------------------

    def epoch_days(self, column: exp.Expr) -> exp.Expr | None:
        return days_since_1970(column)

    def epoch_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """``EXTRACT(EPOCH ...) * 1000000``: an exact numeric (PostgreSQL 14+)."""
        return _epoch_microseconds(column)

    def clock_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        return _epoch_microseconds(column)

    def duration_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """A time or interval as the feeds read it: a year 365 days, a month 30.

        ``EXTRACT(EPOCH ...)`` would count 365.25 and 30.
        """

        def part(field: str, factor: int) -> exp.Expr:
            extract = exp.Extract(this=exp.var(field), expression=column.copy())
            return exp.Mul(this=extract, expression=exp.Literal.number(factor))

        total: exp.Expr = part("HOUR", MICROSECONDS["HOUR"])
        for field in ("MINUTE", "SECOND"):
            total = exp.Add(this=total, expression=part(field, MICROSECONDS[field]))
        days = exp.Add(
            this=exp.Add(this=part("YEAR", 365), expression=part("MONTH", 30)),
            expression=part("DAY", 1),
        )
        day = exp.Literal.number(86_400_000_000)
        return exp.Add(this=exp.Mul(this=exp.paren(days), expression=day), expression=total)

    def unnest_elements(self, value: exp.Expr, depth: int) -> exp.Expr | None:
        """The list itself, one level deep.

        PostgreSQL's unnest flattens every level, so a deeper list (an array of arrays) is
        refused.
        """
        return value if depth <= 1 else None

    # -- the lease queue ----------------------------------------------------------------

    def insert_ignoring(self, table: str, values: str) -> str:
        return f"INSERT INTO {table} VALUES {values} ON CONFLICT DO NOTHING"

    def queue_session_sql(self, version: str, bounds: QueueBounds) -> list[str]:
        """``lock_timeout`` and ``idle_in_transaction_session_timeout``.

        With ``lock_timeout`` a statement waits that long for a lock, then fails and is
        retried; with ``idle_in_transaction_session_timeout`` a frozen session's locks go.
        """
        return [
            f"SET lock_timeout = '{bounds.lock_wait_s}s'",
            f"SET idle_in_transaction_session_timeout = '{bounds.idle_transaction_s}s'",
        ]

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
        """PostgreSQL's types (:data:`POSTGRES_SINK_TYPES`).

        ``NUMERIC(p,s)`` up to p 1000; ``TIMESTAMPTZ`` for a zone-aware timestamp (its
        instant; read back in UTC); ``INTERVAL`` for a duration; microseconds at most
        (``ns`` units: None). Text cannot hold the character NUL.
        """
        check_sink_kind(kind)
        if kind == "decimal":
            return decimal_type("NUMERIC", precision, scale, 1000)
        if kind in ("timestamp", "time", "duration"):
            if unit not in EXACT_UNITS:
                return None
            if kind == "timestamp":
                return "TIMESTAMP" if tz is None else "TIMESTAMPTZ"
            return "TIME" if kind == "time" else "INTERVAL"
        return POSTGRES_SINK_TYPES.get(kind)

    def finish_lock_sql(self, name: str) -> tuple[str, str] | None:
        """``pg_advisory_xact_lock(hashtext(name))``: released when the transaction ends."""
        return f"SELECT pg_advisory_xact_lock(hashtext({_literal(name)}))", ""


def _literal(text: str) -> str:
    return exp.Literal.string(text).sql("postgres")


def _epoch_microseconds(column: exp.Expr) -> exp.Expr:
    seconds = exp.Extract(this=exp.var("EPOCH"), expression=column.copy())
    return exp.Mul(this=seconds, expression=exp.Literal.number(1_000_000))
