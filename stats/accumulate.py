"""Mergeable statistics over Arrow batches.

Each worker accumulates its partitions, then the accumulators merge into the statistics of
the whole query.

Exact as long as the data fits the sketches (``SKETCH_VALUES`` values per numeric column,
``KMV_SIZE`` distinct values, ``VOCABULARY_CAPACITY`` distinct categories); beyond, the
quantiles, distinct counts and vocabulary counts become approximate, and say so
(``boundaries_exact``, ``distinct_exact``); a distinct estimate never exceeds the
non-NULL count.

The rules are the pushdown's (see :mod:`sqlfeed.stats.pushdown`): boundary positions in integer
arithmetic, NaN counted and left out, infinities counted and left out of the moments,
moments scaled by powers of two so that finite values never overflow, -0.0 and 0.0 one
value, dates and timestamps with moments in days / microseconds (:mod:`sqlfeed.stats.units`).
"""

from __future__ import annotations

import datetime as dt
import fractions
import hashlib
import heapq
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.stats.model import ColumnStats, FeatureStats, StatsSpec
from sqlfeed.stats.pushdown import innermost, kinds_of, positions, scale_exponent
from sqlfeed.stats.units import PER_SECOND, unit_of

__all__ = ["StatsAccumulator", "accumulate"]

SKETCH_VALUES = 200_000
KMV_SIZE = 4096
VOCABULARY_CAPACITY = 100_000
_MASK = (1 << 64) - 1


class _Distinct:
    """K minimum values of 64-bit hashes: exact below ``KMV_SIZE`` distinct values."""

    def __init__(self) -> None:
        self.hashes: set[int] = set()
        self.saturated = False

    def add(self, hashes: Iterable[int]) -> None:
        self.hashes.update(hashes)
        if len(self.hashes) > KMV_SIZE:
            self.hashes = set(heapq.nsmallest(KMV_SIZE, self.hashes))
            self.saturated = True

    def merge(self, other: _Distinct) -> None:
        self.saturated = self.saturated or other.saturated
        self.add(other.hashes)

    def estimate(self) -> tuple[int, bool]:
        if not self.saturated:
            return len(self.hashes), True
        kth = max(self.hashes)
        return round((KMV_SIZE - 1) / ((kth + 1) / 2**64)), False


def _splitmix(values: np.ndarray) -> list[int]:
    x = values.astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return [int(v) for v in np.unique(x)]


def _text_hash(value: Any) -> int:
    data = value if isinstance(value, bytes) else repr(value).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class _Moments:
    """Count, mean and sum of squared deviations of finite values.

    Merged with Chan et al.'s pairwise update.

    Kept as deviations from an ``origin`` (the first value seen) scaled by ``2**-scale``:
    integer ticks are differenced exactly, so a partition's mean is exact to the spread of
    its values, not to their size (timestamps in microseconds are ~1.7e15 with spreads of
    seconds), and the power-of-two scaling (exact) keeps sums and squares from overflowing.
    The true mean is ``origin + mean * 2**scale``, the true sum of squares
    ``m2 * 2**(2 * scale)``.
    """

    def __init__(self) -> None:
        self.n = self.scale = 0
        self.origin: int | float = 0
        self.mean = self.m2 = 0.0
        self.total: int | None = None
        """The exact sum of integer values (None for floats, or a spread beyond int64)."""

    def add(self, values: np.ndarray, integral: bool) -> None:
        """Add finite values (integers as their own NumPy integer type)."""
        if not len(values):
            return
        other = _Moments()
        other.n, other.origin = len(values), values[0].item()
        if integral:
            other.total = _exact_sum(values, int(other.origin))
            deviations = _int_deviations(values, int(other.origin))
            other.scale = scale_exponent(float(deviations.min()), float(deviations.max()))
            scaled = np.ldexp(deviations, -other.scale)
        else:
            other.scale = scale_exponent(float(values.min()), float(values.max()))
            scaled = np.ldexp(values, -other.scale) - math.ldexp(other.origin, -other.scale)
        other.mean = float(scaled.mean())
        other.m2 = float(((scaled - other.mean) ** 2).sum())
        self.merge(other)

    def merge(self, other: _Moments) -> None:
        if not other.n:
            return
        if not self.n:
            self.n, self.scale, self.origin = other.n, other.scale, other.origin
            self.mean, self.m2, self.total = other.mean, other.m2, other.total
            return
        both = self.total is not None and other.total is not None
        self.total = self.total + other.total if both else None  # type: ignore[operator]
        if isinstance(self.origin, int) and isinstance(other.origin, int):
            gap = float(other.origin - self.origin)  # exact difference, then rounded once
            scale = max(self.scale, other.scale, math.frexp(gap)[1])
            shift = math.ldexp(gap, -scale)
        else:  # floats: scaled first, so that the difference cannot overflow
            bound = max(abs(float(self.origin)), abs(float(other.origin)))
            scale = max(self.scale, other.scale, math.frexp(bound)[1] + 1)
            shift = math.ldexp(float(other.origin), -scale) - math.ldexp(float(self.origin), -scale)
        mean_a, m2_a = _rescaled(self.mean, self.m2, self.scale - scale)
        mean_b, m2_b = _rescaled(other.mean, other.m2, other.scale - scale)
        mean_b += shift
        total = self.n + other.n
        delta = mean_b - mean_a
        self.m2 = m2_a + m2_b + delta * delta * (self.n * other.n / total)
        self.mean = mean_a + delta * (other.n / total)
        self.n, self.scale = total, scale

    def result(self, low: float, high: float) -> tuple[float | None, float | None]:
        """(mean, population variance); the mean kept within the values' range."""
        if not self.n:
            return None, None
        if low == high:
            return float(low), 0.0
        if isinstance(self.origin, int):
            mean = float(self.origin) + math.ldexp(self.mean, self.scale)
        else:
            mean = math.ldexp(math.ldexp(self.origin, -self.scale) + self.mean, self.scale)
        try:
            variance = math.ldexp(self.m2 / self.n, 2 * self.scale)
        except OverflowError:
            variance = math.inf
        return min(max(mean, float(low)), float(high)), variance


