"""Engine-independent Arrow helpers: DB-API rows to record batches, schemas, conforming.

Every batch a source yields is cast to the schema given by the caller (:func:`conform`),
so all partitions of a plan yield the same Arrow schema, also when a partition is empty
or a column is all NULL there. Where a driver reports no column types, they are inferred
from the values (:func:`infer_schema`). The engine-specific readers and type codes live in
the engine family modules (:mod:`sqlfeed.io.duckdb`, :mod:`sqlfeed.io.postgres`, ...).
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "READER_HINT",
    "BatchBuilder",
    "conform",
    "downscale_decimal",
    "empty_batch",
    "infer_schema",
    "infer_type",
    "iterate_rows",
    "merge_schemas",
    "renamed_columns",
    "rows_table",
    "to_arrow_array",
    "unique_names",
    "without_hints",
]

DEFAULT_BATCH_ROWS = 65_536
"""Rows per record batch read from the database."""

READER_HINT = b"sqlfeed.reader."
"""Prefix of the field metadata keys a source puts in the schemas it derives, for its own
readers (e.g. MySQL's column type codes): a plan keeps them, batches never carry them."""


class BatchBuilder:
    """Turns DB-API row tuples into record batches of a fixed schema."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def build(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        """One record batch of ``rows`` (an empty one when there are none)."""
        if not rows:
            return empty_batch(self.schema)
        columns = list(zip(*rows, strict=True))
        arrays = [
            to_arrow_array(values, field.type)
            for values, field in zip(columns, self.schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def to_arrow_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type``.

    Decimals become floats where asked; a float in an integer column only when it is whole:
    ``4.5`` raises, never becomes 4.
    """
    if pa.types.is_null(arrow_type):
        return pa.nulls(len(values))
    # the kinds of value present, found in C (a Python loop over every value cost more than
    # the conversion itself: 2 of 3.8 s of a 600,000-row read)
    kinds = (
        set(map(type, values))
        if pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_string(arrow_type)
        else set()
    )
    if pa.types.is_integer(arrow_type) and float in kinds:
        values = [_whole(v) for v in values]  # pyarrow would truncate 4.5 to 4 silently
    if pa.types.is_floating(arrow_type) and any(issubclass(k, decimal.Decimal) for k in kinds):
        values = [None if v is None else float(v) for v in values]
    if pa.types.is_list(arrow_type) and pa.types.is_floating(arrow_type.value_type):
        values = [  # numeric[] without a declared precision: lists of floats
            None if v is None else [float(x) if isinstance(x, decimal.Decimal) else x for x in v]
            for v in values
        ]
    if pa.types.is_string(arrow_type) and any(
        k is not type(None) and not issubclass(k, str) for k in kinds
    ):
        values = [None if v is None else _text(v) for v in values]
    if pa.types.is_list(arrow_type) and pa.types.is_string(arrow_type.value_type):
        values = [  # uuid[] (psycopg: lists of UUID objects): lists of text
            None if v is None else [x if x is None or isinstance(x, str) else _text(x) for x in v]
            for v in values
        ]
    return pa.array(values, type=arrow_type)


def _whole(value: Any) -> Any:
    """``value`` as an integer when it is a float with no fraction; other floats raise."""
    if type(value) is not float:
        return value
    if not value.is_integer():
        raise pa.ArrowInvalid(f"{value!r} is not an integer")
    return int(value)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    return str(value)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of no rows with ``schema``.

    Made of ``pa.nulls(0)``: ``pa.array([])`` asks pandas whether a list is array-like,
    importing it (~0.2 s) into a process that reads no pandas at all.
    """
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (names, types, metadata); NULL-only columns cast.

    Casts are checked: a value that does not fit its new type raises, never changes.
    """
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        if column.type == field.type:
            arrays.append(column)
            continue
        exact = downscale_decimal(column, field.type)
        arrays.append(exact if exact is not None else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def downscale_decimal(column: pa.Array, target: pa.DataType) -> pa.Array | None:
    """``column`` (decimal128) at the smaller scale of ``target``, or None to cast instead.

    Arrow's checked cast divides every value by ``10**k`` in 128-bit long division (most
    of the cast's time). Here a value ``v`` is divided exactly by its ``2**k`` factor (a
    shift) and its odd ``5**k`` factor (a product by the inverse of ``5**k`` modulo
    ``2**64``), which gives ``q`` with ``q * 10**k == v`` modulo ``2**(64+k)``; the high
    words then agree to within ``2**(k-1)`` only if ``q * 10**k == v`` exactly. Any value
    that fails that or ``target``'s precision (and any column this does not cover: an
    offset, a scale step under 2, a precision over 18) returns None, and Arrow's checked
    cast decides (and raises for a value it cannot carry): never a silent change.
    """
    source = column.type
    if not (pa.types.is_decimal128(source) and pa.types.is_decimal128(target)):
        return None
    k = source.scale - target.scale
    if column.offset or not 2 <= k <= 18 or target.precision > 18 or len(column) == 0:
        return None
    n = len(column)
    words = np.frombuffer(column.buffers()[1], dtype=np.uint64, count=2 * n).reshape(n, 2)
    low, high = words[:, 0], words[:, 1]
    shifted = (low >> np.uint64(k)) | (high << np.uint64(64 - k))
    quotient = (shifted * np.uint64(pow(5**k, -1, 2**64))).view(np.int64)
    near = np.abs(high.view(np.int64) - quotient * (10.0**k / 2.0**64)) < 2 ** (k - 1)
    bound = 10**target.precision
    exact = ((low & np.uint64(2**k - 1)) == 0) & near & (quotient < bound) & (quotient > -bound)
    if column.null_count:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        exact |= ~valid  # the bytes under a NULL are not a value
        quotient = np.where(valid, quotient, 0)
    if not exact.all():
        return None
    out = np.empty((n, 2), dtype=np.int64)
    out[:, 0] = quotient
    out[:, 1] = quotient >> 63  # the sign, extended to 128 bits
    validity = column.buffers()[0] if column.null_count else None
    return pa.Array.from_buffers(target, n, [validity, pa.py_buffer(out)], column.null_count)


def without_hints(schema: pa.Schema) -> pa.Schema:
    """``schema`` without the reader hints (:data:`READER_HINT`) in its fields' metadata."""
    if not any(_hinted(f) for f in schema):
        return schema
    fields = []
    for field in schema:
        kept = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(READER_HINT)}
        fields.append(field.with_metadata(kept) if kept else field.remove_metadata())
    return pa.schema(fields, metadata=schema.metadata)


def unique_names(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every repeated column name made unique as DuckDB does.

    The first ``id`` keeps its name, the next ones become ``id_1``, ``id_2``... (skipping
    names the query already has). A ``SELECT *`` over a join repeats names, and a file, a
    data frame or a dict of features cannot hold two columns of one name.
    """
    names = schema.names
    if len(set(names)) == len(names):
        return schema
    taken = set(names)
    seen: set[str] = set()
    fields = []
    for field in schema:
        name = field.name
        if name in seen:
            k = 1
            while f"{name}_{k}" in taken:
                k += 1
            name = f"{name}_{k}"
            taken.add(name)
            field = field.with_name(name)
        seen.add(name)
        fields.append(field)
    return pa.schema(fields, metadata=schema.metadata)


def renamed_columns(names: Sequence[str | None] | None, schema: pa.Schema | None) -> str:
    """One line saying which of the query's output ``names`` :func:`unique_names` renamed.

    It names the columns renamed in ``schema`` (empty when none was), with the fix.
    """
    if names is None or schema is None:
        return ""
    pairs = [
        f"{a} -> {b}" for a, b in zip(names, schema.names, strict=False) if a is not None and a != b
    ]
    if not pairs:
        return ""
    return (
        f"the query returns repeated column names, made unique as DuckDB does: "
        f"{', '.join(pairs)} (name them with AS in the SELECT to choose)"
    )


def _hinted(field: pa.Field) -> bool:
    return any(key.startswith(READER_HINT) for key in field.metadata or {})


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
    """``first`` with its ``null``-typed columns typed from ``second`` (metadata kept)."""
    fields = [
        a.with_type(b.type) if pa.types.is_null(a.type) else a
        for a, b in zip(first, second, strict=True)
    ]
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
