"""Statistics equal a reference computed in Python from the same rows, on every engine."""

from __future__ import annotations

import datetime as dt
import decimal
import fractions
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError, StatsSpec
from sqlfeed.stats.units import to_units
from tests.helpers.engines import Engine

pytestmark = pytest.mark.engine

COLUMNS = "id, name, city, age, score, big, born, seen, balance, active"
SKEWED = "CASE WHEN id % 10 < 6 THEN 'common' WHEN id % 10 < 9 THEN 'rarer' ELSE name END"


def query(engine: Engine) -> str:
    return f"SELECT {COLUMNS}, {SKEWED} AS skewed FROM {engine.qualify('people')}"


def numeric(value: Any) -> Any:
    return float(value) if isinstance(value, decimal.Decimal) else value


def check_column(stats: sqlfeed.ColumnStats, values: list[Any], spec: StatsSpec) -> None:
    present = [numeric(v) for v in values if v is not None]
    assert stats.count == len(values)
    assert stats.nulls == len(values) - len(present)
    assert stats.distinct == len(set(present))
    if stats.kind == "numeric" and present:
        assert numeric(stats.min) == min(present)
        assert numeric(stats.max) == max(present)
        ordered = sorted(present)
        expected = [ordered[max(1, math.ceil(f * len(ordered))) - 1] for f in spec.fractions]
        assert [numeric(b) for b in stats.boundaries] == expected
        assert sum(stats.histogram) == len(present)
        if isinstance(present[0], dt.date):  # days / microseconds since 1970
            assert stats.unit == ("us" if isinstance(present[0], dt.datetime) else "days")
            present = [to_units(v, stats.unit) for v in present]
        floats = np.array(present, dtype=np.float64)
        assert stats.mean == pytest.approx(floats.mean(), rel=1e-9)
        assert stats.variance == pytest.approx(floats.var(), rel=1e-9, abs=1e-9)
    if stats.kind == "categorical":
        counts = Counter(present)
        assert stats.vocabulary_counts == sorted(counts.values(), reverse=True)[: spec.top_k]
        assert all(
            counts[v] == c for v, c in zip(stats.vocabulary, stats.vocabulary_counts, strict=True)
        )
        assert stats.other_count == len(present) - sum(stats.vocabulary_counts)


def test_pushdown_statistics_equal_a_python_reference(engine: Engine) -> None:
    spec = StatsSpec(label="active", buckets=8, top_k=4)
    with engine.source() as source:
        stats = sqlfeed.compute_stats(query(engine), source, spec=spec)
    rows = engine.rows(query(engine))
    names = [*COLUMNS.split(", "), "skewed"]
    assert stats.rows == len(rows)
    assert stats["active"].label
    for position, name in enumerate(names):
        check_column(stats[name], [row[position] for row in rows], spec)
    assert stats["skewed"].vocabulary[:2] == ["common", "rarer"]


def comparable(stats: sqlfeed.FeatureStats) -> dict[str, Any]:
    """The statistics, with the floating-point moments set apart for :func:`assert_same`."""
    data = stats.to_dict()["columns"]
    for column in data.values():
        column["moments"] = (column.pop("mean"), column.pop("variance"))
    return data


def assert_same(ours: sqlfeed.FeatureStats, theirs: sqlfeed.FeatureStats) -> None:
    left, right = comparable(ours), comparable(theirs)
    for name in left:
        for a, b in zip(left[name].pop("moments"), right[name].pop("moments"), strict=True):
            assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    assert left == right


def test_pushdown_sample_and_accumulators_agree(engine: Engine) -> None:
    spec = StatsSpec(buckets=5, top_k=3)
    sql = query(engine)
    with engine.source() as source:
        pushed = sqlfeed.compute_stats(sql, source, spec=spec)
        sampled = sqlfeed.compute_stats(sql, source, spec=spec, method="sample", sample_rows=10**6)
        merged = sqlfeed.compute_stats(
            sql, source, spec=spec, method="accumulate", partitions=6, strategy="hash"
        )
    assert_same(pushed, sampled)
    # Accumulators merged over the plan's 6 partitions give the statistics of the whole query.
    assert_same(merged, pushed)


