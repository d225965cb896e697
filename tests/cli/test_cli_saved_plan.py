"""``--plan FILE``: a plan saved by ``sqlfeed plan --db URL`` used by ``export``, ``job
create`` and ``sqlfeed plan``, and checked by ``worker``: the rows are the query's own,
and a plan that does not fit (edited, another engine, changed tables) is refused in one
line before anything is read or written."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from sqlfeed.dispatch import open_queue
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import POSTGRES_URL

DB = "duckdb:///d.duckdb"
SQL = "SELECT id, g, s FROM t WHERE id % 3 <> 0"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT range AS id, range % 7 AS g, "
            "CASE WHEN range % 5 = 0 THEN NULL ELSE 'v' || range END AS s "
            "FROM range(5000)"
        )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _save(db: str, sql: str, *flags: str, path: str = "plan.json") -> dict[str, object]:
    run = run_cli(["plan", "--db", db, *flags, sql])
    assert run.code == 0, run.err
    Path(path).write_text(run.out, encoding="utf-8")
    document: dict[str, object] = json.loads(run.out)
    return document


def _rows(path: str) -> Counter[tuple[object, ...]]:
    return Counter(tuple(r.values()) for r in pq.read_table(path).to_pylist())


def _expected(sql: str) -> Counter[tuple[object, ...]]:
    with duckdb.connect("d.duckdb", read_only=True) as conn:
        return Counter(conn.execute(sql).fetchall())


@pytest.mark.parametrize(
    "flags",
    [
        ["-m", "4", "--strategy", "hash"],
        ["-m", "5", "--strategy", "range", "--key", "id"],
        ["-m", "3", "--strategy", "ctid"],
        ["-m", "4", "--strategy", "materialize", "--scratch", "main"],
    ],
    ids=["hash", "range", "rowid", "materialize"],
)
def test_export_of_a_saved_plan_reads_the_querys_rows(work: Path, flags: list[str]) -> None:
    saved = _save(DB, SQL, *flags)
    run = run_cli(["export", "--db", DB, "--plan", "plan.json", "--out", "o.parquet"])
    assert run.code == 0, run.err
    assert _rows("o.parquet") == _expected(SQL)
    assert f"{saved['strategy']} partitions" in run.out
    if saved["scratch_table"]:  # a saved plan's table stays: export again
        again = run_cli(["export", "--db", DB, "--plan", "plan.json", "--out", "p.parquet"])
        assert again.code == 0, again.err
        assert _rows("p.parquet") == _expected(SQL)


def test_job_create_and_worker_take_the_saved_plan(work: Path) -> None:
    saved = _save(DB, SQL, "-m", "4")
    made = run_cli(
        [
            "job",
            "create",
            "--queue",
            "sqlite:///q.db",
            "--job",
            "j",
            "--db",
            DB,
            "--plan",
            "plan.json",
            "--format",
            "json",
        ]
    )
    assert made.code == 0, made.err
    assert json.loads(made.out)["fingerprint"] == saved["fingerprint"]
    _save(DB, "SELECT id FROM t", "-m", "2", path="other.json")
    refused = run_cli(
        ["worker", "--queue", "sqlite:///q.db", "--job", "j", "--db", DB, "--plan", "other.json"]
    )
    assert refused.code == 2
    assert "not --plan other.json" in refused.err
    assert open_queue("sqlite:///q.db").status("j").per_epoch[0]["pending"] == 4
    worked = run_cli(
        [
            "worker",
            "--queue",
            "sqlite:///q.db",
            "--job",
            "j",
            "--db",
            DB,
            "--plan",
            "plan.json",
            "--out",
            "out",
        ]
    )
    assert worked.code == 0, worked.err
    assert sum(_rows(str(f)).total() for f in Path("out").rglob("part-*.parquet")) == sum(
        _expected(SQL).values()
    )


def test_plan_checks_and_prints_a_saved_plan(work: Path) -> None:
    saved = _save(DB, SQL, "-m", "4")
    run = run_cli(["plan", "--db", DB, "--plan", "plan.json"])
    assert run.code == 0, run.err
    assert json.loads(run.out)["fingerprint"] == saved["fingerprint"]


def _edited(document: dict[str, object]) -> str:
    document["sql"] = str(document["sql"]).replace("<> 0", "<> 1")
    return json.dumps(document)


@pytest.mark.parametrize(
    ("argv", "content", "expected"),
    [
        (["--plan", "p.json", SQL], None, "give the SQL or --plan FILE, not both"),
        (["--plan", "p.json", "--strategy", "hash"], None, "fixes the partitions: drop --strategy"),
        (["--plan", "p.json", "-m", "3", "--key", "id"], None, "drop --partitions, --key"),
        (["--plan", "p.json"], "edited", "fingerprint does not match its contents (it was edited"),
        (["--plan", "p.json"], '{"a": 1}', "not a saved plan"),
        (["--plan", "p.json"], "not json", "not JSON"),
        (["--plan", "missing.json"], None, "--plan missing.json: cannot read it"),
        ([], None, "the SQL argument is required (or --plan FILE"),
    ],
)
def test_a_saved_plan_that_does_not_fit_is_refused_before_anything_runs(
    work: Path, argv: list[str], content: str | None, expected: str
) -> None:
    document = _save(DB, SQL, "-m", "4", path="p.json")
    if content is not None:
        Path("p.json").write_text(_edited(document) if content == "edited" else content)
    create = ["job", "create", "--queue", "sqlite:///q.db", "--job", "j", "--db", DB]
    for command in (["export", "--db", DB, "--out", "o.parquet"], create):
        run = run_cli([*command, *argv])
        assert run.code == 2, run
        (line,) = run.err.splitlines()
        assert expected in line, line
    assert not Path("o.parquet").exists()
    assert not Path("q.db").exists()


def test_a_plan_for_another_engine_or_changed_tables_is_refused(work: Path) -> None:
    _save(DB, "SELECT * FROM t", "-m", "4")
    Path("x.sqlite").touch()
    run = run_cli(
        ["export", "--db", "sqlite:///x.sqlite", "--plan", "plan.json", "--out", "o.parquet"]
    )
    assert run.code == 2
    assert "is a plan for duckdb, but --db is a sqlite URL" in run.err
    with duckdb.connect("d.duckdb") as conn:
        conn.execute("ALTER TABLE t ADD COLUMN z INTEGER")
    run = run_cli(["export", "--db", DB, "--plan", "plan.json", "--out", "o.parquet"])
    assert run.code == 2
    assert "returns the columns id, g, s, z, not the plan's id, g, s" in run.err
    assert not Path("o.parquet").exists()


@pytest.mark.engine
def test_a_saved_postgres_ctid_plan_exports_the_querys_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = get_engine("postgres")
    table = engine.qualify(f"saved_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} AS SELECT g AS id, g % 7 AS k FROM generate_series(1, 20000) g"
    )
    try:
        monkeypatch.chdir(tmp_path)
        url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        sql = f"SELECT id, k FROM {table} WHERE k <> 3"
        saved = _save(url, sql, "-m", "4", "--strategy", "ctid")
        assert saved["strategy"] == "ctid"
        run = run_cli(["export", "--db", url, "--plan", "plan.json", "--out", "o.parquet"])
        assert run.code == 0, run.err
        expected = Counter((i, i % 7) for i in range(1, 20001) if i % 7 != 3)
        assert _rows("o.parquet") == expected
    finally:
        engine.execute(f"DROP TABLE {table}")
