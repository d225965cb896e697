"""The command line: JSON shape, SQL sources, exit codes, and plans that run for real."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed import __version__
from sqlfeed.cli import export as cli_export
from sqlfeed.cli import query as cli_query
from sqlfeed.cli import scratch as scratch_cli
from sqlfeed.dialects import EngineError
from sqlfeed.feed import PartitionFeeder as Feeder
from sqlfeed.feed import UnequalSharesWarning
from sqlfeed.plans import materialize
from tests.conftest import get_engine
from tests.helpers import engines
from tests.helpers.cli import run_cli
from tests.helpers.engines import Engine


def test_plan_json_has_the_documented_shape() -> None:
    run = run_cli(["plan", "--dialect", "postgres", "-m", "4", "SELECT a, b FROM t WHERE a > 1"])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["dialect"] == "postgres"
    assert plan["strategy"] == "hash"
    # Without --db the count keeps the select list: it fails exactly when the query would.
    assert (
        plan["count_sql"] == "SELECT COUNT(*) FROM (SELECT a, b FROM t WHERE a > 1) AS _sqlfeed_q"
    )
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
    # the file's own text (its comment included) is what the count wraps
    count_sql = json.loads(run.out)["count_sql"]
    assert count_sql.startswith("SELECT COUNT(*) FROM (")
    assert count_sql.endswith("-- training rows\nSELECT x, y\nFROM s\n) AS _sqlfeed_q")


def test_key_may_be_repeated_or_comma_separated() -> None:
    one = run_cli(["plan", "--key", "a", "--key", "b", "-m", "2", "SELECT a, b, c FROM t"])
    two = run_cli(["plan", "--key", "a,b", "-m", "2", "SELECT a, b, c FROM t"])
    assert json.loads(one.out)["partitions"] == json.loads(two.out)["partitions"]
    assert "HASH(a, b)" in json.loads(one.out)["partitions"][0]["sql"]


def test_allow_unstable_lets_an_unstable_query_through() -> None:
    refused = run_cli(["plan", "SELECT a, random() AS r FROM t"])
    assert refused.code == 2
    assert refused.err.count("\n") == 1
    assert "rand" in refused.err.lower()
    assert run_cli(["plan", "--allow-unstable", "SELECT a, random() AS r FROM t"]).code == 0


def test_a_limit_that_may_tie_is_completed_unless_strict() -> None:
    run = run_cli(["plan", "-m", "2", "SELECT a, b FROM t ORDER BY a LIMIT 5"])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert "ORDER BY a LIMIT 5 completed with b" in plan["reason"]
    assert all("ORDER BY a, 2 ASC NULLS FIRST LIMIT 5" in p["sql"] for p in plan["partitions"])
    strict = run_cli(["plan", "--strict", "SELECT a, b FROM t ORDER BY a LIMIT 5"])
    assert strict.code == 2
    assert strict.err.count("\n") == 1
    assert "tie" in strict.err


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
    "command",
    ["plan", "count", "sample", "export", "stats", "job", "worker", "scratch", "reshard", "demo"],
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
    if engine.name == "duckdb":
        pytest.skip("not an engine gap: the in-memory DuckDB's tables live in this process")
    url = engines.POSTGRES_URL if engine.name == "postgres" else engines.MYSQL_URL
    url = url.replace("postgresql://", "postgresql+psycopg://").replace(
        "mysql://", "mysql+pymysql://"
    )
    if engine.name == "sqlite":
        url = f"sqlite:///{engine.path}"  # type: ignore[attr-defined]
    dups = engine.qualify("dups")
    sql = f"SELECT * FROM {dups} d1 JOIN {dups} d2 ON d1.a = d2.a"
    run = run_cli(["plan", "--db", url, "-m", "3", sql])
    assert run.code == 0, run.err
    plan = json.loads(run.out)
    assert plan["columns"] == ["a", "b", "a", "b"]
    parts: Counter[tuple[object, ...]] = Counter()
    for partition in plan["partitions"]:
        parts.update(engine.rows(partition["sql"]))
    assert parts == Counter(engine.rows(sql))


@pytest.mark.slow  # trains the demo's model (26 s in a -m "not slow" run of the file)
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
            [
                "plan",
                "--db",
                duck_file,
                "-m",
                "4",
                "--strategy",
                "range",
                "--key",
                "id",
                "SELECT id, s FROM t",
            ]
        ).out
    )
    assert ranged["strategy"] == "range"
    assert [p["estimated_rows"] for p in ranged["partitions"]] == [250, 250, 250, 250]


def test_strategies_other_than_hash_need_a_database() -> None:
    run = run_cli(["plan", "--strategy", "range", "--key", "a", "SELECT a FROM t"])
    assert run.code == 2
    assert "needs --db" in run.err


def test_sample_prints_rows(duck_file: str) -> None:
    run = run_cli(
        [
            "sample",
            "--db",
            duck_file,
            "--rows",
            "3",
            "--format",
            "json",
            "SELECT id, s FROM t ORDER BY id",
        ]
    )
    assert json.loads(run.out) == [{"id": 0, "s": None}, {"id": 1, "s": "v1"}, {"id": 2, "s": "v2"}]
    hashed = run_cli(
        [
            "sample",
            "--db",
            duck_file,
            "--method",
            "hash",
            "--fraction",
            "0.1",
            "--rows",
            "1000",
            "--format",
            "csv",
            "SELECT id FROM t",
        ]
    )
    assert 50 < len(hashed.out.splitlines()) - 1 < 150


def test_export_writes_a_parquet_file_and_refuses_to_overwrite(
    duck_file: str, tmp_path: Path
) -> None:
    out = tmp_path / "rows.parquet"
    run = run_cli(
        [
            "export",
            "--db",
            duck_file,
            "--out",
            str(out),
            "-m",
            "3",
            "--format",
            "json",
            "SELECT * FROM t WHERE g < 3",
        ]
    )
    assert run.code == 0, run.err
    summary = json.loads(run.out)
    assert summary["rows"] == 429
    assert pq.read_table(out).num_rows == 429
    again = run_cli(["export", "--db", duck_file, "--out", str(out), "SELECT * FROM t"])
    assert again.code == 2
    assert "--overwrite" in again.err
    replaced = run_cli(
        ["export", "--db", duck_file, "--out", str(out), "--overwrite", "SELECT * FROM t"]
    )
    assert replaced.code == 0
    assert pq.read_table(out).num_rows == 1000


def test_export_to_a_folder_writes_one_part_per_partition(duck_file: str, tmp_path: Path) -> None:
    out = tmp_path / "parts"
    run = run_cli(
        [
            "export",
            "--db",
            duck_file,
            "--out",
            str(out),
            "--as",
            "csv",
            "-m",
            "5",
            "SELECT * FROM t",
        ]
    )
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
    create = [
        "job",
        "create",
        "--queue",
        queue,
        "--job",
        "j",
        "--db",
        sqlite_data,
        "-m",
        "6",
        "--epochs",
        "2",
        "--format",
        "json",
        "SELECT id, g FROM t",
    ]
    made = run_cli(create)
    assert made.code == 0, made.err
    assert json.loads(made.out)["partitions"] == 6
    assert run_cli(create).code == 0  # idempotent
    out = tmp_path / "batches"
    ran = run_cli(
        [
            "worker",
            "--queue",
            queue,
            "--job",
            "j",
            "--db",
            sqlite_data,
            "--out",
            str(out),
            "--batch-size",
            "50",
            "--format",
            "json",
        ]
    )
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["rows"] == 1200
    for epoch in (0, 1):
        ids = [
            i
            for f in (out / f"epoch={epoch}").glob("*.parquet")
            for i in pq.read_table(f).column("id").to_pylist()
        ]
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
    missing = run_cli(["job", "status", "--queue", queue, "--job", "ghost"])
    assert missing.code == 2
    assert "no queue file" in missing.err
    assert not (tmp_path / "queue.db").exists()  # reading a queue never creates one
    base = ["job", "create", "--queue", queue, "--job", "j", "--db", sqlite_data, "-m", "4"]
    assert run_cli([*base, "SELECT id FROM t"]).code == 0
    unknown = run_cli(["job", "status", "--queue", queue, "--job", "ghost"])
    assert unknown.code == 2
    assert "no job named 'ghost'" in unknown.err
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
    run = run_cli(
        [
            "stats",
            "--db",
            duck_file,
            "--out",
            str(out),
            "--html",
            str(html),
            *options,
            "SELECT id, g, s FROM t",
        ]
    )
    assert run.code == 0, run.err
    stats = json.loads(out.read_text())
    assert stats["rows"] == 1000
    assert stats["columns"]["g"]["kind"] == "categorical"
    assert stats["columns"]["s"]["nulls"] == 200
    assert html.read_text().count("<img") == 3  # id's histogram, g's and s's bar charts
    sampled = run_cli(
        [
            "stats",
            "--db",
            duck_file,
            "--out",
            str(out),
            "--sample",
            "100",
            "--format",
            "json",
            "SELECT id FROM t",
        ]
    )
    assert json.loads(sampled.out)["method"] == "sample"
    assert json.loads(out.read_text())["rows"] == 100


def test_stats_writes_only_the_html_report(duck_file: str, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    run = run_cli(["stats", "--db", duck_file, "--html", str(html), "SELECT id, g, s FROM t"])
    assert run.code == 0, run.err
    assert run.out.endswith(f"written to {html}\n")
    assert html.read_text().count("<img") == 3
    assert not list(tmp_path.glob("*.json"))  # no statistics JSON was asked for
    neither = run_cli(["stats", "--db", duck_file, "SELECT id FROM t"])
    assert neither.code == 2
    assert neither.err == (
        "sqlfeed: error: give --out PATH (the statistics JSON), --html PATH (the report), or both\n"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--label", "nope"], "--label nope: the query returns no column 'nope'"),
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


# -- issue 14: unnamed columns, clean failures, scratch tables, printing -----------------


def _scratch_tables(path: str) -> list[str]:
    with duckdb.connect(path.removeprefix("duckdb:///"), read_only=True) as conn:
        rows = conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()
    return sorted(r[0] for r in rows if r[0].startswith("sqlfeed_"))


@pytest.mark.parametrize(
    "sql",
    ["SELECT id * 2, s FROM t", "SELECT g, count(*) FROM t GROUP BY g", "SELECT g, id + 1 FROM t"],
)
def test_plan_count_sample_with_db_take_unnamed_columns(duck_file: str, sql: str) -> None:
    """With --db the CLI plans through the engine like the Python API: no names needed."""
    counted = run_cli(["count", "--db", duck_file, sql])
    assert counted.code == 0, counted.err
    planned = run_cli(["plan", "--db", duck_file, "-m", "3", sql])
    assert planned.code == 0, planned.err
    plan = json.loads(planned.out)
    with duckdb.connect(duck_file.removeprefix("duckdb:///"), read_only=True) as conn:
        whole = Counter(conn.execute(sql).fetchall())
        parts: Counter[tuple[object, ...]] = Counter()
        for partition in plan["partitions"]:
            parts.update(conn.execute(partition["sql"]).fetchall())
    assert parts == whole
    assert int(counted.out) == sum(whole.values())
    sampled = run_cli(
        [
            "sample",
            "--db",
            duck_file,
            "--method",
            "hash",
            "--fraction",
            "0.5",
            "--format",
            "json",
            sql,
        ]
    )
    assert sampled.code == 0, sampled.err
    assert 0 < len(json.loads(sampled.out)) <= sum(whole.values())


def test_plan_with_sqlite_db_takes_unnamed_columns(sqlite_data: str) -> None:
    sql = "SELECT g, count(*) FROM t GROUP BY g"
    assert run_cli(["count", "--db", sqlite_data, sql]).out == "5\n"
    plan = json.loads(run_cli(["plan", "--db", sqlite_data, "-m", "2", sql]).out)
    source = sqlfeed.connect(sqlite_data)  # registers the hash function the partitions use
    rows = [
        tuple(row.values())
        for partition in plan["partitions"]
        for row in source.read_table(partition["sql"]).to_pylist()
    ]
    source.close()
    assert sorted(rows) == [(g, 120) for g in range(5)]


def test_sample_prints_null_as_null(duck_file: str) -> None:
    sql = "SELECT id, s, CASE WHEN id = 0 THEN NULL ELSE id / 2 END AS half FROM t ORDER BY id"
    base = ["sample", "--db", duck_file, "--rows", "2"]
    table = run_cli([*base, sql]).out.splitlines()
    assert table[0].split() == ["id", "s", "half"]
    assert table[1].split() == ["0", "NULL", "NULL"]
    assert table[2].split() == ["1", "v1", "0.5"]
    assert "NaN" not in "".join(table)
    assert "None" not in "".join(table)
    assert json.loads(run_cli([*base, "--format", "json", sql]).out)[0] == {
        "id": 0,
        "s": None,
        "half": None,
    }
    assert run_cli([*base, "--format", "csv", sql]).out.splitlines()[1] == "0,,"


def test_stats_checks_its_output_paths_before_computing(duck_file: str, tmp_path: Path) -> None:
    out, html = tmp_path / "stats.json", tmp_path / "missing" / "report.html"
    run = run_cli(
        ["stats", "--db", duck_file, "--out", str(out), "--html", str(html), "SELECT id, g FROM t"]
    )
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        f"sqlfeed: error: --html {html}: the folder {html.parent} does not exist; create it first"
    ]
    assert not out.exists()  # the JSON is not written when the HTML cannot be
    folder = run_cli(["stats", "--db", duck_file, "--out", str(tmp_path), "SELECT id FROM t"])
    assert folder.code == 2
    assert "is a folder" in folder.err
    assert sorted(tmp_path.iterdir()) == [tmp_path / "data.duckdb"]


def test_export_refuses_unknown_extensions_and_writes_nothing(
    duck_file: str, tmp_path: Path
) -> None:
    run = run_cli(
        ["export", "--db", duck_file, "--out", str(tmp_path / "x.xlsx"), "SELECT * FROM t"]
    )
    assert run.code == 2
    assert len(run.err.strip().splitlines()) == 1
    assert ".parquet, .csv, .jsonl" in run.err
    assert "--as" in run.err
    assert sorted(tmp_path.iterdir()) == [tmp_path / "data.duckdb"]
    folder = run_cli(
        [
            "export",
            "--db",
            duck_file,
            "--out",
            str(tmp_path / "v1.2"),
            "--as",
            "csv",
            "-m",
            "2",
            "SELECT * FROM t",
        ]
    )
    assert folder.code == 0, folder.err
    assert len(list((tmp_path / "v1.2").glob("part-*.csv"))) == 2


def test_export_drops_its_scratch_table(duck_file: str, tmp_path: Path) -> None:
    sql = "SELECT g, count(*) AS n FROM t GROUP BY g"
    run = run_cli(
        [
            "export",
            "--db",
            duck_file,
            "--out",
            str(tmp_path / "g.parquet"),
            "--strategy",
            "materialize",
            "--scratch",
            "main",
            "-m",
            "3",
            sql,
        ]
    )
    assert run.code == 0, run.err
    assert pq.read_table(tmp_path / "g.parquet").num_rows == 7
    assert _scratch_tables(duck_file) == []


def test_export_drops_its_scratch_table_when_it_fails(
    duck_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise EngineError("the server went away")

    monkeypatch.setattr(cli_export, "export", failing)
    run = run_cli(
        [
            "export",
            "--db",
            duck_file,
            "--out",
            str(tmp_path / "g.parquet"),
            "--strategy",
            "materialize",
            "--scratch",
            "main",
            "SELECT g, count(*) AS n FROM t GROUP BY g",
        ]
    )
    assert run.code == 1
    assert run.err.strip().splitlines() == ["sqlfeed: engine error: the server went away"]
    assert _scratch_tables(duck_file) == []
    assert not (tmp_path / "g.parquet").exists()


def test_job_delete_drops_the_jobs_scratch_table(duck_file: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    target = ["--queue", queue, "--job", "j"]
    made = run_cli(
        [
            "job",
            "create",
            *target,
            "--db",
            duck_file,
            "--strategy",
            "materialize",
            "--scratch",
            "main",
            "-m",
            "2",
            "SELECT g, count(*) AS n FROM t GROUP BY g",
        ]
    )
    assert made.code == 0, made.err
    (table,) = _scratch_tables(duck_file)
    again = run_cli(
        [
            "job",
            "create",
            *target,
            "--db",
            duck_file,
            "--strategy",
            "materialize",
            "--scratch",
            "main",
            "-m",
            "2",
            "SELECT g, count(*) AS n FROM t WHERE g > 0 GROUP BY g",
        ]
    )
    assert again.code == 2  # another definition: the table planned for it is dropped
    assert _scratch_tables(duck_file) == [table]
    refused = run_cli(["job", "delete", *target])
    assert refused.code == 2
    assert f"reads the scratch table main.{table}: pass --db URL" in refused.err
    assert run_cli(["job", "status", *target]).code == 0  # the job is still there
    deleted = run_cli(["job", "delete", *target, "--db", duck_file])
    assert deleted.code == 0, deleted.err
    assert _scratch_tables(duck_file) == []
    assert run_cli(["job", "status", *target]).code == 2


def test_scratch_list_and_drop(duck_file: str) -> None:
    """``sqlfeed scratch`` lists a plan's table, drops by age, by name and all."""
    base = ["--db", duck_file, "--schema", "main"]
    for _ in range(2):
        made = run_cli(
            [
                "plan",
                "--db",
                duck_file,
                "--strategy",
                "materialize",
                "--scratch",
                "main",
                "-m",
                "2",
                "SELECT g, count(*) AS n FROM t GROUP BY g",
            ]
        )
        assert made.code == 0, made.err
        assert "sqlfeed scratch drop" in made.err  # the warning says how to drop it
    first, second = _scratch_tables(duck_file)
    listed = json.loads(run_cli(["scratch", "list", *base, "--format", "json"]).out)
    assert [t["table"] for t in listed] == [first, second]
    assert all(t["age_seconds"] < 600 and t["rows"] == 7 for t in listed)
    text = run_cli(["scratch", "list", *base]).out
    assert first in text
    assert "2 scratch table(s) in main" in text
    kept = run_cli(["scratch", "drop", *base, "--older-than", "1h"])
    assert kept.out == "no scratch table to drop in main\n"
    assert run_cli(["scratch", "drop", *base, first]).code == 0
    assert _scratch_tables(duck_file) == [second]
    assert run_cli(["scratch", "drop", *base, "t"]).code == 2  # never a table of its own
    assert run_cli(["scratch", "drop", *base, "--all"]).code == 0
    assert _scratch_tables(duck_file) == []
    assert run_cli(["count", "--db", duck_file, "SELECT * FROM t"]).out == "1000\n"


