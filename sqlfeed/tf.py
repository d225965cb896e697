"""tf.data input pipelines from a SELECT, for Keras ``fit`` and ``tf.distribute``.

>>> import sqlfeed.tf  # doctest: +SKIP
>>> ds = sqlfeed.tf.dataset("SELECT * FROM t", source, label="y", batch_size=1024)  # doctest: +SKIP
>>> model.fit(ds, epochs=3)  # doctest: +SKIP

Every element is ``(features, label)`` (or ``features`` alone without a label), where
``features`` is a dict of column name to a tensor whose first dimension is the batch.
Its ``element_spec`` comes from the plan's Arrow schema, one rule per Arrow type:

=========================================  ==========================================  =====
Arrow type                                 tensor                                      NULL
=========================================  ==========================================  =====
int8 ... int64, uint8 ... uint64           ``tf.int64``                                0
float16, float32, float64                  ``tf.float32`` (``float_dtype="float64"``)  0.0
bool                                       ``tf.bool``                                 False
string, large_string, string_view          ``tf.string`` (UTF-8 bytes)                 ""
binary, large_binary, fixed_size_binary    ``tf.string`` (the bytes)                   b""
decimal128, decimal256                     ``tf.float64``, the nearest double          0.0
date32, date64                             ``tf.int64``, days since 1970-01-01         0
timestamp (any unit, with or without tz)   ``tf.int64``, ``time_unit`` (default        0
                                           ``"us"``) since 1970-01-01 00:00 UTC
time32, time64                             ``tf.int64``, ``time_unit`` since midnight  0
duration                                   ``tf.int64``, in ``time_unit``              0
dictionary (DuckDB ENUM)                   as its value type                           as it
list, large_list, fixed_size_list of the   ``tf.RaggedTensor``, one ragged dimension   []
above, nested too                          per list level (NULL elements: as above)
struct, map, interval, list_view, union    refused: select scalar columns instead
=========================================  ==========================================  =====

Scalar columns are rank-1 tensors ``[batch]`` (Keras ``Input(shape=(1,))`` takes them).
NULLs are replaced by the default above, or by ``fill={"col": value}`` (a value of the
tensor's type: an int in ``time_unit`` for a timestamp, days for a date; a
``datetime``/``date`` is converted); ``masks=["col"]`` adds a ``col_is_null`` boolean
feature. A NULL in a label, or anywhere with ``fill_nulls=False``, is an error unless its
column has a ``fill``: sqlfeed never trains on a made-up label. Conversions are exact or
refused: a ``uint64`` above 2**63 - 1, a float64 beyond float32's range, or a timestamp
that does not fit ``time_unit`` exactly raises instead of wrapping or rounding.

How it runs: the Feeder's reader threads stream Arrow record batches (the database and
Arrow work outside the GIL); each batch is converted column by column in Arrow (casts,
NULL fills) and handed to NumPy without a copy where the type allows; a generator at
*batch* granularity feeds ``tf.data.Dataset.from_generator`` with an explicit
``output_signature``, and ``rebatch`` cuts the large read batches into ``batch_size``
rows inside TensorFlow, so Python runs once per read batch (64K rows), not per training
batch. Datasets with list columns, and a job's batches (acknowledged one by one), are
batched in Arrow instead. ``prefetch`` is on by default, except with a job.

Three ways to split the work:

* one dataset over the whole plan (the default), or a static share of it:
  ``input_context=`` (``tf.distribute.InputContext``: pipeline ``i`` of ``n`` reads the
  partitions ``i, i + n, ...``) or ``rank=``/``world_size=``;
* a dynamic share: ``job=`` pulls partitions from a lease queue (see
  :mod:`sqlfeed.dispatch.worker`), so elastic workers share the plan; each iteration of the
  dataset (a Keras epoch) is the job's next epoch, and ``even_batches=True`` makes every
  one of ``replicas`` workers deliver the same number of batches per epoch, so
  synchronous replicas stay in lockstep;
* :func:`distributed_dataset` calls ``strategy.distribute_datasets_from_function`` with a
  per-pipeline dataset built by :func:`input_fn`.

TensorFlow is imported only when a dataset is built; without it,
:class:`~dialects.MissingDependencyError` names the extra (``pip install 'sqlfeed[tf]'``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import difflib
import inspect
import itertools
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dialects import InvalidArgumentError, MissingDependencyError, QueryError
from sqlfeed.feed.feeder import Feeder
from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS
from sqlfeed.io.sources import Source, connect
from sqlfeed.plans.model import Plan

__all__ = [
    "AUTOTUNE",
    "FLOAT_DTYPES",
    "MASK_SUFFIX",
    "TIME_UNITS",
    "ColumnMapping",
    "Feed",
    "column_mappings",
    "dataset",
    "distributed_dataset",
    "input_fn",
]

AUTOTUNE = -1
"""``prefetch=AUTOTUNE`` lets tf.data size the prefetch buffer (``tf.data.AUTOTUNE``)."""

FLOAT_DTYPES = ("float32", "float64")
"""What Arrow floats become (``float_dtype``); decimals are always float64."""

TIME_UNITS = ("s", "ms", "us", "ns")
"""Units of the int64 that timestamps, times and durations become (``time_unit``)."""

MASK_SUFFIX = "_is_null"
"""``masks=["col"]`` adds the boolean feature ``col_is_null``."""

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DEFAULT_FILL: dict[str, Any] = {
    "int": 0,
    "float": 0.0,
    "decimal": 0.0,
    "bool": False,
    "string": "",
    "binary": b"",
    "date": 0,
    "timestamp": 0,
    "time": 0,
    "duration": 0,
}
_DTYPE = {
    "int": "int64",
    "decimal": "float64",
    "bool": "bool",
    "string": "string",
    "binary": "string",
    "date": "int64",
    "timestamp": "int64",
    "time": "int64",
    "duration": "int64",
}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT64_MAX = 2**63 - 1


def _tensorflow() -> Any:
    try:
        import tensorflow as tf
    except ImportError:
        raise MissingDependencyError(
            "tf.data pipelines need TensorFlow: pip install 'sqlfeed[tf]'"
        ) from None
    return tf


# -- the type mapping -------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnMapping:
    """How one output column of the query becomes a tensor."""

    name: str
    arrow_type: pa.DataType
    kind: str
    """``int``, ``float``, ``decimal``, ``bool``, ``string``, ``binary``, ``date``,
    ``timestamp``, ``time`` or ``duration``: the kind of the (innermost) values."""
    dtype: str
    """The tensor's dtype name (``int64``, ``float32``, ``float64``, ``bool``, ``string``)."""
    ragged_rank: int
    """0 for a scalar column; the list nesting depth for a RaggedTensor."""
    fill: Any
    """The value NULLs become (in the tensor's type), or None: a NULL is an error."""
    mask: bool
    """Whether a ``<name>_is_null`` feature goes with it."""
    label: bool
    """Whether it is a label (else a feature)."""

    @property
    def value_fill(self) -> Any:
        """The value NULL elements inside lists become (their kind's default)."""
        return _DEFAULT_FILL[self.kind]


