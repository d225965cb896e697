"""Arrow -> torch: a record batch becomes a dict of tensors (and lists of strings).

Numbers, bools, dates, times and decimals go through :class:`sqlfeed.feed.converter.Converter`
(the tf.data table's casts, NULL fills, masks and refusals, done in Arrow) and become
tensors without a Python loop; list columns are padded in NumPy (or become
``torch.nested`` jagged tensors). Strings become a list of ``str`` (bytes a list of
``bytes``), or whatever the column's tokenizer makes of that list. Imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from sqlfeed.dialects import QueryError
from sqlfeed.feed.converter import Converter, null_message
from sqlfeed.feed.tensors import MASK_SUFFIX, ColumnMapping
from sqlfeed.torch.types import LENGTHS_SUFFIX, tokenizer_of

__all__ = ["BatchConverter", "pack", "pad"]

_ALIGN = 64
"""Where each array of a packed batch starts: a multiple of this many bytes."""


class BatchConverter:
    """Turns record batches into dicts of tensors, column by column.

    Args:
        mappings: the columns (:func:`sqlfeed.feed.tensors.column_mappings`).
        time_unit: the unit of timestamps, times and durations.
        lists: ``padded`` or ``nested`` (see :data:`sqlfeed.torch.types.LIST_MODES`).
        tokenizer: a callable for every string column, a dict of them, or None.
    """

    def __init__(
        self, mappings: Sequence[ColumnMapping], time_unit: str, lists: str, tokenizer: Any
    ) -> None:
        self.mappings = list(mappings)
        self.lists = lists
        self.tokenizers = {m.name: tokenizer_of(tokenizer, m) for m in self.mappings}
        self._text = [m for m in self.mappings if m.kind in ("string", "binary")]
        self._numbers = Converter([m for m in self.mappings if m not in self._text], time_unit)
        self.sliceable = not any(m.ragged_rank for m in self.mappings) and not any(
            self.tokenizers.values()
        )
        """Every part of a converted batch can be cut by rows (``part[start:stop]``): no
        list columns (padded to the batch's longest), no tokenizer (any output)."""

    def convert(self, batch: pa.RecordBatch) -> dict[str, Any]:
        """The batch as a dict of column name (and lengths, masks) to tensor or list.

        The tensors of numbers are views of one buffer (see :func:`pack`).
        """
        arrays: dict[str, np.ndarray] = {}
        out: dict[str, Any] = {}
        flat = iter(self._numbers.arrays(batch))
        for m in self._numbers.mappings:
            values = next(flat)
            splits = [next(flat) for _ in range(m.ragged_rank)]
            if not m.ragged_rank:
                arrays[m.name] = values
            elif self.lists == "nested":
                out[m.name] = torch.nested.nested_tensor_from_jagged(
                    _tensor(values), torch.from_numpy(splits[0])
                )
            else:
                padded, lengths = pad(values, splits, m.value_fill)
                arrays[m.name] = padded
                arrays[m.name + LENGTHS_SUFFIX] = lengths[0]
                for level, inner in enumerate(lengths[1:], 1):
                    arrays[f"{m.name}{LENGTHS_SUFFIX}_{level}"] = inner
            if m.mask:
                arrays[m.name + MASK_SUFFIX] = next(flat)
        for m in self._text:
            column = batch.column(m.name)
            if m.mask:
                arrays[m.name + MASK_SUFFIX] = column.is_null().to_numpy(zero_copy_only=False)
            texts = _texts(m, column)
            tokenize = self.tokenizers[m.name]
            out[m.name] = texts if tokenize is None else tokenize(texts)
        out.update(pack(arrays))
        return {key: out[key] for key in _ordered_keys(self.mappings, out)}


def _ordered_keys(mappings: Sequence[ColumnMapping], out: dict[str, Any]) -> list[str]:
    """The batch's keys in the columns' order (each column's lengths and mask after it)."""
    keys = []
    for m in mappings:
        keys += [k for k in out if k == m.name or k.startswith(m.name + LENGTHS_SUFFIX)]
        if m.mask:
            keys.append(m.name + MASK_SUFFIX)
    return list(dict.fromkeys(keys))


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A tensor owning its memory (Arrow's buffers are read-only; a tensor may be written)."""
    if not values.flags.writeable or not values.flags.c_contiguous:
        values = np.array(values, copy=True, order="C")
    return torch.from_numpy(values)


def pack(arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The arrays copied into one new buffer, as tensors viewing it (writable, own memory).

    One storage per batch: a DataLoader worker process hands the main process the whole
    batch through one shared-memory segment, not one per tensor (each costs a file
    descriptor passed over a socket). Each array starts at a multiple of 64 bytes.

    >>> out = pack({"a": np.arange(3), "b": np.array([[0.5], [1.5]], dtype=np.float32)})
    >>> out["a"].tolist(), out["b"].tolist(), out["a"].untyped_storage().nbytes()
    ([0, 1, 2], [[0.5], [1.5]], 128)
    """
    starts, total = [], 0
    for values in arrays.values():
        starts.append(total)
        total += -(-values.nbytes // _ALIGN) * _ALIGN
    buffer = torch.empty(total, dtype=torch.uint8)
    memory = buffer.numpy()
    out: dict[str, torch.Tensor] = {}
    for (key, values), start in zip(arrays.items(), starts, strict=True):
        stop = start + values.nbytes
        np.copyto(memory[start:stop].view(values.dtype).reshape(values.shape), values)
        dtype = torch.from_numpy(np.empty(0, dtype=values.dtype)).dtype
        out[key] = buffer[start:stop].view(dtype).view(values.shape)
    return out


def pad(
    values: np.ndarray, splits: Sequence[np.ndarray], fill: Any
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Nested lists as one dense array padded with ``fill``, and the lengths of each level.

    Args:
        values: the innermost values, flat.
        splits: the row splits of each list level, outermost first (as tf.RaggedTensor's).
        fill: the padding value.

    Returns:
        The padded array (``[rows, longest, ...]``) and, per level, the lengths padded to
        the shape of the levels above it (level 0: ``[rows]``, level 1: ``[rows,
        longest]``, ...), int64.

    >>> padded, lengths = pad(np.array([1, 2, 3]), [np.array([0, 2, 2, 3])], 0)
    >>> padded.tolist(), lengths[0].tolist()
    ([[1, 2], [0, 0], [3, 0]], [2, 0, 1])
    """
    dense = values
    for level in reversed(range(len(splits))):
        dense = _pad_level(dense, splits[level], fill)
    lengths = []
    for level in range(len(splits)):
        counts = np.diff(splits[level]).astype(np.int64)
        for outer in reversed(range(level)):
            counts = _pad_level(counts, splits[outer], 0)
        lengths.append(counts)
    return dense, lengths


def _pad_level(items: np.ndarray, splits: np.ndarray, fill: Any) -> np.ndarray:
    """``items`` grouped into rows by ``splits``, each row padded to the longest."""
    lengths = np.diff(splits)
    rows = len(lengths)
    width = int(lengths.max(initial=0))
    out = np.full((rows, width, *items.shape[1:]), fill, dtype=items.dtype)
    if rows and splits[-1]:  # the splits start at 0 (sqlfeed.feed.converter makes them so)
        row = np.repeat(np.arange(rows), lengths)
        column = np.arange(len(row)) - np.repeat(splits[:-1], lengths)
        out[row, column] = items[: len(row)]
    return out


def _texts(mapping: ColumnMapping, array: pa.Array) -> list[Any]:
    """A string (or bytes) column as a list, NULLs filled; lists of them as nested lists."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if array.null_count and mapping.fill is None:
        raise QueryError(null_message(mapping))
    if not mapping.ragged_rank:
        if array.null_count:
            array = array.cast(_fillable(array.type))
            array = pc.fill_null(array, pa.scalar(mapping.fill, type=array.type))
        values: list[Any] = array.to_pylist()
        return values
    return [_fill_nested(v, mapping.ragged_rank, mapping.value_fill) for v in array.to_pylist()]


def _fillable(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_binary_view(arrow_type) or pa.types.is_fixed_size_binary(arrow_type):
        return pa.binary()
    return arrow_type


def _fill_nested(value: Any, depth: int, fill: Any) -> Any:
    if value is None:
        return [] if depth else fill
    if not depth:
        return value
    return [_fill_nested(v, depth - 1, fill) for v in value]
