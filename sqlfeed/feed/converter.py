"""Arrow -> NumPy: a record batch becomes the flat components of a dataset element.

Owns :class:`Converter` (casts, NULL fills and list row splits, done column by column in
Arrow), the exact decimal -> float64 conversion, and the messages of conversions refused.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects import QueryError
from sqlfeed.feed.tensors import FLOAT32_MAX, ColumnMapping
from sqlfeed.io.views import plain

__all__ = ["Converter"]


class Converter:
    """Turns record batches into NumPy arrays, column by column (Arrow does the work)."""

    def __init__(self, mappings: Sequence[ColumnMapping], time_unit: str) -> None:
        """A converter for ``mappings``' columns.

        Args:
            mappings: the columns, as :func:`~sqlfeed.tf.column_mappings` returns them.
            time_unit: the unit of timestamps, times and durations (``s`` ... ``ns``).
        """
        self.mappings = list(mappings)
        self.time_unit = time_unit

    def arrays(self, batch: pa.RecordBatch) -> list[np.ndarray]:
        """The flat components: per column its values, row splits (lists) and mask."""
        out: list[np.ndarray] = []
        for mapping in self.mappings:
            values, splits, mask = self._column(mapping, batch.column(mapping.name))
            out.append(values)
            out.extend(splits)
            if mapping.mask:
                assert mask is not None
                out.append(mask)
        return out

    def _column(
        self, mapping: ColumnMapping, array: pa.Array
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        array = plain(array)  # view types: most kernels have none for them
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        mask = None
        if mapping.mask:
            mask = array.is_null().to_numpy(zero_copy_only=False)
        if array.null_count and mapping.fill is None:
            raise QueryError(null_message(mapping))
        if not mapping.ragged_rank:
            return self._values(mapping, array, mapping.fill), [], mask
        splits = []
        for _ in range(mapping.ragged_rank):
            if pa.types.is_dictionary(array.type):
                array = array.dictionary_decode()
            if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
                array = array.cast(pa.large_list(array.type.value_type))  # fixed size
            if array.null_count:  # a NULL list (at any depth) becomes an empty one
                if mapping.fill is None:
                    raise QueryError(null_message(mapping))
                array = pc.fill_null(array, pa.scalar([], type=array.type))
            offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            splits.append(offsets - offsets[0])
            array = array.flatten()
        inner_fill = None if mapping.fill is None else mapping.value_fill
        return self._values(mapping, array, inner_fill), splits, mask

    def _values(self, mapping: ColumnMapping, array: pa.Array, fill: Any) -> np.ndarray:
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        if array.null_count and fill is None:
            raise QueryError(null_message(mapping))
        if mapping.kind == "decimal":
            return _decimals(array, fill)
        target = self._target(mapping, array.type)
        if array.type != target:
            array = self._cast(mapping, array, target)
        if array.null_count:
            array = pc.fill_null(array, pa.scalar(fill, type=target))
        if mapping.kind == "string":  # as bytes: TensorFlow wants UTF-8, not str objects
            binary = pa.large_binary() if pa.types.is_large_string(array.type) else pa.binary()
            array = array.cast(binary)
        # Zero-copy for numbers without NULLs; bools unpack bits, strings become objects.
        values: np.ndarray = array.to_numpy(zero_copy_only=False)
        return values

    def _target(self, mapping: ColumnMapping, arrow_type: pa.DataType) -> pa.DataType:
        if mapping.dtype == "int64":
            return pa.int64()
        if mapping.dtype == "float32":
            return pa.float32()
        if mapping.dtype == "float64":
            return pa.float64()
        if pa.types.is_string_view(arrow_type):
            return pa.string()  # views have no NULL-fill kernel
        if pa.types.is_fixed_size_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
            return pa.binary()  # a fill need not have the fixed size
        return arrow_type  # bool, strings and bytes stay as they are

    def _cast(self, mapping: ColumnMapping, array: pa.Array, target: pa.DataType) -> pa.Array:
        kind, unit, source = mapping.kind, self.time_unit, array.type
        try:
            if kind == "date":
                days = array.cast(pa.date32()) if pa.types.is_date64(source) else array
                return days.cast(pa.int32()).cast(pa.int64())
            if kind == "timestamp":
                return array.cast(pa.timestamp(unit, tz=source.tz)).cast(pa.int64())
            if kind == "duration":
                return array.cast(pa.duration(unit)).cast(pa.int64())
            if kind == "time":
                clock = pa.time64(unit) if unit in ("us", "ns") else pa.time32(unit)
                narrow = pa.int64() if unit in ("us", "ns") else pa.int32()
                return array.cast(clock).cast(narrow).cast(pa.int64())
            if kind == "float" and target == pa.float32() and source.bit_width > 32:
                bounds = pc.min_max(array)
                low, high = bounds["min"].as_py(), bounds["max"].as_py()
                if any(
                    v is not None and math.isfinite(v) and abs(v) > FLOAT32_MAX for v in (low, high)
                ):
                    raise QueryError(
                        f"column {mapping.name!r} has values beyond float32's range: "
                        "pass float_dtype='float64'"
                    )
            return array.cast(target)
        except pa.ArrowInvalid as err:
            raise QueryError(_cast_message(mapping, source, unit, err)) from None


def _decimals(array: pa.Array, fill: Any) -> np.ndarray:
    """Decimals as the nearest float64 each (NULLs as ``fill``).

    Arrow's decimal-to-float cast divides in floating point after an inexact scaling, so
    236.45 can become 236.45000000000002. Here the unscaled integer is divided by 10**scale
    when both are exact doubles (|unscaled| <= 2**53, scale <= 22): one IEEE division,
    correctly rounded. Otherwise the decimal goes through its exact text and Arrow's
    correctly rounded parser.
    """
    mask = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if mask is not None:
        array = pc.fill_null(array, pa.scalar(decimal.Decimal(0), type=array.type))
    values = _exact_division(array)
    if values is None:
        values = np.array(array.cast(pa.string()).cast(pa.float64()).to_numpy(), copy=True)
    if mask is not None:
        values[mask] = fill
    return values


def _exact_division(array: pa.Array) -> np.ndarray | None:
    arrow_type = array.type
    if not pa.types.is_decimal128(arrow_type) or not 0 <= arrow_type.scale <= 22:
        return None
    start = 2 * array.offset
    words = np.frombuffer(array.buffers()[1], dtype="<i8")[start : start + 2 * len(array)]
    low, high = words[0::2], words[1::2]
    if len(low) and (
        not np.array_equal(high, low >> 63) or low.min() < -(2**53) or low.max() > 2**53
    ):
        return None
    values: np.ndarray = low.astype(np.float64) / 10.0**arrow_type.scale
    return values


def null_message(mapping: ColumnMapping) -> str:
    """The one line that says a column or the label has a NULL it cannot hold, and the fixes."""
    if mapping.label:
        return (
            f"label column {mapping.name!r} has a NULL: leave such rows out in the SELECT "
            f"(WHERE {mapping.name} IS NOT NULL) or give fill={{{mapping.name!r}: ...}}"
        )
    return (
        f"column {mapping.name!r} has a NULL and fill_nulls=False: give "
        f"fill={{{mapping.name!r}: ...}}, COALESCE it in the SELECT, or allow the default fills"
    )


def _cast_message(mapping: ColumnMapping, source: pa.DataType, unit: str, err: Exception) -> str:
    if mapping.kind == "int":
        return (
            f"column {mapping.name!r} ({source}) has a value beyond int64: cast it in the "
            "SELECT (to DOUBLE or text)"
        )
    if mapping.kind in ("timestamp", "time", "duration"):
        return (
            f"column {mapping.name!r} ({source}) does not fit int64 {unit} exactly "
            f"({str(err).splitlines()[0]}): pass time_unit='ns' or a coarser unit"
        )
    return f"column {mapping.name!r} ({source}) cannot become {mapping.dtype}: {err}"