def _scalar_kind(arrow_type: pa.DataType) -> str | None:
    t = pa.types
    if t.is_integer(arrow_type):
        return "int"
    if t.is_floating(arrow_type):
        return "float"
    if t.is_boolean(arrow_type):
        return "bool"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_string_view(arrow_type):
        return "string"
    if (
        t.is_binary(arrow_type)
        or t.is_large_binary(arrow_type)
        or t.is_fixed_size_binary(arrow_type)
        or t.is_binary_view(arrow_type)
    ):
        return "binary"
    if t.is_decimal(arrow_type):
        return "decimal"
    if t.is_date(arrow_type):
        return "date"
    if t.is_timestamp(arrow_type):
        return "timestamp"
    if t.is_time(arrow_type):
        return "time"
    if t.is_duration(arrow_type):
        return "duration"
    return None


def _is_list(arrow_type: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type)
    )


def _value_type(arrow_type: pa.DataType) -> pa.DataType:
    return arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type


def _kind_and_depth(name: str, arrow_type: pa.DataType) -> tuple[str, int]:
    depth = 0
    inner = _value_type(arrow_type)
    while _is_list(inner):
        depth += 1
        inner = _value_type(inner.value_type)
    kind = _scalar_kind(inner)
    if kind is None:
        what = f"a list of {inner}" if depth else str(arrow_type)
        raise InvalidArgumentError(
            f"column {name!r} is {what}, which has no tf.data mapping: select scalar "
            "columns (its fields, a CAST to text or a number) instead"
        )
    return kind, depth


