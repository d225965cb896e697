"""DuckDB, the embedded default engine."""

from __future__ import annotations

from types import MappingProxyType

from sqlglot import exp

from sqlfeed.dialects import effects
from sqlfeed.dialects.base import (
    EXACT_UNITS,
    Dialect,
    check_sink_kind,
    days_since_1970,
    decimal_type,
    md5_hex_head,
)
from sqlfeed.dialects.catalog import Extent, SqlRunner

ROW_GROUP = 122_880
"""Rows in a DuckDB row group (its default ``row_group_size``)."""


DUCKDB_SINK_TYPES = MappingProxyType(
    {
        "bool": "BOOLEAN",
        "int8": "TINYINT",
        "int16": "SMALLINT",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "uint8": "UTINYINT",
        "uint16": "USMALLINT",
        "uint32": "UINTEGER",
        "uint64": "UBIGINT",
        "float32": "FLOAT",
        "float64": "DOUBLE",
        "string": "VARCHAR",
        "binary": "BLOB",
        "date": "DATE",
        "null": "VARCHAR",
    }
)
"""DuckDB's column type per value kind that needs no parameter (:meth:`DuckDB.sink_type`)."""

DUCKDB_TIMESTAMPS = MappingProxyType(
    {
        "s": "TIMESTAMP_S",
        "ms": "TIMESTAMP_MS",
        "us": "TIMESTAMP",
        None: "TIMESTAMP",
        "ns": "TIMESTAMP_NS",
    }
)
"""DuckDB's naive timestamp type per time unit."""


