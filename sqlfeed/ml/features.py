"""The features of a training and how each is preprocessed, decided from exact statistics.

:func:`choose_features` takes the training split's schema and statistics and gives one
:class:`Feature` per column used: its Arrow type, its family (``numeric``,
``categorical`` or ``time``) and its transform (mean and standard deviation, the NULL fill
and mask; a vocabulary with one out-of-vocabulary index). The transforms are JSON, saved in
the model's manifest, and built into the model's layers, so that the model takes raw
columns: nothing is derived again at evaluation or prediction.

Refused, each with one line saying what to do: a struct, map, list, union, interval or
binary column as a feature; a text or integer column whose every row holds another value
(an identifier: pass it as the split ``key`` or ``skip`` it). Dropped with a warning: a
column with one value and no NULL, or only NULLs (it carries nothing). (An identifier:
every row another text, or another integer of a range at most twice the rows, as row
numbers are; an integer amount unique by chance is a feature.)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml.options import TrainOptions
from sqlfeed.stats.fed import TICK_KINDS, fed_kind, fed_value
from sqlfeed.stats.model import ColumnStats, FeatureStats

__all__ = ["FAMILY_NAMES", "Feature", "check_columns", "choose_features", "type_family"]

FAMILY_NAMES = ("numeric", "categorical", "time")
_NOT_FEATURES = ("struct", "map", "list", "union", "interval", "binary")
UNIQUE_MIN_ROWS = 20
"""Fewer training rows than this and a column unique in every row is not refused."""


@dataclass
class Feature:
    """One feature column: its type, family and transform (JSON, in the manifest)."""

    name: str
    arrow_type: str
    family: str
    """``numeric`` (numbers, booleans), ``categorical`` (text, integers described as
    categorical) or ``time`` (dates as days, timestamps as microseconds since 1970)."""
    transform: dict[str, Any] = field(default_factory=dict)
    """numeric/time: ``mean``, ``std`` (1 for a constant), ``fill`` (the mean: what a NULL
    becomes before scaling, so NULL scales to 0) and ``mask`` (a 0/1 NULL indicator is a
    feature too); ``gbdt``: ``mean`` and ``std`` (statistics only: a time is shifted by its
    mean) and ``null`` (a NULL is XGBoost's missing value; the values are not scaled);
    numeric in ``wide_deep``: ``boundaries`` (quantiles); categorical:
    ``vocabulary`` (top-k values, index 1...; 0 is every other value and NULL) and
    ``dtype`` (``string`` or ``int64``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Feature:
        return cls(data["name"], data["arrow_type"], data["family"], dict(data["transform"]))


def type_family(arrow_type: pa.DataType | str) -> str | None:
    """The coarse family of a type for the schema check.

    ``integer``, ``float``, ``decimal``, ``bool``, ``string``, ``date``, ``timestamp``, ...
    or None (not a feature); from the type or its text (the manifest keeps the text).
    """
    kind, depth = fed_kind(str(arrow_type))
    if kind is None or depth or kind == "binary":
        return None
    return {"int": "integer", "float": "float", "decimal": "decimal"}.get(kind, kind)


def choose_features(
    schema: pa.Schema,
    stats: FeatureStats,
    *,
    label: str,
    options: TrainOptions,
) -> list[Feature]:
    """The features of a training, in the query's column order.

    Raises:
        InvalidArgumentError: an unknown column in ``features``/``skip``, a column no
            feature can be made of, an identifier column, or no feature left.
    """
    features = []
    for name in check_columns(schema, label=label, options=options):
        feature = _feature(schema.field(name).type, stats[name], stats.rows, options)
        if feature is not None:
            features.append(feature)
    if not features:
        raise InvalidArgumentError(
            "no feature columns are left: the SELECT must return columns beside the label "
            "and the key that are not constant"
        )
    return features


def check_columns(schema: pa.Schema, *, label: str, options: TrainOptions) -> list[str]:
    """The feature columns ``options`` choose from ``schema``, each of a type a feature can be.

    What the schema alone tells, checked before any query runs.

    Raises:
        InvalidArgumentError: an unknown column in ``features``/``skip``, the label or the
            key among ``features``, or a struct, map, list, union, interval or binary column.
    """
    names = list(schema.names)
    for what, given in (("features", options.features or ()), ("skip", options.skip)):
        for name in given:
            if name not in names:
                raise InvalidArgumentError(
                    f"{what} names {name!r}, which the query does not return "
                    f"(columns: {', '.join(names)})"
                )
    if options.features is not None:
        chosen = [n for n in names if n in options.features]
        if label in chosen or (options.key and options.key in chosen):
            raise InvalidArgumentError("the label and the split key cannot be features")
    else:
        left_out = {label, options.key, *options.skip}
        chosen = [n for n in names if n not in left_out]
    for name in chosen:
        arrow_type = schema.field(name).type
        if type_family(arrow_type) is None:
            what = next((w for w in _NOT_FEATURES if w in str(arrow_type)), str(arrow_type))
            raise InvalidArgumentError(
                f"column {name!r} is a {what} ({arrow_type}), which is not a feature: select "
                f"numbers, text, booleans, dates or timestamps from it, or skip it "
                f"(--skip {name})"
            )
    return chosen


def _feature(
    arrow_type: pa.DataType, column: ColumnStats, rows: int, options: TrainOptions
) -> Feature | None:
    name = column.name
    kind, _depth = fed_kind(str(arrow_type))  # a feature's type (check_columns)
    assert kind is not None
    present = column.count - column.nulls
    if present <= 0 or (column.nulls == 0 and column.distinct is not None and column.distinct < 2):
        what = "only NULLs" if present <= 0 else f"one value ({_shown(column)})"
        warnings.warn(
            f"column {name!r} holds {what} in the training split: it is left out",
            UserWarning,
            stacklevel=5,  # _feature, choose_features, prepare, train: the caller of train
        )
        return None
    if (
        kind in ("int", "string")
        and rows >= UNIQUE_MIN_ROWS
        and column.nulls == 0
        and column.distinct_exact
        and column.distinct == rows
        and (kind == "string" or _dense(column, rows))
    ):
        raise InvalidArgumentError(
            f"column {name!r} holds another value in every row (an identifier, which a "
            f"model can only memorise): split by it with --key {name}, or --skip {name}"
        )
    if column.kind == "categorical" and kind != "bool":
        vocabulary = list(
            dict.fromkeys(fed_value(v, kind, "us") for v in column.vocabulary if v is not None)
        )
        if isinstance(vocabulary[0] if vocabulary else "", bytes):
            vocabulary = [v.decode("utf-8", "replace") for v in vocabulary]
        dtype = "string" if kind == "string" else "int64"
        return Feature(
            name,
            str(arrow_type),
            "categorical",
            {"vocabulary": vocabulary[: options.top_k], "dtype": dtype},
        )
    return _numeric(arrow_type, column, kind, options)


def _numeric(
    arrow_type: pa.DataType, column: ColumnStats, kind: str, options: TrainOptions
) -> Feature:
    if kind == "bool":  # described as categorical: its mean from the value counts
        counts = dict(zip(column.vocabulary, column.vocabulary_counts, strict=False))
        present = column.count - column.nulls
        mean = counts.get(True, 0) / present
        variance = mean * (1 - mean)
    else:
        if column.mean is None or column.variance is None:
            raise InvalidArgumentError(
                f"column {column.name!r} has no mean (its values are not finite): skip it "
                f"(--skip {column.name}) or cast it in the SELECT"
            )
        mean, variance = float(column.mean), float(column.variance)
    std = math.sqrt(variance) if variance and variance > 0 else 1.0
    family = "time" if kind in TICK_KINDS else "numeric"
    transform: dict[str, Any] = {"mean": mean, "std": std, "fill": mean, "mask": True}
    if options.family == "gbdt":  # trees take the values as they are, NULL as missing
        transform = {"mean": mean, "std": std, "null": "XGBoost's missing value; not scaled"}
    if family == "time":
        transform["unit"] = "days" if kind == "date" else "us"
    if options.family == "wide_deep":
        bounds = [fed_value(b, kind, "us") for b in column.boundaries if b is not None]
        transform["boundaries"] = sorted({float(b) for b in bounds if _finite(b)})
    return Feature(column.name, str(arrow_type), family, transform)


def _dense(column: ColumnStats, rows: int) -> bool:
    """Whether an integer column unique in every row looks like a row number.

    It does when its values span at most twice the rows: an amount or a count unique by
    chance is a feature.
    """
    low, high = column.min, column.max
    if not isinstance(low, int) or not isinstance(high, int):
        return True
    return high - low < 2 * rows


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(column: ColumnStats) -> str:
    value = column.vocabulary[0] if column.vocabulary else column.min
    return repr(value)


def feature_names(features: Sequence[Feature]) -> list[str]:
    """The features' column names, in order."""
    return [f.name for f in features]
