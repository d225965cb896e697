"""Keras preprocessing layers built from statistics transform batches as expected."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import warnings
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError, StatsSpec
from sqlfeed.stats.keras import to_keras

QUERY = """
SELECT (range % 97) * 1.5 - 20 AS amount,
       CASE WHEN range % 10 < 5 THEN 'web' WHEN range % 10 < 8 THEN 'store' ELSE 'phone' END
           AS channel,
       range % 4 AS level,
       range % 2 = 0 AS label
FROM range(5000)
"""


@pytest.fixture(scope="module")
def stats() -> sqlfeed.FeatureStats:
    spec = StatsSpec(kinds={"level": "categorical"}, label="label", buckets=4)
    return sqlfeed.compute_stats(QUERY, sqlfeed.connect(duckdb.connect()), spec=spec)


def test_normalization_uses_the_mean_and_variance(stats: sqlfeed.FeatureStats) -> None:
    layer = to_keras(stats)["amount"]
    values = np.array([[stats["amount"].mean], [stats["amount"].mean + stats["amount"].stddev]])
    out = np.asarray(layer(values))
    assert out[0, 0] == pytest.approx(0.0, abs=1e-5)
    assert out[1, 0] == pytest.approx(1.0, abs=1e-5)


def test_lookups_index_the_vocabulary(stats: sqlfeed.FeatureStats) -> None:
    layers = to_keras(stats)
    assert stats["channel"].vocabulary == ["web", "store", "phone"]
    channel = np.asarray(layers["channel"](np.array(["web", "phone", "fax"])))
    assert channel.tolist() == [1, 3, 0]  # index 0 is out of vocabulary
    level = np.asarray(layers["level"](np.array([0, 3, 9])))
    assert level.tolist() == [
        stats["level"].vocabulary.index(0) + 1,
        stats["level"].vocabulary.index(3) + 1,
        0,
    ]


def test_discretization_uses_the_boundaries(stats: sqlfeed.FeatureStats) -> None:
    layer = to_keras(stats, ["amount"], numeric="discretize")["amount"]
    values = np.array([-100.0, -20.0, 30.0, 500.0])
    expected = np.searchsorted(np.array(stats["amount"].boundaries), values, side="right")
    assert np.asarray(layer(values)).tolist() == expected.tolist()


def test_the_label_is_left_out_unless_asked_for(stats: sqlfeed.FeatureStats) -> None:
    assert "label" not in to_keras(stats)
    assert "label" in to_keras(stats, include_label=True)


def test_an_all_null_column_cannot_be_normalized() -> None:
    stats = sqlfeed.compute_stats(
        "SELECT CAST(NULL AS DOUBLE) AS x FROM range(3)", sqlfeed.connect(duckdb.connect())
    )
    with pytest.raises(InvalidArgumentError, match="no mean"):
        to_keras(stats)


# -- date and timestamp columns: days and microseconds since 1970 --------------------------

TIME_QUERY = """
SELECT DATE '1999-12-31' + CAST(range * 37 % 4000 AS INTEGER) AS day,
       TIMESTAMP '2001-02-03 04:00:00' + TO_HOURS(CAST(range * 7919 % 50000 AS BIGINT)) AS moment,
       CASE WHEN range % 11 = 0 THEN NULL ELSE TIMESTAMPTZ '1969-07-20 20:17:00+00'
            + TO_DAYS(CAST(range AS INTEGER)) END AS zoned
