"""Phase 2, the sort: the SQL that orders the work table, and the Arrow bytes per row.

DuckDB orders the table out of core (it spills to its temp directory rather than fail):
by a seeded hash (shuffle) of the uid column, or of the row identity when the uid is
generated (of the group key with ``group_by``), by columns (sort), or in the query's
order. Ties are broken by the row identity, so the same input and seed give the same order.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqlfeed.shards.reshard.columns import Columns
from sqlfeed.shards.reshard.engine import col, engine_errors, render

_GROUP = "_sqlfeed_group"
_ROWID = "_sqlfeed_rowid"
_FIRST = "_sqlfeed_first"


def order_sql(columns: Columns, seed: int | None, table: exp.Expr) -> str:
    """The SELECT of the work table's rows in the run's order (plus the group hash, if any).

    Args:
        columns: the query's columns, with the resolved sort keys, groups and uid.
        seed: the shuffle seed, or ``None`` for a sort or the query's order.
        table: the work table (columns ``c0``, ``c1``, ...).
    """
    names = columns.schema.names
    cols = [col(f"c{i}") for i in range(len(names))]
    position = {name: col(f"c{i}") for i, name in enumerate(names)}
    groups = [position[name].copy() for name in columns.group_by]
    inner_items: list[exp.Expr] = [
        *[c.copy() for c in cols],
        exp.column("rowid").as_(_ROWID),
    ]
    outer_items: list[exp.Expr] = [c.copy() for c in cols]
    if groups:
        inner_items.append(exp.func("hash", *[g.copy() for g in groups]).as_(_GROUP))
        outer_items.append(col(_GROUP))
    rowid = col(_ROWID)
    order: list[exp.Expr]
    if seed is not None:
        seed_value = exp.cast(exp.Literal.number(seed), "BIGINT")
        if groups:
            order = [
                exp.func("hash", seed_value, *[g.copy() for g in groups]),
                *[g.copy() for g in groups],
                rowid,
            ]
        elif not columns.uid_generated:  # by the uid: the same order whatever the input order
            uid = position[columns.uid]
            order = [exp.func("hash", seed_value, uid.copy()), uid.copy(), rowid]
        else:
            order = [exp.func("hash", seed_value, rowid.copy()), rowid]
    elif columns.sort:
        keys = [
            exp.Ordered(this=position[k.column].copy(), desc=k.descending) for k in columns.sort
        ]
        if groups:
            first = columns.sort[0]
            pick = "MAX" if first.descending else "MIN"
            window = exp.Window(
                this=exp.func(pick, position[first.column].copy()),
                partition_by=[g.copy() for g in groups],
            )
            inner_items.append(window.as_(_FIRST))
            order = [
                exp.Ordered(this=col(_FIRST), desc=first.descending),
                *[g.copy() for g in groups],
                *keys,
                rowid,
            ]
        else:
            order = [*keys, rowid]
    elif groups:  # the query's order, groups kept together where they first appear
        window = exp.Window(
            this=exp.func("MIN", exp.column("rowid")), partition_by=[g.copy() for g in groups]
        )
        inner_items.append(window.as_(_FIRST))
        order = [col(_FIRST), rowid]
    else:  # the query's order: the table's, as DuckDB preserves insertion order
        return render(exp.select(*outer_items).from_(table.copy()))
    inner = exp.select(*inner_items).from_(table.copy())
    outer = exp.select(*outer_items).from_(inner.subquery("_sqlfeed_o")).order_by(*order)
    return render(outer)


def arrow_bytes_per_row(engine: duckdb.DuckDBPyConnection, table: exp.Expr, width: int) -> float:
    """Arrow bytes per row of a sample of the work table's ``width`` columns (at least 1)."""
    names = [col(f"c{i}") for i in range(width)]
    sample_sql = exp.select(*names).from_(table.copy()).limit(100)
    with engine_errors("sampling the rows"):
        sample: pa.Table = engine.sql(render(sample_sql)).to_arrow_table()
    if not sample.num_rows:
        return 1.0
    return max(1.0, float(sample.nbytes) / int(sample.num_rows))