class DuckDB(Dialect):
    """DuckDB: ``hash(...)`` is variadic, NULL-safe and returns UBIGINT."""

    name = "duckdb"
    # dataset:///folder: a shardset dataset; iceberg:, delta: lakehouse tables (all in DuckDB)
    aliases = ("dataset", "iceberg", "delta")
    sqlglot_dialect = "duckdb"
    EXACT_SUMS = True
    HASH_FUNCTION = "hash"
    HASH_IS_UNSIGNED = True
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    SAMPLE_DERIVED_TABLES = True
    DERIVED_COLUMN_LIST = True
    WHOLE_ROW_HASH = True
    GROUPING_SETS = True
    TITLE = "DuckDB"
    EMBEDS_QUERY_TEXT = True
    FETCH_WITH_TIES = False
    RENDERED_SYNONYMS = MappingProxyType(
        {
            "LISTAGG": frozenset({"STRING_AGG", "GROUP_CONCAT"}),
            "LENGTH": frozenset({"LEN"}),
            "ARRAY_CONTAINS": frozenset({"LIST_CONTAINS", "LIST_HAS"}),
            "ARRAY_AGG": frozenset({"LIST"}),
            # USING SAMPLE 10% (bernoulli, 7): the method and seed spelled out
            **{w: frozenset({"USING"}) for w in ("PERCENT", "BERNOULLI", "SYSTEM", "REPEATABLE")},
        }
    )
    FILE_DATABASE = True
    SINK_ONE_PROCESS = True
    PHYSICAL_ADDRESS = True
    ROW_GROUP_ROWS = ROW_GROUP
    READS_FILES = True
    MEMORY_URLS = True
    SCRATCH_ROW_NUMBER_INDEX = False
    TRANSACTIONAL_DDL = True
    SIDE_EFFECT_FUNCTIONS = effects.DUCKDB

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="hash", expressions=args)

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """``CAST('0x' || SUBSTRING(MD5(t), 1, 7) AS BIGINT)``: DuckDB reads 0x hex."""
        hexed = exp.DPipe(
            this=exp.Literal.string("0x"), expression=md5_hex_head(exp.MD5(this=text))
        )
        return exp.cast(hexed, exp.DataType.Type.BIGINT)

    def whole_row_hash(self, alias: str | exp.Identifier) -> exp.Expr:
        """``hash(q)``: the row of relation ``q`` as a struct, hashed as ``hash(a, b, ...)``."""
        ident = exp.to_identifier(alias, quoted=True) if isinstance(alias, str) else alias
        return exp.Anonymous(this="hash", expressions=[exp.column(ident.copy())])

    def quantiles(self, arg: exp.Expr, fractions: list[float]) -> exp.Expr | None:
        points = exp.Array(expressions=[exp.Literal.number(repr(f)) for f in fractions])
        return exp.PercentileDisc(this=arg, expression=points)

    # -- catalog ------------------------------------------------------------------------

    def physical_extent(self, source: SqlRunner, table: exp.Table, quoted: str) -> Extent | str:
        """Rowids up to ``MAX(rowid)``; the row estimate of ``duckdb_tables()``."""
        schema = exp.Literal.string(table.db or "main").sql("duckdb")
        found = source.rows(
            "SELECT estimated_size FROM duckdb_tables() WHERE lower(table_name) = lower("
            f"{exp.Literal.string(table.name).sql('duckdb')}) AND lower(schema_name) = "
            f"lower({schema})",
            what="catalog query",
        )
        if not found:
            return f"{quoted} is not a base table (a view, or not found)"
        span = source.scalar(f"SELECT MAX(rowid) FROM {quoted}", what="catalog query")
        high = int(span) + 1 if span is not None else 0
        return Extent(
            0, high, float(found[0][0] or 0), "duckdb_tables().estimated_size", "rowid", "rowids"
        )

    def primary_key_sql(self, table: exp.Table, quoted: str) -> str | None:
        name = exp.Literal.string(table.name).sql("duckdb")
        return (
            "SELECT c.column_name, c.data_type FROM duckdb_constraints() k, "
            "unnest(k.constraint_column_names) AS u(column_name) JOIN duckdb_columns() c "
            "ON c.table_name = k.table_name AND c.column_name = u.column_name "
            "WHERE k.constraint_type = 'PRIMARY KEY' AND lower(k.table_name) = "
            f"lower({name}) ORDER BY list_position(k.constraint_column_names, "
            "u.column_name)"
        )

    def unique_keys_sql(self, table: exp.Table) -> str | None:
        name = exp.Literal.string(table.name).sql("duckdb")
        schema = exp.Literal.string(table.db).sql("duckdb") if table.db else "current_schema()"
        return (
            "SELECT k.constraint_index, u.column_name, NOT c.is_nullable "
            "FROM duckdb_constraints() k, unnest(k.constraint_column_names) AS u(column_name) "
            "JOIN duckdb_columns() c ON c.database_name = k.database_name AND c.schema_name = "
            "k.schema_name AND c.table_name = k.table_name AND c.column_name = u.column_name "
            "WHERE k.constraint_type IN ('PRIMARY KEY', 'UNIQUE') AND lower(k.table_name) = "
            f"lower({name}) AND lower(k.schema_name) = lower({schema})"
        )

    def scratch_tables_sql(self, schema: str) -> str:
        return (
            "SELECT table_name, NULL, estimated_size, comment FROM duckdb_tables() "
            f"WHERE schema_name = {exp.Literal.string(schema).sql('duckdb')}"
        )

    def scratch_comment_sql(self, table: exp.Table, text: str) -> str | None:
        literal = exp.Literal.string(text).sql("duckdb")
        return f"COMMENT ON TABLE {self.sql(table)} IS {literal}"

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
        """DuckDB's types (:data:`DUCKDB_SINK_TYPES`), unsigned integers included.

        ``DECIMAL(p,s)`` up to p 38; a naive timestamp in the type of its unit
        (:data:`DUCKDB_TIMESTAMPS`), a zone-aware one in ``TIMESTAMPTZ`` (microseconds; its
        instant, read back in UTC); ``TIME`` (microseconds). No duration: an INTERVAL reads
        back as Arrow's month-day-nano interval, not a duration.
        """
        check_sink_kind(kind)
        if kind == "decimal":
            return decimal_type("DECIMAL", precision, scale, 38)
        if kind == "timestamp":
            if tz is None:
                return DUCKDB_TIMESTAMPS.get(unit)
            return "TIMESTAMPTZ" if unit in EXACT_UNITS else None
        if kind == "time":
            return "TIME" if unit in EXACT_UNITS else None
        return DUCKDB_SINK_TYPES.get(kind)

    # -- values -------------------------------------------------------------------------

    def epoch_days(self, column: exp.Expr) -> exp.Expr | None:
        return days_since_1970(column)

    def epoch_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        return exp.Anonymous(this="epoch_us", expressions=[column.copy()])

    def clock_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        return exp.Anonymous(this="epoch_us", expressions=[column.copy()])

    def unnest_elements(self, value: exp.Expr, depth: int) -> exp.Expr | None:
        """The inner levels flattened (``flatten``), the outer one unnested."""
        for _ in range(depth - 1):
            value = exp.Anonymous(this="flatten", expressions=[value])
        return value
