"""Bad input: exit code 2, one line on stderr that says what is wrong, nothing executed.

The database URL in these tests points at a port nothing listens on: had sqlfeed tried to
run anything, it would have failed to connect (exit code 1). Exit code 2 with the input's
own error proves the input was refused before any connection was made. A second test
runs the destructive inputs against a real DuckDB file and checks that its table survives.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.cli_helpers import run_cli

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:9/test"

BAD_SQL = {
    "drop": ("DROP TABLE t", "not a query"),
    "insert": ("INSERT INTO t VALUES (1)", "not a query"),
    "update": ("UPDATE t SET a = 1", "not a query"),
    "delete": ("DELETE FROM t WHERE a = 1", "not a query"),
    "create": ("CREATE TABLE x (a INT)", "not a query"),
    "create_as": ("CREATE TABLE x AS SELECT * FROM t", "not a query"),
    "alter": ("ALTER TABLE t ADD COLUMN c INT", "not a query"),
    "truncate": ("TRUNCATE t", "not a query"),
    "grant": ("GRANT SELECT ON t TO bob", "not a query"),
    "copy": ("COPY t TO '/tmp/out.csv'", "not a query"),
    "merge": ("MERGE INTO t USING u ON t.a = u.a WHEN MATCHED THEN DELETE", "not a query"),
    "set": ("SET search_path TO other", "not a query"),
    "call": ("CALL do_things()", "not a query"),
    "two_statements": ("SELECT 1; DROP TABLE t", "exactly one statement"),
    "comment_hides_statement": ("SELECT a FROM t /* ; */; DELETE FROM t", "exactly one statement"),
    "line_comment_then_statement": ("SELECT a FROM t -- x\n; DROP TABLE t", "exactly one"),
    "data_modifying_cte": ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE"),
    "insert_cte": ("WITH i AS (INSERT INTO t VALUES (1) RETURNING a) SELECT a FROM i", "INSERT"),
    "select_into": ("SELECT * INTO new_t FROM t", "INTO"),
    "for_update": ("SELECT * FROM t FOR UPDATE", "locks"),
    "side_effect_function": ("SELECT nextval('seq') AS n", "side effects"),
    "empty": ("", "empty"),
    "whitespace": ("   \n  ", "empty"),
    "only_comment": ("-- nothing here", "empty"),
    "syntax_error": ("SELEC a FROM t", "line 1, column"),
    "syntax_error_line_2": ("SELECT a\nFROM t WHERE (", "line 2"),
    "unterminated_string": ("SELECT 'abc FROM t", "cannot parse"),
    "unstable_limit": ("SELECT a FROM t LIMIT 10", "LIMIT"),
    "unstable_partial_order": ("SELECT a, b FROM t ORDER BY a LIMIT 10", "tie"),
    "unstable_random": ("SELECT a, random() AS r FROM t", "different value"),
    "unstable_now": ("SELECT a FROM t WHERE ts < now()", "different value"),
    "unstable_tablesample": ("SELECT a FROM t TABLESAMPLE BERNOULLI (10)", "TABLESAMPLE"),
    "unstable_string_agg": ("SELECT g, string_agg(a, ',') AS s FROM t GROUP BY g", "ORDER BY"),
}


def assert_one_line_error(run_code: int, err: str, out: str, expected: str) -> None:
    assert run_code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sqlfeed: error: ")
    assert "Traceback" not in err
    assert expected.lower() in lines[0].lower()
    assert out == ""


@pytest.mark.parametrize("name", sorted(BAD_SQL))
def test_bad_sql_is_refused_before_connecting(name: str) -> None:
    sql, expected = BAD_SQL[name]
    run = run_cli(["plan", "--db", UNREACHABLE, sql])
    assert_one_line_error(run.code, run.err, run.out, expected)


BAD_ARGUMENTS = {
    "unknown_dialect": (["plan", "--dialect", "postgress", "SELECT a FROM t"], "did you mean"),
    "unknown_url_scheme": (["count", "--db", "nosuchdb://x/y", "SELECT 1"], "unknown dialect"),
    "not_a_url": (["count", "--db", "just-a-name", "SELECT 1"], "not a database URL"),
    "zero_partitions": (["plan", "-m", "0", "SELECT a FROM t"], ">= 1"),
    "negative_partitions": (["plan", "-m", "-3", "SELECT a FROM t"], ">= 1"),
    "key_not_in_output": (["plan", "--key", "nope", "SELECT a, b FROM t"], "not in the query"),
    "key_ambiguous": (["plan", "--key", "a", "SELECT a, b AS a FROM t"], "names 2 output"),
    "target_rows_without_db": (["plan", "--target-rows", "100", "SELECT a FROM t"], "needs --db"),
    "zero_workers": (["plan", "--workers", "0", "SELECT a FROM t"], ">= 1"),
    "missing_sql_file": (["plan", "@/nonexistent/query.sql"], "cannot read SQL"),
    "unknown_strategy": (["plan", "--strategy", "magic", "SELECT a FROM t"], "invalid choice"),
    "missing_sql": (["plan"], "required"),
    "unknown_command": (["fly"], "invalid choice"),
    "sample_bad_method": (["sample", "--db", "duckdb://", "--method", "x", "SELECT 1"], "choice"),
    "sample_hash_without_fraction": (
        ["sample", "--db", "duckdb://", "--method", "hash", "SELECT 1 AS a"],
        "needs fraction",
    ),
    "sample_bernoulli_on_mysql": (
        [
            "sample",
            "--db",
            "mysql+pymysql://root@127.0.0.1:9/x",
            "--method",
            "bernoulli",
            "--fraction",
            "0.1",
            "SELECT a FROM t",
        ],
        "method='hash'",
    ),
    "export_without_out": (["export", "--db", "duckdb://", "SELECT 1"], "--out"),
    "export_bad_readers": (
        ["export", "--db", "duckdb://", "--out", "/tmp/x.parquet", "--readers", "0", "SELECT 1"],
        "--readers",
    ),
    "export_unstable": (
        ["export", "--db", UNREACHABLE, "--out", "/tmp/x.parquet", "SELECT a FROM t LIMIT 3"],
        "LIMIT",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_get_a_one_line_error(name: str) -> None:
    args, expected = BAD_ARGUMENTS[name]
    run = run_cli(args)
    assert_one_line_error(run.code, run.err, run.out, expected)


def test_key_not_in_output_is_refused_before_connecting() -> None:
    run = run_cli(["plan", "--db", UNREACHABLE, "--key", "zz", "SELECT a, b FROM t"])
    assert_one_line_error(run.code, run.err, run.out, "not in the query")


@pytest.mark.parametrize(
    "name", ["drop", "delete", "truncate", "two_statements", "data_modifying_cte", "create_as"]
)
def test_destructive_sql_leaves_a_real_database_untouched(tmp_path: Path, name: str) -> None:
    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS a FROM range(5)")
    sql = BAD_SQL[name][0]
    for command in (["count"], ["plan"]):
        run = run_cli([*command, "--db", f"duckdb:///{path}", sql])
        assert run.code == 2, run.err
    with duckdb.connect(str(path)) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (5,)
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert tables == {"t"}


def test_engine_failure_is_exit_code_1_with_one_line(tmp_path: Path) -> None:
    run = run_cli(["count", "--db", f"duckdb:///{tmp_path / 'x.duckdb'}", "SELECT a FROM nope"])
    assert run.code == 1
    assert len(run.err.strip().splitlines()) == 1
    assert run.err.startswith("sqlfeed: engine error: ")
    assert "nope" in run.err


def test_unreachable_server_is_exit_code_1_with_one_line() -> None:
    run = run_cli(["count", "--db", UNREACHABLE, "SELECT 1 AS one"])
    assert run.code == 1
    assert len(run.err.strip().splitlines()) == 1
    assert "cannot connect" in run.err
