"""The output table's columns: Arrow types to each engine's column types.

Each engine declares the column type that holds an Arrow value exactly
(:meth:`sqlfeed.dialects.base.Dialect.sink_type`); a type it cannot hold is refused, naming the
column, before anything is written, and so is a float value it cannot hold (NaN, the
infinities: :func:`check_values`), before the batch's transaction. Text columns compare
byte for byte and keep trailing spaces, as the rows read did: on MySQL/MariaDB the type
names a collation picked by the output server's version (:func:`server_version`), so keys
'a', 'A' and 'a ' stay three keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError
from sqlfeed.io import Source

__all__ = [
    "IDENTITY",
    "arrow_kind",
    "beside",
    "check_values",
    "column_definitions",
    "constraint_sql",
    "create_table_sql",
    "drop_table",
    "quoted",
    "same_key",
    "server_version",
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


def server_version(source: Source) -> str:
    """The output server's version, where its dialect's column types depend on it.

    What :attr:`~sqlfeed.dialects.base.Dialect.SERVER_VERSION_SQL` reads (MySQL/MariaDB:
    ``10.11.6-MariaDB``, ``8.0.36``), as the lease queue reads it; else empty.
    """
    query = source.dialect.SERVER_VERSION_SQL
    return "" if query is None else str(source.scalar(query, what="server version"))


def column_definitions(
    schema: pa.Schema, dialect: Dialect, *, not_null: Sequence[str] = (), version: str = ""
) -> list[str]:
    """A ``CREATE TABLE`` column definition per field of ``schema``, in the engine's types.

    The type's text is kept as the dialect declares it: a collation included, the one
    ``version`` (:func:`server_version`) has where the engine's text would otherwise pad
    or fold (MySQL/MariaDB; without it, their ``utf8mb4_bin``, which pads).

    Raises:
        InvalidArgumentError: a column of a type the engine cannot hold exactly.
    """
    columns = []
    for field in schema:
        kind, params = arrow_kind(field.type)
        if field.name in not_null and kind in ("string", "binary"):
            params["length"] = KEY_LENGTH  # a key's column: indexed whole on every engine
        try:
            text = dialect.sink_type(kind, version=version, **params)  # type: ignore[arg-type]
        except InvalidArgumentError:  # a type no engine knows (an extension type)
            text = None
        if text is None:
            raise InvalidArgumentError(
                f"column {field.name!r} is {field.type}, which {dialect.name} cannot hold "
                "exactly: cast the column written to a type it can (e.g. text)"
            )
        name = quoted(field.name).sql(dialect=dialect.sqlglot_dialect)
        columns.append(f"{name} {text}{' NOT NULL' if field.name in not_null else ''}")
    return columns


def same_key(
    source: Source, staging: exp.Table, key: Sequence[str], table: str, rows: str
) -> exp.Expr:
    """``table.k = rows.k AND ...``: a row of ``table`` (an alias) with the key of a staging row.

    ``rows`` is the alias of ``staging``, the sink's table. Text keys compare as the sink's
    text columns do (byte for byte): in their collation, named where the engine has one
    (MySQL/MariaDB, :meth:`~sqlfeed.dialects.base.Dialect.queue_name_collation`), since a
    column of the other table in another binary collation (``utf8mb4_bin``: a table an
    older sqlfeed made) would not compare with theirs (error 1267, illegal mix).
    """
    collation = source.dialect.queue_name_collation(server_version(source))
    text: set[str] = set()
    if collation is not None:
        probe = exp.select(*(quoted(k) for k in key)).from_(staging.copy()).where(exp.false())
        found = source.schema(probe.sql(dialect=source.dialect.sqlglot_dialect))
        text = {f.name for f in found if arrow_kind(f.type)[0] == "string"}
    same = []
    for name in key:
        ours: exp.Expr = exp.column(name, table=rows, quoted=True)
        if name in text:
            ours = exp.Collate(this=ours, expression=exp.var(collation))
        same.append(exp.column(name, table=table, quoted=True).eq(ours))
    return exp.and_(*same)


def check_values(batch: pa.RecordBatch | pa.Table, dialect: Dialect) -> None:
    """Refuse float values the engine's float columns cannot hold.

    NaN where :attr:`~sqlfeed.dialects.base.Dialect.FLOAT_NAN` is off (MySQL/MariaDB refuse
    it, SQLite would store NULL), the infinities where
    :attr:`~sqlfeed.dialects.base.Dialect.FLOAT_INFINITY` is.

    Raises:
        InvalidArgumentError: one line naming the first such column, the value and how many
            rows of the batch hold it.
    """
    refused = [
        (label, test)
        for label, test, held in (
            ("NaN", pc.is_nan, dialect.FLOAT_NAN),
            ("infinite", pc.is_inf, dialect.FLOAT_INFINITY),
        )
        if not held
    ]
    if not refused:
        return
    for field, column in zip(batch.schema, batch.columns, strict=True):
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if not pa.types.is_floating(kind):
            continue
        values = pc.cast(column, pa.float64())  # decoded; float16 widened (exactly)
        for label, test in refused:
            count = int(pc.sum(test(values)).as_py() or 0)
            if count:
                raise InvalidArgumentError(
                    f"column {field.name!r} holds {label} values in {count:,} of {len(values):,} "
                    f"rows of a batch, which {dialect.name} cannot store: replace them in the "
                    "SELECT (with NULL or a number), or write into an engine that holds them"
                )


def create_table_sql(
    table: exp.Table,
    dialect: Dialect,
    columns: Sequence[str],
    constraint: Sequence[str],
    *,
    unique: bool = False,
) -> str:
    """``CREATE TABLE IF NOT EXISTS table (columns..., PRIMARY KEY|UNIQUE (constraint...))``.

    No constraint when ``constraint`` is empty. ``IF NOT EXISTS``: the sink's own tables,
    named for one run, are made again after a lost connection (the first may have been).
    """
    render = dialect.sqlglot_dialect
    body = ", ".join(
        [*columns, *([constraint_sql(dialect, constraint, unique)] if constraint else [])]
    )
    return f"CREATE TABLE IF NOT EXISTS {table.sql(dialect=render)} ({body})"


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