def _exact_sum(values: np.ndarray, origin: int) -> int | None:
    """The sum of integer values as a Python integer (None: their spread exceeds int64).

    Their deviations from ``origin`` are summed by 32-bit halves (``d = hi * 2**32 + lo``,
    ``0 <= lo < 2**32``), whose int64 sums cannot overflow for fewer than 2**31 values.
    """
    low, high = int(values.min()), int(values.max())
    if max(abs(low - origin), abs(high - origin)) >= 2**63:
        return None
    with np.errstate(over="ignore"):
        deviations = (values - np.array(origin).astype(values.dtype)).view(np.int64)
    high_halves = int((deviations >> 32).sum())
    low_halves = int((deviations & 0xFFFFFFFF).sum())
    return origin * len(values) + (high_halves << 32) + low_halves


def _int_deviations(values: np.ndarray, origin: int) -> np.ndarray:
    """``values - origin`` as float64: exact in integers where the spread fits int64."""
    low, high = int(values.min()), int(values.max())
    if max(abs(low - origin), abs(high - origin)) < 2**63:
        with np.errstate(over="ignore"):  # wraps around, and the int64 view unwraps it
            wrapped = values - np.array(origin).astype(values.dtype)
        exact: np.ndarray = wrapped.view(np.int64).astype(np.float64)
        return exact
    rounded: np.ndarray = values.astype(np.float64) - float(origin)
    return rounded


def _rescaled(mean: float, m2: float, shift: int) -> tuple[float, float]:
    """A (mean, m2) pair scaled by ``2**shift`` (``shift <= 0``: never overflows)."""
    return math.ldexp(mean, shift), math.ldexp(m2, 2 * shift)


_NAN_HASH = 0x7FF8000000000000
"""The bits of the canonical NaN: every NaN counts as this one distinct value."""


