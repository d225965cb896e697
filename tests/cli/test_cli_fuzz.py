"""Random command lines never end in a traceback, and exit 0, 1 or 2.

Hypothesis builds command lines from the parser itself (every command and every one of
its flags), with valid and invalid values: SQL that is fine, wrong, unsafe or unstable;
sizes, counts and durations in and out of range; paths that exist, are files, or lie in
missing folders; a DuckDB file that exists and one that does not, and PostgreSQL and
MySQL servers that nothing listens on (so nothing slow happens); saved plans (``--plan``)
that fit, belong to another query, were edited, or are no plan at all. ``SQLFEED_DEBUG=1``
makes the command line re-raise an unexpected exception instead of printing its one
"internal error" line, so a bug fails the test with its traceback.

Each example runs in a fresh copy of a small work folder (a DuckDB file and a queue with
one job), so examples do not depend on each other. On failure (exit 1 or 2) the
invariants are: one line on stderr saying what is wrong, every stderr line is sqlfeed's
own, and nothing new is left in the work folder. ``SQLFEED_FUZZ_EXAMPLES=2000`` runs
more examples than the default 150.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlfeed.cli.main import build_parser
from tests.helpers.cli import run_cli

UNREACHABLE = (
    "postgresql+psycopg://postgres@127.0.0.1:9/test",
    "mysql+pymysql://root@127.0.0.1:9/test",
)

# Each pool: (valid values, invalid values); a value is invalid about one time in five.
POOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "db": (
        (
            "duckdb:///data.duckdb",
            "duckdb:///data.duckdb",
            "duckdb:///data.duckdb",
            "duckdb://",
            *UNREACHABLE,
        ),
        ("duckdb:///nosuch.duckdb", "sqlite:///nosuch.sqlite", "nosuch://x", "not a url", ""),
    ),
    "queue": (
        ("sqlite:///queue.db", "sqlite:///queue.db", "memory://q", *UNREACHABLE),
        (
            "sqlite:///nosuch-queue.db",
            "sqlite:///missing/queue.db",
            "oracle://x@h/y",
            "postgresql+psycopg2://u@127.0.0.1:9/x",
            "mysql://root@127.0.0.1:9/x",
            "nosuch://x",
        ),
    ),
    "sql": (
        (
            "SELECT id, g, s FROM t",
            "SELECT * FROM t WHERE g = 3",
            "SELECT id * 2, s FROM t",
            "SELECT g, count(*) FROM t GROUP BY g",
            "SELECT id, id FROM t",
            "@query.sql",
            "-",
            "SELECT id, CASE WHEN id % 5 = 0 THEN NULL ELSE id * 0.5 END AS f FROM t",
            "SELECT * FROM t AS a JOIN t AS b ON a.id = b.id",  # repeated names: id_1
            # lists, structs, intervals, blobs: JSON/ISO/hex text in CSV; Parquet refuses
            # the interval before anything runs
            "SELECT id, [id, g] AS l, {'a': id, 'b': s} AS st, to_days(id::INT) AS d, "
            "s::BLOB AS b FROM t",
        ),
        (
            "SELECT a* FROM t",
            "SELEC id FROM t",
            "SELECT 'abc FROM t",
            "DROP TABLE t",
            "SELECT id FROM t; DELETE FROM t",
            "SELECT id FROM t LIMIT 3",
            "SELECT 1/0 AS x",
            "SELECT random() AS r FROM t",
            "SELECT nosuch FROM t",
            "SELECT id FROM nosuch",
            "",
            "@missing.sql",
        ),
    ),
    "path": (
        ("out", "out.parquet", "out.csv", "out.jsonl", "report.html", "dir/out.parquet"),
        (
            "out.xlsx",
            "out.v2",
            ".",
            "missing/out.parquet",
            "missing/deeper/out",
            "data.duckdb",
            "dir",
            "",
        ),
    ),
    "column": (("id", "g", "s", "id,g", "id desc", "ID"), ("a,,b", "nosuch", "", "uid")),
    "name": (("j", "j", "other"), ("", "  ")),
    "size": (("256MB", "1KB", "1.5GiB", "60%"), ("0", "-5", "12XB", "200%", "lots", "")),
    "duration": (("90s", "2h", "1d", "0"), ("-1h", "soon", "")),
    "schema": (("main",), ("", "nosuch")),
    "kind": (("id=numeric", "g=categorical", "s=skip"), ("id", "id=x", "nosuch=numeric")),
    "tar": (("v=*.tar",), ("v", "=x", "v=missing/*.tar")),
    "dialect": (("postgres", "mysql", "sqlite"), ("postgress", "")),
    "int": (("1", "2", "3", "7", "100"), ("-1", "0", "x", "", "99999999999999999999")),
    "float": (("0.5", "1", "0.1", "2"), ("0", "-1", "nan", "inf", "x")),
    "lease_ttl": (("1", "2"), ("0", "-1", "nan", "x")),  # a lease left behind expires soon
    "plan": (  # plan.json: the saved plan job j was made from; the others do not fit
        ("plan.json", "plan.json", "other.json"),
        ("missing.json", "query.sql", "edited.json", "sketch.json", "dir", ""),
    ),
    "seconds": (("0", "0.5", "60"), ("-1", "nan", "inf", "x")),
    "start_wait": (("0", "0.2"), ("-1", "nan", "inf", "x")),  # a fuzzed server is down
    "other": (("x", "1"), ("",)),
}
DEST_POOL = {
    "db": "db",
    "queue": "queue",
    "sql": "sql",
    "out": "path",
    "html": "path",
    "temp_dir": "path",
    "dir": "path",
    "job": "name",
    "worker_id": "name",
    "key": "column",
    "sort": "column",
    "group_by": "column",
    "label": "column",
    "uid": "column",
    "kind": "kind",
    "tar": "tar",
    "shard_size": "size",
    "memory_limit": "size",
    "older_than": "duration",
    "scratch": "schema",
    "schema": "schema",
    "dialect": "dialect",
    "lease_ttl": "lease_ttl",
    "plan": "plan",
    "checkpoint_every": "seconds",
    "start_wait": "start_wait",
}
SCRATCH_NAMES = ("sqlfeed_1_ab", "t", "sqlfeed_x", "")


def leaf_parsers(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command (``("job", "create")`` ...) and its parser, from the parser itself."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], node: argparse.ArgumentParser) -> None:
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[path] = node
        for action in subs:
            for name, child in action.choices.items():
                walk((*path, name), child)

    walk((), parser)
    return found


COMMANDS = leaf_parsers(build_parser())


def value(draw: st.DrawFn, action: argparse.Action) -> str:
    """A valid value of one option or positional argument, or now and then an invalid one."""
    invalid = draw(st.integers(0, 4)) == 0
    if action.choices:
        return "nosuch" if invalid else draw(st.sampled_from(sorted(map(str, action.choices))))
    kind = DEST_POOL.get(action.dest)
    if kind is None:
        kind = "int" if action.type is int else "float" if action.type is float else "other"
    valid, wrong = POOLS[kind]
    return draw(st.sampled_from(wrong if invalid else valid))


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A command, its required arguments and a random selection of its flags."""
    path = draw(st.sampled_from(sorted(COMMANDS)))
    parser = COMMANDS[path]
    exclusive = {id(a): g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    taken: set[int] = set()
    argv = list(path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest == "version":
            continue
        if not action.option_strings:
            if action.dest == "names":
                argv += draw(st.lists(st.sampled_from(SCRATCH_NAMES), max_size=2))
            elif action.dest == "sql" and "--plan" in argv:  # the plan carries its query
                if draw(st.integers(0, 3)) == 0:
                    argv.append(value(draw, action))
            elif draw(st.integers(0, 19)) > 0:  # a positional is now and then left out
                argv.append(value(draw, action))
            continue
        group = exclusive.get(id(action))
        must = (
            action.required
            or action.dest in ("queue", "start_wait")  # never the default 120 s wait
            or (path == ("job", "create") and action.dest == "lease_ttl")
        )
        if not must and draw(st.integers(0, 2)) > 0:
            continue
        if group is not None and id(group) in taken and draw(st.integers(0, 9)) > 0:
            continue  # mostly one option of a mutually exclusive group
        if group is not None:
            taken.add(id(group))
        flag = draw(st.sampled_from(action.option_strings))
        argv += [flag] if action.nargs == 0 else [flag, value(draw, action)]
    if path == ("demo",):  # the demo trains a model: only its refusals are fast
        argv += ["--rows", draw(st.sampled_from(("0", "-5", "x")))]
    return argv


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """A work folder to copy: a DuckDB file, a queue holding job j, a folder, a SQL file."""
    with tempfile.TemporaryDirectory(prefix="sqlfeed-fuzz-") as name:
        base = Path(name)
        with duckdb.connect(str(base / "data.duckdb")) as conn:
            conn.execute(
                "CREATE TABLE t AS SELECT range AS id, range % 7 AS g, "
                "CASE WHEN range % 5 = 0 THEN NULL ELSE 'v' || range END AS s FROM range(200)"
            )
        (base / "dir").mkdir()
        (base / "query.sql").write_text("SELECT id, g FROM t WHERE g > 2\n", encoding="utf-8")
        previous = Path.cwd()
        os.chdir(base)
        try:
            _save_plans(base)
            made = run_cli(
                [
                    "job",
                    "create",
                    "--queue",
                    "sqlite:///queue.db",
                    "--job",
                    "j",
                    "--db",
                    "duckdb:///data.duckdb",
                    "--lease-ttl",
                    "2",
                    "--plan",
                    "plan.json",
                ]
            )
        finally:
            os.chdir(previous)
        assert made.code == 0, made.err
        yield base


def _save_plans(base: Path) -> None:
    """Saved plans: job j's, another query's, an edited one and one made without --db."""
    for name, argv in (
        ("plan.json", ["--db", "duckdb:///data.duckdb", "-m", "2", "SELECT id, g FROM t"]),
        ("other.json", ["--db", "duckdb:///data.duckdb", "-m", "3", "SELECT id FROM t"]),
        ("sketch.json", ["--dialect", "duckdb", "SELECT id FROM t"]),
    ):
        saved = run_cli(["plan", *argv])
        assert saved.code == 0, saved.err
        (base / name).write_text(saved.out, encoding="utf-8")
    edited = json.loads((base / "plan.json").read_text())
    edited["partitions"][0]["sql"] = "SELECT id, g FROM t"  # reads every row: refused
    (base / "edited.json").write_text(json.dumps(edited), encoding="utf-8")


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.slow  # 48 s alone (150 command lines)
@settings(
    max_examples=int(os.environ.get("SQLFEED_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines())
def test_random_command_lines_end_cleanly(
    argv: list[str], template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQLFEED_DEBUG", "1")  # an unexpected exception fails the test
    with tempfile.TemporaryDirectory(prefix="sqlfeed-fuzz-run-") as name:
        work = Path(name) / "w"
        shutil.copytree(template, work)
        before = listing(work)
        monkeypatch.chdir(work)
        run = run_cli(argv, stdin="SELECT id FROM t")
        monkeypatch.chdir(template)
        after = listing(work)
    assert run.code in (0, 1, 2), (argv, run)
    assert "Traceback" not in run.err, (argv, run.err)
    lines = run.err.strip().splitlines()
    assert all(line.startswith("sqlfeed: ") for line in lines), (argv, run.err)
    if run.code != 0:
        errors = [line for line in lines if "error: " in line]
        assert len(errors) == 1, (argv, run.err)
        assert lines[-1] == errors[0], (argv, run.err)
        new = {p for p in after - before if not p.endswith((".wal", "-wal", "-shm"))}
        assert not new, (argv, run.err, sorted(new))
