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

from functools import cached_property
from typing import Any, Protocol

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects.catalog import Extent
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
        """Why the strategy was chosen, for :attr:`~sqlfeed.plans.model.Plan.reason`.

        It comes after ``asked for:`` or ``auto:``.
        """

    def build(self, ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
        """About ``m`` partitions whose rows add up to exactly the query's rows."""


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
        """The physical row addresses of the query's base table, or why it has none.

        On PostgreSQL, DuckDB and SQLite. Why it may have none: a view, not found, a WITHOUT
        ROWID table.
        """
        assert self.base_table is not None
        return physical_extent(self.source, self.base_table, self.quoted_table_name())

    @cached_property
    def catalog_rows(self) -> tuple[int, str] | None:
        """(rows, where the number comes from) of the query's one base table, without counting.

        From the catalog or the table's physical extent; None: no estimate.
        """
        table = self.base_table
        if table is None:
            return None
        if self.engine.ROWS_FROM_EXTENT:
            extent = self.physical
            if isinstance(extent, str) or extent.rows is None:
                return None
            return round(extent.rows), extent.rows_from
        return self.engine.catalog_row_estimate(self.source, table)

    @cached_property
    def primary_key(self) -> list[str]:
        """The columns of the query's base table's primary key, in key order.

        As the catalog names them; empty when it has none (or the engine's catalog is not
        known).
        """
        return [str(row[0]) for row in self._primary_key_rows]

    @cached_property
    def integer_primary_key(self) -> str | None:
        """The output column that is the first column of the query's table's primary key.

        When it is an integer (the whole key, or the leading column of a composite one:
        ranges of it are disjoint whatever the other key columns, and follow the key's
        index, as InnoDB's clustered index does). For a GROUP BY (:attr:`grouped`), only an
        output column that is that key column unchanged, as a grouping column (see
        :mod:`sqlfeed.sql.grouped`).
        """
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
        sql = self.engine.primary_key_sql(self.base_table, self.quoted_table_name())
        if sql is None:
            return []
        return [tuple(row) for row in self.source.rows(sql, what="catalog query")]


def physical_extent(source: Source, table: exp.Table, quoted: str) -> Extent | str:
    """The physical extent of ``table`` (spelled ``quoted``), or why it has none.

    The dialect's :meth:`~sqlfeed.dialects.Dialect.physical_extent`, run on ``source``.

    PostgreSQL: its pages, and ``reltuples`` scaled to its current size as the planner
    does (None when never analyzed); DuckDB: rowids up to ``MAX(rowid)``; SQLite: rowids
    from ``MIN(rowid)`` to ``MAX(rowid)`` (both read off the b-tree's ends).
    """
    return source.dialect.physical_extent(source, table, quoted)


def expensive(parsed: ParsedQuery) -> str:
    """What makes re-running the query per partition costly (a join, an aggregate...).

    Empty when nothing does.
    """
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
    """The primary and unique keys of ``table`` whose columns are all NOT NULL, from the catalog.

    PostgreSQL, MySQL/MariaDB, SQLite, DuckDB; none elsewhere.

    A key with a nullable column is left out: NULLs tie in an ORDER BY. Partial,
    expression and prefix indexes are left out too; INCLUDE columns are not key columns.
    """
    sql = source.dialect.unique_keys_sql(table)
    if sql is None:
        return []
    keys: dict[str, list[str]] = {}
    nullable: set[str] = set()
    for index, column, not_null in source.rows(sql, what="catalog query"):
        keys.setdefault(str(index), []).append(str(column))
        if not not_null or str(not_null).upper() in ("YES", "0", "FALSE"):
            nullable.add(str(index))
    return [columns for index, columns in keys.items() if index not in nullable]