class _Numeric:
    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type
        self.temporal = bool(pa.types.is_temporal(arrow_type))
        self.floating = bool(pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type))
        self.unit = unit_of(arrow_type)
        # Integers and times stay integers (exact to their limits); the rest is float64.
        self.dtype = (
            np.float64
            if self.floating
            else np.uint64
            if pa.types.is_uint64(arrow_type)
            else np.int64
        )
        self.count = self.nulls = self.nans = self.infinities = self.n = 0
        self.moments = _Moments()
        self.low: Any = None
        self.high: Any = None
        self.finite_low: float = math.inf
        self.finite_high: float = -math.inf
        self.values = np.empty(0, dtype=self.dtype)
        self.weight = 1
        self.distinct = _Distinct()

    def _numbers(self, present: pa.Array) -> np.ndarray:
        """The non-NULL values as NumPy numbers (time values as int64 ticks)."""
        kind = self.arrow_type
        if pa.types.is_date(kind):
            days = present.cast(pa.date32()) if pa.types.is_date64(kind) else present
            numbers = days.cast(pa.int32()).cast(pa.int64())
        elif pa.types.is_time32(kind):
            numbers = present.cast(pa.int32()).cast(pa.int64())
        elif self.temporal:
            numbers = present.cast(pa.int64())
        elif pa.types.is_decimal(kind):
            # Arrow's decimal-to-double cast is not correctly rounded (99819.01 becomes
            # 99819.01000000001); parsing the exact decimal text is.
            numbers = present.cast(pa.string()).cast(pa.float64())
        else:
            numbers = present.cast(pa.from_numpy_dtype(self.dtype))
        values: np.ndarray = numbers.to_numpy()
        return values

    def update(self, column: pa.Array) -> None:
        self.count += len(column)
        self.nulls += column.null_count
        present = pc.drop_null(column)
        if not len(present):
            return
        values = self._numbers(present)
        if self.floating:
            nan = np.isnan(values)
            if nan.any():
                self.nans += int(nan.sum())
                self.distinct.add([_NAN_HASH])
                values = values[~nan]
            if not len(values):
                return
            # -0.0 + 0.0 is 0.0: the two zeros hash as one value.
            self.distinct.add(_splitmix((values + 0.0).view(np.uint64)))
        else:
            self.distinct.add(_splitmix(values.view(np.uint64)))
        self.n += len(values)
        low, high = values.min().item(), values.max().item()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        self._add_moments(values)
        self._add_values(values, 1)

    def _add_moments(self, values: np.ndarray) -> None:
        """Moments of the finite values (time columns in their own ticks until the result)."""
        if pa.types.is_interval(self.arrow_type):
            return  # months and days of unequal lengths: no moments
        if self.floating:
            finite = np.isfinite(values)
            self.infinities += int(len(values) - finite.sum())
            values = values[finite]
        if len(values):
            self.finite_low = min(self.finite_low, values.min().item())
            self.finite_high = max(self.finite_high, values.max().item())
            self.moments.add(values, integral=not self.floating)

    def _add_values(self, values: np.ndarray, weight: int) -> None:
        while weight < self.weight:  # bring the lighter side to this sketch's weight
            values, weight = np.sort(values)[1::2], weight * 2
        while weight > self.weight:
            self.values, self.weight = np.sort(self.values)[1::2], self.weight * 2
        self.values = np.concatenate([self.values, values])
        while len(self.values) > SKETCH_VALUES:
            self.values, self.weight = np.sort(self.values)[1::2], self.weight * 2

    def merge(self, other: _Numeric) -> None:
        self.count += other.count
        self.nulls += other.nulls
        self.nans += other.nans
        self.infinities += other.infinities
        if other.n:
            self.n += other.n
            self.low = other.low if self.low is None else min(self.low, other.low)
            self.high = other.high if self.high is None else max(self.high, other.high)
            self.finite_low = min(self.finite_low, other.finite_low)
            self.finite_high = max(self.finite_high, other.finite_high)
            self.moments.merge(other.moments)
            self._add_values(other.values, other.weight)
        self.distinct.merge(other.distinct)

    def result(self, name: str, spec: StatsSpec) -> ColumnStats:
        distinct, exact = self.distinct.estimate()
        present = self.count - self.nulls
        stats = ColumnStats(
            name,
            "numeric",
            str(self.arrow_type),
            count=self.count,
            nulls=self.nulls,
            nans=self.nans,
            infinities=self.infinities,
            distinct=min(distinct, present),
            distinct_exact=exact,
            unit=self.unit,
        )
        if not self.n:
            return stats
        stats.min, stats.max = self._back(self.low), self._back(self.high)
        mean, variance = self.moments.result(self.finite_low, self.finite_high)
        ticked = self.temporal and not pa.types.is_date(self.arrow_type)
        per_tick = fractions.Fraction(1)
        if mean is not None and variance is not None and ticked:  # timestamps, times, durations
            per_tick = fractions.Fraction(PER_SECOND["us"], PER_SECOND[self.arrow_type.unit])
            mean, variance = mean * float(per_tick), variance * float(per_tick) ** 2
        if self.moments.total is not None:  # integers and times: the exact mean, rounded once
            mean = float(fractions.Fraction(self.moments.total, self.moments.n) * per_tick)
        stats.mean, stats.variance = mean, variance
        ordered = np.sort(self.values)
        picked = [p - 1 for p in positions(len(ordered), spec.buckets)]
        stats.boundaries = [self._back(ordered[p].item()) for p in picked]
        stats.boundaries_exact = self.weight == 1
        buckets = np.searchsorted(ordered[picked], ordered, side="right")
        counts = np.bincount(buckets, minlength=len(picked) + 1)
        stats.histogram = [int(c) * self.weight for c in counts]
        return stats

    def _back(self, value: Any) -> Any:
        """A number in the column's own type (ints stay ints, dates stay dates)."""
        if value is None:
            return None
        if pa.types.is_date(self.arrow_type):
            return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
        if self.temporal:
            ticks = pa.array([int(value)], pa.int64())
            if self.arrow_type.bit_width == 32:
                ticks = ticks.cast(pa.int32())
            return ticks.cast(self.arrow_type)[0].as_py()
        return float(value) if self.floating else int(value)


