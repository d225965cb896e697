"""A password never leaves the URL it came in.

Passwords holding each of ``/ @ : ? # %`` (and all of them at once), in every place a URL
carries one (``user:PASSWORD@``, ``:PASSWORD@`` without a user, ``?password=``, an Iceberg
catalog's ``?token=``), through every message path (unreachable servers, bad
authentication, exception messages, usage errors) and every artifact sqlfeed writes (queue
rows, job specs, manifests, reports, Parquet files and their metadata, plan JSON, the
tables it writes, progress output, logs). And a URL kept off the command line: ``--db
env:NAME``, ``--db @FILE``, ``$SQLFEED_DB``, for every URL option.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pyarrow.parquet as pq
import pytest

from sqlfeed import connect
from sqlfeed.dialects import EngineError, InvalidArgumentError, SqlfeedError
from sqlfeed.dispatch import open_queue
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.io import driver_message, redact_url
from sqlfeed.urlsecrets import remember_secrets, scrub
from tests.conftest import get_engine
from tests.helpers.cli import Run, run_cli
from tests.helpers.engines import Engine
from tests.security.roles import database_user

SPECIALS = "/@:?#%"


def _password(special: str) -> str:
    # Distinct fragments on each side of the special characters: a password cut at one of
    # them (the rest taken for the host) still shows as a leak.
    return f"Kq7{special}Zw0rd9"


PASSWORDS = [_password(c) for c in SPECIALS] + [_password(SPECIALS)]
ALL = _password(SPECIALS)
FRAGMENTS = ("Kq7", "Zw0rd9")


def leaked(text: str, password: str = ALL) -> list[str]:
    """The forms of ``password`` (or of its fragments) that ``text`` shows."""
    forms = {password, quote(password, safe=""), quote_plus(password), *FRAGMENTS}
    return sorted(form for form in forms if form in text)


def url_forms(password: str, scheme: str, host: str = "127.0.0.1:1", db: str = "db") -> list[str]:
    """Every place a URL of ``scheme`` carries ``password``."""
    enc = quote(password, safe="")
    forms = [
        f"{scheme}://me:{enc}@{host}/{db}",  # user information, percent-encoded
        f"{scheme}://:{enc}@{host}/{db}",  # a password without a user
        f"{scheme}://me@{host}/{db}?password={enc}",  # an option
        f"{scheme}://me@{host}/{db}?connect_timeout=5&password={enc}",
    ]
    if "@" not in password:  # SQLAlchemy reads these characters as written too
        forms.append(f"{scheme}://me:{password}@{host}/{db}")
    return forms


# -- the URL shown: parsed, its secrets hidden ------------------------------------------


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql", "oracle", "unknown"])
def test_redact_url_hides_the_password_in_every_place(password: str, scheme: str) -> None:
    for url in url_forms(password, scheme):
        shown = redact_url(url)
        assert not leaked(shown, password), (url, shown)
        assert "***" in shown, (url, shown)
        assert "127.0.0.1:1" in shown, (url, shown)


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_with_an_unencoded_at_is_hidden_whole(password: str) -> None:
    url = f"mysql+pymysql://me:{password}@127.0.0.1:3306/db"
    assert not leaked(redact_url(url), password), redact_url(url)


@pytest.mark.parametrize(
    "url",
    [
        f"iceberg://catalog/ns.table?token={quote(ALL, safe='')}&uri=http://catalog:8181",
        f"iceberg:///metadata/v1.metadata.json?credential={quote(ALL, safe='')}",
        f"iceberg://catalog/ns.table?s3.secret-access-key={quote(ALL, safe='')}",
        f"dataset:///data?token={quote(ALL, safe='')}",
        f"/a/local/path?sas_token={quote(ALL, safe='')}",
    ],
)
def test_secret_options_of_other_urls_are_hidden(url: str) -> None:
    shown = redact_url(url)
    assert not leaked(shown), shown
    assert "***" in shown, shown


@pytest.mark.parametrize(
    "url",
    [
        "duckdb://",
        "duckdb:///data/file.duckdb",
        "sqlite:////tmp/a file@2.db",
        "dataset:///shards",
        "iceberg://catalog/ns.table?uri=http://catalog:8181&snapshot=3",
        "delta:///tables/events?version=2",
        "postgresql+psycopg://me@db.example:5432/x?sslmode=require",
        "data/file.parquet",
    ],
)
def test_a_url_without_secrets_is_shown_as_given(url: str) -> None:
    assert redact_url(url) == url


def test_driver_messages_hide_the_secrets_of_the_urls_seen() -> None:
    remember_secrets(f"postgresql://me:{quote(ALL, safe='')}@h/db")
    err = RuntimeError(f'invalid dsn: missing "=" after "{ALL}" in connection info string')
    assert not leaked(driver_message(err))
    assert not leaked(scrub(f"password={quote(ALL, safe='')} rejected"))


@pytest.mark.parametrize(
    "url",
    [
        f"iceberg://catalog/ns.table?token={quote(ALL, safe='')}&snapshot=notanumber",
        f"iceberg://catalog/ns.table?token={quote(ALL, safe='')}&nosuchoption=1",
        f"iceberg://catalog?token={quote(ALL, safe='')}",
        f"delta:///no/such/folder?token={quote(ALL, safe='')}",
    ],
)
def test_lakehouse_url_errors_hide_the_secret_options(url: str) -> None:
    with pytest.raises(SqlfeedError) as refused:
        connect(url)
    assert not leaked(str(refused.value)), str(refused.value)


def test_a_bad_queue_url_hides_its_password() -> None:
    with pytest.raises(SqlfeedError) as refused:
        open_queue(f"postgresql+nosuchdriver://me:{quote(ALL, safe='')}@127.0.0.1:1/db")
    assert not leaked(str(refused.value)), str(refused.value)


def test_an_unencoded_at_in_a_password_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        connect(f"postgresql+psycopg://me:{ALL}@127.0.0.1:5432/db")
    message = str(refused.value)
    assert "%40" in message, message
    assert not leaked(message), message


# -- messages: unreachable servers, bad authentication, usage errors ---------------------


def _commands(url: str, tmp: Path) -> list[list[str]]:
    """Every command with ``url`` in each of its URL options (the others reachable)."""
    sql = "SELECT 1 AS a"
    queue = f"sqlite:///{tmp / 'q.db'}"
    return [
        ["count", "--db", url, sql],
        ["sample", "--db", url, sql],
        ["plan", "--db", url, sql],
        ["plan", "--db", url, "--strategy", "materialize", sql],
        ["export", "--db", url, "--out", str(tmp / "o.parquet"), sql],
        ["export", "--db", "duckdb://", "--into", "t", "--into-db", url, sql],
        ["export", "--db", "duckdb://", "--into", "t", "--queue", url, "--job", "j", sql],
        ["stats", "--db", url, "--out", str(tmp / "s.json"), sql],
        ["job", "create", "--queue", queue, "--job", "j", "--db", url, sql],
        ["job", "create", "--queue", url, "--job", "j", "--db", "duckdb://", sql],
        ["job", "status", "--queue", url, "--job", "j"],
        ["job", "delete", "--queue", url, "--job", "j"],
        ["worker", "--queue", url, "--job", "j", "--db", "duckdb://", "--start-wait", "0"],
        ["worker", "--queue", queue, "--job", "j", "--db", url, "--start-wait", "0.2"],
        ["scratch", "list", "--db", url],
        ["reshard", "--db", url, "--out", str(tmp / "shards"), "--shuffle", "1", sql],
        ["train", "--db", url, "--label", "a", "--out", str(tmp / "m"), sql],
        ["predict", "--db", url, "--model", str(tmp / "m"), "--into", "p", sql],
        ["sql", "--db", url, "SELECT 1 AS a TO TRAIN DNNClassifier LABEL a INTO m"],
    ]


def _assert_one_clean_line(run: Run, password: str = ALL) -> None:
    assert run.code != 0
    lines = run.err.strip().splitlines()
    assert lines, run.err
    assert lines[-1].startswith("sqlfeed: "), run.err
    assert "Traceback" not in run.err, run.err
    assert "internal error" not in run.err, run.err
    assert not leaked(run.out + run.err, password), run.err


@pytest.mark.slow  # the queue's commands retry an unreachable server for a few seconds
@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql"])
@pytest.mark.parametrize("form", range(4))
def test_every_command_hides_the_password_of_an_unreachable_server(
    form: int, scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The message, not the patience: the queue gives up on the unreachable server at once
    # (its retries, 3 s a command, are tested in tests/dispatch).
    monkeypatch.setattr(SQLQueue, "retry_seconds", 0.0)
    for args in _commands(url_forms(ALL, scheme)[form], tmp_path):
        _assert_one_clean_line(run_cli(args))


@pytest.mark.parametrize("password", PASSWORDS)
def test_each_special_character_stays_hidden_in_cli_errors(password: str) -> None:
    for url in url_forms(password, "postgresql+psycopg"):
        _assert_one_clean_line(run_cli(["count", "--db", url, "SELECT 1 AS a"]), password)
    unencoded = f"mysql+pymysql://me:{password}@127.0.0.1:1/db"  # refused, or unreachable
    _assert_one_clean_line(run_cli(["count", "--db", unencoded, "SELECT 1 AS a"]), password)


@pytest.mark.parametrize("password", PASSWORDS)
def test_each_special_character_stays_hidden_in_exception_messages(password: str) -> None:
    for url in url_forms(password, "postgresql+psycopg"):
        with pytest.raises(SqlfeedError) as failed:
            connect(url)
        assert not leaked(str(failed.value), password), str(failed.value)


@pytest.mark.parametrize("command", ["count", "job status"])
def test_an_option_the_driver_refuses_is_one_line(command: str) -> None:
    """A read's --db and a queue's URL (the queue's first connection was a TypeError)."""
    url = f"mysql+pymysql://me:{quote(ALL, safe='')}@127.0.0.1:1/db?sslmode=x"
    if command == "count":
        run = run_cli(["count", "--db", url, "SELECT 1"])
    else:
        run = run_cli(["job", "status", "--queue", url, "--job", "j"])
    _assert_one_clean_line(run)
    assert run.code == 2, run.err
    assert "the driver refuses its options" in run.err, run.err
    assert "sslmode" in run.err, run.err


def test_queue_exceptions_hide_the_password() -> None:
    for url in url_forms(ALL, "postgresql+psycopg"):  # each retried for a few seconds
        with pytest.raises(SqlfeedError) as failed:
            open_queue(url).job("j")
        assert not leaked(str(failed.value)), str(failed.value)


def test_bad_authentication_hides_the_password() -> None:
    mysql = get_engine("mysql")
    with database_user(mysql, ALL) as url:
        wrong = url.replace(quote(ALL, safe=""), quote(ALL + "x", safe=""))
        run = run_cli(["count", "--db", wrong, "SELECT 1 AS a"])
        _assert_one_clean_line(run)
        assert "Access denied" in run.err, run.err
        right = run_cli(["count", "--db", url, "SELECT 1 AS a"])
        assert (right.code, right.out.strip()) == (0, "1"), right.err
    postgres = get_engine("postgres")
    with database_user(postgres, ALL) as url:
        nobody = url.replace("sqlfeed_u_", "sqlfeed_nobody_")
        run = run_cli(["count", "--db", nobody, "SELECT 1 AS a"])
        _assert_one_clean_line(run)
        assert "does not exist" in run.err, run.err


# -- artifacts: everything sqlfeed writes, with a password that connects ------------------


def _server_urls(engine: Engine) -> Iterator[tuple[str, str]]:
    """URLs of ``engine`` holding ALL in each place the server accepts it; (form, URL)."""
    with database_user(engine, ALL, writes=True) as url:
        yield "user", url
        if engine.name == "postgres":
            user, _, rest = url.partition("://")[2].partition(":")
            host = rest.partition("@")[2]
            option = f"postgresql+psycopg://{user}@{host}?password={quote(ALL, safe='')}"
            yield "option", option


def _artifact_commands(url: str, engine: Engine, tmp: Path) -> dict[str, list[str]]:
    table = f"{engine.schema}.src" if engine.name == "postgres" else "src"
    sql = f"SELECT id, k, x, y FROM {table}"
    queue = f"sqlite:///{tmp / 'q.db'}"
    into = f"{engine.schema}.copied" if engine.name == "postgres" else "copied"
    return {
        "plan": ["plan", "--db", url, "--format", "json", "-m", "4", sql],
        "count": ["count", "--db", url, sql],
        "sample": ["sample", "--db", url, "--format", "json", sql],
        "export": ["export", "--db", url, "--out", str(tmp / "out.parquet"), "-m", "3", sql],
        "export folder": ["export", "--db", url, "--out", str(tmp / "folder"), "-m", "3", sql],
        "export into": [
            *("export", "--db", url, "--into", into, "--queue", queue, "--job", "x"),
            *("--key", "id", "-m", "3", sql),
        ],
        "job create": ["job", "create", "--queue", queue, "--job", "j", "--db", url, sql],
        "worker": ["worker", "--queue", queue, "--job", "j", "--db", url, "--out", str(tmp / "w")],
        "job status": ["job", "status", "--queue", queue, "--job", "j", "--format", "json"],
        "stats": [
            *("stats", "--db", url, "--out", str(tmp / "s.json"), "--html", str(tmp / "s.html")),
            sql,
        ],
        "reshard": ["reshard", "--db", url, "--out", str(tmp / "shards"), "--shuffle", "1", sql],
        "train": [
            *("train", "--db", url, "--label", "y", "--skip", "id", "--family", "gbdt"),
            *("--trees", "2", "--out", str(tmp / "model"), sql),
        ],
        "predict": [
            *("predict", "--db", url, "--model", str(tmp / "model"), "--into", f"{into}_p"),
            *("--queue", queue, "--job", "p", sql),
        ],
        "materialize": [
            *("plan", "--db", url, "--strategy", "materialize", "--scratch", engine.schema),
            sql,
        ],
        "scratch": ["scratch", "list", "--db", url, "--schema", engine.schema],
    }


def _written_tables(engine: Engine) -> list[str]:
    """Every row of every table in the engine's test schema, as text."""
    if engine.name == "postgres":
        names = engine.rows(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            f"WHERE table_schema = '{engine.schema}'"
        )
    else:
        names = engine.rows(
            "SELECT table_name FROM information_schema.tables "
            f"WHERE table_schema = '{engine.schema}'"
        )
    return [f"{name}: {engine.rows(f'SELECT * FROM {name}')}" for (name,) in names]


def _files_holding(folder: Path, password: str) -> list[str]:
    forms = [f.encode() for f in (password, quote(password, safe=""), *FRAGMENTS)]
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and any(form in path.read_bytes() for form in forms)
    ]