def test_scratch_list_and_drop_on_sqlite(sqlite_data: str) -> None:
    base = ["--db", sqlite_data, "--schema", "main", "--format", "json"]
    made = run_cli(
        [
            "plan",
            "--db",
            sqlite_data,
            "--strategy",
            "materialize",
            "--scratch",
            "main",
            "SELECT g, count(*) AS n FROM t GROUP BY g",
        ]
    )
    assert made.code == 0, made.err
    (listed,) = json.loads(run_cli(["scratch", "list", *base]).out)
    assert f"main.{listed['table']}" == json.loads(made.out)["scratch_table"]
    dropped = json.loads(run_cli(["scratch", "drop", *base, "--all"]).out)
    assert dropped == {"schema": "main", "dropped": [listed["table"]]}
    assert json.loads(run_cli(["scratch", "list", *base]).out) == []
    assert run_cli(["count", "--db", sqlite_data, "SELECT * FROM t"]).out == "600\n"


def _server_url(engine: Engine) -> str:
    if engine.name == "postgres":
        return engines.POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    return engines.MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1)


@pytest.mark.engine
def test_scratch_list_and_drop_on_servers(engine: Engine) -> None:
    if engine.name not in ("postgres", "mysql"):
        pytest.skip("not an engine gap: DuckDB and SQLite files: test_scratch_list_and_drop*")
    url, schema = _server_url(engine), engine.scratch
    sql = f"SELECT a, count(*) AS n FROM {schema}.dups GROUP BY a"
    made = run_cli(["plan", "--db", url, "--strategy", "materialize", "--scratch", schema, sql])
    assert made.code == 0, made.err
    table = json.loads(made.out)["scratch_table"].rsplit(".", 1)[-1]
    listed = json.loads(
        run_cli(["scratch", "list", "--db", url, "--schema", schema, "--format", "json"]).out
    )
    assert [t["table"] for t in listed] == [table]
    assert listed[0]["bytes"] > 0
    dropped = run_cli(["scratch", "drop", "--db", url, "--schema", schema, "--all"])
    assert dropped.code == 0, dropped.err
    assert table in dropped.out
    assert (
        json.loads(
            run_cli(["scratch", "list", "--db", url, "--schema", schema, "--format", "json"]).out
        )
        == []
    )


