"""The query's columns for a reshard: checks, the uid, the shards' schema, the conversion.

:func:`check_columns` matches the sort, group and uid columns to the query's and derives
the shards' schema before anything is written; :func:`check_uid` checks the uid's values
once the rows are extracted; :func:`converter` turns the ordered batches into shard rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.io.views import plain, plain_type
from sqlfeed.shards.reader import TAR_KEY
from sqlfeed.shards.reshard.engine import col, engine_errors, render
from sqlfeed.shards.reshard.options import ReshardOptions, SortKey
from sqlfeed.shards.writer import tar_schema

GENERATED_UID = "uid"
"""The name of the uid column reshard adds when the query has none."""

HELPER = "_sqlfeed_"
"""The prefix of reshard's own column names (a query's columns may not start with it)."""


@dataclass(frozen=True)
class Columns:
    """The query's columns, the shards' columns, and the sort, group and uid among them.

    Attributes:
        schema: the query's columns as the engine returns them.
        out_schema: the shards' columns as Arrow (the generated uid first).
        file_schema: the manifest's schema (tar: string key, binary members).
        sort: the sort keys, by the query's column names.
        group_by: the group columns, by the query's column names.
        uid: the uid column.
        uid_generated: the uid column is reshard's (numbering the output rows).
    """

    schema: pa.Schema
    out_schema: pa.Schema
    file_schema: pa.Schema
    sort: list[SortKey]
    group_by: list[str]
    uid: str
    uid_generated: bool

    @property
    def group_index(self) -> int | None:
        """The position of the group hash in the ordered rows (after the query's columns)."""
        return len(self.schema) if self.group_by else None


def check_columns(schema: pa.Schema, options: ReshardOptions) -> Columns:
    """The columns of a query returning ``schema``, checked against the options.

    Raises:
        InvalidArgumentError: duplicate or reserved column names, an unknown sort, group
            or uid column, or a column the format cannot hold.
    """
    names = list(schema.names)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidArgumentError(
                f"the query returns two columns named {name!r}: a shard needs unique "
                "column names, rename one in the SELECT"
            )
        seen.add(name)
        if name.startswith(HELPER):
            raise InvalidArgumentError(
                f"column {name!r}: names starting with {HELPER} are reshard's own"
            )
    sort = [SortKey(_column(k.column, names, "sort"), k.descending) for k in options.sort]
    group_by = [_column(name, names, "group-by") for name in options.group_by]
    if options.uid is not None:
        uid, uid_generated = _column(options.uid, names, "uid"), False
    elif GENERATED_UID in names:
        uid, uid_generated = GENERATED_UID, False
    elif TAR_KEY in names:
        uid, uid_generated = TAR_KEY, False
    else:
        uid, uid_generated = GENERATED_UID, True
    fields = [pa.field(f.name, _plain_type(f.type)) for f in schema]
    if uid_generated:
        fields.insert(0, pa.field(GENERATED_UID, pa.int64(), nullable=False))
    out_schema = pa.schema(fields)
    if options.fmt == "csv":
        for item in out_schema:
            problem = _csv_problem(item.type)
            if problem:
                raise InvalidArgumentError(
                    f"column {item.name!r} is {problem} ({item.type}), which CSV cannot "
                    "hold: write parquet, jsonl or tar, or cast it in the SELECT"
                )
    file_schema = tar_schema(out_schema, uid) if options.fmt == "tar" else out_schema
    return Columns(schema, out_schema, file_schema, sort, group_by, uid, uid_generated)


def _column(name: str, names: list[str], what: str) -> str:
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise InvalidArgumentError(
        f"{what} column {name!r} is not in the query's columns ({', '.join(names) or 'none'})"
    )


def _plain_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type a shard holds: dictionaries decoded, view types (also nested) plain."""
    return plain_type(arrow_type, decode_dictionaries=True)


def _csv_problem(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_nested(arrow_type):
        return "a nested value"
    if (
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    ):
        return "binary"
    return None


def check_uid(
    engine: duckdb.DuckDBPyConnection, table: exp.Expr, columns: Columns, fmt: str
) -> None:
    """The uid column's values are unique, not NULL, and (tar) usable as record keys.

    Raises:
        InvalidArgumentError: they are not.
    """
    uid = columns.uid
    column = col(f"c{columns.schema.names.index(uid)}")
    nulls_sql = exp.select("COUNT(*)").from_(table.copy()).where(column.is_(exp.null()))
    dups = (
        exp.select(column.copy(), exp.func("COUNT", exp.Star()).as_("n"))
        .from_(table.copy())
        .group_by(column.copy())
        .having(exp.func("COUNT", exp.Star()) > 1)
    )
    count_sql = exp.select("COUNT(*)").from_(dups.subquery("_d"))
    first_sql = dups.copy().order_by("n DESC", column.copy()).limit(5)
    with engine_errors("checking the uid column"):
        nulls = engine.execute(render(nulls_sql)).fetchall()[0][0]
        repeated = engine.execute(render(count_sql)).fetchall()[0][0]
        examples = engine.execute(render(first_sql)).fetchall() if repeated else []
    if nulls:
        raise InvalidArgumentError(
            f"the uid column {uid!r} is NULL in {nulls} row(s): a uid names a sample; "
            "pick another --uid column, or leave --uid out to number the rows"
        )
    if repeated:
        shown = ", ".join(f"{value!r} ({n} times)" for value, n in examples)
        raise InvalidArgumentError(
            f"the uid column {uid!r} is not unique: {repeated} value(s) appear more "
            f"than once, e.g. {shown}; pick a unique --uid column, or leave --uid out to "
            "number the rows"
        )
    if fmt == "tar":
        _check_tar_keys(engine, table, column, uid)


def _check_tar_keys(
    engine: duckdb.DuckDBPyConnection, table: exp.Expr, column: exp.Column, uid: str
) -> None:
    text = exp.cast(column.copy(), "VARCHAR")
    bad = exp.not_(exp.func("regexp_full_match", text, exp.Literal.string(r"([^/]+/)*[^/.]+")))
    bad_sql = exp.select("COUNT(*)", exp.func("MIN", text.copy())).from_(table.copy()).where(bad)
    with engine_errors("checking the uid column"):
        count, example = engine.execute(render(bad_sql)).fetchall()[0]
    if count:
        raise InvalidArgumentError(
            f"the uid column {uid!r} cannot name tar records: {count} value(s) "
            f"like {example!r} are empty or have a '.' in their last path segment "
            "(a record's members are <key>.<extension>); pick another --uid column"
        )


def converter(columns: Columns) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """From the ordered query's batches to the shard schema (names, types, uid)."""
    width = len(columns.schema)
    generated = columns.uid_generated
    out_schema = columns.out_schema
    fields = list(out_schema)[1:] if generated else list(out_schema)
    counter = [0]

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for i in range(width):
            array = plain(batch.column(i))  # Arrow's list_view cast is broken: rebuilt
            if array.type != fields[i].type:
                array = array.cast(fields[i].type)
            arrays.append(array)
        if generated:
            start = counter[0]
            arrays.insert(0, pa.array(range(start, start + batch.num_rows), pa.int64()))
            counter[0] += batch.num_rows
        return pa.RecordBatch.from_arrays(arrays, schema=out_schema)

    return convert
