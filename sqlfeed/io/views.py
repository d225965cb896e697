"""Arrow's view types as their plain forms.

``string_view`` as ``string``, ``binary_view`` as ``binary``, ``list_view`` as ``list``
(also nested in lists, structs, maps and dictionaries).

Readers accept view types (Parquet files written by current tools carry ``string_view``),
but many Arrow kernels have none for them (``take``, ``filter``, joins, CSV and ORC
writing), so the code that sorts, joins, writes or converts rows casts them first.

>>> import pyarrow as pa
>>> plain_type(pa.list_view(pa.string_view()))
ListType(list<item: string>)
>>> plain(pa.table({"s": pa.array(["a"], pa.string_view())})).schema.field("s").type
DataType(string)
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["has_views", "plain", "plain_schema", "plain_type"]

Data = TypeVar("Data", pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)


def plain_type(arrow_type: pa.DataType, *, decode_dictionaries: bool = False) -> pa.DataType:
    """``arrow_type`` with every view type replaced by its plain form.

    Args:
        arrow_type: any Arrow type.
        decode_dictionaries: also replace dictionary types by their value types.
    """
    t = pa.types

    def inner(field: pa.Field) -> pa.Field:
        return field.with_type(plain_type(field.type, decode_dictionaries=decode_dictionaries))

    if t.is_string_view(arrow_type):
        return pa.string()
    if t.is_binary_view(arrow_type):
        return pa.binary()
    if t.is_list_view(arrow_type):
        return pa.list_(inner(arrow_type.value_field))
    if t.is_large_list_view(arrow_type):
        return pa.large_list(inner(arrow_type.value_field))
    if t.is_list(arrow_type):
        return pa.list_(inner(arrow_type.value_field))
    if t.is_large_list(arrow_type):
        return pa.large_list(inner(arrow_type.value_field))
    if t.is_fixed_size_list(arrow_type):
        return pa.list_(inner(arrow_type.value_field), arrow_type.list_size)
    if t.is_map(arrow_type):
        return pa.map_(inner(arrow_type.key_field), inner(arrow_type.item_field))
    if t.is_struct(arrow_type):
        return pa.struct([inner(arrow_type.field(i)) for i in range(arrow_type.num_fields)])
    if t.is_dictionary(arrow_type):
        value = plain_type(arrow_type.value_type, decode_dictionaries=decode_dictionaries)
        if decode_dictionaries:
            return value
        return pa.dictionary(arrow_type.index_type, value, arrow_type.ordered)
    return arrow_type


def plain_schema(schema: pa.Schema, *, decode_dictionaries: bool = False) -> pa.Schema:
    """``schema`` with :func:`plain_type` applied to every field (metadata kept)."""
    return pa.schema(
        [f.with_type(plain_type(f.type, decode_dictionaries=decode_dictionaries)) for f in schema],
        metadata=schema.metadata,
    )


def has_views(arrow_type: pa.DataType | pa.Schema) -> bool:
    """Whether a type (or any field of a schema) holds a view type anywhere."""
    if isinstance(arrow_type, pa.Schema):
        return any(has_views(f.type) for f in arrow_type)
    return not plain_type(arrow_type).equals(arrow_type)


def plain(data: Data) -> Data:
    """A table, batch or array with its view types cast to their plain forms.

    The same object when it has none.
    """
    if isinstance(data, pa.Table):
        if not has_views(data.schema):
            return data
        columns = [plain(column) for column in data.columns]
        return pa.Table.from_arrays(columns, schema=plain_schema(data.schema))
    if isinstance(data, pa.RecordBatch):
        if not has_views(data.schema):
            return data
        arrays = [plain(column) for column in data.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=plain_schema(data.schema))
    if isinstance(data, pa.ChunkedArray):
        if not has_views(data.type):
            return data
        return pa.chunked_array([plain(c) for c in data.chunks], plain_type(data.type))
    return _plain_array(data)


def _plain_array(array: pa.Array) -> pa.Array:
    """One array in plain types.

    List views are rebuilt here: Arrow's own cast from a list view to a list makes an
    invalid array when it holds NULLs (pyarrow 23).
    """
    if not has_views(array.type):
        return array
    kind, t = array.type, pa.types
    if (
        t.is_list_view(kind)
        or t.is_large_list_view(kind)
        or t.is_list(kind)
        or t.is_large_list(kind)
    ):
        values = _plain_array(array.flatten())
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
        large = t.is_large_list_view(kind) or t.is_large_list(kind)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64 if large else np.int32)
        mask = array.is_null() if array.null_count else None
        builder = pa.LargeListArray if large else pa.ListArray
        return builder.from_arrays(pa.array(offsets), values, type=plain_type(kind), mask=mask)
    return array.cast(plain_type(kind))