def column_mappings(
    schema: pa.Schema,
    *,
    label: str | Sequence[str] | None = None,
    features: Sequence[str] | None = None,
    fill: Mapping[str, Any] | None = None,
    fill_nulls: bool = True,
    masks: bool | Sequence[str] = False,
    float_dtype: str = "float32",
    time_unit: str = "us",
) -> list[ColumnMapping]:
    """How each selected column of ``schema`` becomes a tensor (features first, then labels).

    Raises:
        InvalidArgumentError: an unknown or repeated column, a type with no mapping, a fill
            value that does not fit its column, a mask whose name is taken.
    """
    _check_options(label, features, fill, fill_nulls, masks, float_dtype, time_unit)
    names = list(schema.names)
    repeated = sorted({n for n in names if names.count(n) > 1})
    labels = _names(label, "label")
    chosen = _names(features, "features") if features is not None else None
    fills = dict(fill or {})
    for what, given in (("label", labels), ("feature", chosen or []), ("fill", list(fills))):
        for name in given:
            if name not in names:
                raise InvalidArgumentError(
                    f"unknown {what} column {name!r}: the query returns {', '.join(names)}"
                )
    if chosen is None:
        chosen = [n for n in names if n not in labels]
    if not chosen:
        raise InvalidArgumentError("no feature columns: name some in features=[...]")
    both = [n for n in chosen if n in labels]
    if both:
        raise InvalidArgumentError(f"column {both[0]!r} is both a feature and the label")
    for name in [*chosen, *labels]:
        if name in repeated:
            raise InvalidArgumentError(
                f"the query returns more than one column named {name!r}: rename them with AS"
            )
    if len(set(chosen)) != len(chosen) or len(set(labels)) != len(labels):
        raise InvalidArgumentError("features and label must not name a column twice")
    if isinstance(masks, bool):
        masked = set(chosen) if masks else set()
    else:
        masked = set(_names(masks, "masks"))
        for name in masked:
            if name not in chosen:
                raise InvalidArgumentError(f"masks names {name!r}, which is not a feature")
    for name in masked:
        if name + MASK_SUFFIX in names:
            raise InvalidArgumentError(
                f"the mask of {name!r} would be named {name + MASK_SUFFIX!r}, which the query "
                "returns already: rename that column"
            )
    mappings = []
    for name in [*chosen, *labels]:
        arrow_type = schema.field(name).type
        kind, depth = _kind_and_depth(name, arrow_type)
        is_label = name in labels
        if name in fills:
            value = _check_fill(name, kind, depth, fills[name], time_unit, float_dtype)
        elif is_label or not fill_nulls:
            value = None
        else:
            value = [] if depth else _DEFAULT_FILL[kind]
        dtype = float_dtype if kind == "float" else _DTYPE[kind]
        mappings.append(
            ColumnMapping(name, arrow_type, kind, dtype, depth, value, name in masked, is_label)
        )
    return mappings


def _check_options(
    label: Any,
    features: Any,
    fill: Any,
    fill_nulls: Any,
    masks: Any,
    float_dtype: Any,
    time_unit: Any,
) -> None:
    """The checks that need no schema (made before connecting)."""
    if float_dtype not in FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"float_dtype must be one of {', '.join(FLOAT_DTYPES)}, not {float_dtype!r}"
        )
    if time_unit not in TIME_UNITS:
        raise InvalidArgumentError(
            f"time_unit must be one of {', '.join(TIME_UNITS)}, not {time_unit!r}"
        )
    _names(label, "label")
    if features is not None:
        _names(features, "features")
    if not isinstance(masks, bool):
        _names(masks, "masks")
    if not isinstance(fill or {}, Mapping):
        raise InvalidArgumentError("fill must be a dict of column name to value")
    if not isinstance(fill_nulls, bool):
        raise InvalidArgumentError(f"fill_nulls must be True or False, not {fill_nulls!r}")


