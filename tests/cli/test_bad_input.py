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

from sqlfeed.cli.checks import cli_wording
from tests.helpers.cli import run_cli

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
    "misspelt_select": (
        "SELEC * FROM t",
        "'SELEC' is not a keyword: did you mean SELECT? at line 1, column 1",
    ),
    "misspelt_with": (
        "WTIH x AS (SELECT 1) SELECT * FROM x",
        "did you mean WITH? at line 1, column 1",
    ),
    "misspelt_from": (
        "SELECT a\nFORM t",
        "'FORM' is not a keyword: did you mean FROM? at line 2, column 1",
    ),
    "misspelt_where": (
        "SELECT a FROM t WHER a > 1",
        "'WHER' is not a keyword: did you mean WHERE?",
    ),
    "syntax_error_line_2": ("SELECT a\nFROM t WHERE (", "line 2"),
    "unterminated_string": ("SELECT 'abc FROM t", "cannot parse"),
    # An ORDER BY that may tie is completed (or, with --strict, refused once the catalog's
    # keys are known); what no tie-breaker fixes is refused before connecting.
    "unstable_order_by_random": ("SELECT a FROM t ORDER BY random() LIMIT 10", "different value"),
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
        "--method hash needs --fraction",
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
        "use --method hash",
    ),
    "export_without_out": (["export", "--db", "duckdb://", "SELECT 1"], "--out"),
    "export_bad_readers": (
        ["export", "--db", "duckdb://", "--out", "/tmp/x.parquet", "--readers", "0", "SELECT 1"],
        "--readers",
    ),
    "export_unstable": (
        ["export", "--db", UNREACHABLE, "--out", "/tmp/x.parquet", "SELECT now() AS t LIMIT 3"],
        "different value",
    ),
    # Every argument is checked before connecting, and the message names the CLI flag.
    "lease_ttl_zero": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--lease-ttl",
            "0",
            "SELECT a FROM t",
        ],
        "--lease-ttl must be",
    ),
    "even_batches_without_batch_size": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--even-batches",
            "2",
            "SELECT a FROM t",
        ],
        "--even-batches 2 needs --batch-size",
    ),
    "batch_size_without_even_batches": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--batch-size",
            "8",
            "SELECT a FROM t",
        ],
        "--batch-size goes with --even-batches",
    ),
    "snapshot_off_postgres": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            "mysql+pymysql://root@127.0.0.1:9/x",
            "--snapshot",
            "SELECT a FROM t",
        ],
        "--snapshot needs PostgreSQL",
    ),
    "materialize_without_scratch": (  # PostgreSQL and MySQL default to sqlfeed_scratch
        [
            "export",
            "--db",
            "duckdb:///nosuch.duckdb",
            "--out",
            "/tmp/x.parquet",
            "--strategy",
            "materialize",
            "SELECT a FROM t",
        ],
        "--strategy materialize needs --scratch SCHEMA on duckdb",
    ),
    "export_as_contradicts_file_name": (
        [
            "export",
            "--db",
            UNREACHABLE,
            "--out",
            "/tmp/x.parquet",
            "--as",
            "csv",
            "SELECT a FROM t",
        ],
        "--as csv does not match the file name x.parquet",
    ),
    "export_unknown_extension": (
        ["export", "--db", UNREACHABLE, "--out", "/tmp/x.xlsx", "SELECT a FROM t"],
        "give a .parquet, .csv, .jsonl file, or a folder",
    ),
    "reshard_as_contradicts_format": (
        ["reshard", "--out", "/tmp/never", "--as", "csv", "--format", "parquet", "SELECT 1 AS a"],
        "--as csv and --format parquet",
    ),
    "reshard_empty_sort_key": (
        ["reshard", "--sort", "a,,b", "--out", "/tmp/never", "SELECT 1 AS a"],
        "--sort: empty column name in 'a,,b'",
    ),
    "reshard_shard_rows_zero": (
        ["reshard", "--out", "/tmp/never", "--shard-rows", "0", "SELECT 1 AS a"],
        "--shard-rows must be",
    ),
    "stats_top_k_zero": (
        ["stats", "--db", UNREACHABLE, "--out", "/tmp/s.json", "--top-k", "0", "SELECT a FROM t"],
        "--top-k must be",
    ),
    "stats_label_not_in_query": (
        ["stats", "--db", UNREACHABLE, "--out", "/tmp/s.json", "--label", "b", "SELECT a FROM t"],
        "--label b: the query returns no column 'b'",
    ),
    "stats_fraction_out_of_range": (
        [
            "stats",
            "--db",
            UNREACHABLE,
            "--out",
            "/tmp/s.json",
            "--method",
            "hash",
            "--fraction",
            "2",
            "SELECT a FROM t",
        ],
        "--fraction must be in (0, 1]",
    ),
    "sample_fraction_with_limit": (
        ["sample", "--db", UNREACHABLE, "--fraction", "0.5", "SELECT a FROM t"],
        "--fraction needs --method hash or --method bernoulli",
    ),
    "sample_bernoulli_unnamed_on_mysql": (
        [
            "sample",
            "--db",
            "mysql+pymysql://root@127.0.0.1:9/x",
            "--method",
            "bernoulli",
            "--fraction",
            "0.1",
            "SELECT a, count(*) FROM t GROUP BY a",
        ],
        "use --method hash",
    ),
    "scratch_drop_not_a_scratch_table": (
        ["scratch", "drop", "--db", UNREACHABLE, "--schema", "s", "events"],
        "'events' is not a sqlfeed scratch table name",
    ),
    "scratch_drop_bad_duration": (
        ["scratch", "drop", "--db", UNREACHABLE, "--schema", "s", "--older-than", "soon"],
        "--older-than 'soon' is not a duration",
    ),
    "scratch_drop_says_which": (
        ["scratch", "drop", "--db", UNREACHABLE, "--schema", "s"],
        "say which scratch tables to drop",
    ),
    "queue_driver_not_installed": (
        ["job", "status", "--queue", "postgresql+psycopg2://u:secret@127.0.0.1:9/x", "--job", "j"],
        "psycopg2 is not installed: use a postgresql+psycopg:// URL",
    ),
    "queue_mysqldb_not_installed": (
        ["job", "status", "--queue", "mysql://root@127.0.0.1:9/x", "--job", "j"],
        "use a mysql+pymysql:// URL (pip install 'sqlfeed[mysql]')",
    ),
    "queue_not_a_queue_backend": (
        ["job", "status", "--queue", "oracle://x@h/y", "--job", "j"],
        "a queue lives in SQLite, PostgreSQL or MySQL/MariaDB",
    ),
    "worker_out_is_a_file": (
        ["worker", "--queue", "memory://", "--job", "j", "--db", UNREACHABLE, "--out", __file__],
        "is a file, not a folder",
    ),
    "worker_out_cannot_be_made": (
        [
            "worker",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--out",
            "/proc/sqlfeed-out",
        ],
        "cannot write in the folder /proc",
    ),
    # Values a library would choke on (hang, overflow, a bad seed) are refused up front.
    "negative_job_seed": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--seed",
            "-1",
            "SELECT a FROM t",
        ],
        "--seed must be >= 0",
    ),
    "huge_epochs": (
        [
            "job",
            "create",
            "--queue",
            "memory://",
            "--job",
            "j",
            "--db",
            UNREACHABLE,
            "--epochs",
            "99999999999999999999",
            "SELECT a FROM t",
        ],
        "--epochs must be at most 1000000",
    ),
    "negative_sample_seed": (
        [
            "sample",
            "--db",
            UNREACHABLE,
            "--method",
            "bernoulli",
            "--fraction",
            "0.5",
            "--seed",
            "-5",
            "SELECT a FROM t",
        ],
        "--seed must be >= 0",
    ),
    "sample_rows_past_bigint": (
        ["sample", "--db", UNREACHABLE, "--rows", "99999999999999999999", "SELECT a FROM t"],
        "--rows must be at most 9223372036854775807",
    ),
    "stats_too_many_buckets": (
        [
            "stats",
            "--db",
            UNREACHABLE,
            "--out",
            "/tmp/s.json",
            "--buckets",
            "100000",
            "SELECT a FROM t",
        ],
        "--buckets must be between 2 and 1000, got 100000",
    ),
    "export_too_many_readers": (
        [
            "export",
            "--db",
            UNREACHABLE,
            "--out",
            "/tmp/x.parquet",
            "--readers",
            "100000",
            "SELECT a FROM t",
        ],
        "--readers must be at most 256",
    ),
    "reshard_too_many_threads": (
        ["reshard", "--out", "/tmp/never", "--threads", "100000", "SELECT 1 AS a"],
        "--threads must be at most 1024",
    ),
    "parse_error_in_sql_terms": (
        ["plan", "--db", UNREACHABLE, "SELECT spend* FROM events"],
        "'*' has no right-hand operand near 'FROM' at line 1, column",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_get_a_one_line_error(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a command that wrongly wrote a file would write it here
    args, expected = BAD_ARGUMENTS[name]
    run = run_cli(args)
    assert_one_line_error(run.code, run.err, run.out, expected)
    assert "secret" not in run.err  # passwords in URLs are never shown
    assert list(tmp_path.iterdir()) == []
    assert not Path("/tmp/never").exists()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT a* FROM t", "'*' has no right-hand operand near 'FROM' at line 1, column 14"),
        ("SELECT a\nFROM t WHERE", "WHERE is not followed by a condition near 'WHERE' at line 2"),
        ("SELECT a FROM t WHERE a BETWEEN 1", "BETWEEN has no upper bound"),
        ("SELECT a FROM t WHERE a LIKE", "LIKE has no right-hand operand"),
        ("SELECT a FROM t JOIN", "expected table name, but the SQL ends"),
        ("SELECT a FROM t\nWHERE b = 'it''s", "a string (') is not closed at line 2, column 11"),
        ('SELECT "a FROM t', 'a quoted name (") is not closed at line 1, column 8'),
        ("SELECT a FROM t /* note", "a /* comment is not closed at line 1, column 17"),
    ],
)
def test_parse_errors_are_said_in_sql_terms(sql: str, expected: str) -> None:
    run = run_cli(["plan", sql])
    assert_one_line_error(run.code, run.err, run.out, expected)
    assert "<class" not in run.err
    assert "Required keyword" not in run.err


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
    duckdb.connect(str(tmp_path / "x.duckdb")).close()  # a database without the table
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


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("lease_ttl must be > 0", "--lease-ttl must be > 0"),
        ("use method='hash' (deterministic)", "use --method hash (deterministic)"),
        ("name the key column(s) (key=..., --key)", "name the key column(s) (--key)"),
        ("top_k must be an integer >= 1", "--top-k must be an integer >= 1"),
        ("output column 1 (a = 1) has no name", "output column 1 (a = 1) has no name"),
    ],
)
def test_library_wording_becomes_the_flags(message: str, said: str) -> None:
    names = {"lease_ttl": "--lease-ttl", "method": "--method", "key": "--key", "top_k": "--top-k"}
    assert cli_wording(message, names) == said