FROM range(3000)
"""
EPOCH = dt.datetime(1970, 1, 1)


def units(value: dt.date) -> int:
    """Days since 1970 for a date; microseconds since 1970 (UTC) for a timestamp."""
    if isinstance(value, dt.datetime):
        naive = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        return (naive - EPOCH) // dt.timedelta(microseconds=1)
    return (value - EPOCH.date()).days


@pytest.fixture(scope="module")
def time_values() -> dict[str, list[int]]:
    table = duckdb.connect().sql(TIME_QUERY).to_arrow_table()
    return {
        n: [units(v) for v in table.column(n).to_pylist() if v is not None]
        for n in ("day", "moment", "zoned")
    }


@pytest.mark.parametrize("method", ["pushdown", "accumulate"])
def test_time_columns_have_moments_in_days_and_microseconds(
    method: str, time_values: dict[str, list[int]]
) -> None:
    stats = sqlfeed.compute_stats(TIME_QUERY, sqlfeed.connect(duckdb.connect()), method=method)
    for name, unit in (("day", "days"), ("moment", "us"), ("zoned", "us")):
        column, values = stats[name], time_values[name]
        assert column.unit == unit
        assert column.mean == pytest.approx(float(statistics.mean(values)), rel=1e-12)
        assert column.variance == pytest.approx(float(statistics.pvariance(values)), rel=1e-9)


def exact_boundaries(values: list[int], buckets: int) -> list[int]:
    ordered = sorted(values)
    where = [max(1, math.ceil(Fraction(i, buckets) * len(ordered))) for i in range(1, buckets)]
    return [ordered[p - 1] for p in where]


@pytest.mark.parametrize("time_unit", ["us", "s"])
def test_time_columns_become_normalization_and_discretization_layers(
    tmp_path: Path, time_values: dict[str, list[int]], time_unit: str
) -> None:
    stats = sqlfeed.compute_stats(
        TIME_QUERY, sqlfeed.connect(duckdb.connect()), spec=StatsSpec(buckets=7)
    )
    stats.save(str(tmp_path / "stats.json"))
    again = sqlfeed.FeatureStats.load(str(tmp_path / "stats.json"))  # boundaries as ISO text
    per_us = {"us": 1, "s": 1_000_000}[time_unit]
    for loaded in (stats, again):
        normalize = to_keras(loaded, time_unit=time_unit)
        discretize = to_keras(loaded, numeric="discretize", time_unit=time_unit)
        for name in ("day", "moment", "zoned"):
            scale = 1 if name == "day" else per_us
            fed = np.array([v // scale for v in time_values[name]], dtype=np.int64)
            mean = float(statistics.mean(fed.tolist()))
            std = math.sqrt(float(statistics.pvariance(fed.tolist())))
            normalized = np.asarray(normalize[name](fed[:, None]))[:, 0]
            # Keras computes in float32: a time is resolved to ~1e-7 of its size.
            assert np.allclose(normalized, (fed - mean) / std, atol=1e-7 * fed.max() / std + 1e-5)
            bounds = exact_boundaries(fed.tolist(), 7)
            buckets = np.asarray(discretize[name](fed))
            assert buckets.tolist() == np.searchsorted(bounds, fed, side="right").tolist()


def test_time_layers_apply_to_the_tensors_sqlfeed_tf_feeds(
    time_values: dict[str, list[int]],
) -> None:
    pytest.importorskip("tensorflow")
    source = sqlfeed.connect(duckdb.connect())
    stats = sqlfeed.compute_stats(TIME_QUERY, source, spec=StatsSpec(buckets=5))
    discretize = to_keras(stats, ["day", "moment"], numeric="discretize")
    normalize = to_keras(stats, ["day", "moment"])
    data = sqlfeed.tf.dataset(TIME_QUERY, source, batch_size=4096, features=["day", "moment"])
    batch = next(iter(data))
    for name in ("day", "moment"):
        fed = np.asarray(batch[name])
        assert sorted(fed.tolist()) == sorted(time_values[name])  # the int64 units fed
        bounds = exact_boundaries(time_values[name], 5)
        assert (
            np.asarray(discretize[name](batch[name])).tolist()
            == np.searchsorted(bounds, fed, side="right").tolist()
        )
        assert np.asarray(normalize[name](batch[name][:, None])).std() == pytest.approx(1, rel=1e-3)


# -- vocabularies that leave values out ------------------------------------------------------

FIFTY = "SELECT 'v' || CAST(range % 50 AS VARCHAR) AS c FROM range(1000)"


def test_a_vocabulary_that_leaves_values_out_warns_with_their_share() -> None:
    source = sqlfeed.connect(duckdb.connect())
    cut = sqlfeed.compute_stats(FIFTY, source, spec=StatsSpec(top_k=20))
    with pytest.warns(UserWarning, match="out of vocabulary|leaves") as caught:
        to_keras(cut)
    (message,) = [str(w.message) for w in caught]
    assert "\n" not in message
    assert "leaves 600 of 1,000 non-NULL values (60.0%) out" in message
    assert "StatsSpec(top_k=50)" in message


def test_the_default_vocabulary_keeps_a_fifty_value_column_whole() -> None:
    pytest.importorskip("tensorflow")
    source = sqlfeed.connect(duckdb.connect())
    stats = sqlfeed.compute_stats(FIFTY, source)
    assert len(stats["c"].vocabulary) == 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer = to_keras(stats)["c"]
    batch = next(iter(sqlfeed.tf.dataset(FIFTY, source, batch_size=1000)))
    assert (np.asarray(layer(batch["c"])) > 0).all()
