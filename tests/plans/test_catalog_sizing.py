"""M sized from the catalog (no COUNT(*)) for a plain scan of one base table; the plan says
when its row count is an estimate."""

from __future__ import annotations

import json

import pytest

import sqlfeed
from sqlfeed import Plan
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import POSTGRES_URL

pytestmark = pytest.mark.engine

ROWS = [(i, i % 17 if i % 9 else None, None, float(i), f"s{i % 5}") for i in range(2000)]
COLUMNS = [("id", "bigint"), ("k", "bigint"), ("ts", "timestamp"), ("v", "float"), ("s", "text")]


def test_postgres_sizes_a_ctid_plan_from_reltuples() -> None:
    engine = get_engine("postgres")
    engine.create_table("sized", COLUMNS, ROWS)
    table = engine.qualify("sized")
    with engine.source() as source:
        fresh = sqlfeed.plan(f"SELECT * FROM {table}", source, target_rows=100)
        engine.execute(f"ANALYZE {table}")
        analyzed = sqlfeed.plan(f"SELECT * FROM {table}", source, target_rows=100)
        filtered = sqlfeed.plan(f"SELECT id FROM {table} WHERE v < 100", source, target_rows=100)
    # Never analyzed (reltuples -1): counted.
    assert fresh.strategy == "ctid"
    assert fresh.rows == 2000
    assert not fresh.rows_estimated
    assert "not a COUNT" not in fresh.reason
    # Analyzed: the catalog's estimate, said to be one.
    assert analyzed.strategy == "ctid"
    assert analyzed.rows is None
    assert analyzed.rows_estimated
    assert analyzed.estimated_rows == 2000
    assert 1 < analyzed.num_partitions <= 20  # M = 20, or fewer: one page at least each
    assert "pg_class.reltuples" in analyzed.reason
    assert "not a COUNT(*)" in analyzed.reason
    # With a WHERE the table's size is an upper bound on the query's rows.
    assert filtered.estimated_rows == 2000
    assert "an upper bound" in filtered.reason
    partition = analyzed.partitions[1].sql
    assert "Tid Range Scan" in " ".join(r[0] for r in engine.rows("EXPLAIN " + partition))


def test_mysql_sizes_a_primary_key_range_plan_from_table_rows() -> None:
    engine = get_engine("mysql")
    engine.execute("DROP TABLE IF EXISTS pk_sized")
    engine.execute("CREATE TABLE pk_sized (id BIGINT PRIMARY KEY, v DOUBLE) ENGINE=InnoDB")
    cursor = engine.conn.cursor()
    cursor.executemany("INSERT INTO pk_sized VALUES (%s, %s)", [(i, i / 3) for i in range(1500)])
    cursor.close()
    engine.execute("ANALYZE TABLE pk_sized")
    table = engine.qualify("pk_sized")
    with engine.source() as source:
        plan = sqlfeed.plan(f"SELECT id, v FROM {table}", source, target_rows=100)
        rows = sum(len(source.rows(p.sql)) for p in plan.partitions)
    assert plan.strategy == "range"
    assert plan.rows is None
    assert plan.rows_estimated
    assert plan.estimated_rows is not None
    assert plan.estimated_rows > 0
    assert "table_rows, an estimate" in plan.reason
    assert rows == 1500


def test_hash_plans_with_a_filter_still_count() -> None:
    engine = get_engine("mysql")
    engine.create_table("hashed", COLUMNS, ROWS)
    with engine.source() as source:
        plan = sqlfeed.plan(
            f"SELECT s FROM {engine.qualify('hashed')} WHERE v < 500", source, target_rows=100
        )
    assert plan.strategy == "hash"
    assert plan.rows == 500
    assert plan.estimated_rows == 500
    assert not plan.rows_estimated


def test_duckdb_counts_for_free() -> None:
    plan = sqlfeed.plan("SELECT * FROM range(1000) AS r(x)", target_rows=100)
    assert plan.rows == 1000
    assert plan.estimated_rows == 1000


def test_the_estimate_survives_json_and_the_cli_prints_it() -> None:
    engine = get_engine("postgres")
    engine.create_table("printed", COLUMNS, ROWS[:300])
    engine.execute(f"ANALYZE {engine.qualify('printed')}")
    url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    run = run_cli(["plan", "--db", url, f"SELECT * FROM {engine.qualify('printed')}"])
    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["rows"] is None
    assert document["estimated_rows"] == 300
    plan = Plan.from_json(json.dumps({**document, "schema": None}))
    assert plan.rows_estimated
    assert plan.estimated_rows == 300
