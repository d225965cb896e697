"""The output table's columns: Arrow types to each engine's column types.

Each engine declares the column type that holds an Arrow value exactly
(:meth:`dialects.base.Dialect.sink_type`); a type it cannot hold is refused, naming the
column, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp

from dialects import Dialect, InvalidArgumentError

__all__ = [
    "IDENTITY",
    "arrow_kind",
    "beside",
    "column_definitions",
    "constraint_sql",
    "create_table_sql",
    "drop_table",
    "quoted",
]

IDENTITY = ("_sqlfeed_partition", "_sqlfeed_row")
"""The row identity of an output without a unique key: the row's partition and its
position in it (the same on every attempt)."""

KEY_LENGTH = 255
"""The characters (bytes) a text (binary) key column holds where the engine indexes only
bounded columns (MySQL/MariaDB)."""

_SIMPLE = {
    "bool": pa.types.is_boolean,
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "binary": lambda t: (
        pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    ),
    "date": pa.types.is_date,
    "null": pa.types.is_null,
    "list": lambda t: pa.types.is_list(t) or pa.types.is_large_list(t),
    "struct": pa.types.is_struct,
    "map": pa.types.is_map,
    "duration": pa.types.is_duration,
    "time": pa.types.is_time,
}


def arrow_kind(arrow_type: pa.DataType) -> tuple[str, dict[str, object]]:
    """The kind :meth:`Dialect.sink_type` takes for ``arrow_type``, and its parameters."""
    if pa.types.is_dictionary(arrow_type):
        return arrow_kind(arrow_type.value_type)
    if pa.types.is_integer(arrow_type):
        return str(arrow_type), {}
    if pa.types.is_floating(arrow_type):
        return f"float{arrow_type.bit_width}", {}
    if pa.types.is_decimal(arrow_type):
        return "decimal", {"precision": arrow_type.precision, "scale": arrow_type.scale}
    if pa.types.is_timestamp(arrow_type):
        return "timestamp", {"unit": arrow_type.unit, "tz": arrow_type.tz}
    if pa.types.is_time(arrow_type):
        return "time", {"unit": arrow_type.unit}
    for kind, test in _SIMPLE.items():
        if test(arrow_type):
            return kind, {}
    return str(arrow_type), {}


def column_definitions(
    schema: pa.Schema, dialect: Dialect, *, not_null: Sequence[str] = ()
) -> list[str]:
    """A ``CREATE TABLE`` column definition per field of ``schema``, in the engine's types.

    The type's text is kept as the dialect declares it: a collation included.

    Raises:
        InvalidArgumentError: a column of a type the engine cannot hold exactly.
    """
    columns = []
    for field in schema:
        kind, params = arrow_kind(field.type)
        if field.name in not_null and kind in ("string", "binary"):
            params["length"] = KEY_LENGTH  # a key's column: indexed whole on every engine
        try:
            text = dialect.sink_type(kind, **params)  # type: ignore[arg-type]
        except InvalidArgumentError:  # a type no engine knows (an extension type)
            text = None
        if text is None:
            raise InvalidArgumentError(
                f"column {field.name!r} is {field.type}, which {dialect.name} cannot hold "
                "exactly: cast it in the SELECT to a type it can (e.g. text)"
            )
        name = quoted(field.name).sql(dialect=dialect.sqlglot_dialect)
        columns.append(f"{name} {text}{' NOT NULL' if field.name in not_null else ''}")
    return columns


def create_table_sql(
    table: exp.Table,
    dialect: Dialect,
    columns: Sequence[str],
    constraint: Sequence[str],
    *,
    unique: bool = False,
) -> str:
    """``CREATE TABLE table (columns..., PRIMARY KEY|UNIQUE (constraint...))``.

    No constraint when ``constraint`` is empty.
    """
    render = dialect.sqlglot_dialect
    body = ", ".join(
        [*columns, *([constraint_sql(dialect, constraint, unique)] if constraint else [])]
    )
    return f"CREATE TABLE {table.sql(dialect=render)} ({body})"


def constraint_sql(dialect: Dialect, columns: Sequence[str], unique: bool) -> str:
    """``PRIMARY KEY (columns...)`` or ``UNIQUE (columns...)``."""
    names = ", ".join(quoted(c).sql(dialect=dialect.sqlglot_dialect) for c in columns)
    return f"{'UNIQUE' if unique else 'PRIMARY KEY'} ({names})"


def quoted(name: str) -> exp.Identifier:
    """``name`` as a quoted identifier."""
    return exp.to_identifier(name, quoted=True)


def beside(table: exp.Table, name: str) -> exp.Table:
    """A table named ``name`` in ``table``'s schema."""
    return exp.table_(quoted(name), db=table.args.get("db"), catalog=table.args.get("catalog"))


def drop_table(table: exp.Table) -> exp.Drop:
    """``DROP TABLE IF EXISTS table``."""
    return exp.Drop(tables=[table], kind="TABLE", exists=True)
