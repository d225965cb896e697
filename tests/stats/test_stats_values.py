"""Statistics of awkward values, checked against an exact computation in Python.

Quantile positions (integer arithmetic), -0.0 and 0.0, NaN, infinities, values whose
squares or sums overflow a double, and capped distinct estimates: on every engine that
can hold the values, by pushdown, sample and accumulators alike. The reference uses
``fractions`` and ``statistics`` on the same values, so it is exact.
"""

from __future__ import annotations

import bisect
import datetime as dt
import importlib
import math
import statistics
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed import StatsSpec
from sqlfeed.dialects import get_dialect
from sqlfeed.stats.accumulate import StatsAccumulator, _Distinct
from sqlfeed.stats.pushdown import positions
from sqlfeed.stats.sqlvalues import float_literal
from tests.conftest import get_engine
from tests.helpers.engines import Engine

accumulate_module = importlib.import_module("sqlfeed.stats.accumulate")  # `stats.accumulate` is
# also the name of a function the package exports

METHODS = ("pushdown", "sample", "accumulate")
NAN_ENGINES = ("duckdb", "postgres")  # SQLite stores NaN as NULL; MySQL has no NaN
INFINITY_ENGINES = ("duckdb", "postgres", "sqlite")  # MySQL has no infinity


def compute(engine: Engine, sql: str, method: str, spec: StatsSpec) -> sqlfeed.ColumnStats:
    options: dict[str, Any] = {}
    if method == "sample":
        options = {"sample_rows": 10**6}
    elif method == "accumulate":
        options = {"partitions": 3, "strategy": "hash"}
    with engine.source() as source:
        result = sqlfeed.compute_stats(sql, source, spec=spec, method=method, **options)
    return result["x"]


def reference(values: list[float | None], buckets: int) -> dict[str, Any]:
    """The statistics of ``values`` by exact arithmetic (the rules of stats.model)."""
    present = [v for v in values if v is not None]
    numbers = sorted(v for v in present if not math.isnan(v))
    finite = [Fraction(v) for v in numbers if math.isfinite(v)]
    nans = len(present) - len(numbers)
    where = [max(1, math.ceil(Fraction(i, buckets) * len(numbers))) for i in range(1, buckets)]
    boundaries = [numbers[p - 1] for p in where] if numbers else []
    histogram = [0] * buckets if numbers else []
    for v in numbers:
        histogram[bisect.bisect_right(boundaries, v)] += 1
    return {
        "nulls": len(values) - len(present),
        "nans": nans,
        "infinities": len(numbers) - len(finite),
        "distinct": len(set(numbers)) + (1 if nans else 0),  # -0.0 == 0.0; NaN is one
        "min": numbers[0] if numbers else None,
        "max": numbers[-1] if numbers else None,
        "mean": float(statistics.mean(finite)) if finite else None,
        "variance": float(statistics.pvariance(finite)) if finite else None,
        "boundaries": boundaries,
        "histogram": histogram,
    }


def check(stats: sqlfeed.ColumnStats, values: list[float | None], buckets: int) -> None:
    want = reference(values, buckets)
    assert stats.count == len(values)
    for key in ("nulls", "nans", "infinities", "distinct", "min", "max", "histogram"):
        assert getattr(stats, key) == want[key], key
    assert [float(b) for b in stats.boundaries] == want["boundaries"]
    if want["mean"] is None:
        assert (stats.mean, stats.variance) == (None, None)
    else:
        assert stats.mean == pytest.approx(want["mean"], rel=1e-12)
        assert stats.variance == pytest.approx(want["variance"], rel=1e-9, abs=1e-300)


def load(engine: Engine, table: str, values: list[float | None]) -> str:
    engine.create_table(table, [("id", "int"), ("x", "float")], enumerate(values))
    return f"SELECT x FROM {engine.qualify(table)}"


# -- quantile positions in integer arithmetic (item 12) ----------------------------------


def test_positions_are_exact_integer_arithmetic() -> None:
    for n in (*range(1, 120), 1_000, 12_345, 2**40 + 3):
        for buckets in (2, 3, 7, 10, 100, 1000):
            want = [max(1, math.ceil(Fraction(i, buckets) * n)) for i in range(1, buckets)]
            assert positions(n, buckets) == want
    # float64 says ceil(0.14 * 50) = ceil(7.000000000000001) = 8; the 7th value is right.
    assert math.ceil(0.14 * 50) == 8
    assert positions(50, 100)[13] == 7


@pytest.mark.engine
@pytest.mark.parametrize("method", ["pushdown", "accumulate"])
def test_quantile_boundaries_are_at_exact_positions(engine: Engine, method: str) -> None:
    values = [float(v) for v in range(1, 1000)]
    engine.create_table(
        "seq", [("id", "int"), ("x", "float")], [(int(v) * 7919 % 1000, v) for v in values]
    )
    for n, buckets in ((50, 100), (1, 100), (10, 3), (999, 7), (37, 10), (101, 100)):
        sql = f"SELECT x FROM {engine.qualify('seq')} WHERE x <= {n}"
        stats = compute(engine, sql, method, StatsSpec(buckets=buckets))
        check(stats, values[:n], buckets)
        if (n, buckets) == (50, 100):
            assert stats.boundaries[13] == 7  # the 7th value, not the 8th


# -- -0.0 and 0.0 (item 11) ----------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("method", METHODS)
def test_negative_zero_and_zero_are_one_value(engine: Engine, method: str) -> None:
    values: list[float | None] = [-0.0, 0.0, 1.0, -0.0, None, 2.5, 0.0]
    sql = load(engine, "zeros", values)
    stats = compute(engine, sql, method, StatsSpec(buckets=4))
    assert stats.distinct == 3
    check(stats, values, 4)


