"""The command line's messages say what applies to the command as given (issue 24, 14).

Each test runs a command a user wrote and checks the one line it prints: advice the user
already followed is not repeated, an error names what is wrong with the value given, and
a URL people often mistype gets the fix.
"""

from __future__ import annotations

import argparse
import io
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
import sqlfeed.ml as ml
from sqlfeed.cli.main import build_parser
from sqlfeed.cli.progress import RowsBar
from sqlfeed.dialects import InvalidArgumentError, SqlfeedError
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


def _engine_url(engine_name: str, tmp_path: Path, stem: str) -> str:
    """A database of ``engine_name`` to write into: a file in ``tmp_path`` for DuckDB and
    SQLite, else the test server (skipped or failed, as the engine fixture does, when down)."""
    if engine_name == "duckdb":
        return f"duckdb:///{tmp_path / f'{stem}.duckdb'}"
    if engine_name == "sqlite":
        return f"sqlite:///{tmp_path / f'{stem}.db'}"
    get_engine(engine_name)
    return _url(engine_name)


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


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command of ``parser`` (``job create`` as ``("job", "create")``) and its parser."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
        return
    for name, sub in groups[0].choices.items():
        yield from _commands(sub, (*path, name))


def _typo(option: str) -> str:
    """``option`` with its second and third letters swapped (``--label`` -> ``--lbael``)."""
    word = option[2:]
    return f"--{word[0]}{word[2]}{word[1]}{word[3:]}"


def test_a_mistyped_option_of_any_command_is_named_with_the_option_meant() -> None:
    """Issue 36 item 14: argparse said "required: --label" for ``--lable``, never which word."""
    checked = 0
    for path, parser in _commands(build_parser()):
        for option in parser._option_string_actions:
            if not option.startswith("--") or option == "--help" or len(option) < 5:
                continue
            typo = _typo(option)
            if typo == option:
                continue
            run = run_cli([*path, typo, "value"])
            assert run.code == 2, (path, typo)
            assert run.err == (
                f"sqlfeed: error: unknown option {typo}; did you mean {option}? "
                f"(see 'sqlfeed {' '.join(path)} --help')\n"
            ), (path, run.err)
            checked += 1
    assert checked > 150


def test_a_mistyped_option_is_named_before_the_required_one_it_was_meant_to_be() -> None:
    run = run_cli(["train", "--db", "duckdb:///x.duckdb", "--lable", "y", "SELECT 1 AS y"])
    assert run.err == (
        "sqlfeed: error: unknown option --lable; did you mean --label? "
        "(see 'sqlfeed train --help')\n"
    )
    quiet = run_cli(["--quite", "count", "--db", "duckdb:///x.duckdb", "SELECT 1"])
    assert "unknown option --quite; did you mean --quiet?" in quiet.err
    equals = run_cli(["count", "--db=duckdb:///x.duckdb", "--formt=json", "SELECT 1"])
    assert "unknown option --formt; did you mean --format?" in equals.err
    far = run_cli(["count", "--db", "duckdb:///x.duckdb", "--zzzz", "SELECT 1"])
    assert far.err == "sqlfeed: error: unknown option --zzzz (see 'sqlfeed count --help')\n"


def test_what_argparse_reads_as_values_is_not_an_unknown_option(db: str) -> None:
    """Abbreviations, ``--opt=value``, negative numbers, words with spaces, after ``--``."""
    for args in (
        ["count", "--d", db, "SELECT -1 AS x"],
        ["count", f"--db={db}", "--format=json", "SELECT 1 AS x"],
        ["count", "--db", db, "-", "--", "--x"],
        ["sample", "--db", db, "--rows", "2", "-- a comment\nSELECT id FROM t"],
        ["plan", "--db", db, "-m2", "SELECT id FROM t"],
    ):
        run = run_cli(args, stdin="SELECT 1 AS x")
        assert "unknown option" not in run.err, (args, run.err)
    minus = run_cli(["count", "--db", db, "-5"])
    assert "unknown option" not in minus.err


