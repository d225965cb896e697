"""Reshard straight from Parquet files: no extract copy.

A row-by-row query over one table of Parquet files (``SELECT * FROM
read_parquet('in/*.parquet') WHERE ...``, the same rule as ``fragments`` plans) needs no
work table: DuckDB sorts the query's rows as it reads the files. The row identity that
the work table's ``rowid`` gave (ties, the seeded order of rows without a uid) is the
row's place in the files instead: the rows of the files before it (from their footers)
plus its ``file_row_number``, so a query without a filter is ordered exactly as after an
extract.
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
from sqlglot import exp

from sqlfeed.io import DuckDBSource, Source
from sqlfeed.plans.fileplan import chosen_table
from sqlfeed.plans.files import FILE_COLUMN, reader_call
from sqlfeed.shards.reshard.engine import col, ident
from sqlfeed.sql import ParsedQuery

__all__ = ["direct_relation"]

_ROW = "file_row_number"
_FILE, _NUMBER = "_sqlfeed_f", "_sqlfeed_r"


def direct_relation(parsed: ParsedQuery, source: Source, width: int) -> tuple[exp.Expr, int] | None:
    """The query's rows as a relation read straight from its Parquet files, and the files' bytes.

    The relation has columns ``c0..c{width-1}`` and ``rowid``. None when the query is not a
    row-by-row query over local Parquet files (it is then extracted as before).
    """
    if not isinstance(source, DuckDBSource):
        return None
    table, _why = chosen_table(parsed)
    if table is None or table.fmt != "parquet":
        return None
    if table.option("filename") is not None or table.option(_ROW) is not None:
        return None
    files = source.expand_files(list(table.patterns))
    offsets: dict[str, int] = {}
    total = 0
    for file in files:
        meta = pq.ParquetFile(file)
        if {_ROW, FILE_COLUMN} & set(meta.schema_arrow.names):
            return None
        offsets[file] = total
        total += int(meta.metadata.num_rows)
    tree = parsed.tree.copy()
    assert isinstance(tree, exp.Select)  # chosen_table checked it
    node = list(tree.find_all(exp.Table))[table.position]
    extra = [("filename", exp.Literal.string(FILE_COLUMN)), (_ROW, exp.true())]
    node.set("this", reader_call(table, extra=extra))
    if not node.alias:
        node.set("alias", exp.TableAlias(this=exp.to_identifier(table.alias)))
    _hide_added(tree, node.alias)
    tree.select(
        exp.column(FILE_COLUMN, table=node.alias, quoted=True),
        exp.column(_ROW, table=node.alias),
        append=True,
        copy=False,
    )
    if len(source.describe_columns(tree.sql(dialect="duckdb"))) != width + 2:
        return None  # a projection the added columns do not fit: extract as before
    names = [ident(f"c{i}") for i in range(width)] + [ident(_FILE), ident(_NUMBER)]
    query = exp.Subquery(this=tree, alias=exp.TableAlias(this=ident("_sqlfeed_q"), columns=names))
    first_rows = exp.Case(
        ifs=[
            exp.If(this=col(_FILE).eq(exp.Literal.string(f)), true=exp.Literal.number(o))
            for f, o in offsets.items()
        ],
        default=exp.Literal.number(0),
    )
    rowid = exp.Add(this=first_rows, expression=col(_NUMBER)) if len(offsets) > 1 else col(_NUMBER)
    items = [col(f"c{i}") for i in range(width)] + [rowid.as_("rowid")]
    relation = exp.select(*items).from_(query).subquery("_sqlfeed_in")
    return relation, sum(os.path.getsize(f) for f in files)


def _hide_added(tree: exp.Select, alias: str) -> None:
    """Keep the added file name and row number out of the query's ``*`` and ``t.*``."""
    hidden = [exp.column(FILE_COLUMN, quoted=True), exp.column(_ROW)]
    for item in tree.expressions:
        star: exp.Expr | None = None
        if isinstance(item, exp.Star):
            star = item
        elif isinstance(item, exp.Column) and item.is_star and item.table in ("", alias):
            star = item.this
        if isinstance(star, exp.Star):
            star.set("except_", [*(star.args.get("except_") or []), *(h.copy() for h in hidden)])