def _names(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"{what} must be a column name or a list of column names")
    return list(value)


def _check_fill(name: str, kind: str, depth: int, value: Any, unit: str, float_dtype: str) -> Any:
    """``value`` as the tensor's type, or a one-line error saying why it does not fit."""
    if depth:
        if not isinstance(value, list | tuple) or len(value):
            raise InvalidArgumentError(
                f"fill for list column {name!r} must be [] (a NULL list becomes an empty "
                f"one), not {value!r}; NULL elements inside lists become their type's default"
            )
        return []
    bad = InvalidArgumentError(
        f"fill value {value!r} does not fit column {name!r} ({kind} -> "
        f"{float_dtype if kind == 'float' else _DTYPE[kind]})"
    )
    if value is None:
        raise bad
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "binary" and isinstance(value, bytes):
        return value
    if kind in ("string", "binary"):
        raise bad
    if kind == "bool":
        if not isinstance(value, bool | np.bool_):
            raise bad
        return bool(value)
    if kind in ("float", "decimal"):
        if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
            raise bad
        number = float(value)
        too_big = math.isfinite(number) and abs(number) > _FLOAT32_MAX
        if kind == "float" and float_dtype == "float32" and too_big:
            raise bad
        return number
    if kind == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - _EPOCH_DATE).days
    if kind == "timestamp" and isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        delta = moment - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return _in_unit(micros, unit, bad)
    if kind == "time" and isinstance(value, dt.time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        return _in_unit(micros + value.microsecond, unit, bad)
    if kind == "duration" and isinstance(value, dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return _in_unit(micros, unit, bad)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise bad
    if not -(2**63) <= int(value) <= _INT64_MAX:
        raise bad
    return int(value)


def _in_unit(micros: int, unit: str, bad: Exception) -> int:
    scaled = micros * _PER_SECOND[unit]
    if scaled % 1_000_000:
        raise bad  # finer than the unit: it would be rounded
    return scaled // 1_000_000


# -- Arrow -> NumPy ---------------------------------------------------------------------


class _Converter:
    """Turns record batches into NumPy arrays, column by column (Arrow does the work)."""

    def __init__(self, mappings: Sequence[ColumnMapping], time_unit: str) -> None:
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
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        mask = None
        if mapping.mask:
            mask = array.is_null().to_numpy(zero_copy_only=False)
        if array.null_count and mapping.fill is None:
            raise QueryError(_null_message(mapping))
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
                    raise QueryError(_null_message(mapping))
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
            raise QueryError(_null_message(mapping))
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
                if any(v is not None and math.isfinite(v) and abs(v) > _FLOAT32_MAX
                       for v in (low, high)):  # fmt: skip
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


def _null_message(mapping: ColumnMapping) -> str:
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


# -- the feed ---------------------------------------------------------------------------


class Feed:
    """A query's rows as a ``tf.data.Dataset`` (:attr:`dataset`), and how they map.

    :func:`dataset` returns ``Feed(...).dataset``; keep the Feed to see how each column
    maps (:attr:`mappings`), the :attr:`plan` and :attr:`feeder`, or to :meth:`close` a
    job's worker (give its lease back at once, e.g. on shutdown).

    Args:
        query: a SQL SELECT or a :class:`~sqlfeed.Plan`.
        source: where it runs (anything :func:`sqlfeed.connect` takes).
        batch_size: rows per element (per pipeline: with ``input_context`` this is the
            per-replica batch size; :func:`input_fn` divides a global one).
        label: the label column (element ``(features, label)``), a list of them (element
            ``(features, {name: label})``), or None (element ``features``).
        features: the feature columns in order (default: every column but the labels).
        fill: per column, the value its NULLs become (default: see the module's table).
        fill_nulls: False: a NULL in a column without a ``fill`` is an error.
        masks: True, or feature names: add a boolean ``<name>_is_null`` feature.
        float_dtype: what Arrow floats become, ``float32`` or ``float64``.
        time_unit: the unit of timestamps, times and durations (``s``, ``ms``, ``us``,
            ``ns``); dates are days.
        drop_remainder: drop each epoch's last, smaller batch (static mode).
        shuffle_buffer, seed, readers, read_batch_rows: as for :class:`~sqlfeed.Feeder`.
            The k-th iteration of the dataset is the Feeder's epoch k (its own order).
        prefetch: batches prefetched (``AUTOTUNE``: tf.data decides; 0: none). Default:
            ``AUTOTUNE``, and 0 with ``job``: a job's batch counts as taken when the next
            one is asked for, and a prefetch buffer asks early, so batches an abandoned
            iteration prefetched would be acknowledged without being trained on.
        input_context: a ``tf.distribute.InputContext``: read pipeline
            ``input_pipeline_id``'s static share (or, with ``job``, be worker
            ``<worker_id>/<input_pipeline_id>``, ``replicas`` defaulting to the number of
            pipelines).
        rank, world_size: a static share without an InputContext.
        job, queue, worker_id, epochs, lease_ttl, order, even_batches, replicas: pull
            partitions dynamically from a lease queue, as :class:`~sqlfeed.Feeder` does.
            Each iteration of the dataset is the job's next epoch (an iteration stopped
            early is continued by the next); a batch counts as taken (acknowledged) when
            the next one is asked for.
        **plan_options: for a SQL query, passed to :func:`sqlfeed.plan`.

    Raises:
        InvalidArgumentError: bad arguments, unknown columns, unmappable types; raised
            before any partition query runs (a SQL query's schema is read first).
        MissingDependencyError: TensorFlow is not installed.
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        batch_size: int,
        label: str | Sequence[str] | None = None,
        features: Sequence[str] | None = None,
        fill: Mapping[str, Any] | None = None,
        fill_nulls: bool = True,
        masks: bool | Sequence[str] = False,
        float_dtype: str = "float32",
        time_unit: str = "us",
        drop_remainder: bool = False,
        shuffle_buffer: int = 0,
        seed: int = 0,
        readers: int = 2,
        read_batch_rows: int = DEFAULT_BATCH_ROWS,
        prefetch: int | None = None,
        input_context: Any = None,
        rank: int = 0,
        world_size: int = 1,
        job: str | None = None,
        queue: Any = None,
        worker_id: str | None = None,
        epochs: int = 1,
        lease_ttl: float = 60.0,
        order: str = "shuffle",
        even_batches: bool = False,
        replicas: int | None = None,
        **plan_options: Any,
    ) -> None:
        _check_int(batch_size, "batch_size", 1)
        _check_options(label, features, fill, fill_nulls, masks, float_dtype, time_unit)
        if prefetch is None:
            prefetch = AUTOTUNE if job is None else 0
        _check_int(prefetch, "prefetch", AUTOTUNE)
        if not isinstance(drop_remainder, bool):
            raise InvalidArgumentError("drop_remainder must be True or False")
        if job is None:
            if even_batches:
                raise InvalidArgumentError(
                    "even_batches needs job=...: a static split cannot even out its shares"
                )
        elif drop_remainder:
            raise InvalidArgumentError(
                "drop_remainder works on the whole epoch; with job=..., batches end with their "
                "partition: use even_batches=True for equal batch counts"
            )
        if input_context is not None:
            if rank != 0 or world_size != 1:
                raise InvalidArgumentError("give input_context or rank/world_size, not both")
            pipelines = int(input_context.num_input_pipelines)
            pipeline = int(input_context.input_pipeline_id)
            if job is None:
                rank, world_size = pipeline, pipelines
            else:
                from sqlfeed.dispatch.worker import default_worker_id

                worker_id = f"{worker_id or default_worker_id()}/{pipeline}"
                if even_batches and replicas is None:
                    replicas = pipelines
        self.tf = _tensorflow()
        self.source: Source = connect(source)
        _check_plan_options(plan_options)
        if isinstance(query, Plan):
            if plan_options:
                raise InvalidArgumentError(
                    f"plan options ({', '.join(plan_options)}) need a SQL query, not a Plan"
                )
            plan = query
            schema = plan.arrow_schema() or self.source.schema(plan.sql)
        else:
            schema = self.source.schema(query)  # check the columns before planning
            column_mappings(
                schema, label=label, features=features, fill=fill, fill_nulls=fill_nulls,
                masks=masks, float_dtype=float_dtype, time_unit=time_unit,
            )  # fmt: skip
            from sqlfeed.plans.planner import plan as make_plan

            plan_options.setdefault("workers", world_size)
            plan = make_plan(query, self.source, **plan_options)
            schema = plan.arrow_schema() or schema
        self.mappings: list[ColumnMapping] = column_mappings(
            schema, label=label, features=features, fill=fill, fill_nulls=fill_nulls,
            masks=masks, float_dtype=float_dtype, time_unit=time_unit,
        )  # fmt: skip
        self.plan = plan
        self.batch_size = batch_size
        self.drop_remainder = drop_remainder
        self.prefetch = prefetch
        self.labels = _names(label, "label")
        self._single_label = isinstance(label, str)
        self._converter = _Converter(self.mappings, time_unit)
        self.ragged = any(m.ragged_rank for m in self.mappings)
        dynamic = job is not None
        self.feeder = Feeder(
            plan,
            self.source,
            format="arrow",
            # Dense columns are cut into batch_size rows by tf.data's rebatch; ragged ones
            # and a job's batches (acknowledged one by one) are batched here.
            batch_size=batch_size if (self.ragged or dynamic) else None,
            drop_remainder=drop_remainder,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            readers=readers,
            read_batch_rows=read_batch_rows,
            rank=rank,
            world_size=world_size,
            epochs=epochs,
            job=job,
            queue=queue,
            worker_id=worker_id,
            lease_ttl=lease_ttl,
            order=order,
            even_batches=even_batches,
            replicas=replicas,
        )
        self._job = _JobEpochs(self.feeder.worker) if dynamic else None
        self._iterations = itertools.count()
        self.dataset: Any = self._build()
        """The ``tf.data.Dataset``."""

    def __repr__(self) -> str:
        return f"Feed({self.feeder!r}, {len(self.mappings)} columns)"

    @property
    def element_spec(self) -> Any:
        """The dataset's ``element_spec``."""
        return self.dataset.element_spec

    def close(self) -> None:
        """Give back a job's lease held now (dynamic mode); nothing otherwise."""
        self.feeder.close()

    # -- building -----------------------------------------------------------------------

    def _batches(self) -> Iterator[pa.RecordBatch]:
        if self._job is not None:
            return self._job.epoch_batches()
        return self.feeder.epoch(next(self._iterations))

    def _flat_specs(self) -> list[Any]:
        tf = self.tf
        specs = []
        for m in self.mappings:
            specs.append(tf.TensorSpec([None], tf.as_dtype(m.dtype)))
            specs.extend(tf.TensorSpec([None], tf.int64) for _ in range(m.ragged_rank))
            if m.mask:
                specs.append(tf.TensorSpec([None], tf.bool))
        return specs

    def _structure(self, flat: Sequence[Any], ragged: Callable[[Any, list[Any]], Any]) -> Any:
        features: dict[str, Any] = {}
        labels: dict[str, Any] = {}
        at = 0
        for m in self.mappings:
            value = flat[at]
            if m.ragged_rank:
                value = ragged(value, list(flat[at + 1 : at + 1 + m.ragged_rank]))
            at += 1 + m.ragged_rank
            (labels if m.label else features)[m.name] = value
            if m.mask:
                features[m.name + MASK_SUFFIX] = flat[at]
                at += 1
        if not self.labels:
            return features
        if self._single_label:
            return features, labels[self.labels[0]]
        return features, labels

    def _build(self) -> Any:
        tf = self.tf
        convert = self._converter.arrays
        if self.ragged:
            signature = tuple(self._flat_specs())

            def flat_batches() -> Iterator[tuple[np.ndarray, ...]]:
                for batch in self._batches():
                    if batch.num_rows:
                        yield tuple(convert(batch))

            ds = tf.data.Dataset.from_generator(flat_batches, output_signature=signature)

            def assemble(*flat: Any) -> Any:
                return self._structure(
                    flat,
                    lambda values, splits: tf.RaggedTensor.from_nested_row_splits(
                        values, splits, validate=False
                    ),
                )

            ds = ds.map(assemble)
        else:
            signature = self._structure(self._flat_specs(), _no_ragged)

            def batches() -> Iterator[Any]:
                for batch in self._batches():
                    if batch.num_rows:
                        yield self._structure(convert(batch), _no_ragged)

            ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
            if self._job is None:
                # Python once per read batch (64K rows); tf.data cuts the training batches.
                ds = ds.rebatch(self.batch_size, drop_remainder=self.drop_remainder)
        if self.prefetch:
            ds = ds.prefetch(tf.data.AUTOTUNE if self.prefetch == AUTOTUNE else self.prefetch)
        else:  # and no prefetch added behind our back either
            options = tf.data.Options()
            options.experimental_optimization.inject_prefetch = False
            ds = ds.with_options(options)
        return ds


def _no_ragged(values: Any, splits: list[Any]) -> Any:  # pragma: no cover - never called
    raise AssertionError("no list columns here")


class _JobEpochs:
    """A job worker's deliveries cut into epochs: each call of :meth:`epoch_batches` is one.

    A batch counts as taken when the next one is asked for (the Worker acknowledges it
    then). A batch handed out by an iteration that was abandoned before asking for the
    next one (Keras pulls one batch from a throw-away iterator to build a distributed
    model) was not acknowledged, so the next iteration hands it out again first. The
    first batch of the next epoch, read to find the end of this one, waits the same way.
    """

    def __init__(self, worker: Any) -> None:
        self._deliveries: Iterator[Any] = worker.deliveries()
        self._pending: Any = None
        """Handed out (or read ahead) but not taken: the next iteration starts with it."""
        self._generation = 0
        self._lock = threading.Lock()

    def epoch_batches(self) -> Iterator[pa.RecordBatch]:
        with self._lock:
            self._generation += 1
            generation = self._generation
        epoch = None
        while True:
            with self._lock:
                if generation != self._generation:
                    return  # a newer iteration took over
                delivery, self._pending = self._pending, None
                if delivery is None:
                    delivery = next(self._deliveries, None)  # acknowledges the last one
                if delivery is None:
                    return  # every epoch of the job is done
                self._pending = delivery
                if epoch is None:
                    epoch = delivery.epoch
                elif delivery.epoch != epoch:
                    return  # the next epoch's first batch: the next iteration's
            yield delivery.batch
            with self._lock:
                if generation == self._generation and self._pending is delivery:
                    self._pending = None  # asked for the next one: taken


def dataset(query: str | Plan, source: Any = None, *, batch_size: int, **options: Any) -> Any:
    """A ``tf.data.Dataset`` of the query's rows: ``Feed(query, source, ...).dataset``.

    See :class:`Feed` for the options and the module docstring for the type mapping.

    >>> ds = dataset("SELECT * FROM t", source, label="y", batch_size=1024)  # doctest: +SKIP
    >>> model.fit(ds, epochs=3)  # doctest: +SKIP
    """
    return Feed(query, source, batch_size=batch_size, **options).dataset


def input_fn(
    query: str | Plan, source: Any = None, *, batch_size: int, **options: Any
) -> Callable[..., Any]:
    """An ``input_fn``: a function of an optional ``tf.distribute.InputContext``.

    The query is planned and checked now, once; each call builds a dataset. Without a
    context it reads everything in batches of ``batch_size``; with one (as
    ``strategy.distribute_datasets_from_function`` passes) ``batch_size`` is the *global*
    batch size and the pipeline reads its share in batches of
    ``input_context.get_per_replica_batch_size(batch_size)``.

    >>> train = input_fn("SELECT * FROM t", source, label="y", batch_size=256)  # doctest: +SKIP
    >>> model.fit(train(), epochs=2)  # doctest: +SKIP
    """
    _check_int(batch_size, "batch_size", 1)
    known = set(inspect.signature(Feed).parameters) - {"query", "source", "plan_options"}
    _check_plan_options({k: v for k, v in options.items() if k not in known})
    _check_options(*(options.get(k, _OPTION_DEFAULTS[k]) for k in _OPTION_DEFAULTS))
    _tensorflow()
    src = connect(source)
    if isinstance(query, str):
        plan_options = {k: options.pop(k) for k in _PLAN_OPTIONS if k in options}
        schema = src.schema(query)
        _check_columns(schema, options)
        from sqlfeed.plans.planner import plan as make_plan

        query = make_plan(query, src, **plan_options)
    _check_columns(query.arrow_schema() or src.schema(query.sql), options)
    plan = query

    def make(input_context: Any = None) -> Any:
        size = batch_size
        if input_context is not None:
            replicas = int(input_context.num_replicas_in_sync)
            if batch_size % replicas:
                raise InvalidArgumentError(
                    f"the global batch_size {batch_size} is not divisible by the "
                    f"{replicas} replicas in sync"
                )
            size = int(input_context.get_per_replica_batch_size(batch_size))
        return dataset(plan, src, batch_size=size, input_context=input_context, **options)

    return make


_PLAN_OPTIONS = (
    "partitions", "strategy", "key", "target_rows", "workers", "scratch", "allow_unstable",
    "sample_rows",
)  # fmt: skip
_OPTION_DEFAULTS: dict[str, Any] = {
    "label": None, "features": None, "fill": None, "fill_nulls": True, "masks": False,
    "float_dtype": "float32", "time_unit": "us",
}  # fmt: skip
_MAPPING_OPTIONS = (
    "label", "features", "fill", "fill_nulls", "masks", "float_dtype", "time_unit",
)  # fmt: skip


def _check_plan_options(options: Mapping[str, Any]) -> None:
    unknown = [name for name in options if name not in _PLAN_OPTIONS]
    if unknown:
        known = [*inspect.signature(Feed).parameters, *_PLAN_OPTIONS]
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidArgumentError(f"unknown option {unknown[0]!r}{hint}")


def _check_columns(schema: pa.Schema, options: Mapping[str, Any]) -> None:
    column_mappings(schema, **{k: v for k, v in options.items() if k in _MAPPING_OPTIONS})


def distributed_dataset(
    strategy: Any,
    query: str | Plan,
    source: Any = None,
    *,
    global_batch_size: int,
    per_replica: bool = False,
    **options: Any,
) -> Any:
    """``strategy.distribute_datasets_from_function`` over per-pipeline sqlfeed datasets.

    Args:
        strategy: a ``tf.distribute.Strategy``.
        query, source: as for :func:`dataset`.
        global_batch_size: rows per step over all replicas (divisible by their number).
        per_replica: one input pipeline per replica (``InputReplicationMode.PER_REPLICA``,
            MirroredStrategy only) instead of one per worker host. With ``job=...`` each
            pipeline is an elastic worker of the job; ``even_batches=True`` keeps them in
            lockstep, and elements are not prefetched to the devices (one per worker
            host prefetches a batch per device, which a job counts as taken).
        **options: as for :func:`dataset` (``label``, ``job``, ``even_batches``, ...).
    """
    tf = _tensorflow()
    _check_int(global_batch_size, "global_batch_size", 1)
    replicas = int(strategy.num_replicas_in_sync)
    if global_batch_size % replicas:
        raise InvalidArgumentError(
            f"global_batch_size {global_batch_size} is not divisible by the {replicas} replicas"
        )
    make = input_fn(query, source, batch_size=global_batch_size, **options)
    mode = (
        tf.distribute.InputReplicationMode.PER_REPLICA
        if per_replica
        else tf.distribute.InputReplicationMode.PER_WORKER
    )
    # A job's batch is taken when the next is asked for: no device prefetch ahead of it
    # (per replica, the pipeline's own iterator is used then).
    fetch = not (per_replica and options.get("job") is not None)
    return strategy.distribute_datasets_from_function(
        make,
        options=tf.distribute.InputOptions(
            experimental_replication_mode=mode, experimental_fetch_to_device=fetch
        ),
    )


def _check_int(value: object, what: str, lowest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InvalidArgumentError(f"{what} must be an integer >= {lowest}, got {value!r}")
