"""Arrow types as DuckDB SQL types: what a lakehouse table's columns are cast to."""

from __future__ import annotations

import pyarrow as pa

from sqlfeed.dialects import UnsupportedError

__all__ = ["duckdb_type"]

_SIMPLE = {
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
    pa.float16(): "FLOAT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.string_view(): "VARCHAR",
    pa.binary(): "BLOB",
    pa.large_binary(): "BLOB",
    pa.binary_view(): "BLOB",
    pa.date32(): "DATE",
    pa.date64(): "DATE",
}


def duckdb_type(arrow: pa.DataType) -> str:
    """The DuckDB type holding ``arrow``'s values exactly."""
    if arrow in _SIMPLE:
        return _SIMPLE[arrow]
    if pa.types.is_decimal(arrow):
        return f"DECIMAL({arrow.precision}, {arrow.scale})"
    if pa.types.is_timestamp(arrow):
        unit = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
        return "TIMESTAMPTZ" if arrow.tz is not None else unit[arrow.unit]
    if pa.types.is_time(arrow):
        return "TIME"
    if pa.types.is_fixed_size_binary(arrow):
        return (
            "UUID" if arrow.byte_width == 16 and str(arrow) == "extension<arrow.uuid>" else "BLOB"
        )
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return f"{duckdb_type(arrow.value_type)}[]"
    if pa.types.is_struct(arrow):
        fields = ", ".join(
            f'"{f.name}" {duckdb_type(f.type)}'
            for f in arrow  # type: ignore[attr-defined]
        )
        return f"STRUCT({fields})"
    if pa.types.is_map(arrow):
        return f"MAP({duckdb_type(arrow.key_type)}, {duckdb_type(arrow.item_type)})"
    if isinstance(arrow, pa.ExtensionType):
        if arrow.extension_name == "arrow.uuid":
            return "UUID"
        return duckdb_type(arrow.storage_type)
    raise UnsupportedError(f"a lakehouse column of Arrow type {arrow} has no DuckDB type here")