@pytest.mark.parametrize("flag", ["--out", "--html"])
@pytest.mark.parametrize("dangling", [False, True], ids=["file", "dangling"])
def test_stats_refuses_an_output_that_is_a_symbolic_link(
    db: str, tmp_path: Path, flag: str, dangling: bool
) -> None:
    """Issue 36 item 3: ``stats --out link`` replaced the file the link points to, elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    theirs = elsewhere / "theirs.json"
    if not dangling:
        theirs.write_text("a user's file\n", encoding="utf-8")
    Path("stats.json").symlink_to(theirs)
    run = run_cli(["stats", "--db", db, flag, "stats.json", "SELECT id, category FROM t"])
    assert run.err == (
        f"sqlfeed: error: {flag} stats.json is a symbolic link to {theirs}: writing it would "
        "replace that file; give the file's own path if you mean it, or another name\n"
    )
    assert run.code == 2
    assert list(elsewhere.iterdir()) == ([] if dangling else [theirs])
    if not dangling:
        assert theirs.read_text(encoding="utf-8") == "a user's file\n"
    direct = run_cli(["stats", "--db", db, flag, str(tmp_path / "s.out"), "SELECT id FROM t"])
    assert direct.code == 0, direct.err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_rows_bar_shows_the_total_and_the_time_left() -> None:
    """Issue 36 item 16: ``predict``'s bar showed the rows alone, even with the total known."""
    terminal = _Terminal()
    bar = RowsBar(stream=terminal)
    bar(0, 200_000)
    time.sleep(0.2)
    bar(50_000, 200_000)
    bar.close()
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue()).strip().split("\r")[-1]
    assert "50.0k/200.0k rows" in last, last
    assert re.search(r"ETA 0:00:0\d", last), last


# -- evaluate on rows the model was trained on (issue 36 item 17) ------------------------------


