"""Keras 3 preprocessing layers from feature statistics.

Numeric columns become ``Normalization`` (mean and variance) or ``Discretization``
(the quantile boundaries); categorical columns become ``StringLookup`` or
``IntegerLookup`` with the top-k vocabulary (values outside it map to the OOV index 0;
when the top k leave rows out, a warning says how many and that a larger
``StatsSpec(top_k=...)`` keeps them).

Each layer takes the tensor :mod:`sqlfeed.tf` feeds for its column (:mod:`sqlfeed.stats.fed`):
a string, JSON or uuid column its text, a binary column its bytes (``StringLookup``), an
integer, bool, date or time column its int64 (``IntegerLookup``), a list column the
``tf.RaggedTensor`` of its elements, whose statistics these are (a lookup or
``Discretization``; ``Normalization`` takes no ragged tensor). A column the feed refuses
(struct, map, interval) or that a layer cannot take (a lookup over floats) is refused
with the reason.

Date and timestamp columns are numbers too, as :mod:`sqlfeed.tf` feeds them: a date as
int64 days since 1970-01-01, a timestamp as int64 ticks of ``time_unit`` since 1970 (give
the ``time_unit`` the dataset was built with). Keras computes in float32, which resolves
a time to about 1e-7 of its distance from 1970: about two minutes for today's timestamps,
exact for dates.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dialects.optional import require
from sqlfeed.stats.fed import NUMBER_KINDS, TICK_KINDS, fed_kind, fed_value
from sqlfeed.stats.model import ColumnStats, FeatureStats
from sqlfeed.stats.units import PER_SECOND

__all__ = ["to_keras"]


def to_keras(
    stats: FeatureStats,
    columns: list[str] | None = None,
    *,
    numeric: str = "normalize",
    include_label: bool = False,
    time_unit: str = "us",
) -> dict[str, Any]:
    """One preprocessing layer per column, ready to use in a model.

    Args:
        stats: the statistics.
        columns: which columns (default: every described column but the label).
        numeric: ``normalize`` (Normalization) or ``discretize`` (Discretization).
        include_label: also build a layer for the label column.
        time_unit: the unit timestamps, times and durations are fed in (``s``, ``ms``,
            ``us`` or ``ns``, as ``time_unit`` of :func:`sqlfeed.tf.dataset`); dates are
            always days.

    Warns:
        UserWarning: a vocabulary leaves values out (they map to the OOV index): the share
            of the column's values left out, and the ``top_k`` that keeps them.

    Raises:
        InvalidArgumentError: a column without the statistics its layer needs (an all-NULL
            column has no mean; an empty vocabulary makes no lookup), or whose fed tensor
            no layer here takes (the reason, in one line).
    """
    layers = require("keras.layers", "to_keras (Keras preprocessing layers)")
    if numeric not in ("normalize", "discretize"):
        raise InvalidArgumentError(f"numeric must be 'normalize' or 'discretize', not {numeric!r}")
    if time_unit not in PER_SECOND:
        raise InvalidArgumentError(
            f"time_unit must be one of {', '.join(PER_SECOND)}, not {time_unit!r}"
        )
    names = columns or [name for name, c in stats.columns.items() if include_label or not c.label]
    built: dict[str, Any] = {}
    for name in names:
        column = stats[name]
        if column.kind == "skip":
            continue
        kind, depth = fed_kind(column.arrow_type)
        if kind is None:
            raise InvalidArgumentError(
                f"column {name!r} is {column.arrow_type}, which sqlfeed.tf does not feed: "
                "leave it out (columns=[...]) or select its fields or a cast in the query"
            )
        if column.kind == "numeric":
            built[name] = _numeric_layer(layers, column, kind, depth, numeric, time_unit)
        else:
            built[name] = _lookup_layer(layers, column, kind, time_unit)
    return built


def _numeric_layer(
    layers: Any, column: ColumnStats, kind: str, depth: int, numeric: str, time_unit: str
) -> Any:
    if kind not in NUMBER_KINDS:
        raise InvalidArgumentError(
            f"column {column.name!r} is fed as {kind}, not a number: describe it as "
            "categorical (StatsSpec(kinds=...)) or leave it out"
        )
    if numeric == "discretize":
        numbers = {_number(b, kind, time_unit) for b in column.boundaries}
        boundaries = sorted(n for n in numbers if n is not None)
        if not boundaries:
            raise InvalidArgumentError(f"column {column.name!r} has no numeric boundaries")
        return layers.Discretization(bin_boundaries=boundaries, name=f"{column.name}_buckets")
    if depth:
        raise InvalidArgumentError(
            f"column {column.name!r} is a list, fed as a ragged tensor, which Normalization "
            "cannot take: use numeric='discretize' or describe it as categorical"
        )
    if column.mean is None or column.variance is None:
        raise InvalidArgumentError(
            f"column {column.name!r} has no mean/variance (all NULL or non-finite, or a time "
            "column whose engine cannot average it): use numeric='discretize' or leave it out"
        )
    factor = 1.0  # from the statistics' microseconds to the fed time_unit (dates: days)
    if kind in TICK_KINDS and kind != "date":
        factor = PER_SECOND[time_unit] / PER_SECOND["us"]
    return layers.Normalization(
        mean=column.mean * factor,
        variance=column.variance * factor * factor,
        name=f"{column.name}_normalized",
    )


def _number(bound: Any, kind: str, time_unit: str) -> float | None:
    """A boundary as the number fed (dates in days, times in ``time_unit``).

    None for a bound that is not finite.
    """
    if bound is None or isinstance(bound, bool):
        return None
    if kind in TICK_KINDS:
        return float(fed_value(bound, kind, time_unit))
    if isinstance(bound, int | float) and math.isfinite(bound):
        return float(bound)
    return None


def _lookup_layer(layers: Any, column: ColumnStats, kind: str, time_unit: str) -> Any:
    if kind in ("float", "decimal"):
        raise InvalidArgumentError(
            f"column {column.name!r} is fed as a {kind} number, which no lookup takes: "
            "describe it as numeric, or cast it to an integer or text in the query"
        )
    fed = [fed_value(v, kind, time_unit) for v in column.vocabulary if v is not None]
    vocabulary = list(dict.fromkeys(fed))  # a layer refuses repeats
    if not vocabulary:
        raise InvalidArgumentError(f"column {column.name!r} has an empty vocabulary")
    _warn_left_out(column)
    name = f"{column.name}_lookup"
    if kind in ("string", "binary"):  # the bytes the feed gives: a str is UTF-8 encoded
        # as objects: a NumPy string array would drop trailing NUL bytes (b"\x00" -> "")
        return layers.StringLookup(vocabulary=np.array(vocabulary, dtype=object), name=name)
    return layers.IntegerLookup(vocabulary=vocabulary, name=name)


def _warn_left_out(column: ColumnStats) -> None:
    """Warns when the vocabulary leaves values out (they become the OOV index 0)."""
    present = column.count - column.nulls
    if column.other_count <= 0 or present <= 0:
        return
    what = "elements" if column.elements else "non-NULL values"
    keep = column.distinct if column.distinct else len(column.vocabulary) + 1
    warnings.warn(
        f"column {column.name!r}: the vocabulary of the top {len(column.vocabulary)} values "
        f"leaves {column.other_count:,} of {present:,} {what} "
        f"({column.other_count / present:.1%}) out, as [UNK]: compute the statistics with "
        f"StatsSpec(top_k={keep}) (or stats --top-k {keep}) to keep them",
        UserWarning,
        stacklevel=4,  # the caller of to_keras
    )
