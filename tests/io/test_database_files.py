"""Database files: reading never creates one, URLs follow SQLAlchemy's slashes, DuckDB files
are opened read-only (so many processes read one at once), and SQLite queue files are
made only by creating a job."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.dialects import EngineError, InvalidArgumentError, MissingDependencyError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.worker import Worker
from sqlfeed.plans import drop_scratch
from tests.helpers.cli import Run, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current folder (relative URLs resolve in it)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def _duckdb_file(path: Path, rows: int = 1000) -> Path:
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT range AS id, range % 7 AS g FROM range({rows})")
    return path


def _sqlite_file(path: Path, rows: int = 1000) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, g INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, i % 7) for i in range(rows)])
    conn.close()
    return path


def _one_line(run: Run, code: int, *expected: str) -> str:
    lines = run.err.strip().splitlines()
    assert run.code == code, run.err
    assert len(lines) == 1, run.err
    assert "Traceback" not in run.err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


MISSING_COMMANDS = {
    "count": ["count", "--db", "{url}", "SELECT * FROM t"],
    "plan": ["plan", "--db", "{url}", "SELECT * FROM t"],
    "sample": ["sample", "--db", "{url}", "SELECT * FROM t"],
    "export": ["export", "--db", "{url}", "--out", "out.parquet", "SELECT * FROM t"],
    "stats": ["stats", "--db", "{url}", "--out", "stats.json", "SELECT * FROM t"],
    "job create": [
        "job",
        "create",
        "--queue",
        "sqlite:///q.db",
        "--job",
        "j",
        "--db",
        "{url}",
        "-m",
        "2",
        "SELECT * FROM t",
    ],
}


@pytest.mark.parametrize("url", ["duckdb:///nosuch.duckdb", "sqlite:///nosuch.sqlite"])
@pytest.mark.parametrize("command", sorted(MISSING_COMMANDS))
def test_a_missing_database_file_is_refused_and_never_created(
    workdir: Path, url: str, command: str
) -> None:
    args = [a.replace("{url}", url) for a in MISSING_COMMANDS[command]]
    run = run_cli(args)
    missing = str(workdir / url.rsplit("/", 1)[1])
    _one_line(run, 2, f"no {'DuckDB' if 'duckdb' in url else 'SQLite'} database at {missing}")
    assert list(workdir.iterdir()) == []  # no database, queue or output file made


@pytest.mark.parametrize("url", ["duckdb:/sqlfeed-typo.duckdb", "duckdb://sqlfeed-typo.duckdb"])
def test_a_malformed_duckdb_url_says_both_forms_and_creates_nothing(
    workdir: Path, url: str
) -> None:
    existed = os.path.exists("/sqlfeed-typo.duckdb")
    run = run_cli(["count", "--db", url, "SELECT 1 AS a"])
    _one_line(run, 2, "duckdb:///sqlfeed-typo.duckdb", "duckdb:////sqlfeed-typo.duckdb")
    assert os.path.exists("/sqlfeed-typo.duckdb") == existed
    assert list(workdir.iterdir()) == []


def test_the_error_points_at_four_slashes_when_the_absolute_file_exists(
    workdir: Path, tmp_path: Path
) -> None:
    path = _duckdb_file(tmp_path / "abs.duckdb")
    url = "duckdb:///" + str(path).lstrip("/")  # three slashes: relative to the folder
    with pytest.raises(InvalidArgumentError, match=f"write duckdb:///{path}"):
        sqlfeed.connect(url)


def test_file_urls_follow_sqlalchemy_slashes(workdir: Path) -> None:
    _duckdb_file(workdir / "rel.duckdb", rows=10)
    _sqlite_file(workdir / "rel.sqlite", rows=11)
    dataset = sqlfeed.create_dataset(workdir / "ds", uid="id")
    dataset.add_shardset("main", pa.table({"id": list(range(12)), "x": [1.0] * 12}))
    for relative, absolute, rows in [
        ("duckdb:///rel.duckdb", f"duckdb:///{workdir}/rel.duckdb", 10),
        ("sqlite:///rel.sqlite", f"sqlite:///{workdir}/rel.sqlite", 11),
        ("dataset:///ds", f"dataset:///{workdir}/ds", 12),
    ]:
        assert absolute.count("////") == 1  # f"scheme:///{absolute path}": four slashes
        table = "dataset" if relative.startswith("dataset") else "t"
        for url in (relative, absolute):
            with sqlfeed.connect(url) as source:
                assert source.count(f"SELECT * FROM {table}") == rows, url


def test_reading_opens_a_duckdb_file_read_only(tmp_path: Path) -> None:
    path = _duckdb_file(tmp_path / "data.duckdb")
    with sqlfeed.connect(f"duckdb:///{path}") as source:
        assert source.count("SELECT * FROM t") == 1000
        with pytest.raises(duckdb.Error, match="read-only"):
            source.connection.execute("CREATE TABLE z (a INTEGER)")  # type: ignore[attr-defined]
        # a second, independent read-only connection (what another process would open)
        with duckdb.connect(str(path), read_only=True) as other:
            assert other.execute("SELECT count(*) FROM t").fetchone() == (1000,)


def test_a_materialize_plan_writes_its_scratch_table_then_reads_read_only(
    tmp_path: Path,
) -> None:
    path = _duckdb_file(tmp_path / "data.duckdb")
    sql = "SELECT g, count(*) AS n FROM t GROUP BY g"
    with sqlfeed.connect(f"duckdb:///{path}") as source:
        plan = sqlfeed.plan(sql, source, strategy="materialize", scratch="main", partitions=3)
        assert plan.scratch_table is not None
        rows = Counter(r for p in plan.partitions for r in source.rows(p.sql))
        assert rows == Counter(source.rows(sql))
        with pytest.raises(duckdb.Error, match="read-only"):
            source.connection.execute("CREATE TABLE z (a INTEGER)")  # type: ignore[attr-defined]
        drop_scratch(plan, source)
    with duckdb.connect(str(path), read_only=True) as conn:
        assert [
            r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        ] == ["t"]


def test_a_scratch_table_cannot_be_written_while_another_connection_reads(
    tmp_path: Path,
) -> None:
    path = _duckdb_file(tmp_path / "data.duckdb")
    sql = "SELECT g, count(*) AS n FROM t GROUP BY g"
    with sqlfeed.connect(f"duckdb:///{path}") as source:
        with duckdb.connect(str(path), read_only=True) as reader:
            with pytest.raises(EngineError) as caught:
                sqlfeed.plan(sql, source, strategy="materialize", scratch="main", partitions=2)
            assert reader.execute("SELECT count(*) FROM t").fetchone() == (1000,)
        assert "\n" not in str(caught.value)
        assert "cannot write the scratch table" in str(caught.value)
        assert source.count("SELECT * FROM t") == 1000  # still readable afterwards
    with duckdb.connect(str(path), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (1,)


def test_reshard_reads_a_duckdb_file_it_opened_read_only(tmp_path: Path) -> None:
    path = _duckdb_file(tmp_path / "data.duckdb")
    out = tmp_path / "shards"
    run = run_cli(
        [
            "reshard",
            "--db",
            f"duckdb:///{path}",
            "--out",
            str(out),
            "--shuffle",
            "1",
            "--shard-rows",
            "300",
            "SELECT * FROM t",
        ]
    )
    assert run.code == 0, run.err
    ids = Counter(
        i for f in out.glob("*.parquet") for i in pq.read_table(f).column("id").to_pylist()
    )
    assert ids == Counter(range(1000))


def test_a_process_with_the_file_open_for_writing_shares_it(tmp_path: Path) -> None:
    path = _duckdb_file(tmp_path / "data.duckdb")
    with duckdb.connect(str(path)) as writer, sqlfeed.connect(f"duckdb:///{path}") as source:
        writer.execute("INSERT INTO t VALUES (1000, 0)")
        assert source.count("SELECT * FROM t") == 1001


@pytest.mark.skipif(
    importlib.util.find_spec("MySQLdb") is not None, reason="mysqlclient is installed"
)
def test_mysql_url_without_a_driver_names_the_installed_one() -> None:
    with pytest.raises(MissingDependencyError) as caught:
        sqlfeed.connect("mysql://root@127.0.0.1:3306/test")
    assert "use mysql+pymysql://root@127.0.0.1:3306/test (pymysql is installed)" in str(
        caught.value
    )
    run = run_cli(["count", "--db", "mysql://root@127.0.0.1:3306/test", "SELECT 1 AS a"])
    _one_line(run, 2, "use mysql+pymysql://root@127.0.0.1:3306/test")


@pytest.mark.parametrize("command", [["job", "status"], ["job", "reset"], ["job", "delete"]])
def test_job_commands_on_a_missing_queue_file_create_nothing(
    workdir: Path, command: list[str]
) -> None:
    run = run_cli([*command, "--queue", "sqlite:///typo.db", "--job", "j"])
    _one_line(run, 2, "typo.db")
    assert list(workdir.iterdir()) == []


def test_only_creating_a_job_makes_a_queue_file(workdir: Path, tmp_path: Path) -> None:
    data = _duckdb_file(tmp_path / "data.duckdb")
    with pytest.raises(InvalidArgumentError, match=f"no lease queue at {workdir}/typo.db"):
        Worker("sqlite:///typo.db", "j", f"duckdb:///{data}")
    with pytest.raises(InvalidArgumentError, match="only creating a job"):
        open_queue("sqlite:///typo.db").status("j")
    assert list(workdir.iterdir()) == []
    plan = sqlfeed.plan("SELECT * FROM t", f"duckdb:///{data}", partitions=2)
    queue = open_queue("sqlite:///made.db")
    queue.create_job(JobSpec("j", plan))
    assert queue.status("j").partitions == 2
    assert (workdir / "made.db").exists()


@pytest.mark.slow
def test_four_workers_and_a_count_share_one_duckdb_file(tmp_path: Path) -> None:
    rows = 200_000
    path = _duckdb_file(tmp_path / "data.duckdb", rows=rows)
    url, queue = f"duckdb:///{path}", f"sqlite:///{tmp_path / 'queue.db'}"
    created = run_cli(
        [
            "job",
            "create",
            "--queue",
            queue,
            "--job",
            "j",
            "--db",
            url,
            "-m",
            "24",
            "SELECT * FROM t",
        ]
    )
    assert created.code == 0, created.err
    out = tmp_path / "out"
    worker = [
        "worker",
        "--queue",
        queue,
        "--job",
        "j",
        "--db",
        url,
        "--batch-size",
        "5000",
        "--out",
        str(out),
    ]
    processes = [_sqlfeed(worker, tmp_path) for _ in range(4)]
    counter = _sqlfeed(["count", "--db", url, "SELECT * FROM t WHERE g = 3"], tmp_path)
    count_out, count_err = counter.communicate(timeout=300)
    results = [p.communicate(timeout=300) for p in processes]
    assert counter.returncode == 0, count_err
    assert count_out.strip() == str(sum(1 for i in range(rows) if i % 7 == 3))
    assert count_err == ""
    for process, (stdout, stderr) in zip(processes, results, strict=True):
        assert process.returncode == 0, stderr
        assert stderr == ""  # no lock error, no "nanobind: leaked N instances"
        assert stdout.startswith("worker ")
    ids = Counter(
        i for f in sorted(out.rglob("*.parquet")) for i in pq.read_table(f).column("id").to_pylist()
    )
    assert ids == Counter(range(rows))


def _sqlfeed(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``sqlfeed ARGS`` in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqlfeed", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
