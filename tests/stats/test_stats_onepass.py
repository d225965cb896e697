"""Pushdown statistics in two statements: one aggregate scan, one grouped scan.

The grouped statement (``GROUP BY GROUPING SETS`` where the engine has it, a cross join
emulating it elsewhere) gives distinct counts, vocabularies, boundaries, histograms and
moments; these tests check its values against Python on every engine, on data made to
exercise it: repeated values spanning several boundary positions (empty buckets), ties in
the vocabulary, NULLs, and more columns than ``GROUPING()`` could number.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed import StatsSpec
from sqlfeed.stats.pushdown import compute_pushdown
from tests.helpers.engines import Engine

pytestmark = pytest.mark.engine

ROWS = 60


def _rows() -> list[tuple[Any, ...]]:
    out = []
    for i in range(ROWS):
        heavy = None if i % 13 == 0 else (7 if i % 4 else i)  # one value holds most positions
        word = None if i % 11 == 0 else ("b", "a", "c")[i % 3]  # a three-way tie
        out.append((i, heavy, word, float(i % 5) - 2.0))
    return out


def _load(engine: Engine) -> str:
    engine.create_table(
        "onepass", [("id", "int"), ("heavy", "int"), ("word", "text"), ("x", "float")], _rows()
    )
    return f"SELECT heavy, word, x FROM {engine.qualify('onepass')}"


def test_repeated_values_ties_and_nulls_match_python(engine: Engine) -> None:
    sql = _load(engine)
    spec = StatsSpec(buckets=8, top_k=2)
    with engine.source() as source:
        stats = sqlfeed.compute_stats(sql, source, spec=spec)
    rows = _rows()
    heavy = sorted(r[1] for r in rows if r[1] is not None)
    where = [max(1, math.ceil(i * len(heavy) / 8)) for i in range(1, 8)]
    assert stats["heavy"].boundaries == [heavy[p - 1] for p in where]
    assert stats["heavy"].histogram == [
        sum(1 for v in heavy if low <= v < high)
        for low, high in zip(
            [-math.inf, *stats["heavy"].boundaries],
            [*stats["heavy"].boundaries, math.inf],
            strict=True,
        )
    ]
    assert 0 in stats["heavy"].histogram  # equal boundaries leave empty buckets
    assert stats["heavy"].distinct == len(set(heavy))
    assert stats["heavy"].mean == pytest.approx(sum(heavy) / len(heavy), rel=1e-12)
    words = Counter(r[2] for r in rows if r[2] is not None)
    assert stats["word"].distinct == 3
    # Equal counts are ordered by value, as the separate GROUP BY of earlier versions did.
    assert stats["word"].vocabulary == sorted(words)[:2]
    assert stats["word"].vocabulary_counts == [words[w] for w in sorted(words)[:2]]
    assert stats["word"].other_count == sum(words.values()) - sum(stats["word"].vocabulary_counts)
    assert stats["x"].distinct == 5


def test_two_statements_and_no_count_distinct(engine: Engine) -> None:
    sql = _load(engine)
    statements: list[str] = []
    with engine.source() as source:

        def run(query: str) -> pa.Table:
            statements.append(query)
            return source.arrow(query, settings=source.dialect.STATS_SETTINGS)

        schema = source.schema(sql)
        stats = compute_pushdown(sql, schema, run, dialect=source.dialect)
    assert len(statements) == 2
    assert not any("COUNT(DISTINCT" in s.upper().replace(" ", "") for s in statements)
    assert stats["word"].distinct == 3


def test_more_columns_than_grouping_can_number(engine: Engine) -> None:
    sql = _load(engine)
    columns = ", ".join(f"x + {i} AS c{i}" for i in range(40))
    wide = f"SELECT {columns} FROM ({sql}) AS t"
    with engine.source() as source:
        stats = sqlfeed.compute_stats(wide, source, spec=StatsSpec(buckets=4))
    values = sorted(float(i % 5) - 2.0 for i in range(ROWS))
    for i in (0, 39):
        column = stats[f"c{i}"]
        assert column.distinct == 5
        assert column.min == values[0] + i
        assert [float(b) for b in column.boundaries] == [
            values[max(1, math.ceil(k * ROWS / 4)) - 1] + i for k in (1, 2, 3)
        ]
