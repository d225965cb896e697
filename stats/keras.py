"""Keras 3 preprocessing layers from feature statistics.

Numeric columns become ``Normalization`` (mean and variance) or ``Discretization``
(the quantile boundaries); categorical columns become ``StringLookup`` or
``IntegerLookup`` with the top-k vocabulary (values outside it map to the OOV index 0).
"""

from __future__ import annotations

from typing import Any

from dialects import InvalidArgumentError, MissingDependencyError
from stats.model import ColumnStats, FeatureStats

__all__ = ["to_keras"]


def to_keras(
    stats: FeatureStats,
    columns: list[str] | None = None,
    *,
    numeric: str = "normalize",
    include_label: bool = False,
) -> dict[str, Any]:
    """One preprocessing layer per column, ready to use in a model.

    Args:
        stats: the statistics.
        columns: which columns (default: every described column but the label).
        numeric: ``normalize`` (Normalization) or ``discretize`` (Discretization).
        include_label: also build a layer for the label column.

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
    names = columns or [name for name, c in stats.columns.items() if include_label or not c.label]
    built: dict[str, Any] = {}
    for name in names:
        column = stats[name]
        if column.kind == "numeric":
            built[name] = _numeric_layer(layers, column, numeric)
        elif column.kind == "categorical":
            built[name] = _lookup_layer(layers, column)
    return built


def _numeric_layer(layers: Any, column: ColumnStats, numeric: str) -> Any:
    if numeric == "discretize":
        boundaries = sorted({float(b) for b in column.boundaries if isinstance(b, int | float)})
        if not boundaries:
            raise InvalidArgumentError(f"column {column.name!r} has no numeric boundaries")
        return layers.Discretization(bin_boundaries=boundaries, name=f"{column.name}_buckets")
    if column.mean is None or column.variance is None:
        raise InvalidArgumentError(
            f"column {column.name!r} has no mean/variance (all NULL, or a date): "
            "use numeric='discretize' or leave it out"
        )
    return layers.Normalization(
        mean=column.mean, variance=column.variance, name=f"{column.name}_normalized"
    )


def _lookup_layer(layers: Any, column: ColumnStats) -> Any:
    vocabulary = [v for v in column.vocabulary if v is not None]
    if not vocabulary:
        raise InvalidArgumentError(f"column {column.name!r} has an empty vocabulary")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in vocabulary):
        return layers.IntegerLookup(vocabulary=vocabulary, name=f"{column.name}_lookup")
    return layers.StringLookup(vocabulary=[str(v) for v in vocabulary],
                               name=f"{column.name}_lookup")  # fmt: skip
