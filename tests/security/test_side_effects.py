"""Functions that write or reach outside the database are refused in reads (issue #36 item 7).

Each dialect lists them (:attr:`Dialect.SIDE_EFFECT_FUNCTIONS`: PostgreSQL's dblink
family, large-object writers, server files; MySQL's LOAD_FILE; SQLite's load_extension and
writefile; DuckDB's functions that run SQL text or write the database file): a query
calling one, wherever (a projection, a FROM, a WHERE, a CTE, schema-qualified, in capitals),
is refused before anything runs, unless the user opts in (``--allow-side-effects``,
``parse(..., allow_side_effects=True)``), and then it runs: ``lo_from_bytea`` on
PostgreSQL makes its large objects only with the flag. ``SELECT ... INTO OUTFILE`` is
refused even then (a query that writes a file returns no rows).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import pytest

import sqlfeed
from sqlfeed.dialects import UnsafeQueryError, get_dialect
from sqlfeed.dialects.effects import side_effect
from sqlfeed.sql import parse
from tests.helpers.cli import Run, run_cli
from tests.helpers.engines import ENGINES
from tests.security.canary import Canary, canary

__all__ = ["canary"]  # the fixture, used by name

FAMILIES = {
    "dblink*": [
        "dblink",
        "dblink_exec",
        "dblink_connect",
        "dblink_connect_u",
        "dblink_open",
        "dblink_fetch",
        "dblink_send_query",
        "dblink_get_result",
        "dblink_disconnect",
    ]
}
"""Members of each family entry, each checked."""

NATIVE = ("postgres", "mysql", "sqlite", "duckdb")


def _listed(dialect: str) -> list[str]:
    names: list[str] = []
    for entry in get_dialect(dialect).SIDE_EFFECT_FUNCTIONS:
        names.extend(FAMILIES.get(entry, [entry]))
    return names


CALLS = [(d, f) for d in NATIVE for f in _listed(d)]


def _forms(dialect: str, function: str) -> list[str]:
    forms = [
        f"SELECT {function}(1) AS x",
        f"SELECT a FROM t WHERE {function}(1) IS NOT NULL",
        f"WITH c AS (SELECT {function.upper()}(1) AS x) SELECT x FROM c",
        f"SELECT a FROM t WHERE a IN (SELECT {function}(a) FROM u)",
    ]
    if dialect == "postgres":
        forms += [
            f"SELECT x FROM {function}('a', 'b') AS r(x)",
            f"SELECT pg_catalog.{function}(1)",
            f"SELECT x FROM t, LATERAL {function}(t.a) AS r(x)",
        ]
    if dialect == "duckdb":
        forms += [f"SELECT * FROM {function}('a')", f"SELECT main.{function}(1)"]
    return forms


@pytest.mark.parametrize(("dialect", "function"), CALLS)
def test_every_listed_function_is_refused_wherever_it_is_called(
    dialect: str, function: str
) -> None:
    for sql in _forms(dialect, function):
        with pytest.raises(UnsafeQueryError) as caught:
            parse(sql, dialect)
        message = str(caught.value)
        assert f"calls {function}()" in message, (sql, message)
        assert "allow_side_effects=True (--allow-side-effects)" in message
        assert parse(sql, dialect, allow_side_effects=True).allow_side_effects


@pytest.mark.parametrize(
    ("dialect", "sql"),
    [
        ("postgres", "SELECT lo_get(1)"),  # reads a large object: no side effect
        ("postgres", "SELECT loread(lo_open_x(1), 10)"),
        ("postgres", "SELECT dbl(1)"),
        ("mysql", "SELECT LENGTH(a) FROM t"),
        ("sqlite", "SELECT readfile_x(1)"),
        ("duckdb", "SELECT * FROM read_parquet('f.parquet')"),  # DuckDB reads files: its job
    ],
)
def test_functions_without_side_effects_are_not_refused(dialect: str, sql: str) -> None:
    assert not parse(sql, dialect).allow_side_effects


def test_each_native_engine_has_its_own_table() -> None:
    assert side_effect(get_dialect("postgres").SIDE_EFFECT_FUNCTIONS, "lo_create")
    assert side_effect(get_dialect("postgres").SIDE_EFFECT_FUNCTIONS, "load_extension") is None
    assert side_effect(get_dialect("sqlite").SIDE_EFFECT_FUNCTIONS, "load_extension")
    assert side_effect(get_dialect("mariadb").SIDE_EFFECT_FUNCTIONS, "load_file")
    assert side_effect(get_dialect("duckdb").SIDE_EFFECT_FUNCTIONS, "query")
    # an engine read without a table of its own refuses every listed function
    for name in ("dblink_exec", "load_file", "writefile", "checkpoint", "xp_cmdshell"):
        assert side_effect(get_dialect("trino").SIDE_EFFECT_FUNCTIONS, name), name


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t INTO OUTFILE '/tmp/x'",
        "SELECT a INTO DUMPFILE '/tmp/x' FROM t",
        "SELECT a FROM t INTO @v",
    ],
)
def test_select_into_a_file_is_refused_even_with_side_effects_allowed(sql: str) -> None:
    for allowed in (False, True):
        with pytest.raises(UnsafeQueryError, match="INTO"):
            parse(sql, "mysql", allow_side_effects=allowed)


# -- on the engines: refused by default, run with the flag -------------------------------------


def _refused(run: Run, function: str) -> None:
    assert run.code == 2, (run.code, run.out, run.err)
    line = run.err.strip()
    assert "\n" not in line, line
    assert f"calls {function}()" in line, line
    assert "--allow-side-effects" in line, line


REFUSED = {
    "postgres": [
        ("dblink", "SELECT x FROM dblink('dbname=test', 'DELETE FROM {t}') AS r(x int)"),
        ("dblink_exec", "SELECT dblink_exec('dbname=test', 'DELETE FROM {t}') AS x"),
        ("lo_create", "SELECT id, lo_create(0) AS o FROM {t}"),
        ("lo_from_bytea", "SELECT id, lo_from_bytea(0, 'x') AS o FROM {t}"),
        ("pg_read_file", "SELECT pg_read_file('/etc/hostname') AS x"),
        ("pg_file_write", "SELECT pg_file_write('/tmp/x', 'y', false) AS x"),
    ],
    "mysql": [
        ("load_file", "SELECT LOAD_FILE('/etc/hostname') AS x"),
        ("sleep", "SELECT id, SLEEP(0) AS s FROM {t}"),
        ("get_lock", "SELECT GET_LOCK('sqlfeed_x', 0) AS x"),
    ],
    "sqlite": [
        ("load_extension", "SELECT load_extension('/tmp/nothing') AS x"),
        ("writefile", "SELECT writefile('/tmp/x', v) AS x FROM {t}"),
    ],
    "duckdb": [
        ("query", "SELECT * FROM query('SELECT * FROM {t}')"),
        ("checkpoint", "SELECT * FROM checkpoint()"),
        ("setseed", "SELECT setseed(0.5) AS x"),
    ],
}  # fmt: skip
"""Per engine: calls refused (function, SQL over the canary ``{t}``)."""


@pytest.mark.parametrize("engine_name", ENGINES)
def test_side_effect_functions_are_refused_before_anything_runs(canary: Canary) -> None:
    for function, sql in REFUSED[canary.engine]:
        for command in (["sample", "--rows", "5"], ["count"], ["export", "--out", "o.parquet"]):
            run = run_cli([*command, "--db", canary.url, sql.format(t=canary.name)])
            _refused(run, function)
    assert canary.intact()


ALLOWED = {
    "postgres": "SELECT pg_sleep(0) IS NULL AS slept",
    "mysql": "SELECT LOAD_FILE('/etc/hostname') IS NULL AS x, SLEEP(0) AS s",
    "sqlite": "SELECT load_extension('/tmp/sqlfeed-no-such-extension') AS x",
    "duckdb": "SELECT * FROM query('SELECT 42 AS answer')",
}
"""Per engine: a call the flag lets through to the engine."""


@pytest.mark.parametrize("engine_name", ENGINES)
def test_the_flag_lets_the_call_reach_the_engine(canary: Canary) -> None:
    sql = ALLOWED[canary.engine]
    refused = run_cli(["sample", "--db", canary.url, sql])
    assert refused.code == 2, refused.err
    run = run_cli(["sample", "--db", canary.url, "--allow-side-effects", "--format", "csv", sql])
    if canary.engine == "sqlite":  # Python's sqlite3 keeps extension loading off
        assert run.code == 1, (run.code, run.err)
        assert "engine error" in run.err, run.err
        assert "not authorized" in run.err, run.err
    else:
        assert run.code == 0, run.err
    if canary.engine == "duckdb":
        assert run.out.splitlines()[1:] == ["42"], run.out


LO_SQL = "SELECT id, lo_from_bytea(0, '{payload}'::bytea) IS NOT NULL AS made FROM {t}"
"""Makes a large object per row read."""


@pytest.mark.parametrize("engine_name", ["postgres"])
def test_lo_from_bytea_makes_large_objects_only_with_the_flag(canary: Canary) -> None:
    payload = f"sqlfeed-{uuid.uuid4().hex}"
    sql = LO_SQL.format(payload=payload, t=canary.name)
    made = f"SELECT loid FROM pg_largeobject WHERE data = '{payload}'::bytea"
    _refused(run_cli(["sample", "--db", canary.url, "--rows", "10", sql]), "lo_from_bytea")
    assert canary.rows(made) == []
    run = run_cli(["sample", "--db", canary.url, "--rows", "10", "--allow-side-effects", sql])
    try:
        assert run.code == 0, run.err
        assert len(canary.rows(made)) == 3  # one per row read
    finally:
        canary.execute(f"SELECT lo_unlink(loid) FROM ({made}) AS m")


def test_a_parsed_query_carries_the_permission_into_plan_and_feeder(tmp_path: Path) -> None:
    duckdb.connect(str(tmp_path / "f.duckdb")).close()
    url = f"duckdb:///{tmp_path / 'f.duckdb'}"
    sql = "SELECT answer FROM query('SELECT range AS answer FROM range(10)')"
    with pytest.raises(UnsafeQueryError, match=r"calls query\(\)"):
        sqlfeed.plan(sql, url, partitions=2)
    allowed = parse(sql, "duckdb", allow_side_effects=True)
    planned = sqlfeed.plan(allowed, url, partitions=2)
    feeder = sqlfeed.Feeder(planned, url, batch_size=4)
    rows = sorted(v.as_py() for batch in feeder for v in batch["answer"])
    assert rows == list(range(10))