@pytest.mark.slow  # trains a model and runs a worker
@pytest.mark.parametrize("engine_name", ["postgres", "mysql"])
def test_no_artifact_holds_the_password(
    engine_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = get_engine(engine_name)
    engine.create_table(
        "src",
        [("id", "int"), ("k", "int"), ("x", "float"), ("y", "int")],
        [(i, i % 3, i * 1.5, i % 2) for i in range(120)],
    )
    caplog.set_level(logging.DEBUG)
    before = set(_scratch_tables(engine))
    try:
        _check_artifacts(engine, tmp_path)
    finally:  # the materialize plan keeps its scratch table (a plan's partitions read it)
        for name in set(_scratch_tables(engine)) - before:
            engine.execute(f"DROP TABLE IF EXISTS {engine.qualify(name)}")
        engine.execute(f"DROP TABLE IF EXISTS {engine.qualify('src')}")
    assert not leaked(caplog.text)


def _scratch_tables(engine: Engine) -> list[str]:
    rows = engine.rows(
        "SELECT table_name FROM information_schema.tables "
        f"WHERE table_schema = '{engine.schema}' AND table_name LIKE 'sqlfeed%%'"
    )
    return [name for (name,) in rows]


def _check_artifacts(engine: Engine, tmp_path: Path) -> None:
    for form, url in _server_urls(engine):
        out = tmp_path / form
        out.mkdir()
        for name, args in _artifact_commands(url, engine, out).items():
            run = run_cli(args)
            assert run.code == 0, (form, name, run.err)
            assert not leaked(run.out + run.err), (form, name, run.out, run.err)
        assert not _files_holding(out, ALL), form
        for parquet in out.rglob("*.parquet"):
            metadata = pq.read_metadata(parquet).metadata or {}
            assert not leaked(repr(metadata)), parquet
        with sqlite3.connect(out / "q.db") as queue:
            tables = queue.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in tables.fetchall():
                rows = queue.execute(f'SELECT * FROM "{table}"').fetchall()
                assert not leaked(repr(rows)), table
        plan = json.loads(run_cli(_artifact_commands(url, engine, out)["plan"]).out)
        assert not leaked(json.dumps(plan))
        assert not leaked(repr(_written_tables(engine)))
        for table in ("copied", "copied_p"):
            engine.execute(f"DROP TABLE IF EXISTS {engine.qualify(table)}")


# -- a URL kept off the command line: env:NAME, @FILE, $SQLFEED_DB ----------------------


@pytest.fixture
def database(tmp_path: Path) -> str:
    """A SQLite database of 3 rows: its URL."""
    path = tmp_path / "data.db"
    with sqlite3.connect(path) as made:
        made.execute("CREATE TABLE t (a INTEGER)")
        made.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    return f"sqlite:///{path}"


def test_db_from_an_environment_variable(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_FEED_DB", database)
    run = run_cli(["count", "--db", "env:MY_FEED_DB", "SELECT a FROM t"])
    assert (run.code, run.out.strip()) == (0, "3"), run.err


def test_db_from_a_file(database: str, tmp_path: Path) -> None:
    (tmp_path / "db.url").write_text(f"\n{database}\n", encoding="utf-8")
    run = run_cli(["count", "--db", f"@{tmp_path / 'db.url'}", "SELECT a FROM t"])
    assert (run.code, run.out.strip()) == (0, "3"), run.err


def test_sqlfeed_db_is_the_default_db(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLFEED_DB", database)
    run = run_cli(["count", "SELECT a FROM t"])
    assert (run.code, run.out.strip()) == (0, "3"), run.err
    monkeypatch.setenv("SQLFEED_DB", "env:MY_FEED_DB")
    monkeypatch.setenv("MY_FEED_DB", database)
    run = run_cli(["count", "SELECT a FROM t"])
    assert (run.code, run.out.strip()) == (0, "3"), run.err


def test_dialect_is_used_instead_of_sqlfeed_db(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLFEED_DB", "postgresql+psycopg://me:pw@127.0.0.1:1/db")
    run = run_cli(["plan", "--dialect", "mysql", "-m", "2", "--format", "json", "SELECT 1 AS a"])
    assert run.code == 0, run.err
    assert json.loads(run.out)["dialect"] == "mysql"


def test_every_url_option_reads_a_variable(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEED_IN", database)
    monkeypatch.setenv("FEED_OUT", f"sqlite:///{tmp_path / 'out.db'}")
    monkeypatch.setenv("FEED_QUEUE", f"sqlite:///{tmp_path / 'q.db'}")
    run = run_cli(
        [
            *("export", "--db", "env:FEED_IN", "--into", "copy", "--into-db", "env:FEED_OUT"),
            *("--queue", "env:FEED_QUEUE", "--job", "j", "SELECT a FROM t"),
        ]
    )
    assert run.code == 0, run.err
    with sqlite3.connect(tmp_path / "out.db") as out:
        assert out.execute("SELECT COUNT(*) FROM copy").fetchone() == (3,)
    status = run_cli(["job", "status", "--queue", "env:FEED_QUEUE", "--job", "j"])
    assert status.code == 0, status.err


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("env:NO_SUCH_FEED_VARIABLE", "NO_SUCH_FEED_VARIABLE is not set"),
        ("env:", "not set"),
        ("@/no/such/file.url", "cannot read the URL from /no/such/file.url"),
    ],
)
def test_a_missing_variable_or_file_is_one_line(value: str, says: str) -> None:
    for args in (
        ["count", "--db", value, "SELECT 1 AS a"],
        ["job", "status", "--queue", value, "--job", "j"],
        ["export", "--db", "duckdb://", "--into", "t", "--into-db", value, "SELECT 1 AS a"],
    ):
        run = run_cli(args)
        assert run.code == 2, run.err
        assert says in run.err, run.err
        assert len(run.err.strip().splitlines()) == 1, run.err


def test_an_empty_url_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.url").write_text("\n", encoding="utf-8")
    run = run_cli(["count", "--db", f"@{tmp_path / 'empty.url'}", "SELECT 1 AS a"])
    assert run.code == 2, run.err
    assert "holds no URL" in run.err, run.err


def test_exception_of_a_bad_env_url_hides_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEED_DB", f"postgres://me:{quote(ALL, safe='')}@127.0.0.1:1/db")
    run = run_cli(["count", "--db", "env:FEED_DB", "SELECT 1 AS a"])
    _assert_one_clean_line(run)
    assert "did you mean postgresql+psycopg://me:***@" in run.err, run.err
    with pytest.raises(EngineError):
        connect(f"postgresql+psycopg://me:{quote(ALL, safe='')}@127.0.0.1:1/db")