class _Categorical:
    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type
        self.count = self.nulls = 0
        self.counts: Counter[Any] = Counter()
        self.pruned = 0
        self.distinct = _Distinct()

    def update(self, column: pa.Array) -> None:
        self.count += len(column)
        self.nulls += column.null_count
        present = pc.drop_null(column)
        if not len(present):
            return
        try:
            table = pa.table({"v": present}).group_by("v").aggregate([("v", "count")])
            counted = dict(
                zip(table.column("v").to_pylist(), table.column("v_count").to_pylist(), strict=True)
            )
        except pa.ArrowNotImplementedError:  # lists and structs: Arrow cannot group them
            counted = dict(Counter(_hashable(v) for v in present.to_pylist()))
        self.counts.update(counted)
        self.distinct.add(_text_hash(v) for v in counted)
        self._prune()

    def _prune(self) -> None:
        if len(self.counts) > VOCABULARY_CAPACITY:
            keep = dict(self.counts.most_common(VOCABULARY_CAPACITY // 2))
            self.pruned += sum(self.counts.values()) - sum(keep.values())
            self.counts = Counter(keep)

    def merge(self, other: _Categorical) -> None:
        self.count += other.count
        self.nulls += other.nulls
        self.counts.update(other.counts)
        self.pruned += other.pruned
        self.distinct.merge(other.distinct)
        self._prune()

    def result(self, name: str, spec: StatsSpec) -> ColumnStats:
        distinct, exact = self.distinct.estimate()
        top = sorted(self.counts.items(), key=lambda item: (-item[1], _order_key(item[0])))
        top = top[: spec.top_k]
        present = self.count - self.nulls
        return ColumnStats(
            name,
            "categorical",
            str(self.arrow_type),
            count=self.count,
            nulls=self.nulls,
            distinct=min(distinct, present),
            distinct_exact=exact,
            vocabulary=[_listed(v) for v, _ in top],
            vocabulary_counts=[c for _, c in top],
            other_count=present - sum(c for _, c in top),
        )


def _hashable(value: Any) -> Any:
    """A list or struct value as nested tuples (a vocabulary key)."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _listed(value: Any) -> Any:
    """A vocabulary key back as the list it was (:func:`_hashable`'s tuples as lists)."""
    return [_listed(v) for v in value] if isinstance(value, tuple) else value


def _order_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


class StatsAccumulator:
    """Statistics of the batches it has seen; ``merge`` adds another accumulator's.

    >>> import pyarrow as pa
    >>> one, two = StatsAccumulator(pa.schema([("x", pa.int64())])), None
    >>> one.update(pa.record_batch({"x": [1, 2, None]}))
    >>> one.result().columns["x"].mean
    1.5
    """

    def __init__(self, schema: pa.Schema, spec: StatsSpec | None = None) -> None:
        self.schema = schema
        self.spec = spec or StatsSpec()
        self.spec.check_columns(schema.names)
        self.kinds = kinds_of(schema, self.spec)
        self.rows = 0
        self.columns: dict[str, _Numeric | _Categorical] = {}
        self.depths: dict[str, int] = {}
        """List columns are described by their innermost values: the list depth of each."""
        for field in schema:
            kind = self.kinds[field.name]
            element, depth = innermost(field.type)
            self.depths[field.name] = depth
            if kind == "numeric":
                self.columns[field.name] = _Numeric(element)
            elif kind == "categorical":
                self.columns[field.name] = _Categorical(element)

    def update(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for name, column in self.columns.items():
            values = batch.column(name)
            for _ in range(self.depths[name]):  # a list's elements (a NULL list has none)
                values = pc.list_flatten(values)
            if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
                # views have no filter kernel
                values = values.cast(
                    pa.binary() if pa.types.is_binary_view(values.type) else pa.string()
                )
            column.update(values)

    def merge(self, other: StatsAccumulator) -> StatsAccumulator:
        if other.schema.names != self.schema.names:
            raise InvalidArgumentError("cannot merge statistics of different columns")
        self.rows += other.rows
        for name, column in self.columns.items():
            column.merge(other.columns[name])  # type: ignore[arg-type]
        return self

    def result(self, method: str = "accumulate", dialect: str = "", sql: str = "") -> FeatureStats:
        columns = {name: c.result(name, self.spec) for name, c in self.columns.items()}
        for name, stats in columns.items():
            stats.label = name == self.spec.label
            if self.depths[name]:
                stats.arrow_type, stats.elements = str(self.schema.field(name).type), True
        return FeatureStats(
            columns, self.rows, method, dialect=dialect, sql=sql, label=self.spec.label
        )


def accumulate(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, spec: StatsSpec | None = None
) -> StatsAccumulator:
    """An accumulator fed with ``batches``."""
    accumulator = StatsAccumulator(schema, spec)
    for batch in batches:
        accumulator.update(batch)
    return accumulator
