"""The planning context and the interface every strategy module implements.

:class:`PlanContext` is what the planner knows about a query before it splits it: the
source, the parsed query, its output columns and Arrow schema, the key columns and the
scratch schema, plus the catalog facts some strategies need (the base table's physical
extent, its primary key), looked up once and kept. The base table is that of a plain
filter over one table (:attr:`PlanContext.table`), or of a plain GROUP BY over one table
(:attr:`PlanContext.grouped`: ranges of a grouping column may filter it before it groups).

A strategy is a module (:mod:`sqlfeed.plans.hash`, :mod:`~sqlfeed.plans.range`,
:mod:`~sqlfeed.plans.physical`, :mod:`~sqlfeed.plans.materialize`,
:mod:`~sqlfeed.plans.fragments`) with the three functions of :class:`Strategy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import pyarrow as pa
from sqlglot import exp

from sqlfeed.io import Source
from sqlfeed.plans.model import Partition
from sqlfeed.sql import ParsedQuery, grouped_output, grouped_table, single_table

__all__ = [
    "Built",
    "Extent",
    "PlanContext",
    "Strategy",
    "expensive",
    "physical_extent",
    "unique_keys",
]

Built = tuple[list[Partition], str | None]
"""What a strategy builds: the partitions, and the scratch table they read (or None)."""


class Strategy(Protocol):
    """One partitioning strategy; each strategy module provides these three functions."""

    def problem(self, ctx: PlanContext, auto: bool = False) -> str | None:
        """Why the strategy cannot split ``ctx``'s query, None when it can.

        The text is the whole error raised when the strategy was asked for. With
        ``auto``, a strategy may also decline a query it could split but should not.
        """

    def reason(self, ctx: PlanContext, auto: bool = False) -> str:
        """Why the strategy was chosen, for :attr:`~sqlfeed.plans.model.Plan.reason`
        (after ``asked for:`` or ``auto:``)."""

    def build(self, ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
        """About ``m`` partitions whose rows add up to exactly the query's rows."""


@dataclass(frozen=True)
class Extent:
    """The physical row addresses of a base table: ``[low, high)`` in ``unit``."""

    low: int
    high: int
    rows: float | None
    """The catalog's row estimate; None when it has none (never analyzed)."""
    rows_from: str
    """Where ``rows`` comes from, for ``plan.reason``."""
    address: str
    """The column holding a row's address: ``ctid``, ``rowid`` (or SQLite's ``_rowid_``,
    ``oid`` when a column named rowid hides it)."""
    unit: str
    """``pages`` (PostgreSQL) or ``rowids``."""


