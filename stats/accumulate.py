"""Mergeable statistics over Arrow batches: each worker accumulates its partitions, then
the accumulators merge into the statistics of the whole query.

Exact as long as the data fits the sketches (``SKETCH_VALUES`` values per numeric column,
``KMV_SIZE`` distinct values, ``VOCABULARY_CAPACITY`` distinct categories); beyond, the
quantiles, distinct counts and vocabulary counts become approximate, and say so
(``boundaries_exact``, ``distinct_exact``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dialects import InvalidArgumentError
from stats.model import ColumnStats, FeatureStats, StatsSpec
from stats.pushdown import kinds_of

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


class _Numeric:
    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type
        self.temporal = bool(pa.types.is_temporal(arrow_type))
        # Integers and dates stay int64 (exact to the int64 limits); the rest is float64.
        self.integral = self.temporal or bool(pa.types.is_integer(arrow_type))
        self.count = self.nulls = self.n = 0
        self.mean = self.m2 = 0.0
        self.low: Any = None
        self.high: Any = None
        self.values = np.empty(0, dtype=np.int64 if self.integral else np.float64)
        self.weight = 1
        self.distinct = _Distinct()

    def update(self, column: pa.Array) -> None:
        self.count += len(column)
        self.nulls += column.null_count
        present = pc.drop_null(column)
        if not len(present):
            return
        if pa.types.is_date32(self.arrow_type):
            values = present.cast(pa.int32()).cast(pa.int64()).to_numpy()
        elif self.integral:
            values = present.cast(pa.int64(), safe=False).to_numpy()
        elif pa.types.is_decimal(self.arrow_type):
            # Arrow's decimal-to-double cast is not correctly rounded (99819.01 becomes
            # 99819.01000000001); parsing the exact decimal text is.
            values = present.cast(pa.string()).cast(pa.float64()).to_numpy()
        else:
            values = present.cast(pa.float64(), safe=False).to_numpy()
        self.distinct.add(_splitmix(values.view(np.uint64)))
        numbers = values.astype(np.float64)
        mean = float(numbers.mean())
        m2 = float(((numbers - mean) ** 2).sum())
        self._combine(len(values), mean, m2, values.min().item(), values.max().item())
        self._add_values(values, 1)

    def _combine(self, n: int, mean: float, m2: float, low: Any, high: Any) -> None:
        total = self.n + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.n * n / total
        self.mean += delta * n / total
        self.n = total
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

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
        if other.n:
            self._combine(other.n, other.mean, other.m2, other.low, other.high)
            self._add_values(other.values, other.weight)
        self.distinct.merge(other.distinct)

    def result(self, name: str, spec: StatsSpec) -> ColumnStats:
        distinct, exact = self.distinct.estimate()
        stats = ColumnStats(name, "numeric", str(self.arrow_type), count=self.count,
                            nulls=self.nulls, distinct=distinct, distinct_exact=exact)  # fmt: skip
        if not self.n:
            return stats
        stats.min, stats.max = self._back(self.low), self._back(self.high)
        if not self.temporal:
            stats.mean, stats.variance = self.mean, self.m2 / self.n
        ordered = np.sort(self.values)
        positions = [max(1, math.ceil(f * len(ordered))) - 1 for f in spec.fractions]
        stats.boundaries = [self._back(ordered[p].item()) for p in positions]
        stats.boundaries_exact = self.weight == 1
        buckets = np.searchsorted(ordered[positions], ordered, side="right")
        counts = np.bincount(buckets, minlength=len(positions) + 1)
        stats.histogram = [int(c) * self.weight for c in counts]
        return stats

    def _back(self, value: Any) -> Any:
        """A number in the column's own type (ints stay ints, dates stay dates)."""
        if value is None:
            return None
        if pa.types.is_date32(self.arrow_type):
            return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
        if pa.types.is_timestamp(self.arrow_type):
            return pa.scalar(int(value), type=pa.int64()).cast(self.arrow_type).as_py()
        return int(value) if self.integral else float(value)


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
        table = pa.table({"v": present}).group_by("v").aggregate([("v", "count")])
        values = table.column("v").to_pylist()
        self.counts.update(dict(zip(values, table.column("v_count").to_pylist(), strict=True)))
        self.distinct.add(_text_hash(v) for v in values)
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
            name, "categorical", str(self.arrow_type), count=self.count, nulls=self.nulls,
            distinct=distinct, distinct_exact=exact, vocabulary=[v for v, _ in top],
            vocabulary_counts=[c for _, c in top],
            other_count=present - sum(c for _, c in top),
        )  # fmt: skip


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
        for field in schema:
            kind = self.kinds[field.name]
            if kind == "numeric":
                self.columns[field.name] = _Numeric(field.type)
            elif kind == "categorical":
                self.columns[field.name] = _Categorical(field.type)

    def update(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for name, column in self.columns.items():
            column.update(batch.column(name))

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
        return FeatureStats(columns, self.rows, method, dialect=dialect, sql=sql,
                            label=self.spec.label)  # fmt: skip


def accumulate(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, spec: StatsSpec | None = None
) -> StatsAccumulator:
    """An accumulator fed with ``batches``."""
    accumulator = StatsAccumulator(schema, spec)
    for batch in batches:
        accumulator.update(batch)
    return accumulator
