"""Keras 3 preprocessing layers from feature statistics.

Numeric columns become ``Normalization`` (mean and variance) or ``Discretization``
(the quantile boundaries); categorical columns become ``StringLookup`` or
``IntegerLookup`` with the top-k vocabulary (values outside it map to the OOV index 0).

Date and timestamp columns are numbers too, as :mod:`sqlfeed.tf` feeds them: a date as
int64 days since 1970-01-01, a timestamp as int64 ticks of ``time_unit`` since 1970 (give
the ``time_unit`` the dataset was built with). Keras computes in float32, which resolves
a time to about 1e-7 of its distance from 1970: about two minutes for today's timestamps,
exact for dates.
"""

from __future__ import annotations

import math
from typing import Any

from dialects import InvalidArgumentError, MissingDependencyError
from stats.model import ColumnStats, FeatureStats
from stats.units import DAYS, PER_SECOND, to_units, unit_of

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
        time_unit: the unit timestamps are fed in (``s``, ``ms``, ``us`` or ``ns``, as
            ``time_unit`` of :func:`sqlfeed.tf.dataset`); dates are always days.

    Raises:
        InvalidArgumentError: a column without the statistics its layer needs (an all-NULL
            column has no mean; an empty vocabulary makes no lookup).
    """
    try:
        from keras import layers
    except ImportError:
        raise MissingDependencyError(
            "Keras layers need TensorFlow/Keras: pip install 'sqlfeed[tf]'"
        ) from None
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
        if column.kind == "numeric":
            built[name] = _numeric_layer(layers, column, numeric, time_unit)
        elif column.kind == "categorical":
            built[name] = _lookup_layer(layers, column)
    return built


def _numeric_layer(layers: Any, column: ColumnStats, numeric: str, time_unit: str) -> Any:
    unit = unit_of(column.arrow_type)
    factor = 1.0  # from the statistics' unit to the fed one
    if unit is not None and unit != DAYS:
        factor = PER_SECOND[time_unit] / PER_SECOND[unit]
    if numeric == "discretize":
        boundaries = sorted({b * factor for b in _numbers(column, unit)})
        if not boundaries:
            raise InvalidArgumentError(f"column {column.name!r} has no numeric boundaries")
        return layers.Discretization(bin_boundaries=boundaries, name=f"{column.name}_buckets")
    if column.mean is None or column.variance is None:
        raise InvalidArgumentError(
            f"column {column.name!r} has no mean/variance (all NULL or non-finite, or a time "
            "column whose engine cannot average it): use numeric='discretize' or leave it out"
        )
    return layers.Normalization(
        mean=column.mean * factor,
        variance=column.variance * factor * factor,
        name=f"{column.name}_normalized",
    )


def _numbers(column: ColumnStats, unit: str | None) -> list[float]:
    """The finite boundaries as numbers (dates and timestamps in the statistics' unit)."""
    out = []
    for bound in column.boundaries:
        if isinstance(bound, bool):
            continue
        if unit is not None and not isinstance(bound, int | float):
            out.append(float(to_units(bound, unit)))
        elif isinstance(bound, int | float) and math.isfinite(bound):
            out.append(float(bound))
    return out


def _lookup_layer(layers: Any, column: ColumnStats) -> Any:
    vocabulary = [v for v in column.vocabulary if v is not None]
    if not vocabulary:
        raise InvalidArgumentError(f"column {column.name!r} has an empty vocabulary")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in vocabulary):
        return layers.IntegerLookup(vocabulary=vocabulary, name=f"{column.name}_lookup")
    return layers.StringLookup(vocabulary=[str(v) for v in vocabulary],
                               name=f"{column.name}_lookup")  # fmt: skip