class PlanContext:
    """What the planner knows about one query on one source."""

    strict: bool = False
    """Keep ORDER BYs that may tie as written (``plan(strict=True)``): no tie-breakers."""
    table_keys: list[list[str]] | None = None
    """The unique keys of the query's only base table, when the planner read them."""
    counted_rows: int | None = None
    """The query's exact row count, when the planner counted it (to size M)."""

    def __init__(
        self,
        source: Source,
        parsed: ParsedQuery,
        columns: list[str],
        schema: pa.Schema,
        text_columns: list[str],
        keys: list[str] | None,
        scratch: str | None,
    ) -> None:
        """Keep the facts :func:`sqlfeed.plans.planner.plan` gathered.

        Args:
            source: where the query runs.
            parsed: the query.
            columns: its output column names.
            schema: its Arrow schema.
            text_columns: the output columns that hash as text.
            keys: the key columns the user named (resolved to output columns), or None.
            scratch: a schema sqlfeed may create tables in, or None.
        """
        self.source = source
        self.parsed = parsed
        self.columns = columns
        self.schema = schema
        self.text_columns = text_columns
        self.keys = keys
        self.scratch = scratch
        self.engine = source.dialect
        self.table = single_table(parsed)
        """The table of a plain filter over one table (see :func:`sqlfeed.sql.single_table`)."""
        self.grouped = grouped_table(parsed) if self.table is None else None
        """The table of a plain GROUP BY over one table (see :func:`sqlfeed.sql.grouped_table`)."""
        self.memo: dict[str, Any] = {}
        """What a strategy looked up once and keeps for its other steps (by its own keys)."""

    @property
    def base_table(self) -> exp.Table | None:
        """:attr:`table`, else :attr:`grouped`: the one table whose catalog facts apply."""
        return self.table if self.table is not None else self.grouped

    def quoted_table_name(self) -> str:
        """The query's one table as the engine spells it, without its alias."""
        assert self.base_table is not None
        plain = self.base_table.copy()
        plain.set("alias", None)
        return plain.sql(self.engine.sqlglot_dialect)

    @cached_property
    def physical(self) -> Extent | str:
        """The physical row addresses of the query's base table (PostgreSQL, DuckDB,
        SQLite), or why it has none (a view, not found, a WITHOUT ROWID table)."""
        assert self.base_table is not None
        return physical_extent(self.source, self.base_table, self.quoted_table_name())

    @cached_property
    def catalog_rows(self) -> tuple[int, str] | None:
        """(rows, where the number comes from) of the query's one base table, from the
        catalog or the table's physical extent, without counting; None: no estimate."""
        table = self.base_table
        if table is None:
            return None
        if self.engine.name in ("postgres", "sqlite"):  # DuckDB counts a table for free
            extent = self.physical
            if isinstance(extent, str) or extent.rows is None:
                return None
            return round(extent.rows), extent.rows_from
        if self.engine.name != "mysql":
            return None
        schema = exp.Literal.string(table.db).sql("mysql") if table.db else "DATABASE()"
        found = self.source.rows(
            "SELECT table_rows, engine FROM information_schema.tables WHERE table_schema = "
            f"{schema} AND table_name = {exp.Literal.string(table.name).sql('mysql')} "
            "AND table_type = 'BASE TABLE'",
            what="catalog query",
        )
        if not found or not found[0][0]:  # 0: maybe stale statistics; count instead
            return None
        kind = "an estimate" if str(found[0][1]).lower() == "innodb" else "exact"
        return int(found[0][0]), f"information_schema.tables.table_rows, {kind}"

    @cached_property
    def primary_key(self) -> list[str]:
        """The columns of the query's base table's primary key, in key order, as the catalog
        names them; empty when it has none (or the engine's catalog is not known)."""
        return [str(row[0]) for row in self._primary_key_rows]

    @cached_property
    def integer_primary_key(self) -> str | None:
        """The output column that is the first column of the query's table's primary key,
        when it is an integer (the whole key, or the leading column of a composite one:
        ranges of it are disjoint whatever the other key columns, and follow the key's
        index, as InnoDB's clustered index does). For a GROUP BY (:attr:`grouped`), only
        an output column that is that key column unchanged, as a grouping column (see
        :mod:`sqlfeed.sql.grouped`)."""
        rows = self._primary_key_rows
        if not rows or "int" not in str(rows[0][1]).lower():
            return None
        name_in_table = str(rows[0][0])
        if self.table is None:
            assert isinstance(self.parsed.tree, exp.Select)
            position = grouped_output(self.parsed.tree, name_in_table)
            if position is None or position >= len(self.columns):
                return None
            return self.columns[position]
        # The output column that is this table column, as the query names it.
        for column in self.columns:
            if column.casefold() == name_in_table.casefold():
                return column
        return None

    @cached_property
    def _primary_key_rows(self) -> list[tuple[Any, ...]]:
        """(column, type) of the base table's primary key columns, in key order."""
        if self.base_table is None:
            return []
        sql = self._primary_key_sql()
        if sql is None:
            return []
        return [tuple(row) for row in self.source.rows(sql, what="catalog query")]

    def _primary_key_sql(self) -> str | None:
        """The catalog query for (column, type) of the table's primary key columns."""
        assert self.base_table is not None
        engine = self.engine.name
        table = exp.Literal.string(self.base_table.name).sql(self.engine.sqlglot_dialect)
        if engine == "postgres":
            name = exp.Literal.string(self.quoted_table_name()).sql("postgres")
            return (
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                f"WHERE i.indrelid = to_regclass({name}) AND i.indisprimary "
                "ORDER BY array_position(i.indkey::int2[], a.attnum)"
            )
        if engine == "duckdb":
            return (
                "SELECT c.column_name, c.data_type FROM duckdb_constraints() k, "
                "unnest(k.constraint_column_names) AS u(column_name) JOIN duckdb_columns() c "
                "ON c.table_name = k.table_name AND c.column_name = u.column_name "
                "WHERE k.constraint_type = 'PRIMARY KEY' AND lower(k.table_name) = "
                f"lower({table}) ORDER BY list_position(k.constraint_column_names, "
                "u.column_name)"
            )
        if engine == "mysql":
            return (
                "SELECT k.COLUMN_NAME, c.DATA_TYPE FROM information_schema.KEY_COLUMN_USAGE k "
                "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND "
                "c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME "
                "WHERE k.CONSTRAINT_NAME = 'PRIMARY' AND k.TABLE_SCHEMA = DATABASE() "
                f"AND k.TABLE_NAME = {table} ORDER BY k.ORDINAL_POSITION"
            )
        if engine == "sqlite":
            return f"SELECT name, type FROM pragma_table_info({table}) WHERE pk > 0 ORDER BY pk"
        return None


def physical_extent(source: Source, table: exp.Table, quoted: str) -> Extent | str:
    """The physical extent of ``table`` (spelled ``quoted``), or why it has none.

    PostgreSQL: its pages, and ``reltuples`` scaled to its current size as the planner
    does (None when never analyzed); DuckDB: rowids up to ``MAX(rowid)``; SQLite: rowids
    from ``MIN(rowid)`` to ``MAX(rowid)`` (both read off the b-tree's ends).
    """
    engine = source.dialect.name
    if engine == "postgres":
        return _postgres_extent(source, quoted)
    if engine == "duckdb":
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
    if engine == "sqlite":
        return _sqlite_extent(source, table, quoted)
    return f"{engine} has no physical row address (PostgreSQL ctid, DuckDB or SQLite rowid)"


