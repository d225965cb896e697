"""Readers: run one query and stream its rows as ``pyarrow.RecordBatch``es, memory bounded.

Each reader opens its own connection (or cursor), so readers run in parallel threads.
Every batch is cast to the schema given by the caller, so all partitions of a plan yield
the same Arrow schema, also when a partition is empty or a column is all NULL there.

Paths, fastest first where installed:

* DuckDB: native Arrow (``fetch_record_batch``).
* PostgreSQL: ADBC (``adbc-driver-postgresql``, binary COPY, streamed), else psycopg with
  a server-side cursor.
* MySQL/MariaDB: pymysql with an unbuffered (server-side) cursor.
* SQLite: ``sqlite3`` with ``fetchmany`` (the partition hash is a registered function).
* Anything else: SQLAlchemy with ``stream_results``.

The DB-API paths convert rows to columns in Python; their Arrow types come from the
driver's column type codes where it reports them, else from the values.
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

DEFAULT_BATCH_ROWS = 65_536
"""Rows per record batch read from the database."""

# PostgreSQL type OIDs -> Arrow types (the common built-in types).
_PG_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    17: pa.binary(),
    18: pa.string(),
    19: pa.string(),
    20: pa.int64(),
    21: pa.int16(),
    23: pa.int32(),
    25: pa.string(),
    26: pa.int64(),
    114: pa.string(),
    700: pa.float32(),
    701: pa.float64(),
    1042: pa.string(),
    1043: pa.string(),
    1082: pa.date32(),
    1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"),
    1083: pa.time64("us"),
    1186: pa.duration("us"),
    2950: pa.string(),
    3802: pa.string(),
}

# MySQL field type codes -> Arrow types; text/blob types are told apart by their values.
_MYSQL_TYPES: dict[int, pa.DataType] = {
    1: pa.int8(),
    2: pa.int16(),
    3: pa.int32(),
    4: pa.float32(),
    5: pa.float64(),
    7: pa.timestamp("us"),
    8: pa.int64(),
    9: pa.int32(),
    10: pa.date32(),
    11: pa.duration("us"),
    12: pa.timestamp("us"),
    13: pa.int16(),
    16: pa.int64(),
    245: pa.string(),
}
_MYSQL_UNSIGNED = {1: pa.uint8(), 2: pa.uint16(), 3: pa.uint32(), 8: pa.uint64(), 9: pa.uint32()}
_MYSQL_DECIMAL = (0, 246)
_MYSQL_UNSIGNED_FLAG = 32

# Session settings that fix the text form of values: the PostgreSQL hash of a row is taken
# over its text, so every worker must render timestamps, dates and floats alike.
POSTGRES_SESSION = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
)

# Settings that make PostgreSQL return a partition's rows in the same order on every read
# (resuming after acknowledged batches counts on it): no parallel workers, and no scan
# that starts where another session's scan of the same table is.
POSTGRES_ORDERED = (
    "SET max_parallel_workers_per_gather = 0",
    "SET synchronize_seqscans = off",
)


class BatchBuilder:
    """Turns DB-API row tuples into record batches of a fixed schema."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def build(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        if not rows:
            return empty_batch(self.schema)
        columns = list(zip(*rows, strict=True))
        arrays = [
            to_arrow_array(values, field.type)
            for values, field in zip(columns, self.schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def to_arrow_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type`` (decimals to floats where asked)."""
    if pa.types.is_null(arrow_type):
        return pa.nulls(len(values))
    if pa.types.is_floating(arrow_type) and any(isinstance(v, decimal.Decimal) for v in values):
        values = [None if v is None else float(v) for v in values]
    if pa.types.is_string(arrow_type) and any(
        not isinstance(v, str) and v is not None for v in values
    ):
        values = [None if v is None else _text(v) for v in values]
    return pa.array(values, type=arrow_type)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    return str(value)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of no rows with ``schema``."""
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (names and types); NULL-only columns cast."""
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def rows_table(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> pa.Table:
    """A table of DB-API rows, its types inferred from the values (NULL-only: null type).

    Column names may repeat (aggregate queries), so the table is built by position.
    """
    schema = infer_schema(names, rows)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = [to_arrow_array(list(v), f.type) for v, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, names=list(names))


def infer_schema(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> pa.Schema:
    """A schema from the values of a sample of rows (NULL-only columns become ``null``)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return pa.schema(
        [pa.field(name, infer_type(values)) for name, values in zip(names, columns, strict=True)]
    )


def infer_type(values: Sequence[Any]) -> pa.DataType:
    """The Arrow type of some values; ``null`` when all are None, text when they do not fit."""
    sample = [v for v in values if v is not None]
    if not sample:
        return pa.null()
    try:
        return pa.array(sample).type
    except OverflowError:  # integers beyond int64: unsigned 64-bit, else text
        try:
            return pa.array(sample, type=pa.uint64()).type
        except (OverflowError, pa.ArrowInvalid):
            return pa.string()
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types (SQLite): text
        return pa.string()


def merge_schemas(first: pa.Schema, second: pa.Schema) -> pa.Schema:
    """``first`` with its ``null``-typed columns typed from ``second``."""
    fields = [b if pa.types.is_null(a.type) else a for a, b in zip(first, second, strict=True)]
    return pa.schema(fields)


def postgres_description_schema(description: Sequence[Any]) -> pa.Schema:
    """Arrow types from psycopg's description; ``null`` for types to infer from values."""
    fields = []
    for column in description:
        oid = column.type_code
        if oid == 1700:  # numeric: exact decimal when its precision is declared
            precision, scale = column.precision, column.scale
            arrow_type = (
                pa.decimal128(precision, scale)
                if precision and precision <= 38 and scale is not None
                else pa.float64()
            )
        else:
            arrow_type = _PG_TYPES.get(oid, pa.null())
        fields.append(pa.field(column.name, arrow_type))
    return pa.schema(fields)


def mysql_description_schema(cursor: Any) -> pa.Schema | None:
    """Arrow types from a pymysql cursor's field metadata; ``null`` for types to infer."""
    result = getattr(cursor, "_result", None)
    fields_meta = getattr(result, "fields", None)
    if not fields_meta:
        return None
    fields = []
    for meta, description in zip(fields_meta, cursor.description, strict=True):
        code = meta.type_code
        unsigned = bool(meta.flags & _MYSQL_UNSIGNED_FLAG)
        if code in _MYSQL_DECIMAL:
            precision, scale = description[4], description[5]
            arrow_type = (
                pa.decimal128(precision, scale) if precision and precision <= 38 else pa.float64()
            )
        elif unsigned and code in _MYSQL_UNSIGNED:
            arrow_type = _MYSQL_UNSIGNED[code]
        else:
            arrow_type = _MYSQL_TYPES.get(code, pa.null())
        fields.append(pa.field(description[0], arrow_type))
    return pa.schema(fields)


def iterate_rows(
    fetchmany: Callable[[int], Sequence[Sequence[Any]]],
    schema: pa.Schema,
    batch_rows: int,
    stop: threading.Event | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``schema`` from a DB-API cursor's ``fetchmany``."""
    builder = BatchBuilder(schema)
    while stop is None or not stop.is_set():
        rows = fetchmany(batch_rows)
        if not rows:
            return
        yield builder.build(rows)
