"""Keras preprocessing layers built from statistics transform batches as expected."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError, StatsSpec
from stats.keras import to_keras

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
    assert level.tolist() == [stats["level"].vocabulary.index(0) + 1,
                              stats["level"].vocabulary.index(3) + 1, 0]  # fmt: skip


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
