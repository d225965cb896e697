"""``sqlfeed shardset validate|info`` and the CLI commands over ``--db dataset:///DIR``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.cli import run_cli
from tests.shards.test_shardsets import N, expected_rows, make


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    make(tmp_path)
    return tmp_path / "ds"


def test_validate_says_valid(dataset: Path) -> None:
    run = run_cli(["shardset", "validate", str(dataset)])
    assert run.code == 0, run.err
    assert "valid (2 shardsets, 8 shards" in run.out


def test_validate_lists_problems_and_exits_2(dataset: Path) -> None:
    file = dataset / "features" / "shard.00001.parquet"
    table = pq.read_table(file)
    pq.write_table(table.slice(0, 10), file)
    run = run_cli(["shardset", "validate", str(dataset)])
    assert run.code == 2
    assert "features shard 1: shard.00001.parquet has 10 rows, the manifest says 500" in run.out
    assert run.err.count("\n") == 1
    assert "1 problem found" in run.err
    as_json = json.loads(run_cli(["shardset", "validate", "--format", "json", str(dataset)]).out)
    assert as_json["valid"] is False
    assert as_json["problems"][0]["shard"] == 1


def test_validate_a_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    run = run_cli(["shardset", "validate", str(tmp_path / "nothing")])
    assert run.code == 2
    assert "is not a folder" in run.out


def test_info_shows_shardsets_and_the_main_one(dataset: Path) -> None:
    run = run_cli(["shardset", "info", str(dataset)])
    assert run.code == 0, run.err
    main_rows = len(expected_rows())
    assert f"main shardset: labels (fewest samples ({main_rows}))" in run.out
    assert "* labels" in run.out
    assert "  features  parquet  4" in run.out
    assert "joined columns: uid, x, k, label, note" in run.out
    info = json.loads(run_cli(["shardset", "info", "--format", "json", str(dataset)]).out)
    assert info["main"] == "labels"
    assert [s["rows"] for s in info["shardsets"]] == [N, main_rows]


def test_plan_and_export_over_a_dataset_url(dataset: Path, tmp_path: Path) -> None:
    url = f"dataset:///{dataset}"
    run = run_cli(["plan", "--db", url, "--format", "json", "SELECT uid, label FROM dataset"])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["strategy"] == "fragments"
    assert len(plan["partitions"]) == 4
    out = tmp_path / "out.parquet"
    run = run_cli(["export", "--db", url, "SELECT uid, label FROM dataset", "--out", str(out)])
    assert run.code == 0, run.err
    exported = sorted(pq.read_table(out).column("uid").to_pylist())
    assert exported == sorted(r[0] for r in expected_rows())
