"""The command line: JSON shape, SQL sources, exit codes, and plans that run for real."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from sqlfeed import __version__
from tests import engines
from tests.cli_helpers import run_cli
from tests.engines import Engine


def test_plan_json_has_the_documented_shape() -> None:
    run = run_cli(["plan", "--dialect", "postgres", "-m", "4", "SELECT a, b FROM t WHERE a > 1"])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["dialect"] == "postgres"
    assert plan["strategy"] == "hash"
    assert plan["count_sql"] == "SELECT COUNT(*) FROM t WHERE a > 1"
    assert plan["sample_sql"].endswith("LIMIT 10000")
    assert [p["index"] for p in plan["partitions"]] == [0, 1, 2, 3]
    assert all("HASH_RECORD_EXTENDED" in p["sql"] for p in plan["partitions"])


def test_plan_sql_format_prints_one_statement_per_line() -> None:
    run = run_cli(["plan", "--dialect", "mysql", "-m", "3", "--format", "sql", "SELECT a FROM t"])
    lines = run.out.splitlines()
    assert len(lines) == 3
    assert all(line.endswith(";") and "CRC32" in line for line in lines)
    assert [line.rstrip(";").rsplit("= ", 1)[1] for line in lines] == ["0", "1", "2"]


def test_plan_defaults_to_duckdb_and_16_partitions() -> None:
    plan = json.loads(run_cli(["plan", "SELECT a FROM t"]).out)
    assert plan["dialect"] == "duckdb"
    assert len(plan["partitions"]) == 16


def test_plan_makes_at_least_four_partitions_per_worker() -> None:
    plan = json.loads(run_cli(["plan", "--workers", "8", "SELECT a FROM t"]).out)
    assert len(plan["partitions"]) == 32


def test_sql_can_come_from_stdin() -> None:
    run = run_cli(["plan", "--format", "sql", "-m", "2", "-"], stdin="SELECT x FROM s")
    assert run.code == 0, run.err
    assert "FROM s" in run.out


def test_sql_can_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "q.sql"
    path.write_text("-- training rows\nSELECT x, y\nFROM s\n", encoding="utf-8")
    run = run_cli(["plan", "-m", "2", f"@{path}"])
    assert run.code == 0, run.err
    assert json.loads(run.out)["count_sql"].endswith("SELECT COUNT(*) FROM s")


def test_key_may_be_repeated_or_comma_separated() -> None:
    one = run_cli(["plan", "--key", "a", "--key", "b", "-m", "2", "SELECT a, b, c FROM t"])
    two = run_cli(["plan", "--key", "a,b", "-m", "2", "SELECT a, b, c FROM t"])
    assert json.loads(one.out)["partitions"] == json.loads(two.out)["partitions"]
    assert "HASH(a, b)" in json.loads(one.out)["partitions"][0]["sql"]


def test_allow_unstable_lets_an_unstable_query_through() -> None:
    assert run_cli(["plan", "SELECT a FROM t LIMIT 5"]).code == 2
    assert run_cli(["plan", "--allow-unstable", "SELECT a FROM t LIMIT 5"]).code == 0


def test_version() -> None:
    run = run_cli(["--version"])
    assert run.code == 0
    assert run.out.strip() == f"sqlfeed {__version__}"


def test_console_module_runs_as_a_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sqlfeed", "plan", "-m", "2", "--format", "sql", "SELECT 1 AS x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(";") == 2


@pytest.mark.parametrize(
    "command", ["plan", "count", "sample", "export", "stats", "job", "worker", "demo"]
)
def test_every_command_has_help(command: str) -> None:
    run = run_cli([command, "--help"])
    assert run.code == 0
    assert "usage: sqlfeed" in run.out


@pytest.fixture
def duck_file(tmp_path: Path) -> str:
    path = tmp_path / "data.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT range AS id, range % 7 AS g, "
            "CASE WHEN range % 5 = 0 THEN NULL ELSE 'v' || range END AS s FROM range(1000)"
        )
    return f"duckdb:///{path}"


def test_count_prints_the_row_count(duck_file: str) -> None:
    assert run_cli(["count", "--db", duck_file, "SELECT * FROM t WHERE g = 3"]).out == "143\n"
    run = run_cli(["count", "--db", duck_file, "--format", "json", "SELECT * FROM t"])
    assert json.loads(run.out)["count"] == 1000


def test_target_rows_sizes_the_plan_from_the_count(duck_file: str) -> None:
    run = run_cli(["plan", "--db", duck_file, "--target-rows", "90", "SELECT * FROM t"])
    plan = json.loads(run.out)
    assert plan["rows"] == 1000
    assert len(plan["partitions"]) == 12  # ceil(1000 / 90)
    assert plan["columns"] == ["id", "g", "s"]


def test_planned_partitions_run_and_add_up(duck_file: str) -> None:
    sql = "SELECT g, s, id FROM t WHERE id % 3 <> 0 OR s IS NULL"
    plan = json.loads(run_cli(["plan", "--db", duck_file, "-m", "5", sql]).out)
    with duckdb.connect(duck_file.removeprefix("duckdb:///")) as conn:
        whole = Counter(conn.execute(sql).fetchall())
        parts: Counter[tuple[object, ...]] = Counter()
        for partition in plan["partitions"]:
            parts.update(conn.execute(partition["sql"]).fetchall())
    assert parts == whole


@pytest.mark.engine
def test_plan_with_db_reads_duplicate_column_names_from_the_engine(engine: Engine) -> None:
    """``plan --db`` asks the engine for output names, so duplicates partition exactly."""
    urls = {
        "postgres": "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        "mysql": "mysql+pymysql://root@127.0.0.1:3306/test",
    }
    if engine.name not in urls:
        pytest.skip("the engine's tables live in this process's memory")
    url = engines.POSTGRES_URL if engine.name == "postgres" else engines.MYSQL_URL
    url = url.replace("postgresql://", "postgresql+psycopg://").replace(
        "mysql://", "mysql+pymysql://"
    )
    schema = engine.schema
    sql = f"SELECT * FROM {schema}.dups d1 JOIN {schema}.dups d2 ON d1.a = d2.a"
    run = run_cli(["plan", "--db", url, "-m", "3", sql])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["columns"] == ["a", "b", "a", "b"]
    parts: Counter[tuple[object, ...]] = Counter()
    for partition in plan["partitions"]:
        parts.update(engine.rows(partition["sql"]))
    assert parts == Counter(engine.rows(sql))


def test_demo_runs_end_to_end() -> None:
    run = run_cli(["demo", "--rows", "20000", "-m", "4"])
    assert run.code == 0, run.err
    assert "add up to exactly" in run.out
    assert "Keras preprocessing of the first batch" in run.out


def test_plan_with_db_uses_the_planner_strategies(duck_file: str) -> None:
    plan = json.loads(run_cli(["plan", "--db", duck_file, "-m", "4", "SELECT * FROM t"]).out)
    assert plan["strategy"] == "ctid"
    assert plan["reason"].startswith("auto: ")
    ranged = json.loads(
        run_cli(
            ["plan", "--db", duck_file, "-m", "4", "--strategy", "range", "--key", "id",
             "SELECT id, s FROM t"]
        ).out
    )  # fmt: skip
    assert ranged["strategy"] == "range"
    assert [p["estimated_rows"] for p in ranged["partitions"]] == [250, 250, 250, 250]


def test_strategies_other_than_hash_need_a_database() -> None:
    run = run_cli(["plan", "--strategy", "range", "--key", "a", "SELECT a FROM t"])
    assert run.code == 2
    assert "needs --db" in run.err


def test_sample_prints_rows(duck_file: str) -> None:
    run = run_cli(["sample", "--db", duck_file, "--rows", "3", "--format", "json",
                   "SELECT id, s FROM t ORDER BY id"])  # fmt: skip
    assert json.loads(run.out) == [{"id": 0, "s": None}, {"id": 1, "s": "v1"}, {"id": 2, "s": "v2"}]
    hashed = run_cli(["sample", "--db", duck_file, "--method", "hash", "--fraction", "0.1",
                      "--rows", "1000", "--format", "csv", "SELECT id FROM t"])  # fmt: skip
    assert 50 < len(hashed.out.splitlines()) - 1 < 150


def test_export_writes_a_parquet_file_and_refuses_to_overwrite(
    duck_file: str, tmp_path: Path
) -> None:
    out = tmp_path / "rows.parquet"
    run = run_cli(["export", "--db", duck_file, "--out", str(out), "-m", "3", "--format", "json",
                   "SELECT * FROM t WHERE g < 3"])  # fmt: skip
    assert run.code == 0, run.err
    summary = json.loads(run.out)
    assert summary["rows"] == 429
    assert pq.read_table(out).num_rows == 429
    again = run_cli(["export", "--db", duck_file, "--out", str(out), "SELECT * FROM t"])
    assert again.code == 2
    assert "--overwrite" in again.err
    replaced = run_cli(["export", "--db", duck_file, "--out", str(out), "--overwrite",
                        "SELECT * FROM t"])  # fmt: skip
    assert replaced.code == 0
    assert pq.read_table(out).num_rows == 1000


def test_export_to_a_folder_writes_one_part_per_partition(duck_file: str, tmp_path: Path) -> None:
    out = tmp_path / "parts"
    run = run_cli(["export", "--db", duck_file, "--out", str(out), "--as", "csv", "-m", "5",
                   "SELECT * FROM t"])  # fmt: skip
    assert run.code == 0, run.err
    parts = sorted(out.glob("part-*.csv"))
    assert len(parts) == 5
    assert sum(len(p.read_text().splitlines()) - 1 for p in parts) == 1000


@pytest.fixture
def sqlite_data(tmp_path: Path) -> str:
    path = tmp_path / "data.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, g INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, i % 5) for i in range(600)])
    return f"sqlite:///{path}"


def test_job_and_workers_from_the_command_line(sqlite_data: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    create = ["job", "create", "--queue", queue, "--job", "j", "--db", sqlite_data, "-m", "6",
              "--epochs", "2", "--format", "json", "SELECT id, g FROM t"]  # fmt: skip
    made = run_cli(create)
    assert made.code == 0, made.err
    assert json.loads(made.out)["partitions"] == 6
    assert run_cli(create).code == 0  # idempotent
    out = tmp_path / "batches"
    ran = run_cli(["worker", "--queue", queue, "--job", "j", "--db", sqlite_data,
                   "--out", str(out), "--batch-size", "50", "--format", "json"])  # fmt: skip
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["rows"] == 1200
    for epoch in (0, 1):
        ids = [
            i for f in (out / f"epoch={epoch}").glob("*.parquet")
            for i in pq.read_table(f).column("id").to_pylist()
        ]  # fmt: skip
        assert sorted(ids) == list(range(600))
    status = json.loads(
        run_cli(["job", "status", "--queue", queue, "--job", "j", "--format", "json"]).out
    )
    assert status["complete"]
    assert [e["done"] for e in status["per_epoch"]] == [6, 6]
    table = run_cli(["job", "status", "--queue", queue, "--job", "j"]).out
    assert "complete" in table
    assert run_cli(["job", "reset", "--queue", queue, "--job", "j"]).code == 0
    assert run_cli(["job", "delete", "--queue", queue, "--job", "j"]).code == 0


def test_job_errors_are_one_line(sqlite_data: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    unknown = run_cli(["job", "status", "--queue", queue, "--job", "ghost"])
    assert unknown.code == 2
    assert "no job named 'ghost'" in unknown.err
    base = ["job", "create", "--queue", queue, "--job", "j", "--db", sqlite_data, "-m", "4"]
    assert run_cli([*base, "SELECT id FROM t"]).code == 0
    conflict = run_cli([*base, "--epochs", "2", "SELECT id FROM t"])
    assert conflict.code == 2
    assert "another definition" in conflict.err
    assert len(conflict.err.strip().splitlines()) == 1
    nowhere = "postgresql+psycopg://postgres@127.0.0.1:9/x"
    unreachable = run_cli(["job", "status", "--queue", nowhere, "--job", "j"])
    assert unreachable.code == 1
    assert "cannot open queue" in unreachable.err
    assert len(unreachable.err.strip().splitlines()) == 1


def test_stats_writes_json_and_an_html_report(duck_file: str, tmp_path: Path) -> None:
    out, html = tmp_path / "stats.json", tmp_path / "report.html"
    options = ["--label", "g", "--kind", "g=categorical"]
    run = run_cli(["stats", "--db", duck_file, "--out", str(out), "--html", str(html), *options,
                   "SELECT id, g, s FROM t"])  # fmt: skip
    assert run.code == 0, run.err
    stats = json.loads(out.read_text())
    assert stats["rows"] == 1000
    assert stats["columns"]["g"]["kind"] == "categorical"
    assert stats["columns"]["s"]["nulls"] == 200
    assert html.read_text().count("<img") == 3  # id's histogram, g's and s's bar charts
    sampled = run_cli(["stats", "--db", duck_file, "--out", str(out), "--sample", "100",
                       "--format", "json", "SELECT id FROM t"])  # fmt: skip
    assert json.loads(sampled.out)["method"] == "sample"
    assert json.loads(out.read_text())["rows"] == 100


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--label", "nope"], "label column 'nope'"),
        (["--kind", "id=ordinal"], "kind must be"),
        (["--kind", "id"], "COL=KIND"),
        (["--buckets", "1"], "buckets"),
        (["--accumulate", "--sample", "5"], "--accumulate"),
    ],
)
def test_stats_bad_input(duck_file: str, tmp_path: Path, extra: list[str], message: str) -> None:
    out = tmp_path / "stats.json"
    run = run_cli(["stats", "--db", duck_file, "--out", str(out), *extra, "SELECT id, g FROM t"])
    assert run.code == 2
    assert message in run.err
    assert len(run.err.strip().splitlines()) == 1
    assert not out.exists()