def _target(kind: str, tmp_path: Path) -> tuple[str, str, str]:
    """A database URL, its scratch schema and a table of it, for ``kind``."""
    if kind == "duckdb":
        path = tmp_path / "d.duckdb"
        with duckdb.connect(str(path)) as conn:
            conn.execute("CREATE TABLE t AS SELECT range % 7 AS g FROM range(100)")
        return f"duckdb:///{path}", "main", "t"
    if kind == "sqlite":
        path = tmp_path / "d.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t (g INTEGER)")
            conn.executemany("INSERT INTO t VALUES (?)", [(i % 7,) for i in range(100)])
        return f"sqlite:///{path}", "main", "t"
    engine = get_engine(kind)
    table = engine.qualify(f"scratch_race_{uuid.uuid4().hex[:8]}")
    engine.create_table(table, [("g", "int")], [(i % 7,) for i in range(100)])
    return _server_url(engine), engine.scratch, table


@pytest.mark.parametrize("kind", ["duckdb", "sqlite", "postgres", "mysql"])
def test_scratch_list_leaves_out_a_table_another_run_drops_meanwhile(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that ends drops its table at any time: one gone between the listing and its
    count is not listed, and the command does not fail (a CI run failed on it)."""
    url, schema, table = _target(kind, tmp_path)
    made = []
    for _ in range(2):
        run = run_cli(
            [
                "plan",
                "--db",
                url,
                "--strategy",
                "materialize",
                "--scratch",
                schema,
                f"SELECT g, count(*) AS n FROM {table} GROUP BY g",
            ]
        )
        assert run.code == 0, run.err
        made.append(json.loads(run.out)["scratch_table"].rsplit(".", 1)[-1])
    listing = scratch_cli.list_scratch

    def listed_then_one_dropped(source: Any, in_schema: str) -> list[Any]:
        tables = listing(source, in_schema)
        materialize.drop_scratch_tables(source, in_schema, [made[0]])  # another run's end
        return tables

    monkeypatch.setattr(scratch_cli, "list_scratch", listed_then_one_dropped)
    try:
        run = run_cli(["scratch", "list", "--db", url, "--schema", schema, "--format", "json"])
        assert run.code == 0, run.err
        assert [(t["table"], t["rows"]) for t in json.loads(run.out)] == [(made[1], 7)]
    finally:
        monkeypatch.undo()
        assert run_cli(["scratch", "drop", "--db", url, "--schema", schema, *made[1:]]).code == 0
    assert (
        run_cli(
            ["scratch", "list", "--db", url, "--schema", schema, "--format", "json"]
        ).out.strip()
        == "[]"
    )


def test_reshard_defaults_to_256mb_shards(tmp_path: Path) -> None:
    out = tmp_path / "shards"
    run = run_cli(
        ["reshard", "--out", str(out), "--format", "json", "SELECT range AS x FROM range(100)"]
    )
    assert run.code == 0, run.err
    assert json.loads(run.out)["target_bytes"] == 256_000_000
    assert "default, without --shard-rows, is 256MB" in " ".join(
        run_cli(["reshard", "--help"]).out.split()
    )


def test_plan_warns_when_workers_get_unequal_shares() -> None:
    run = run_cli(["plan", "--workers", "3", "-m", "7", "--format", "sql", "SELECT a FROM t"])
    assert run.code == 0
    (line,) = run.err.strip().splitlines()
    assert line.startswith("sqlfeed: warning: 7 partitions over 3 ranks are unequal shares (3/2/2)")
    assert "--even-batches 3" in line
    assert "(6 or 9)" in line
    assert run_cli(["plan", "--workers", "3", "-m", "6", "SELECT a FROM t"]).err == ""


def test_feeder_warns_when_ranks_get_unequal_shares() -> None:
    sql = "SELECT range AS x FROM range(70)"
    with pytest.warns(UnequalSharesWarning, match=r"\(3/2/2\).*even_batches"):
        feeder = Feeder(sql, partitions=7, rank=2, world_size=3)
    assert len(feeder.share) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Feeder(sql, partitions=6, rank=2, world_size=3)


def test_an_unexpected_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.delenv("SQLFEED_DEBUG", raising=False)
    monkeypatch.setattr(cli_query, "partition_sqls", broken)
    run = run_cli(["plan", "SELECT a FROM t"])
    assert run.code == 1
    (line,) = run.err.strip().splitlines()
    assert line.startswith("sqlfeed: internal error: KeyError: 'boom'")
    monkeypatch.setenv("SQLFEED_DEBUG", "1")
    with pytest.raises(KeyError):
        run_cli(["plan", "SELECT a FROM t"])


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def needs_matplotlib(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    monkeypatch.setattr(cli_query, "partition_sqls", needs_matplotlib)
    run = run_cli(["plan", "SELECT a FROM t"])
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        "sqlfeed: error: the Python package matplotlib is not installed: "
        "pip install 'sqlfeed[report]'"
    ]
