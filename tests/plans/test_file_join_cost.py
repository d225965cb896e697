"""Fragment plans over a join of files (#24 item 8): ``plan.cost`` counts the tables every
partition reads whole, the planner cuts the larger side and says when it cannot, and
``auto`` runs the join once into a scratch table when the whole reads would cost more."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

import sqlfeed
from sqlfeed.feed import PartitionFeeder as Feeder
from tests.helpers.cli import run_cli


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A small Parquet file and a CSV file of about 12 MiB (cut into byte ranges)."""
    folder: Path = tmp_path_factory.mktemp("join")
    small, large = str(folder / "users.parquet"), str(folder / "events.csv")
    with duckdb.connect() as conn:
        conn.execute(
            "COPY (SELECT range AS id, 'u' || range AS name FROM range(20000)) "
            f"TO '{small}' (FORMAT parquet, ROW_GROUP_SIZE 2000)"
        )
        conn.execute(
            "COPY (SELECT range AS e, range % 25000 AS id, repeat('x', 40) AS pad "
            f"FROM range(240000)) TO '{large}' (HEADER)"
        )
    return {"small": small, "large": large}


def _rows(source: Any, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in source.read_table(sql).to_pylist())


def _cost(cut: int, whole: int, m: int) -> float:
    return round((cut + m * whole) / (cut + whole), 2)


def test_the_larger_table_is_cut_and_the_cost_counts_the_whole_reads(
    files: dict[str, str],
) -> None:
    source = sqlfeed.connect("duckdb://")
    sql = (
        f"SELECT u.id, u.name, e.e FROM read_parquet('{files['small']}') AS u "
        f"JOIN read_csv('{files['large']}') AS e ON u.id = e.id"
    )
    plan = sqlfeed.plan(sql, source, partitions=3)
    assert plan.strategy == "fragments"
    # the CSV (the larger side) is cut into byte ranges; before, the Parquet file was cut
    # and every partition re-read the whole CSV while the plan said "one read in all"
    assert all("sqlfeedrange://" in p.sql for p in plan.partitions), plan.partitions[0].sql
    assert "one read in all" not in plan.reason
    assert f"every partition also reads {files['small']}" in plan.reason
    small, large = os.path.getsize(files["small"]), os.path.getsize(files["large"])
    assert plan.cost == _cost(large, small, plan.num_partitions)
    assert 1.0 < plan.cost < 2.0
    got = Counter(
        tuple(r.values()) for b in Feeder(plan, source, format="arrow") for r in b.to_pylist()
    )
    assert got == _rows(source, sql)


def test_a_larger_table_that_cannot_be_cut_is_named_and_the_cost_warned(
    files: dict[str, str], tmp_path: Path
) -> None:
    sql = (
        f"SELECT u.id, u.name, e.e FROM read_parquet('{files['small']}') AS u "
        f"LEFT JOIN read_csv('{files['large']}') AS e ON u.id = e.id"
    )
    source = sqlfeed.connect("duckdb://")
    plan = sqlfeed.plan(sql, source, partitions=6)
    assert plan.strategy == "fragments"
    assert f"the larger table {files['large']} cannot be cut" in plan.reason
    assert "outer side of an outer join" in plan.reason
    small, large = os.path.getsize(files["small"]), os.path.getsize(files["large"])
    assert plan.cost == _cost(small, large, plan.num_partitions)
    assert plan.cost > 2.0
    assert "WARNING" in plan.reason
    assert "hash" not in plan.reason.split("WARNING")[1]
    out = tmp_path / "left.parquet"
    ran = run_cli(["export", "--db", "duckdb://", "-m", "6", "--out", str(out), sql])
    assert ran.code == 0, ran.err
    warned = [line for line in ran.err.splitlines() if "times" in line]
    assert len(warned) == 1, ran.err
    assert "hash" not in warned[0]
    assert "files" in warned[0]


def test_auto_runs_the_join_once_when_the_whole_reads_outweigh_the_cut(
    files: dict[str, str],
) -> None:
    sql = (
        f"SELECT u.id, u.name, e.e FROM read_parquet('{files['small']}') AS u "
        f"LEFT JOIN read_csv('{files['large']}') AS e ON u.id = e.id"
    )
    source = sqlfeed.connect("duckdb://")
    plan = sqlfeed.plan(sql, source, partitions=6, scratch="main")
    try:
        assert plan.strategy == "materialize"
        assert plan.cost == 2.0
        got = Counter(
            tuple(r.values()) for b in Feeder(plan, source, format="arrow") for r in b.to_pylist()
        )
        assert got == _rows(source, sql)
    finally:
        sqlfeed.plans.drop_scratch(plan, source)
    asked = sqlfeed.plan(sql, source, partitions=6, strategy="fragments")
    assert asked.strategy == "fragments"  # asked for: kept, with its cost said


def test_one_file_table_is_still_one_read(files: dict[str, str]) -> None:
    plan = sqlfeed.plan(f"SELECT * FROM read_csv('{files['large']}')", "duckdb://", partitions=3)
    assert plan.strategy == "fragments"
    assert plan.cost == 1.0
    assert "one read in all" in plan.reason


def test_a_database_table_read_whole_is_named_with_its_size_unknown(
    files: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "dim.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE dim AS SELECT range AS id, range % 7 AS g FROM range(30000)")
    sql = f"SELECT e.e, d.g FROM read_csv('{files['large']}') AS e JOIN dim AS d ON e.id = d.id"
    run = run_cli(["plan", "--db", f"duckdb:///{path}", "-m", "3", sql])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["strategy"] == "fragments"
    assert "every partition also reads dim whole (of unknown size" in plan["reason"]
    assert plan["cost"] == 1.0  # the only file table is cut; dim's bytes are not counted


def test_a_dataset_joined_to_files_counts_the_files_read_whole(
    files: dict[str, str], tmp_path: Path
) -> None:
    """The shards of a dataset are cut; the CSV joined to them is read by every partition
    (plan.cost said 1.0 and nothing in the reason)."""
    folder = tmp_path / "users"
    users = f"SELECT * FROM read_parquet('{files['small']}')"
    made = run_cli(
        [
            "reshard",
            "--db",
            "duckdb://",
            "--out",
            str(folder),
            "--shuffle",
            "1",
            "--shard-rows",
            "4000",
            users,
        ]
    )
    assert made.code == 0, made.err
    source = sqlfeed.connect(f"dataset:///{folder}")  # an absolute path: four slashes
    sql = (
        f"SELECT u.id, e.e FROM dataset AS u JOIN read_csv('{files['large']}') AS e ON u.id = e.id"
    )
    plan = sqlfeed.plan(sql, source, partitions=5)
    assert plan.strategy == "fragments"
    shards = sum(os.path.getsize(p) for p in folder.glob("shard.*"))
    assert plan.cost == _cost(shards, os.path.getsize(files["large"]), plan.num_partitions)
    assert f"every partition also reads {files['large']}" in plan.reason
    assert "WARNING" in plan.reason
    got = Counter(
        tuple(r.values()) for b in Feeder(plan, source, format="arrow") for r in b.to_pylist()
    )
    assert got == _rows(source, sql)
