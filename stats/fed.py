"""What :mod:`sqlfeed.tf` and :mod:`sqlfeed.torch` feed for a column, from its Arrow type.

The statistics keep each column's Arrow type as text (``ColumnStats.arrow_type``); a
preprocessing layer must work on the tensor the feed makes of it, which is decided by
that type (the table in :mod:`sqlfeed.tf`): integers become int64, floats and decimals
floats, bools bools, strings UTF-8 bytes, binary its bytes, a date int64 days since 1970,
a timestamp, time of day or duration int64 ticks of ``time_unit``, a dictionary its
values, a list (nested too) a ragged tensor of its innermost values. Structs, maps,
intervals and unions are not fed at all. ``stats`` does not import ``sqlfeed``: the rules
are restated here from the type's text, and the tests hold the two to each other.

>>> fed_kind("list<item: list<l: string>>")
('string', 2)
>>> fed_kind("dictionary<values=string, indices=int32, ordered=0>")
('string', 0)
>>> fed_kind("struct<x: int64>")
(None, 0)
>>> fed_value(dt.time(1, 0, 2), "time", "ms"), fed_value(True, "bool", "us")
(3602000, 1)
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from typing import Any

from sqlfeed.stats.units import DAYS, MICROSECONDS, PER_SECOND, to_units

__all__ = [
    "NUMBER_KINDS",
    "TICK_KINDS",
    "decode_binary",
    "encode_binary",
    "fed_kind",
    "fed_value",
]

TICK_KINDS = ("date", "timestamp", "time", "duration")
"""Kinds fed as int64 counts (days, or ticks of ``time_unit``)."""
NUMBER_KINDS = ("int", "float", "decimal", *TICK_KINDS)
"""Kinds fed as numbers (what Normalization and Discretization take)."""

_INTS = re.compile(r"u?int(8|16|32|64)")
_FLOATS = ("halffloat", "float", "double")
_STRINGS = ("string", "large_string", "utf8", "large_utf8", "string_view")
_BINARIES = ("binary", "large_binary", "binary_view")
_LISTS = ("list<", "large_list<", "fixed_size_list<", "list_view<", "large_list_view<")


def fed_kind(arrow_type: str) -> tuple[str | None, int]:
    """The kind of value fed for ``arrow_type`` (its text), and its list depth.

    Returns:
        ``(kind, depth)``: kind one of ``int``, ``float``, ``decimal``, ``bool``,
        ``string``, ``binary``, ``date``, ``timestamp``, ``time``, ``duration``, or None
        for a type the feeds refuse (struct, map, interval, union, null); depth the number
        of list levels (0 for a scalar column).
    """
    text, depth = arrow_type.strip(), 0
    while True:
        text = text.removesuffix(" not null")
        if text.startswith("dictionary<values="):
            text = text[len("dictionary<values=") :].split(", indices=", 1)[0]
            continue
        opener = next((p for p in _LISTS if text.startswith(p)), None)
        if opener is None:
            return _scalar(text), depth
        inner = text[len(opener) :]
        inner = re.sub(r">(\[\d+\])?$", "", inner)  # the closing bracket, a fixed size
        text, depth = inner.split(": ", 1)[1] if ": " in inner else inner, depth + 1


def _scalar(text: str) -> str | None:
    if _INTS.fullmatch(text):
        return "int"
    checks = (
        (text in _FLOATS, "float"),
        (text == "bool", "bool"),
        (text in _STRINGS, "string"),
        (text in _BINARIES or text.startswith("fixed_size_binary"), "binary"),
        (text.startswith("decimal"), "decimal"),
        (text.startswith("date"), "date"),
        (text.startswith("timestamp"), "timestamp"),
        (text.startswith(("time32", "time64")), "time"),
        (text.startswith("duration"), "duration"),
    )
    return next((kind for hit, kind in checks if hit), None)


def fed_value(value: Any, kind: str, time_unit: str) -> Any:
    """A value of the statistics (or its JSON form) as the feed gives it.

    Dates become days since 1970; timestamps, times of day and durations ticks of
    ``time_unit`` (since 1970 UTC, since midnight, or long); bools 0 or 1 (an
    ``IntegerLookup`` takes the bool tensor as those); binary its bytes; the rest as it is.

    Raises:
        ValueError: the value is not of the kind.
    """
    if kind == "bool":
        return int(bool(value))
    if kind == "date":
        return to_units(value, DAYS)
    if kind in ("timestamp", "time", "duration"):
        micros = _micros(value, kind)
        return micros * PER_SECOND[time_unit] // PER_SECOND[MICROSECONDS]
    if kind == "binary":
        return value if isinstance(value, bytes) else str(value).encode("utf-8")
    if kind == "int":
        return int(value)
    if kind in ("float", "decimal"):
        return float(value)
    return value


def _micros(value: Any, kind: str) -> int:
    if kind == "timestamp":
        return to_units(value, MICROSECONDS)
    if kind == "time":
        clock = dt.time.fromisoformat(value) if isinstance(value, str) else value
        if not isinstance(clock, dt.time):
            raise ValueError(f"{value!r} is not a time of day")
        return ((clock.hour * 60 + clock.minute) * 60 + clock.second) * 1_000_000 + (
            clock.microsecond
        )
    if isinstance(value, dt.timedelta):  # a duration; in JSON, its microseconds
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not a duration")


def encode_binary(value: Any) -> Any:
    """Bytes as JSON text (base64), so that a binary vocabulary survives a save."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def decode_binary(value: Any) -> Any:
    """:func:`encode_binary`'s text back as bytes."""
    if isinstance(value, str):
        return base64.b64decode(value.encode("ascii"))
    return value
