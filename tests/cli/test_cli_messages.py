"""The command line's messages say what applies to the command as given (issue 24, 14).

Each test runs a command a user wrote and checks the one line it prints: advice the user
already followed is not repeated, an error names what is wrong with the value given, and
a URL people often mistype gets the fix.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import sqlfeed
from dialects import InvalidArgumentError, SqlfeedError
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT range AS id, 'c' || (range % 7) AS category FROM range(1000)"
        )
    monkeypatch.chdir(tmp_path)
    return "duckdb:///d.duckdb"


def test_the_reread_warning_does_not_ask_for_the_scratch_already_given(db: str) -> None:
    run = run_cli(
        [
            "plan",
            "--db",
            db,
            "--scratch",
            "main",
            "-m",
            "8",
            "SELECT id, category FROM t ORDER BY id LIMIT 100",
        ]
    )
    assert run.code == 0, run.err
    (warning,) = run.err.splitlines()
    assert "reads the whole query about 8 times" in warning
    assert "--scratch SCHEMA" not in warning
    assert "give --key, --scratch" not in warning
    assert "--strategy materialize (one run into --scratch main)" in warning


def test_the_reread_warning_without_scratch_offers_it(db: str) -> None:
    run = run_cli(
        ["plan", "--db", db, "-m", "8", "SELECT id, category FROM t ORDER BY id LIMIT 100"]
    )
    assert run.code == 0, run.err
    assert "--scratch SCHEMA (materialize" in run.err
    assert "--key COLUMN" in run.err


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("category", "needs a numeric, date or timestamp key column, and category is string"),
        ("category,id", "takes one key column, not 2 (category is string, id is int64)"),
    ],
)
def test_a_range_key_of_the_wrong_type_is_named_with_its_type(
    db: str, key: str, expected: str
) -> None:
    run = run_cli(
        [
            "plan",
            "--db",
            db,
            "--strategy",
            "range",
            "--key",
            key,
            "-m",
            "4",
            "SELECT id, category FROM t",
        ]
    )
    assert run.code == 2
    (line,) = run.err.splitlines()
    assert expected in line, line
    assert "needs --key COLUMN" not in line
    assert "no integer primary key" not in line
    assert "--strategy hash" in line


def test_a_worker_out_of_another_job_gets_only_that_advice(db: str) -> None:
    queue = "sqlite:///q.db"
    for job, sql in (("a", "SELECT id FROM t WHERE id < 100"), ("b", "SELECT id FROM t")):
        made = run_cli(
            ["job", "create", "--queue", queue, "--job", job, "--db", db, "-m", "2", sql]
        )
        assert made.code == 0, made.err
    first = run_cli(["worker", "--queue", queue, "--job", "a", "--db", db, "--out", "out"])
    assert first.code == 0, first.err
    run = run_cli(["worker", "--queue", queue, "--job", "b", "--db", db, "--out", "out"])
    assert run.code == 2
    (line,) = run.err.splitlines()
    assert line.startswith("sqlfeed: error: --out out holds the batches of job 'a' (plan ")
    assert line.endswith("), not of this one: give each job its own folder"), line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgres://u:secret@127.0.0.1:9/x",
            "SQLAlchemy has no 'postgres' dialect; did you mean postgresql+psycopg://u:***@127.0.0.1:9/x?",
        ),
        ("postgress://u@127.0.0.1:9/x", "did you mean postgresql+psycopg://u@127.0.0.1:9/x?"),
        ("mysq://root@127.0.0.1:9/x", "did you mean mysql+pymysql://root@127.0.0.1:9/x?"),
        ("snowflake://u@account/db", "pip install snowflake-sqlalchemy"),
        ("bigquery://project/dataset", "pip install sqlalchemy-bigquery"),
    ],
)
@pytest.mark.parametrize(
    "command", [["count"], ["export", "--out", "o.parquet"], ["worker", "--job", "j"]]
)
def test_a_mistyped_or_plugin_url_gets_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, expected: str, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    sql = [] if command[0] == "worker" else ["SELECT 1 AS x"]
    run = run_cli([*command, "--db", url, *sql])
    assert run.code == 2
    (line,) = run.err.splitlines()
    assert expected in line, line
    assert "secret" not in line
    assert not list(tmp_path.iterdir())


@pytest.mark.engine
def test_a_closed_source_says_so_as_a_sqlfeed_error() -> None:
    get_engine("postgres")
    source = sqlfeed.connect(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    source.read_table("SELECT 1 AS x")
    source.close()
    with pytest.raises(InvalidArgumentError, match="the source is closed"):
        source.read_table("SELECT 1 AS x")
    with pytest.raises(SqlfeedError, match=r"sqlfeed\.connect"):
        list(source.read("SELECT 1 AS x"))


@pytest.mark.engine
@pytest.mark.parametrize("name", ["postgres", "mysql"])
def test_materialize_without_scratch_uses_the_default_schema_as_auto_does(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_engine(name)  # skips (or fails under CI=true) when the server is down
    monkeypatch.chdir(tmp_path)
    url = _url(name)
    sql = "SELECT 1 AS x UNION ALL SELECT 2 UNION ALL SELECT 2"
    run = run_cli(
        ["export", "--db", url, "--strategy", "materialize", "-m", "2", "--out", "o.parquet", sql]
    )
    assert run.code == 0, run.err
    assert "materialize partitions" in run.out
    assert sorted(pq.read_table("o.parquet")["x"].to_pylist()) == [1, 2, 2]


def test_materialize_without_scratch_elsewhere_says_which_engines_default(db: str) -> None:
    run = run_cli(["plan", "--db", db, "--strategy", "materialize", "SELECT id FROM t"])
    assert run.code == 2
    assert run.err == (
        "sqlfeed: error: --strategy materialize needs --scratch SCHEMA on duckdb, a schema "
        "sqlfeed may create a table in (PostgreSQL and MySQL default to sqlfeed_scratch)\n"
    )


def _url(name: str) -> str:
    if name == "postgres":
        return POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    return MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgres://u:secret@127.0.0.1:9/x",
            "did you mean postgresql+psycopg://u:***@127.0.0.1:9/x?",
        ),
        ("snowflake://u@account/db", "pip install snowflake-sqlalchemy"),
    ],
)
def test_the_python_api_gives_the_same_url_fix(url: str, expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        sqlfeed.connect(url)
    assert expected in str(refused.value)
    assert "secret" not in str(refused.value)
