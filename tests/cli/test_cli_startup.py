"""Start-up stays cheap: ``import sqlfeed``, ``--version`` and every ``--help`` import no heavy
module, and bad input is refused before the command's own module is imported.

Module sets, not timings: what a fresh interpreter has in ``sys.modules`` afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sqlfeed
from sqlfeed.cli.main import COMMANDS, build_parser
from sqlfeed.cli.parsers import Later
from tests.helpers.cli import run_cli

HEAVY = (
    "pandas",
    "numpy",
    "pyarrow",
    "pyarrow.dataset",
    "duckdb",
    "sqlalchemy",
    "sqlglot",
    "tensorflow",
    "keras",
    "torch",
    "dask",
    "ray",
    "matplotlib",
    "rich",
    "psycopg",
    "pymysql",
    "connectorx",
    "adbc_driver_manager",
    "sqlfeed.dialects",
    "sqlfeed.stats",
)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(run.stdout.strip().splitlines()[-1]))


def _cli(argv: list[str]) -> str:
    return (
        "from sqlfeed.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
    )


def test_import_sqlfeed_imports_no_heavy_module() -> None:
    loaded = _modules_after("import sqlfeed")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], [], ["nosuch", "x"]], ids=["version", "help", "none", "bad"]
)
def test_the_top_of_the_command_line_imports_no_heavy_module(argv: list[str]) -> None:
    loaded = _modules_after(_cli(argv))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert not {m for m in loaded if m.startswith("sqlfeed.") and m.count(".") == 2} - {
        "sqlfeed.cli.main",
        "sqlfeed.cli.native",
        "sqlfeed.cli.parsing",
    }


def test_a_command_imports_its_own_parsers_only() -> None:
    loaded = _modules_after(_cli(["count", "--help"]))
    assert "sqlfeed.cli.parsers.query" in loaded
    assert not {"sqlfeed.cli.parsers.jobs", "sqlfeed.cli.parsers.demo"} & loaded
    assert not {"tensorflow", "torch", "dask", "ray"} & loaded


def _leaves(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command (``("job", "create")``...) and its parser."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], node: argparse.ArgumentParser) -> None:
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        found[path] = node
        for action in subs:
            for name, child in action.choices.items():
                walk((*path, name), child)

    walk((), parser)
    return found


EVERY_COMMAND = sorted(path for path in _leaves(build_parser()) if path)

HANDLER_MODULES = {f"sqlfeed.cli.{module}" for module, _ in COMMANDS} | {
    "sqlfeed.cli.common",
    "sqlfeed.cli.checks",
    "sqlfeed.cli.run",
}
"""The command modules: what a command imports only when it runs."""


@pytest.mark.parametrize("path", EVERY_COMMAND, ids=" ".join)
def test_every_help_imports_no_heavy_module_nor_the_command(path: tuple[str, ...]) -> None:
    loaded = _modules_after(_cli([*path, "--help"]))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert not loaded & HANDLER_MODULES, sorted(loaded & HANDLER_MODULES)


def test_every_command_names_a_handler_that_exists() -> None:
    """A handler is imported when its command runs: a misspelt one fails here, not there."""
    for path, parser in _leaves(build_parser()).items():
        handler = parser.get_default("handler")
        if handler is None:
            assert any(isinstance(a, argparse._SubParsersAction) for a in parser._actions), path
            continue
        assert isinstance(handler, Later), path
        module, _, name = handler.target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), path


def test_the_parsers_offer_the_librarys_own_tables() -> None:
    from sqlfeed.cli import parsers
    from sqlfeed.dialects import dialect_names
    from sqlfeed.dispatch import ORDERS
    from sqlfeed.feed import EXPORT_FORMATS
    from sqlfeed.ml.options import FAMILIES, TASKS
    from sqlfeed.plans import STRATEGIES
    from sqlfeed.plans.materialize import SCRATCH_PREFIX
    from sqlfeed.shards.reshard import RESHARD_FORMATS
    from sqlfeed.sink import MODES
    from sqlfeed.sql import SAMPLE_METHODS
    from sqlfeed.stats.model import DEFAULT_TOP_K

    assert tuple(parsers.STRATEGIES) == tuple(STRATEGIES)
    assert list(parsers.dialect_names()) == list(dialect_names())
    assert tuple(parsers.SAMPLE_METHODS) == tuple(SAMPLE_METHODS)
    assert tuple(parsers.EXPORT_FORMATS) == tuple(EXPORT_FORMATS)
    assert tuple(parsers.SINK_MODES) == tuple(MODES)
    assert tuple(parsers.ORDERS) == tuple(ORDERS)
    assert tuple(parsers.RESHARD_FORMATS) == tuple(RESHARD_FORMATS)
    assert tuple(parsers.TASKS) == tuple(TASKS)
    assert tuple(parsers.FAMILIES) == tuple(FAMILIES)
    assert parsers.DEFAULT_TOP_K == DEFAULT_TOP_K
    assert parsers.SCRATCH_PREFIX == SCRATCH_PREFIX


MODEL_MODULES = {
    "tensorflow",
    "keras",
    "xgboost",
    "torch",
    "sqlfeed.ml.scoring",
    "sqlfeed.ml.trainer",
}
"""What loading or training a model imports (seconds: TensorFlow)."""


def _refused(argv: list[str]) -> set[str]:
    """The modules loaded by the command line ``argv``, which must refuse it (exit 2)."""
    script = (
        "import json, sys\n"
        "from sqlfeed.cli.main import main\n"
        f"code = main({argv!r})\n"
        "print(json.dumps([code, sorted(sys.modules)]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    code, modules = json.loads(run.stdout.strip().splitlines()[-1])
    assert code == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    return set(modules)


BAD_SQL = {
    "syntax": "SELECT a FROM t WHERE",
    "not_a_query": "DELETE FROM t",
    "two_statements": "SELECT 1; SELECT 2",
    "unstable": "SELECT random() AS r FROM t",
}

REFUSING = {
    ("predict", "--into", "o", "--model", "{model}"): "predict",
    ("evaluate", "--model", "{model}"): "ml",
    ("train", "--label", "y", "--out", "{out}"): "ml",
    ("export", "--out", "{out}.parquet"): "export",
    ("job", "create", "--job", "j", "--queue", "sqlite:///{out}.db"): "jobs",
    ("plan",): "query",
    ("count",): "query",
    ("sample",): "query",
    ("stats",): "statistics",
}
"""Commands that read a SELECT, and the module of their handler."""
READS_UNSTABLE = {"predict", "count", "sample", "stats"}
"""Commands that take an unstable query (they read it once)."""


@pytest.mark.parametrize("bad", list(BAD_SQL))
@pytest.mark.parametrize("argv", list(REFUSING), ids=lambda argv: " ".join(argv[:2]))
def test_bad_sql_is_refused_before_the_command_module_is_imported(
    argv: tuple[str, ...], bad: str, tmp_path: Path
) -> None:
    """Before a model is loaded (predict, evaluate: TensorFlow), planned or connected.

    With ``--db`` the URL itself is checked first (its secrets, its scheme: SQLAlchemy).
    """
    if bad == "unstable" and argv[0] in READS_UNSTABLE:
        pytest.skip("this command reads an unstable query (once)")
    model = tmp_path / "model"
    model.mkdir()
    (model / "manifest.json").write_text("{}")
    args = [a.format(model=model, out=tmp_path / "out") for a in argv]
    loaded = _refused([*args, "--db", f"duckdb:///{tmp_path / 'db.duckdb'}", BAD_SQL[bad]])
    assert not loaded & MODEL_MODULES, sorted(loaded & MODEL_MODULES)
    assert f"sqlfeed.cli.{REFUSING[argv]}" not in loaded


@pytest.mark.parametrize("bad", list(BAD_SQL))
def test_bad_sql_without_a_database_imports_only_sqlglot_and_its_engines_dialect(bad: str) -> None:
    loaded = _refused(["plan", "--dialect", "postgres", BAD_SQL[bad]])
    heavy = set(HEAVY) - {"sqlglot", "sqlfeed.dialects", "sqlfeed.stats"}
    assert not loaded & heavy, sorted(loaded & heavy)
    always = {m for m in _modules_after("import sqlfeed.dialects") if m.startswith("sqlglot.")}
    dialects = {m for m in loaded - always if m.startswith("sqlglot.dialects.")}
    assert dialects <= {"sqlglot.dialects.postgres"}, dialects


def test_the_sql_read_from_stdin_reaches_the_command(tmp_path: Path) -> None:
    """The check reads stdin once and hands the text on."""
    import duckdb

    duckdb.connect(str(tmp_path / "c.duckdb")).close()
    run = run_cli(["count", "--db", f"duckdb:///{tmp_path / 'c.duckdb'}", "-"], "SELECT 1 AS x")
    assert (run.code, run.out.strip()) == (0, "1"), run.err


def test_every_public_name_resolves_and_the_heavy_ones_stay_lazy() -> None:
    for name in sqlfeed.__all__:
        assert getattr(sqlfeed, name) is not None, name
    assert {"tf", "torch", "ray", "dask", "ml"} <= set(dir(sqlfeed))
    loaded = _modules_after("import sqlfeed\nfrom sqlfeed import *\nsqlfeed.plan, sqlfeed.Feeder")
    assert not {"tensorflow", "torch", "dask", "ray", "sqlfeed.ml", "xgboost"} & loaded
    loaded = _modules_after("import sqlfeed\nsqlfeed.ml.TrainOptions")
    assert "sqlfeed.ml.options" in loaded
    assert not {"tensorflow", "keras", "xgboost"} & loaded


def test_a_plain_duckdb_read_imports_only_what_it_uses(tmp_path: Path) -> None:
    """A process's first read of a Parquet file (and of an empty result) through the Feeder
    imports no pandas (``pa.array([])`` used to: ~0.2 s) and no fsspec (the byte-range file
    system: ~60 ms, registered where a query reads byte ranges: tests/plans)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(100))}), data)
    loaded = _modules_after(
        "import sqlfeed\n"
        "with sqlfeed.connect('duckdb://') as s:\n"
        f"    rows = sum(b.num_rows for b in sqlfeed.Feeder(\"SELECT * FROM '{data}'\", s))\n"
        "    rows += sum(b.num_rows for b in sqlfeed.Feeder('SELECT 1 AS x WHERE false', s))\n"
        "assert rows == 100, rows"
    )
    unused = {"pandas", "fsspec", "sqlfeed.io.rangefs"}
    assert not unused & loaded, sorted(unused & loaded)


