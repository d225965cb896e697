"""Hash partitions are disjoint and complete on every real engine, for the whole corpus.

A query SQL lets return several results (a LIMIT that cuts between tied rows, a
ROW_NUMBER over a non-unique order) is completed with tie-breakers: the partitions must
then add up to exactly one result, a valid one, the same every time it is planned.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from sqlfeed.dialects import QueryError
from sqlfeed.sql import ParsedQuery, complete_orders, count_sql, parse, partition_sqls, schema_sql
from tests.helpers.corpus import CORPUS, Case, invalid_result
from tests.helpers.engines import Engine, assert_engine_refuses, multiset

pytestmark = pytest.mark.engine

PARTITION_COUNTS = (1, 2, 7, 64)


def assert_partitions_exact(
    engine: Engine, expected: Counter[tuple[Any, ...]], queries: list[str]
) -> None:
    """The partitions' rows add up to ``expected`` and no row is in two partitions."""
    union, homes = partition_rows(engine, queries)
    split = {row: sorted(parts) for row, parts in homes.items() if len(parts) > 1}
    assert not split, f"rows found in several partitions: {list(split.items())[:3]}"
    missing = expected - union
    extra = union - expected
    assert not missing, f"rows missing from the partitions: {list(missing)[:3]}"
    assert not extra, f"rows the query does not return: {list(extra)[:3]}"


def partition_rows(
    engine: Engine, queries: list[str]
) -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], set[int]]]:
    """All the partitions' rows, and the partitions each row was found in."""
    union: Counter[tuple[Any, ...]] = Counter()
    homes: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for index, query in enumerate(queries):
        rows = engine.rows(query)
        union.update(rows)
        for row in rows:
            homes[row].add(index)
    return union, homes


def one_result(engine: Engine, case: Case, parsed: ParsedQuery, columns: list[str] | None) -> Any:
    """The rows the partitions must add up to: the query's own when it has one result;
    else those of the query with its ORDER BYs completed, checked to be a valid result."""
    completion = complete_orders(parsed, columns=columns)
    if not completion.completed:
        return multiset(engine.rows(parsed.sql))
    rows = multiset(engine.rows(parsed.dialect.sql(completion.parsed.tree)))
    assert_valid(engine, case, rows)
    return rows


def assert_valid(engine: Engine, case: Case, rows: Counter[tuple[Any, ...]]) -> None:
    if case.valid is not None:
        problem = invalid_result(case.valid, rows, multiset(engine.rows(case.valid.base)))
        assert problem is None, problem


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_partitions_add_up_to_one_valid_result(engine: Engine, case: Case) -> None:
    if engine.name in case.cannot_run:
        assert_engine_refuses(engine, case.sql_for(engine.name))
        return
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    columns = engine.columns(schema_sql(parsed))
    expected = one_result(engine, case, parsed, columns)
    for m in PARTITION_COUNTS:
        queries = partition_sqls(parsed, m, key=case.key, columns=columns)
        assert len(queries) == m
        assert_partitions_exact(engine, expected, queries)
    # The partitions keep the query's output column names.
    assert engine.columns(queries[0]) == columns
    # A second plan of the same query (parsed anew) reads the same rows.
    again = partition_sqls(parse(sql, engine.name), 7, key=case.key, columns=columns)
    assert partition_rows(engine, again)[0] == expected


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_partitions_from_the_sql_text_alone(engine: Engine, case: Case) -> None:
    """Without asking the engine for column names (``plan --dialect``), where possible."""
    if engine.name in case.cannot_run:
        assert_engine_refuses(engine, case.sql_for(engine.name))
        return
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    try:
        queries = partition_sqls(parsed, 7, key=case.key)
    except QueryError as err:
        refusal = str(err)
    else:
        expected = one_result(engine, case, parsed, None)
        assert_partitions_exact(engine, expected, queries)
        return
    # Engines that hash whole rows need no names; elsewhere the refusal names the fix.
    assert engine.name not in ("duckdb", "postgres"), refusal
    assert "columns=" in refusal, refusal
    assert "--db" in refusal, refusal
    assert "\n" not in refusal


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.id)
def test_count_equals_the_row_count(engine: Engine, case: Case) -> None:
    if engine.name in case.cannot_run:
        assert_engine_refuses(engine, case.sql_for(engine.name))
        return
    sql = case.sql_for(engine.name)
    parsed = parse(sql, engine.name)
    rows = len(engine.rows(sql))
    [(count,)] = engine.rows(count_sql(parsed))  # no names needed
    assert count == rows
    columns = engine.columns(schema_sql(parsed))
    [(count,)] = engine.rows(count_sql(parsed, columns=columns))
    assert count == rows
