"""Hash partitions are disjoint and complete on every real engine, for the whole corpus."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from dialects import QueryError
from sqlfeed.sql import count_sql, parse, partition_sqls, schema_sql
from tests.corpus import CORPUS, Case
from tests.engines import Engine, multiset

pytestmark = pytest.mark.engine

PARTITION_COUNTS = (1, 2, 7, 64)


def assert_partitions_exact(
    engine: Engine, expected: Counter[tuple[Any, ...]], queries: list[str]
) -> None:
    """The partitions' rows add up to ``expected`` and no row is in two partitions."""
    union: Counter[tuple[Any, ...]] = Counter()
    homes: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for index, query in enumerate(queries):
        rows = engine.rows(query)
        union.update(rows)
        for row in rows:
            homes[row].add(index)
    split = {row: sorted(parts) for row, parts in homes.items() if len(parts) > 1}
    assert not split, f"rows found in several partitions: {list(split.items())[:3]}"
    missing = expected - union
    extra = union - expected
    assert not missing, f"rows missing from the partitions: {list(missing)[:3]}"
    assert not extra, f"rows the query does not return: {list(extra)[:3]}"


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_partitions_add_up_to_the_query_result(engine: Engine, case: Case) -> None:
    if engine.name in case.skip:
        pytest.skip(case.skip[engine.name])
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    expected = multiset(engine.rows(sql))
    columns = engine.columns(schema_sql(parsed))
    for m in PARTITION_COUNTS:
        queries = partition_sqls(parsed, m, key=case.key, columns=columns)
        assert len(queries) == m
        assert_partitions_exact(engine, expected, queries)
    # The partitions keep the query's output column names.
    assert engine.columns(queries[0]) == columns


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_partitions_from_the_sql_text_alone(engine: Engine, case: Case) -> None:
    """Without asking the engine for column names (``plan --dialect``), where possible."""
    if engine.name in case.skip:
        pytest.skip(case.skip[engine.name])
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    try:
        queries = partition_sqls(parsed, 7, key=case.key)
    except QueryError as err:
        refusal = str(err)
    else:
        assert_partitions_exact(engine, multiset(engine.rows(sql)), queries)
        return
    # Only refusals that name the fix are allowed: an alias, a key, or the columns.
    assert "columns=" in refusal


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_count_equals_the_row_count(engine: Engine, case: Case) -> None:
    if engine.name in case.skip:
        pytest.skip(case.skip[engine.name])
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    columns = engine.columns(schema_sql(parsed))
    [(count,)] = engine.rows(count_sql(parsed, columns=columns))
    assert count == len(engine.rows(sql))