# -- huge, infinite and NaN values (item 13) -------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("method", METHODS)
def test_values_whose_squares_or_sums_overflow(engine: Engine, method: str) -> None:
    # Naive sums of squares overflow (> 1.8e308) although the variance (8.75e307) does not.
    spread = [1e154, -1e154, 5e153, 1.5e154, None]
    stats = compute(engine, load(engine, "spread", spread), method, StatsSpec(buckets=4))
    check(stats, spread, 4)
    # Two values of 1.5e308: their sum overflows; the mean is 1.5e308, the variance 0.
    twins: list[float | None] = [1.5e308, 1.5e308]
    stats = compute(engine, load(engine, "twins", twins), method, StatsSpec(buckets=4))
    assert (stats.mean, stats.variance) == (1.5e308, 0.0)
    check(stats, twins, 4)
    # Far apart: a true variance beyond the largest double is infinity, not an error.
    far: list[float | None] = [-1.5e308, 1.5e308]
    stats = compute(engine, load(engine, "far", far), method, StatsSpec(buckets=4))
    assert (stats.mean, stats.variance) == (0.0, math.inf)


@pytest.mark.engine
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", INFINITY_ENGINES)
def test_infinities_are_counted_and_ordered_not_averaged(name: str, method: str) -> None:
    engine = get_engine(name)
    values: list[float | None] = [math.inf, 1.0, None, 2.0, -math.inf, 4.0, math.inf]
    stats = compute(engine, load(engine, "infs", values), method, StatsSpec(buckets=3))
    assert (stats.min, stats.max, stats.infinities) == (-math.inf, math.inf, 3)
    check(stats, values, 3)


@pytest.mark.engine
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", NAN_ENGINES)
def test_nan_is_counted_and_left_out(name: str, method: str) -> None:
    engine = get_engine(name)
    values: list[float | None] = [1.0, math.nan, 3.0, None, math.nan, -2.0, math.inf, 8.0]
    stats = compute(engine, load(engine, "nans", values), method, StatsSpec(buckets=4))
    assert stats.nans == 2
    check(stats, values, 4)
    only = [math.nan, None]
    stats = compute(engine, load(engine, "only_nan", only), method, StatsSpec(buckets=4))
    check(stats, only, 4)
    assert (stats.nans, stats.distinct, stats.boundaries) == (1, 1, [])


def test_non_finite_literals_are_sql_values_not_names() -> None:
    cases = {
        "postgres": ["CAST('NaN' AS DOUBLE PRECISION)", "-CAST('Infinity' AS DOUBLE PRECISION)"],
        "duckdb": ["CAST('NaN' AS DOUBLE)", "-CAST('Infinity' AS DOUBLE)"],
        "sqlite": [None, "-9e999"],
        "mysql": [None, None],
    }
    for name, (nan, negative_infinity) in cases.items():
        engine = get_dialect(name)
        for value, want in ((math.nan, nan), (-math.inf, negative_infinity)):
            if want is None:
                with pytest.raises(sqlfeed.UnsupportedError):
                    float_literal(value, engine)
            else:
                assert engine.sql(float_literal(value, engine)) == want
        assert engine.sql(float_literal(-0.5, engine)) == "-0.5"
        assert float(engine.sql(float_literal(0.1, engine))) == 0.1


# -- distinct estimates capped at the rows (item 10) ----------------------------------------


def test_a_distinct_estimate_never_exceeds_the_non_null_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(accumulate_module, "KMV_SIZE", 4)
    over = None
    for start in range(0, 2000, 6):  # find six values whose sketch overestimates
        sketch = _Distinct()
        sketch.add(accumulate_module._splitmix(pa.array(range(start, start + 6)).to_numpy()))
        if sketch.estimate()[0] > 6:
            over = start
            break
    assert over is not None, "no overestimating sample found: the test would prove nothing"
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    accumulator = StatsAccumulator(schema)
    values = [*range(over, over + 6), None]
    accumulator.update(pa.record_batch({"x": values, "s": [str(v) for v in values]}, schema))
    result = accumulator.result()
    assert (result["x"].distinct, result["x"].distinct_exact) == (6, False)
    assert result["s"].distinct is not None
    assert result["s"].distinct <= 7
    assert not result["s"].distinct_exact


def test_accumulated_moments_are_exact_to_the_spread_not_to_the_size() -> None:
    """Values far from zero with a small spread (timestamps in microseconds, ~1.7e15; ints
    near 2**64), merged from several partitions: the variance is that of the deviations."""
    sql = """
        SELECT CAST(TIMESTAMP '2024-01-01 00:00:00.123456' + TO_SECONDS(range)
                    AS TIMESTAMP_NS) AS x,
               CAST(range AS UBIGINT) + CAST(18446744073709551000 AS UBIGINT) AS u
        FROM range(40)
    """
    start = dt.datetime(2024, 1, 1, 0, 0, 0, 123456) - dt.datetime(1970, 1, 1)
    micros = [start // dt.timedelta(microseconds=1) + i * 1_000_000 for i in range(40)]
    unsigned = [18446744073709551000 + i for i in range(40)]
    connection = duckdb.connect()
    result = sqlfeed.compute_stats(
        sql, sqlfeed.connect(connection), method="accumulate", partitions=4, strategy="hash"
    )
    for name, values in (("x", micros), ("u", unsigned)):
        assert result[name].mean == pytest.approx(float(statistics.mean(values)), rel=1e-15)
        assert result[name].variance == pytest.approx(
            float(statistics.pvariance(values)), rel=1e-12
        )
