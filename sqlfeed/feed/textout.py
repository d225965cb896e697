r"""How the text outputs show values: CSV and JSONL exports, ``sqlfeed sample``.

A text cell must carry its value's meaning on its own (a reader of the CSV file has no
Arrow schema), so before writing text every column whose Arrow form would be lost or
refused is shown as text (:func:`shown`); the other columns are written as Arrow does:

=======================  ==========================================  =====================
type                     CSV                                         JSON (JSONL, sample)
=======================  ==========================================  =====================
durations (PostgreSQL    ISO 8601 durations: ``P1D``, ``PT1H30M``,   the same, as strings
interval, MySQL TIME)    ``-PT0.5S``; days are 24 hours
intervals (months,       ISO 8601 with years and months:             the same
days, nanoseconds)       ``P1Y2M3DT4H``; components of mixed signs
                         each carry their own (``P1M-2D``, as
                         PostgreSQL's ``intervalstyle iso_8601``)
binary                   ``\x`` and hex digits (PostgreSQL's          the same
                         ``bytea`` text)
lists, structs, maps     JSON text in one cell (a map: an object)    JSON arrays / objects
=======================  ==========================================  =====================

>>> iso_duration(86_400_000_000, "us"), iso_duration(5_400, "s"), iso_duration(-500, "ms")
('P1D', 'PT1H30M', '-PT0.5S')
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sqlfeed.io.views import plain_type

__all__ = ["iso_duration", "iso_interval", "shown", "shown_schema"]

_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def iso_duration(ticks: int, unit: str) -> str:
    """A duration of ``ticks`` ``unit`` (s, ms, us, ns) as ISO 8601 text (days of 24 h)."""
    per = _PER_SECOND[unit]
    sign = "-" if ticks < 0 else ""
    seconds, fraction = divmod(abs(ticks), per)
    days, seconds = divmod(seconds, 86_400)
    return sign + _iso(0, days, seconds, fraction, per)


def iso_interval(months: int, days: int, nanoseconds: int) -> str:
    """An interval of months, days and nanoseconds as ISO 8601 text.

    One leading ``-`` when every part is negative, else each part with its own sign (as
    PostgreSQL).
    """
    parts = (months, days, nanoseconds)
    if all(p <= 0 for p in parts) and any(parts):
        return "-" + iso_interval(-months, -days, -nanoseconds)
    seconds, fraction = divmod(abs(nanoseconds), 10**9)
    time = _time(seconds, fraction, 10**9, "-" if nanoseconds < 0 else "")
    years, rest = abs(months) // 12, abs(months) % 12
    month_sign = "-" if months < 0 else ""
    date = "".join(
        f"{sign}{n}{unit}"
        for n, unit, sign in (
            (years, "Y", month_sign),
            (rest, "M", month_sign),
            (abs(days), "D", "-" if days < 0 else ""),
        )
        if n
    )
    if not date and not time:
        return "PT0S"
    return "P" + date + ("T" + time if time else "")


def _iso(months: int, days: int, seconds: int, fraction: int, per: int) -> str:
    date = (f"{months}M" if months else "") + (f"{days}D" if days else "")
    time = _time(seconds, fraction, per, "")
    if not date and not time:
        return "PT0S"
    return "P" + date + ("T" + time if time else "")


def _time(seconds: int, fraction: int, per: int, sign: str) -> str:
    hours, rest = divmod(seconds, 3_600)
    minutes, secs = divmod(rest, 60)
    text = (f"{sign}{hours}H" if hours else "") + (f"{sign}{minutes}M" if minutes else "")
    if secs or fraction:
        digits = len(str(per)) - 1
        decimals = f".{fraction:0{digits}d}".rstrip("0") if fraction else ""
        text += f"{sign}{secs}{decimals}S"
    return text


def _nested(t: pa.DataType) -> bool:
    k = pa.types
    return bool(
        k.is_list(t)
        or k.is_large_list(t)
        or k.is_fixed_size_list(t)
        or k.is_list_view(t)
        or k.is_large_list_view(t)
        or k.is_struct(t)
        or k.is_map(t)
    )


def _binary(t: pa.DataType) -> bool:
    k = pa.types
    return bool(
        k.is_binary(t) or k.is_large_binary(t) or k.is_fixed_size_binary(t) or k.is_binary_view(t)
    )


def _textual(t: pa.DataType) -> bool:
    """Whether a value of type ``t`` is shown as text instead of its Arrow form."""
    return bool(pa.types.is_duration(t) or pa.types.is_interval(t) or _binary(t))


def _changes(t: pa.DataType, csv: bool) -> bool:
    """Whether :func:`shown` changes a column of type ``t``."""
    if pa.types.is_dictionary(t):
        return _changes(t.value_type, csv)
    if _textual(t):
        return True
    if _nested(t):
        if csv:
            return True
        return any(_changes(t.field(i).type, csv) for i in range(t.num_fields))
    return not plain_type(t).equals(t)  # view types: no CSV writer, no JSON kernels


def _shown_type(t: pa.DataType, csv: bool) -> pa.DataType:
    if not _changes(t, csv):
        return t
    if pa.types.is_dictionary(t):
        return _shown_type(t.value_type, csv)
    if _textual(t) or (csv and _nested(t)):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_shown_type(t.field(i).type, csv)) for i in range(t.num_fields)]
        )
    if pa.types.is_map(t):
        return pa.map_(_shown_type(t.key_type, csv), _shown_type(t.item_type, csv))
    if pa.types.is_large_list(t) or pa.types.is_large_list_view(t):
        return pa.large_list(_shown_type(t.value_type, csv))
    if _nested(t):
        return pa.list_(_shown_type(t.value_type, csv))
    return plain_type(t)


def shown_schema(schema: pa.Schema, *, csv: bool) -> pa.Schema:
    """The schema of :func:`shown` batches of ``schema`` (metadata dropped)."""
    return pa.schema([pa.field(f.name, _shown_type(f.type, csv)) for f in schema])


def shown(batch: pa.RecordBatch | pa.Table, *, csv: bool) -> pa.RecordBatch | pa.Table:
    """``batch`` with the columns a text output shows as text converted (see the module).

    Durations, intervals and binary values as text, anywhere; with ``csv``, lists, structs
    and maps as JSON text. The other columns are the same arrays.
    """
    if not any(_changes(f.type, csv) for f in batch.schema):
        return batch
    columns = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if not _changes(field.type, csv):
            columns.append(column)
            continue
        values = [_value(v, field.type, csv) for v in column.to_pylist()]
        columns.append(pa.array(values, type=_shown_type(field.type, csv)))
    schema = shown_schema(batch.schema, csv=csv)
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(columns, schema=schema)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _value(value: Any, t: pa.DataType, csv: bool) -> Any:
    """One value of type ``t`` (as ``to_pylist`` gives it) as the text output shows it."""
    if value is None:
        return None
    if pa.types.is_dictionary(t):
        return _value(value, t.value_type, csv)
    if _nested(t) and csv:
        return json.dumps(_json(value, t), ensure_ascii=False, default=str)
    return _json(value, t)


def _json(value: Any, t: pa.DataType) -> Any:
    """``value`` with its durations, intervals and binary values as text, nested too."""
    k = pa.types
    if value is None:
        return None
    if k.is_dictionary(t):
        return _json(value, t.value_type)
    if k.is_duration(t):
        return iso_duration(_ticks(value, t.unit), t.unit)
    if k.is_interval(t):
        return _interval_text(value, t)
    if _binary(t):
        return "\\x" + bytes(value).hex()
    if k.is_struct(t):
        return {
            t.field(i).name: _json(value.get(t.field(i).name), t.field(i).type)
            for i in range(t.num_fields)
        }
    if k.is_map(t):
        return {str(key): _json(item, t.item_type) for key, item in value}
    if _nested(t):
        return [_json(v, t.value_type) for v in value]
    return value


def _ticks(value: Any, unit: str) -> int:
    """A duration value from ``to_pylist`` in ticks of ``unit``.

    The value is a timedelta (pandas' Timedelta for ns).
    """
    if isinstance(value, int):
        return value
    if unit == "ns" and hasattr(value, "value"):
        return int(value.value)  # pandas.Timedelta: nanoseconds
    micros = (value.days * 86_400 + value.seconds) * 10**6 + value.microseconds
    return int(micros * _PER_SECOND[unit] // 10**6)


def _interval_text(value: Any, t: pa.DataType) -> str:
    if isinstance(value, pa.MonthDayNano) or hasattr(value, "nanoseconds"):
        return iso_interval(value.months, value.days, value.nanoseconds)
    if pa.types.is_interval(t) and isinstance(value, int):  # month_interval
        return iso_interval(value, 0, 0)
    days, millis = value  # day_time_interval
    return iso_interval(0, days, millis * 10**6)