def test_statistics_round_trip_through_json(engine: Engine, tmp_path: Any) -> None:
    with engine.source() as source:
        stats = sqlfeed.compute_stats(query(engine), source)
    path = tmp_path / "stats.json"
    stats.save(str(path))
    again = sqlfeed.FeatureStats.load(str(path))
    assert again.to_dict() == stats.to_dict()


def test_an_all_null_column_and_an_empty_table_are_well_defined(engine: Engine) -> None:
    with engine.source() as source:
        nulls = sqlfeed.compute_stats(
            f"SELECT age FROM {engine.qualify('people')} WHERE age IS NULL", source
        )
        empty = sqlfeed.compute_stats(f"SELECT * FROM {engine.qualify('empty_t')}", source)
    age = nulls["age"]
    assert (age.count, age.nulls, age.distinct, age.min, age.mean) == (
        age.count,
        age.count,
        0,
        None,
        None,
    )
    assert age.boundaries == []
    assert empty.rows == 0
    assert all(c.count == 0 and c.distinct == 0 for c in empty.columns.values())


def test_columns_the_spec_names_must_exist(engine: Engine) -> None:
    with engine.source() as source:
        with pytest.raises(InvalidArgumentError, match="label column 'target'"):
            sqlfeed.compute_stats(query(engine), source, spec=StatsSpec(label="target"))
        with pytest.raises(InvalidArgumentError, match="'nope'"):
            sqlfeed.compute_stats(query(engine), source, spec=StatsSpec(kinds={"nope": "skip"}))


def test_bad_specs_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="kind must be"):
        StatsSpec(kinds={"a": "ordinal"})
    with pytest.raises(InvalidArgumentError, match="buckets"):
        StatsSpec(buckets=1)


@pytest.mark.parametrize("method", ["pushdown", "accumulate"])
def test_means_of_integers_dates_and_timestamps_are_exact(engine: Engine, method: str) -> None:
    """The mean of big integers and today's timestamps is their exact mean, rounded once.

    Summed as doubles, a timestamp's mean (~1.7e15 microseconds) was off by microseconds to
    tens of microseconds; the engines that sum integers exactly (DuckDB, PostgreSQL, MySQL)
    and the accumulators (Python integers) give the exact mean. SQLite's SUM overflows
    instead: its pushdown mean stays a rounded double, within 1e-12 relative.
    """
    rng = np.random.default_rng(20)
    start = dt.datetime(2024, 5, 1, 12)
    stamps = [start + dt.timedelta(microseconds=int(u)) for u in rng.integers(0, 10**12, 3000)]
    bigs = [int(b) for b in 1_700_000_000_000_000 + rng.integers(0, 10**13, 3000)]
    days = [dt.date(2000, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 9000, 3000)]
    table = engine.qualify(f"exact_means_{method}")
    engine.create_table(
        table,
        [("ts", "timestamp"), ("big", "bigint"), ("day", "date")],
        zip(stamps, bigs, days, strict=True),
    )
    try:
        stats = sqlfeed.compute_stats(
            f"SELECT ts, big, day FROM {table}", engine.source(), method=method
        )
    finally:
        engine.execute(f"DROP TABLE {table}")
    expected = {
        "ts": [to_units(v, "us") for v in stamps],
        "big": bigs,
        "day": [to_units(v, "days") for v in days],
    }
    exact_sums = method == "accumulate" or sqlfeed.get_dialect(engine.name).EXACT_SUMS
    for name, values in expected.items():
        mean = stats.columns[name].mean
        if stats.columns[name].kind != "numeric":  # SQLite's dates and timestamps are text
            continue
        exact = float(fractions.Fraction(sum(values), len(values)))
        if exact_sums:
            assert mean == exact, (name, mean - exact)
        else:
            assert mean == pytest.approx(exact, rel=1e-12)
