"""What the statistics are: a spec of the columns, and the results, as versioned JSON.

``FeatureStats`` holds one ``ColumnStats`` per column. Numeric columns have moments and
quantile boundaries; categorical columns have a top-k vocabulary with counts; both have
row, null and approximate distinct counts.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.stats.fed import decode_binary, encode_binary, fed_kind

__all__ = [
    "DEFAULT_TOP_K",
    "KINDS",
    "STATS_FORMAT_VERSION",
    "ColumnStats",
    "FeatureStats",
    "StatsSpec",
]

STATS_FORMAT_VERSION = 2
"""2: a binary column's values are base64 text (1, still read: their UTF-8 text, lossy)."""
_READ_VERSIONS = (1, 2)
DEFAULT_TOP_K = 1000
"""Vocabulary size by default: enough for most categorical features (a Keras embedding of
1,000 rows is small), few enough for an HTML report and a JSON file; cut to 20 before, which
left most rows of a 50-value column out of vocabulary."""
KINDS = ("numeric", "categorical", "skip")
"""How a column is described: moments and quantiles, a vocabulary, or not at all."""


@dataclass(frozen=True)
class StatsSpec:
    """Which columns to describe and how.

    Args:
        kinds: column name to ``numeric``, ``categorical`` or ``skip``; columns not named
            are inferred from their Arrow type (numbers and dates numeric, the rest
            categorical; booleans categorical).
        label: the label column: must exist; described like the others, and marked.
        buckets: quantile buckets per numeric column (``buckets - 1`` boundaries).
        top_k: vocabulary size per categorical column (default :data:`DEFAULT_TOP_K`);
            values beyond it become the out-of-vocabulary index of a Keras lookup, and
            :func:`sqlfeed.stats.keras.to_keras` warns with their share.
    """

    kinds: dict[str, str] = field(default_factory=dict)
    label: str | None = None
    buckets: int = 10
    top_k: int = DEFAULT_TOP_K

    def __post_init__(self) -> None:
        for name, kind in self.kinds.items():
            if kind not in KINDS:
                raise InvalidArgumentError(
                    f"column {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}"
                )
        if isinstance(self.buckets, bool) or not isinstance(self.buckets, int) or self.buckets < 2:
            raise InvalidArgumentError(f"buckets must be an integer >= 2, got {self.buckets!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise InvalidArgumentError(f"top_k must be an integer >= 1, got {self.top_k!r}")

    def check_columns(self, columns: list[str]) -> None:
        """Every column the spec names must be in the query's output."""
        named = [*self.kinds, *([self.label] if self.label else [])]
        missing = [name for name in named if name not in columns]
        if missing:
            what = "label column" if missing == [self.label] else "column(s)"
            raise InvalidArgumentError(
                f"the spec names {what} {', '.join(map(repr, missing))} that the query does "
                f"not return (output columns: {', '.join(columns)})"
            )

    @property
    def fractions(self) -> list[float]:
        """The quantile fractions of the bucket boundaries: 1/buckets .. (buckets-1)/buckets."""
        return [i / self.buckets for i in range(1, self.buckets)]


@dataclass
class ColumnStats:
    """The statistics of one column. Absent values are None (e.g. mean of an all-NULL column)."""

    name: str
    kind: str
    arrow_type: str
    count: int = 0
    """Rows, NULLs included."""
    nulls: int = 0
    nans: int = 0
    """NaN values (floating-point columns): counted here, left out of min, max, mean,
    variance, boundaries and histogram."""
    infinities: int = 0
    """Infinite values: in min, max, boundaries and histogram, left out of mean and variance."""
    distinct: int | None = None
    """Distinct non-NULL values, at most ``count - nulls`` (exact for pushdown, approximate
    for accumulators beyond their sketch); NaN counts as one value, -0.0 and 0.0 as one."""
    distinct_exact: bool = True
    min: Any = None
    max: Any = None
    mean: float | None = None
    """The mean of the finite values (of a date or timestamp column: in ``unit``; of a time
    of day or a duration: in microseconds, since midnight or long). Of integers, decimals,
    dates and timestamps: the exact sum over the count, rounded once, where the engine sums
    exactly (:attr:`~sqlfeed.dialects.Dialect.EXACT_SUMS`) and in accumulators; else (floats,
    SQLite) a sum of doubles, within about 1e-15 of the values' magnitude per value."""
    variance: float | None = None
    """Population variance of the finite values (of a time column: in ``unit`` squared)."""
    unit: str | None = None
    """A time column's numeric unit: ``days`` (dates) or ``us`` (timestamps), counted from
    1970-01-01, the int64 values :mod:`sqlfeed.tf` feeds (see :mod:`sqlfeed.stats.units`)."""
    boundaries: list[Any] = field(default_factory=list)
    """Quantile bucket boundaries (numeric): ``buckets - 1`` increasing values."""
    boundaries_exact: bool = True
    vocabulary: list[Any] = field(default_factory=list)
    """The top-k values, most frequent first (categorical)."""
    vocabulary_counts: list[int] = field(default_factory=list)
    other_count: int = 0
    """Non-NULL values outside the top k."""
    histogram: list[int] = field(default_factory=list)
    """Counts per bucket between the boundaries (numeric), for the report."""
    label: bool = False
    elements: bool = False
    """A list column's statistics are of its elements (innermost values, as the feeds give
    them in a ragged tensor): ``count``, ``nulls``, vocabulary and quantiles count elements,
    a NULL or empty list has none."""

    @property
    def null_rate(self) -> float:
        return self.nulls / self.count if self.count else 0.0

    @property
    def stddev(self) -> float | None:
        return math.sqrt(self.variance) if self.variance is not None else None


@dataclass
class FeatureStats:
    """Statistics of a query's columns, and how they were computed."""

    columns: dict[str, ColumnStats]
    rows: int
    method: str
    """``pushdown``, ``sample`` or ``accumulate`` (see :func:`sqlfeed.compute_stats`)."""
    dialect: str = ""
    sql: str = ""
    sample_rows: int | None = None
    label: str | None = None

    def __getitem__(self, name: str) -> ColumnStats:
        if name not in self.columns:
            raise InvalidArgumentError(
                f"no statistics for column {name!r} (columns: {', '.join(self.columns)})"
            )
        return self.columns[name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATS_FORMAT_VERSION,
            "rows": self.rows,
            "method": self.method,
            "dialect": self.dialect,
            "sql": self.sql,
            "sample_rows": self.sample_rows,
            "label": self.label,
            "columns": {
                name: _jsonable(_binary(asdict(c), encode_binary))
                for name, c in self.columns.items()
            },
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureStats:
        version = data.get("version")
        if version not in _READ_VERSIONS:
            raise InvalidArgumentError(
                f"statistics format version {version!r} is not "
                f"{STATS_FORMAT_VERSION}; recompute them with this sqlfeed"
            )
        decode = decode_binary if version == STATS_FORMAT_VERSION else (lambda v: v)
        columns = {name: ColumnStats(**_binary(c, decode)) for name, c in data["columns"].items()}
        return cls(
            columns=columns,
            rows=data["rows"],
            method=data["method"],
            dialect=data.get("dialect", ""),
            sql=data.get("sql", ""),
            sample_rows=data.get("sample_rows"),
            label=data.get("label"),
        )

    @classmethod
    def load(cls, path: str) -> FeatureStats:
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(json.load(handle))


_VALUES = ("min", "max", "boundaries", "vocabulary")


def _binary(column: dict[str, Any], code: Callable[[Any], Any]) -> dict[str, Any]:
    """A binary column's values encoded for JSON, or decoded from it (other columns as they are)."""
    if fed_kind(str(column.get("arrow_type", "")))[0] != "binary":
        return column
    out = dict(column)
    for key in _VALUES:
        value = out.get(key)
        out[key] = [code(v) for v in value] if isinstance(value, list) else code(value)
    return out


def _jsonable(value: Any) -> Any:
    """Dates, decimals and numpy scalars as JSON values.

    Dates as ISO text, durations as microseconds.
    """
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):  # a duration: its microseconds
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, bytes):  # only in columns that are not binary (see _binary)
        return value.decode("utf-8", "replace")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