def test_dataset_urls_open_after_a_lazy_import(tmp_path: object) -> None:
    loaded = _modules_after("import sqlfeed\nsqlfeed.connect")
    assert "sqlfeed.shards.urls" in loaded  # the dataset: scheme is registered


def _helps(parser: object) -> dict[str, str | None]:
    (commands,) = [a for a in parser._actions if a.dest == "command"]  # type: ignore[attr-defined]
    return {c.dest: c.help for c in commands._choices_actions}


def test_the_lazy_parser_lists_each_command_as_its_own_module_does() -> None:
    full, lazy = build_parser(), build_parser(["--version"])
    assert _helps(lazy) == _helps(full)
    assert list(_helps(lazy)) == [name for _, names in COMMANDS for name, _ in names]
    assert lazy.format_help() == full.format_help()


def test_every_error_is_public_and_the_same_class_as_sqlfeed_errors() -> None:
    import sqlfeed
    import sqlfeed.errors

    for name in sqlfeed.errors.__all__:
        assert name in sqlfeed.__all__, name
        assert getattr(sqlfeed, name) is getattr(sqlfeed.errors, name), name


@pytest.mark.parametrize("db", ["duckdb:///x.duckdb", "postgresql://me:pw@127.0.0.1:1/db"])
def test_bad_sql_with_a_database_url_imports_no_driver_duckdb_or_pyarrow(db: str) -> None:
    """The --db URL is checked (its secrets remembered) with SQLAlchemy's URL parser alone:
    sqlfeed.io, which loads DuckDB and pyarrow, was imported for it (~0.6 s of a refusal)."""
    loaded = _refused(["count", "--db", db, "DELETE FROM t"])
    heavy = {"duckdb", "pyarrow", "pandas", "numpy", "psycopg", "pymysql", "sqlfeed.io"}
    assert not loaded & heavy, sorted(loaded & heavy)
