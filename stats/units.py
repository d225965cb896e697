"""Time columns as numbers: the units their mean, variance and Keras layers are expressed in.

A date is a number of days since 1970-01-01; a timestamp a number of microseconds since
1970-01-01 00:00 (UTC for a timestamp with a time zone; the wall-clock value for one
without). These are the int64 values :mod:`sqlfeed.tf` feeds for a date column and for a
timestamp column with its default ``time_unit="us"``, so the statistics apply to them as
they are.

>>> to_units(dt.date(1970, 1, 11), "days"), to_units("1970-01-01T00:00:01", "us")
(10, 1000000)
>>> from_units(10.5, "days")
datetime.datetime(1970, 1, 11, 12, 0)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

__all__ = ["DAYS", "MICROSECONDS", "PER_SECOND", "from_units", "to_units", "unit_of"]

DAYS = "days"
"""The unit of date columns' moments."""
MICROSECONDS = "us"
"""The unit of timestamp columns' moments."""
PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
"""Ticks per second of each ``time_unit``."""

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def unit_of(arrow_type: pa.DataType | str) -> str | None:
    """``days`` for a date type, ``us`` for a timestamp type, None for anything else.

    Args:
        arrow_type: an Arrow type, or its text as :class:`sqlfeed.stats.model.ColumnStats` keeps it.
    """
    text = str(arrow_type)
    if text.startswith("date"):
        return DAYS
    if text.startswith("timestamp"):
        return MICROSECONDS
    return None


def to_units(value: Any, unit: str) -> int:
    """A date or timestamp (or its ISO text, as after a JSON round trip) in ``unit``.

    Raises:
        ValueError: ``value`` is not a date or timestamp.
    """
    if isinstance(value, str):
        value = dt.date.fromisoformat(value) if unit == DAYS else dt.datetime.fromisoformat(value)
    if unit == DAYS:
        if isinstance(value, dt.datetime):
            value = value.date()
        if not isinstance(value, dt.date):
            raise ValueError(f"{value!r} is not a date")
        return (value - _EPOCH_DATE).days
    if not isinstance(value, dt.datetime):
        if isinstance(value, dt.date):
            value = dt.datetime(value.year, value.month, value.day)
        else:
            raise ValueError(f"{value!r} is not a timestamp")
    delta = value - (_EPOCH_UTC if value.tzinfo is not None else _EPOCH)
    return int((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def from_units(number: float, unit: str) -> dt.datetime | None:
    """The moment ``number`` days or microseconds after 1970-01-01 (None beyond year 1..9999)."""
    try:
        if unit == DAYS:
            return _EPOCH + dt.timedelta(days=number)
        return _EPOCH + dt.timedelta(microseconds=number)
    except (OverflowError, ValueError):
        return None
