"""Start-up stays cheap: ``import sqlfeed`` and ``sqlfeed --version`` import no heavy module.

Module sets, not timings: what a fresh interpreter has in ``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sqlfeed
from sqlfeed.cli.main import COMMANDS, build_parser

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
    "dialects",
    "stats",
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


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _modules_after(_cli(["count", "--help"]))
    assert "sqlfeed.cli.query" in loaded
    assert not {"sqlfeed.cli.jobs", "sqlfeed.cli.shardsets", "sqlfeed.cli.demo"} & loaded
    assert not {"tensorflow", "torch", "dask", "ray"} & loaded


def test_every_public_name_resolves_and_the_heavy_ones_stay_lazy() -> None:
    for name in sqlfeed.__all__:
        assert getattr(sqlfeed, name) is not None, name
    assert {"tf", "torch", "ray", "dask", "ml"} <= set(dir(sqlfeed))
    loaded = _modules_after("import sqlfeed\nfrom sqlfeed import *\nsqlfeed.plan, sqlfeed.Feeder")
    assert not {"tensorflow", "torch", "dask", "ray", "sqlfeed.ml", "xgboost"} & loaded
    loaded = _modules_after("import sqlfeed\nsqlfeed.ml.TrainOptions")
    assert "sqlfeed.ml.options" in loaded
    assert not {"tensorflow", "keras", "xgboost"} & loaded


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