@pytest.fixture(scope="module")
def overlap_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(a model trained on DuckDB's table, that table's name, a model split by the whole row)."""
    folder = tmp_path_factory.mktemp("overlap")
    name = f"ov_{uuid.uuid4().hex[:8]}"
    db = f"duckdb:///{folder / 'train.duckdb'}"
    sqlfeed.write_table(_overlap_rows(), db, name)
    keyed, whole = folder / "keyed", folder / "whole"
    ml.train(f"SELECT id, x, y FROM {name}", db, label="y", out=str(keyed), key="id", epochs=1)
    ml.train(f"SELECT x, y FROM {name}", db, label="y", out=str(whole), epochs=1)
    return keyed, name, whole


def _overlap_rows() -> pa.Table:
    ids = list(range(1, 201))
    return pa.table({"id": ids, "x": [i * 0.37 % 5 for i in ids], "y": [i % 2 for i in ids]})


@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_evaluate_warns_of_rows_the_model_was_trained_on(
    engine_name: str, overlap_model: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """It scored training rows with no word: metrics that flatter the model."""
    keyed, name, _ = overlap_model
    url = _engine_url(engine_name, tmp_path, "e")
    sqlfeed.write_table(_overlap_rows(), url, name)
    try:
        training = ml.evaluate(keyed, f"SELECT id, x, y FROM {name}", url)["training_overlap"]
        run = run_cli(["evaluate", "--db", url, "--model", str(keyed), f"SELECT * FROM {name}"])
        assert run.code == 0, run.err
        assert 0 < training < 200
        assert run.err == (
            f"sqlfeed: warning: {training:,} of the 200 rows evaluated are rows the model was "
            "trained on (its training split, matched by the split key id): their metrics "
            "flatter it; evaluate on its validation split (give no SELECT) or on other rows\n"
        )
        split = run_cli(["evaluate", "--db", url, "--model", str(keyed)])
        assert split.code == 0, split.err
        assert split.err == ""
        fresh = f"SELECT id + 1000 AS id, x, y FROM {name}"
        assert ml.evaluate(keyed, fresh, url)["training_overlap"] == 0
    finally:
        with sqlfeed.connect(url) as source:
            source.execute(f"DROP TABLE IF EXISTS {name}")


def test_evaluate_matches_a_whole_row_split_by_features_and_label(
    overlap_model: tuple[Path, str, Path], tmp_path: Path
) -> None:
    _, name, whole = overlap_model
    url = f"duckdb:///{tmp_path / 'e.duckdb'}"
    sqlfeed.write_table(_overlap_rows(), url, name)
    result = ml.evaluate(whole, f"SELECT x, y FROM {name}", url)
    assert 0 < result["training_overlap"] < 200
    assert result["training_overlap"] + ml.evaluate(whole, None, url)["rows"] == 200


@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_an_overlap_that_cannot_be_counted_is_unknown_and_says_why(
    engine_name: str, overlap_model: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """A training table there but unreadable as trained (another shape) is not "no overlap"
    and not silence: the count's failure is a warning, and the overlap None. (Nested in the
    count, the training query's missing key bound to the evaluated row's: on DuckDB, 159 of
    200 rows were said to be trained on, from a table without the key.)"""
    keyed, name, _ = overlap_model
    url = _engine_url(engine_name, tmp_path, "e")
    scored = f"scored_{uuid.uuid4().hex[:8]}"
    sqlfeed.write_table(_overlap_rows().rename_columns(["key", "x", "y"]), url, name)
    sqlfeed.write_table(_overlap_rows(), url, scored)
    try:
        with pytest.warns(
            UserWarning,
            match=r"could not count the evaluated rows the model was "
            r"trained on \(.*\): training_overlap is unknown \(None\)",
        ) as seen:
            result = ml.evaluate(keyed, f"SELECT id, x, y FROM {scored}", url)
        assert result["rows"] == 200
        assert result["training_overlap"] is None
        assert "id" in str(seen[0].message)  # the missing column is named
        run = run_cli(["evaluate", "--db", url, "--model", str(keyed), f"SELECT * FROM {scored}"])
        assert run.code == 0, run.err
        assert run.err.startswith("sqlfeed: warning: could not count the evaluated rows"), run.err
        assert len(run.err.splitlines()) == 1
    finally:
        with sqlfeed.connect(url) as source:
            source.execute(f"DROP TABLE IF EXISTS {name}")
            source.execute(f"DROP TABLE IF EXISTS {scored}")


# -- write_table's errors in its Python arguments (issue 36 item 14) ------------------------


@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_write_table_errors_speak_of_its_arguments_not_of_flags(
    engine_name: str, tmp_path: Path
) -> None:
    """They said --mode replace, --key, --keep and "cast it in the SELECT" to a program."""
    url = _engine_url(engine_name, tmp_path, "w")
    name = f"wt_{uuid.uuid4().hex[:8]}"
    ints = pa.table({"id": [1, 2], "n": [1, 2]})
    cases = [
        (dict(data=ints), "give mode='replace' to replace it or mode='append' to add rows"),
        (dict(data=ints, table=f"{name}_x", mode="append"), "give mode='create' to make it"),
        (dict(data=pa.table({"id": [3]}), mode="append"), "(or give mode='replace')"),
        (
            dict(data=pa.table({"id": [3], "n": [1.5]}), mode="append"),
            "cast the column written, or give mode='replace'",
        ),
        (dict(data=ints, table=f"{name}_y", key=["nope"]), "name a key among them"),
        (dict(data=pa.table({"_sqlfeed_row": [1]}), table=f"{name}_z"), "rename the column"),
    ]
    sqlfeed.write_table(ints, url, name)
    try:
        for given, expected in cases:
            if engine_name == "sqlite" and "cast" in expected:
                continue  # SQLite keeps 1.5 in an INTEGER column as it is: nothing refused
            arguments: dict[str, Any] = {"table": name, **given}
            with pytest.raises(InvalidArgumentError) as refused:
                sqlfeed.write_table(arguments.pop("data"), url, arguments.pop("table"), **arguments)
            message = str(refused.value)
            assert expected in message, message
            assert "--" not in message, message
            assert "SELECT" not in message, message
    finally:
        with sqlfeed.connect(url) as source:
            source.execute(f"DROP TABLE IF EXISTS {name}")
