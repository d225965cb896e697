"""Every strategy, through the Feeder, returns exactly the query's rows on every engine."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed import Feeder, InvalidArgumentError, Plan
from tests.helpers.engines import Engine

pytestmark = pytest.mark.engine

TABLE_QUERIES = {
    "keyed": "SELECT id, k, ts, v, s FROM {keyed}",
    "filtered": "SELECT id, k, ts, v FROM {keyed} WHERE v > 0 OR s IS NULL",
    "one_row": "SELECT id, k, ts, v, s FROM {one_row}",
    "same_key": "SELECT id, k, ts, v, s FROM {same_k}",
    "empty": "SELECT id, k, ts, v, s FROM {empty_keyed}",
}
STRATEGIES: dict[str, dict[str, Any]] = {
    "hash": {"strategy": "hash"},
    "hash_on_key": {"strategy": "hash", "key": "k"},
    "range_int64": {"strategy": "range", "key": "k"},
    "range_timestamp": {"strategy": "range", "key": "ts"},
    "range_float": {"strategy": "range", "key": "v"},
    "ctid": {"strategy": "ctid"},
    "materialize": {"strategy": "materialize"},
    "auto": {"strategy": "auto"},
}


def query_for(engine: Engine, template: str) -> str:
    names = ("keyed", "one_row", "same_k", "empty_keyed")
    return template.format(**{name: engine.qualify(name) for name in names})


def rows_of(batches: list[pa.RecordBatch]) -> Counter[tuple[Any, ...]]:
    rows: Counter[tuple[Any, ...]] = Counter()
    for batch in batches:
        rows.update(tuple(r.values()) for r in batch.to_pylist())
    return rows


def make_plan(engine: Engine, source: Any, sql: str, options: dict[str, Any], m: int) -> Plan:
    options = dict(options)
    if options["strategy"] in ("materialize", "auto"):
        options["scratch"] = engine.scratch
    return sqlfeed.plan(sql, source, partitions=m, **options)


@pytest.mark.engine_gap(
    "sqlite",
    reason="SQLite stores timestamps as ISO text, and range takes no text key (ISO text "
    "orders as the times do)",
    raises=InvalidArgumentError,
    strategy="range_timestamp",
)
@pytest.mark.engine_gap(
    "sqlite",
    reason="SQLite reports no column types for an empty result, so range finds no numeric "
    "key (the table declares one)",
    raises=InvalidArgumentError,
    strategy=("range_int64", "range_float"),
    table="empty",
)
@pytest.mark.parametrize("table", sorted(TABLE_QUERIES))
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_feeds_exactly_the_query_result(
    engine: Engine, strategy: str, table: str
) -> None:
    sql = query_for(engine, TABLE_QUERIES[table])
    if strategy == "ctid" and engine.name not in ("postgres", "duckdb", "sqlite"):
        # Not a gap: the engine has no physical row address; sqlfeed says so in one line.
        with engine.source() as source, pytest.raises(InvalidArgumentError) as refused:
            make_plan(engine, source, sql, STRATEGIES[strategy], 7)
        assert str(refused.value) == (
            f"strategy ctid: {engine.name} has no physical row address "
            "(PostgreSQL ctid, DuckDB or SQLite rowid)"
        )
        return
    with engine.source() as source:
        expected = rows_of(list(source.read(sql)))
        assert sum(expected.values()) == len(engine.rows(sql))
        plan = make_plan(engine, source, sql, STRATEGIES[strategy], 7)
        try:
            assert plan.partitions
            batches = list(Feeder(plan, source, batch_size=37, readers=3))
            schema = plan.arrow_schema()
            assert all(batch.schema.equals(schema) for batch in batches)
            assert rows_of(batches) == expected
            # Every partition, also an empty one, yields the plan's schema.
            for partition in plan.partitions:
                for batch in source.read(partition.sql, schema=schema):
                    assert batch.schema.equals(schema)
        finally:
            sqlfeed.plans.drop_scratch(plan, source)


@pytest.mark.parametrize("strategy", ["hash", "range_int64", "materialize", "auto"])
def test_worker_shares_are_disjoint_and_complete(engine: Engine, strategy: str) -> None:
    sql = query_for(engine, TABLE_QUERIES["keyed"])
    with engine.source() as source:
        plan = make_plan(engine, source, sql, STRATEGIES[strategy], 10)
        try:
            shares = [
                rows_of(list(Feeder(plan, source, rank=rank, world_size=3))) for rank in range(3)
            ]
            indices = [{p.index for p in plan.share(rank, 3)} for rank in range(3)]
            assert (
                sum(len(i) for i in indices) == len(set().union(*indices)) == len(plan.partitions)
            )
            assert sum(shares, Counter()) == rows_of(list(source.read(sql)))
        finally:
            sqlfeed.plans.drop_scratch(plan, source)


def test_materialize_drops_its_scratch_table(engine: Engine) -> None:
    sql = query_for(engine, "SELECT s, COUNT(*) AS n FROM {keyed} GROUP BY s")
    with engine.source() as source:
        plan = make_plan(engine, source, sql, STRATEGIES["materialize"], 3)
        assert plan.scratch_table
        stored = len(source.rows(f"SELECT * FROM {plan.scratch_table}"))
        assert stored == sum(p.estimated_rows or 0 for p in plan.partitions)
        assert stored == len(engine.rows(sql))
        sqlfeed.plans.drop_scratch(plan, source)
        with pytest.raises(sqlfeed.EngineError):
            source.rows(f"SELECT * FROM {plan.scratch_table}")


def test_auto_explains_its_choice(engine: Engine) -> None:
    with engine.source() as source:
        scan = sqlfeed.plan(query_for(engine, "SELECT * FROM {keyed}"), source, partitions=4)
        grouped = sqlfeed.plan(
            query_for(engine, "SELECT s, COUNT(*) AS n FROM {keyed} GROUP BY s"),
            source,
            partitions=4,
        )
        sqlfeed.plans.drop_scratch(grouped, source)
    expected_scan = "hash" if engine.name == "mysql" else "ctid"
    assert scan.strategy == expected_scan
    assert scan.reason.startswith("auto: ")
    # PostgreSQL and MySQL materialize into sqlfeed's default scratch schema.
    servers = engine.name in ("postgres", "mysql")
    assert grouped.strategy == ("materialize" if servers else "hash")
    assert "GROUP BY" in grouped.reason
    assert "scratch" in grouped.reason


def test_range_needs_an_ordered_key(engine: Engine) -> None:
    with engine.source() as source, pytest.raises(InvalidArgumentError, match="range needs key"):
        sqlfeed.plan(
            query_for(engine, "SELECT s FROM {keyed}"), source, strategy="range", partitions=3
        )
