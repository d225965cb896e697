"""The Arrow -> tensor type mapping: how each selected column becomes a tensor.

Framework-neutral (no TensorFlow or torch import): :mod:`sqlfeed.tf` and
:mod:`sqlfeed.torch` both build on it. Owns :class:`ColumnMapping` and
:func:`column_mappings` (the rules tabled in :mod:`sqlfeed.tf`), the NULL defaults, and the
checks of ``fill``, ``masks``, ``float_dtype`` and ``time_unit``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError

__all__ = [
    "FLOAT32_MAX",
    "FLOAT_DTYPES",
    "MASK_SUFFIX",
    "TIME_UNITS",
    "ColumnMapping",
    "as_names",
    "check_options",
    "column_mappings",
]

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
FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest finite float32: a float64 beyond it does not fit ``float_dtype="float32"``."""
_INT64_MAX = 2**63 - 1


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
        t.is_list(arrow_type)
        or t.is_large_list(arrow_type)
        or t.is_fixed_size_list(arrow_type)
        or t.is_list_view(arrow_type)
        or t.is_large_list_view(arrow_type)  # made plain lists
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
    check_options(label, features, fill, fill_nulls, masks, float_dtype, time_unit)
    names = list(schema.names)
    repeated = sorted({n for n in names if names.count(n) > 1})
    labels = as_names(label, "label")
    chosen = as_names(features, "features") if features is not None else None
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
        masked = set(as_names(masks, "masks"))
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


def check_options(
    label: Any,
    features: Any,
    fill: Any,
    fill_nulls: Any,
    masks: Any,
    float_dtype: Any,
    time_unit: Any,
) -> None:
    """The checks of the mapping options that need no schema (made before connecting).

    Args:
        label: as for :func:`column_mappings`.
        features: as for :func:`column_mappings`.
        fill: as for :func:`column_mappings`.
        fill_nulls: as for :func:`column_mappings`.
        masks: as for :func:`column_mappings`.
        float_dtype: as for :func:`column_mappings`.
        time_unit: as for :func:`column_mappings`.

    Raises:
        InvalidArgumentError: an option of the wrong type or an unknown dtype or unit.
    """
    if float_dtype not in FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"float_dtype must be one of {', '.join(FLOAT_DTYPES)}, not {float_dtype!r}"
        )
    if time_unit not in TIME_UNITS:
        raise InvalidArgumentError(
            f"time_unit must be one of {', '.join(TIME_UNITS)}, not {time_unit!r}"
        )
    as_names(label, "label")
    if features is not None:
        as_names(features, "features")
    if not isinstance(masks, bool):
        as_names(masks, "masks")
    if not isinstance(fill or {}, Mapping):
        raise InvalidArgumentError("fill must be a dict of column name to value")
    if not isinstance(fill_nulls, bool):
        raise InvalidArgumentError(f"fill_nulls must be True or False, not {fill_nulls!r}")


def as_names(value: str | Sequence[str] | None, what: str) -> list[str]:
    """A column name, a list of them or None, as a list of names.

    Args:
        value: what the caller passed.
        what: the option's name, for the error message.

    Raises:
        InvalidArgumentError: ``value`` is neither a name nor a sequence of names.
    """
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
        too_big = math.isfinite(number) and abs(number) > FLOAT32_MAX
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