def _postgres_extent(source: Source, quoted: str) -> Extent | str:
    name = exp.Literal.string(quoted).sql("postgres")
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


def _sqlite_extent(source: Source, table: exp.Table, quoted: str) -> Extent | str:
    literal = exp.Literal.string(table.name).sql("sqlite")
    where = (
        f"WHERE lower(schema) = lower({exp.Literal.string(table.db).sql('sqlite')}) "
        if table.db
        else ""
    )
    found = source.rows(
        f"SELECT type, wr, schema FROM pragma_table_list({literal}) {where}ORDER BY CASE schema "
        "WHEN 'temp' THEN 0 WHEN 'main' THEN 1 ELSE 2 END LIMIT 1",  # how SQLite resolves it
        what="catalog query",
    )
    if not found or found[0][0] != "table":
        return f"{quoted} is not a base table (a view, or not found)"
    if found[0][1]:
        return f"{quoted} is a WITHOUT ROWID table: it has no rowid to cut ranges of"
    columns = {
        str(r[0]).casefold()
        for r in source.rows(
            f"SELECT name FROM pragma_table_info({literal}, "
            f"{exp.Literal.string(str(found[0][2])).sql('sqlite')})",
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


def expensive(parsed: ParsedQuery) -> str:
    """What makes re-running the query per partition costly (a join, an aggregate...);
    empty when nothing does."""
    tree = parsed.tree
    if isinstance(tree, exp.SetOperation):
        return "a set operation"
    for node, what in (
        (exp.Join, "a join"),
        (exp.Group, "a GROUP BY"),
        (exp.AggFunc, "an aggregate"),
        (exp.Window, "a window function"),
        (exp.Distinct, "DISTINCT"),
        (exp.Subquery, "a subquery"),
    ):
        if tree.find(node) is not None:
            return what
    return ""


def unique_keys(source: Source, table: exp.Table) -> list[list[str]]:
    """The primary and unique keys of ``table`` whose columns are all NOT NULL, from the
    catalog (PostgreSQL, MySQL/MariaDB, SQLite, DuckDB; none elsewhere).

    A key with a nullable column is left out: NULLs tie in an ORDER BY. Partial,
    expression and prefix indexes are left out too; INCLUDE columns are not key columns.
    """
    sql = _unique_keys_sql(source.dialect.name, table)
    if sql is None:
        return []
    keys: dict[str, list[str]] = {}
    nullable: set[str] = set()
    for index, column, not_null in source.rows(sql, what="catalog query"):
        keys.setdefault(str(index), []).append(str(column))
        if not not_null or str(not_null).upper() in ("YES", "0", "FALSE"):
            nullable.add(str(index))
    return [columns for index, columns in keys.items() if index not in nullable]


def _unique_keys_sql(engine: str, table: exp.Table) -> str | None:
    """The catalog query for (index, column, not null) of ``table``'s unique keys."""
    plain = table.copy()
    plain.set("alias", None)
    name = exp.Literal.string(table.name).sql(engine)
    if engine == "postgres":
        qualified = exp.Literal.string(plain.sql("postgres")).sql("postgres")
        return (
            "SELECT i.indexrelid::regclass::text, a.attname, a.attnotnull FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = "
            "ANY((i.indkey::int2[])[0:i.indnkeyatts - 1]) "
            f"WHERE i.indrelid = to_regclass({qualified}) AND i.indisunique "
            "AND i.indpred IS NULL AND i.indexprs IS NULL"
        )
    if engine == "duckdb":
        schema = exp.Literal.string(table.db).sql("duckdb") if table.db else "current_schema()"
        return (
            "SELECT k.constraint_index, u.column_name, NOT c.is_nullable "
            "FROM duckdb_constraints() k, unnest(k.constraint_column_names) AS u(column_name) "
            "JOIN duckdb_columns() c ON c.database_name = k.database_name AND c.schema_name = "
            "k.schema_name AND c.table_name = k.table_name AND c.column_name = u.column_name "
            "WHERE k.constraint_type IN ('PRIMARY KEY', 'UNIQUE') AND lower(k.table_name) = "
            f"lower({name}) AND lower(k.schema_name) = lower({schema})"
        )
    if engine == "mysql":
        schema = exp.Literal.string(table.db).sql("mysql") if table.db else "DATABASE()"
        return (
            "SELECT INDEX_NAME, COLUMN_NAME, CASE WHEN NULLABLE = 'YES' OR SUB_PART IS NOT "
            "NULL THEN 0 ELSE 1 END FROM information_schema.STATISTICS WHERE NON_UNIQUE = 0 "
            f"AND TABLE_SCHEMA = {schema} AND TABLE_NAME = {name}"
        )
    if engine == "sqlite":
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
    return None
