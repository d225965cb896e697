"""How CSV and JSONL shards hold each Arrow type, so that every value reads back exactly.

:mod:`sqlfeed.shards.writer` casts a column to its text form before writing it, and
:mod:`sqlfeed.shards.reader` parses the file with the same form and casts it back to the
manifest's type:

========================  ==========================  ===================================
type                      CSV                         JSONL
========================  ==========================  ===================================
strings                   quoted text (NULL: empty,   JSON string
                          unquoted)
integers, floats, bools   as Arrow writes them        JSON number (NaN, Infinity) / bool
decimals                  exact text                  exact text (a JSON string)
dates, timestamps         ISO text                    ISO text
times, durations          ISO text / integer ticks    integer ticks of their unit
binary                    base64 (marked in the       base64
                          manifest, see below)
lists, structs            (not in CSV)                JSON arrays / objects of the above
========================  ==========================  ===================================

A CSV binary column is base64 when its manifest field carries :data:`TEXT_ENCODING`
metadata; CSV shardsets written before that hold such columns as raw text and are read
as such.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["TEXT_ENCODING", "base64_encoded", "csv_type", "is_binary", "json_type"]

TEXT_ENCODING = b"sqlfeed.text"
"""Field metadata key of a column a text shard holds encoded (value ``base64``)."""


def is_binary(arrow_type: pa.DataType) -> bool:
    """Any of Arrow's binary types."""
    t = pa.types
    return bool(
        t.is_binary(arrow_type)
        or t.is_large_binary(arrow_type)
        or t.is_fixed_size_binary(arrow_type)
        or t.is_binary_view(arrow_type)
    )


def base64_encoded(field: pa.Field) -> bool:
    """Whether a CSV shard holds this column as base64 text."""
    return bool(field.metadata and field.metadata.get(TEXT_ENCODING) == b"base64")


def csv_type(field: pa.Field) -> pa.DataType:
    """The type a CSV column is parsed as (Arrow's CSV reader parses the rest itself)."""
    if base64_encoded(field) or is_binary(field.type):
        return pa.string() if base64_encoded(field) else pa.binary()
    if pa.types.is_float16(field.type):
        return pa.float32()
    return field.type


def json_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type a JSONL column is written from and parsed as, before the cast back."""
    t = pa.types
    if t.is_dictionary(arrow_type):
        return json_type(arrow_type.value_type)
    if t.is_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return pa.list_(json_type(arrow_type.value_type))
    if t.is_large_list(arrow_type):
        return pa.large_list(json_type(arrow_type.value_type))
    if t.is_struct(arrow_type):
        return pa.struct([f.with_type(json_type(f.type)) for f in arrow_type])
    if t.is_decimal(arrow_type) or t.is_date(arrow_type) or t.is_timestamp(arrow_type):
        return pa.string()
    if is_binary(arrow_type) or t.is_large_string(arrow_type) or t.is_string_view(arrow_type):
        return pa.string()
    if t.is_time32(arrow_type):
        return pa.int32()
    if t.is_time64(arrow_type) or t.is_duration(arrow_type):
        return pa.int64()
    if t.is_float16(arrow_type):
        return pa.float32()
    return arrow_type
