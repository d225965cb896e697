"""PostgreSQL column types: their Arrow types, and which reader carries which type.

The Arrow type of a column comes from its type OID (:func:`postgres_description_schema`).
Types with no faithful Arrow form (``record``, ``money``, ``xml``, ``point``, ranges,
``bit``, ``timetz``, user types, ...) are read as the text PostgreSQL prints for them;
``interval`` is a ``duration`` (a month counted as 30 days and a year as 365, as psycopg
reads it). A read goes through connectorx only when every column's type is in
:data:`CONNECTORX_TYPES`, and through ADBC only when every one is in :data:`ADBC_TYPES`
(types each reader was checked to return exactly as PostgreSQL does, whatever the
values); anything else is read with psycopg. :func:`adbc_batch` turns ADBC's own forms
(extension types, ``month_day_nano_interval``) into those types.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "ADBC_TYPES",
    "CONNECTORX_TYPES",
    "adbc_batch",
    "connectorx_carries",
    "libpq_message",
    "panic_database_message",
    "postgres_description_schema",
]

_SCALARS: dict[int, pa.DataType] = {
    16: pa.bool_(),  # bool
    17: pa.binary(),  # bytea
    20: pa.int64(),  # int8
    21: pa.int16(),  # int2
    23: pa.int32(),  # int4
    26: pa.int64(),  # oid
    700: pa.float32(),  # float4
    701: pa.float64(),  # float8
    1082: pa.date32(),  # date
    1083: pa.time64("us"),  # time
    1114: pa.timestamp("us"),  # timestamp
    1184: pa.timestamp("us", tz="UTC"),  # timestamptz
    1186: pa.duration("us"),  # interval
}
"""Type OIDs with an Arrow type of their own; every other type is read as its text."""

_ARRAYS: dict[int, int] = {
    1000: 16,
    1001: 17,
    1005: 21,
    1007: 23,
    1016: 20,
    1021: 700,
    1022: 701,
    1182: 1082,
    1183: 1083,
    1115: 1114,
    1185: 1184,
    1187: 1186,
    1231: 1700,
    1009: 25,
    1014: 25,
    1015: 25,
    2951: 25,  # text, char(n), varchar, uuid arrays
}
"""Array type OID -> element type OID, for the arrays read as Arrow lists."""

_NUMERIC = 1700
_NUMERIC_ARRAY = 1231

CONNECTORX_TYPES = frozenset(
    {16, 17, 19, 20, 21, 23, 25, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184, 2950}
    | {1000, 1005, 1007, 1009, 1015, 1016, 1021, 1022}
)
"""Types connectorx returns exactly: not ``numeric`` (it panics on values past 28 digits,
NaN or a scale above 10), ``json`` (re-serialized, keys reordered), ``"char"``,
``interval``, ``money``, ``xml``, ``point``, ``record``, ``bit`` (raw bytes), nor arrays
of dates, timestamps or uuids."""

ADBC_TYPES = frozenset(
    {16, 17, 18, 19, 20, 21, 23, 25, 114, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184}
    | {1186, 1700, 3802}
)
"""Types ADBC returns exactly (after :func:`adbc_batch`): no arrays (it flattens
multi-dimensional ones silently), no ``money`` (its raw integer), no ``uuid``, ``xml``,
``point``, ranges or other types it passes as opaque binary."""


def connectorx_carries(types: Sequence[int], schema: pa.Schema) -> bool:
    """Whether connectorx returns every column of a query exactly.

    Args:
        types: the columns' type OIDs.
        schema: the query's Arrow schema (:func:`postgres_description_schema`).

    Returns:
        True when every type is in :data:`CONNECTORX_TYPES`, or is a ``numeric`` read as a
        decimal of precision at most 28 and scale at most 10 (connectorx returns it as
        ``decimal128(38, 10)``, cast back to the column's own decimal).
    """
    for oid, field in zip(types, schema, strict=True):
        if oid in CONNECTORX_TYPES:
            continue
        bounded = pa.types.is_decimal128(field.type) and field.type.precision <= 28
        if oid != _NUMERIC or not bounded or field.type.scale > 10:
            return False
    return True


def postgres_description_schema(description: Sequence[Any]) -> pa.Schema:
    """The Arrow schema of a query from its psycopg description (type OIDs, typmods).

    Args:
        description: a psycopg cursor's ``description`` (its columns' type OIDs, and the
            precision and scale of ``numeric`` and ``numeric[]`` columns).

    Returns:
        A schema with no ``null`` type: ``numeric`` is an exact decimal when its precision
        (at most 38) is declared, else float64; arrays of known element types are lists;
        types without an Arrow form of their own are text.
    """
    fields = []
    for column in description:
        oid = column.type_code
        element = _ARRAYS.get(oid)
        if oid in (_NUMERIC, _NUMERIC_ARRAY):
            arrow_type = _numeric(column.precision, column.scale)
        else:
            arrow_type = _SCALARS.get(element if element is not None else oid, pa.string())
        if element is not None:
            arrow_type = pa.list_(arrow_type)
        fields.append(pa.field(column.name, arrow_type))
    return pa.schema(fields)


def _numeric(precision: int | None, scale: int | None) -> pa.DataType:
    if precision and precision <= 38 and scale is not None:
        return pa.decimal128(precision, scale)
    return pa.float64()


def adbc_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """An ADBC batch in the Arrow types of :func:`postgres_description_schema`.

    Extension columns (``numeric`` as text, ``json``) become their storage; intervals
    become durations in microseconds, with psycopg's 30-day month and 365-day year.
    """
    columns = []
    for column in batch.columns:
        if isinstance(column, pa.ExtensionArray):
            column = column.storage
        if pa.types.is_interval(column.type):
            column = _interval_duration(column)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


_INTERVAL = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanoseconds", "<i8")])
_DAY_US = 86_400_000_000


def _interval_duration(array: pa.Array) -> pa.Array:
    """``month_day_nano_interval`` values as ``duration("us")`` (overflow is an error)."""
    raw = np.frombuffer(
        array.buffers()[1], dtype=_INTERVAL, count=len(array), offset=array.offset * 16
    )
    months = raw["months"].astype(np.int64)
    years = np.sign(months) * (np.abs(months) // 12)  # PostgreSQL prints "-1 years -2 mons"
    days = years * 365 + (months - 12 * years) * 30 + raw["days"]
    micros = pc.add_checked(
        pc.multiply_checked(pa.array(days), _DAY_US), pa.array(raw["nanoseconds"] // 1000)
    )
    if array.null_count:
        micros = pc.if_else(array.is_valid(), micros, pa.scalar(None, micros.type))
    return micros.cast(pa.duration("us"))


_DB_MESSAGE = re.compile(r'\bmessage: "((?:[^"\\]|\\.)*)"')


def panic_database_message(text: str) -> str | None:
    """The database's own message inside a connectorx panic or error text, if there is one.

    connectorx reports a server error as ``cx writer failed: Source(PostgresError(Error {
    ... message: "division by zero", ... }))`` or ``db error: ERROR: division by zero``.
    """
    found = _DB_MESSAGE.search(text)
    if found:
        return found.group(1).replace('\\"', '"').replace("\\\\", "\\")
    if "ERROR:" in text:
        return libpq_message(text)
    return None


def libpq_message(text: str) -> str:
    """The server's message in a libpq error text (what follows ``ERROR:``), on one line."""
    if "ERROR:" in text:
        text = text.split("ERROR:", 1)[1]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text.strip()
