"""A training run leaves no scratch table, whatever way it ends.

On PostgreSQL and MariaDB the planner materializes a training's splits into scratch tables
(the split wraps the SELECT). Every table a run makes is dropped when it finishes, fails
(an option found bad after the tables were made), is interrupted (KeyboardInterrupt in
the Python API; SIGINT to ``sqlfeed train``) or fails while it evaluates; a run killed
outright leaves its tables, which ``sqlfeed scratch list`` shows as that model's (the
process ended) and the next ``train`` with the same ``--out`` drops. DuckDB and SQLite
make none (no default scratch schema). The tables a run made are caught where they are
created, so a table the run does not know of is caught too; the catalog is asked after.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

import sqlfeed.ml
import sqlfeed.plans.materialize as materialize
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.plans.materialize import DEFAULT_SCRATCH
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
ROWS = 1500
COLUMNS = [("id", "bigint"), ("f1", "float"), ("f2", "float"), ("y", "int")]
SERVERS = ["postgres", "mysql"]


def _rows() -> list[tuple[Any, ...]]:
    rows = []
    for i in range(ROWS):
        f1, f2 = ((i * 37) % 101) / 10.0, math.sin(i)
        rows.append((i, f1, f2, int(f1 + 3 * f2 > 5)))
    return rows


@pytest.fixture
def table(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    """A table of its own on the engine ``request.param``: ``(engine, qualified name)``."""
    engine = get_engine(request.param)
    name = engine.qualify(f"train_scratch_{uuid.uuid4().hex[:8]}")
    engine.create_table(name, COLUMNS, _rows())
    try:
        yield engine, name
    finally:
        engine.execute(f"DROP TABLE IF EXISTS {name}")
        engine.commit()


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scratch tables made in this process (``schema.name``), caught where they are."""
    created: list[str] = []
    fill = materialize._fill

    def spy(ctx: Any, table: Any, name: str) -> int:
        created.append(f"{ctx.scratch}.{name}")
        return fill(ctx, table, name)

    monkeypatch.setattr(materialize, "_fill", spy)
    return created


def _existing(engine: Engine, tables: list[str]) -> list[str]:
    """Those of ``tables`` the engine's catalog holds."""
    if engine.name == "postgres":
        sql = (
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON "
            f"n.oid = c.relnamespace WHERE n.nspname = '{DEFAULT_SCRATCH}'"
        )
    else:
        sql = (
            "SELECT CONCAT(table_schema, '.', table_name) FROM information_schema.tables "
            f"WHERE table_schema = '{DEFAULT_SCRATCH}'"
        )
    present = {str(r[0]) for r in engine.rows(sql)}
    return [t for t in tables if t in present]


class Stop(Exception):
    """Raised from the progress callback to stop a training at a given step."""


def _stopping_at(prefix: str, error: BaseException) -> Callable[[str], None]:
    def say(line: str) -> None:
        if line.startswith(prefix):
            raise error

    return say


ENDINGS: dict[str, tuple[dict[str, Any], Callable[[], Callable[[str], None] | None], Any]] = {
    "finished": ({}, lambda: None, None),
    # an option XGBoost refuses, found once the splits are materialized
    "failed": ({"learning_rate": 2.0}, lambda: None, InvalidArgumentError),
    "interrupted": (
        {"trees": 50},
        lambda: _stopping_at("gbdt: 10/50 trees", KeyboardInterrupt()),
        KeyboardInterrupt,
    ),
    "failed evaluating": ({}, lambda: _stopping_at("validation:", Stop()), Stop),
}
"""Each way a run ends: its options, its progress callback and what it raises."""


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("table", SERVERS, indirect=True)
def test_a_training_run_drops_every_scratch_table_it_made(
    table: tuple[Engine, str], made: list[str], ending: str, tmp_path: Path
) -> None:
    engine, name = table
    options, progress, raised = ENDINGS[ending]
    call = {"family": "gbdt", "trees": 5, "key": "id", "report": False, **options}
    with engine.source() as source:
        if raised is None:
            sqlfeed.ml.train(
                f"SELECT id, f1, f2, y FROM {name}", source, label="y", out=tmp_path / "m", **call
            )
        else:
            with pytest.raises(raised):
                sqlfeed.ml.train(
                    f"SELECT id, f1, f2, y FROM {name}",
                    source,
                    label="y",
                    out=tmp_path / "m",
                    progress=progress(),
                    **call,
                )
    assert made, "the run materialized nothing: the test would prove nothing"
    assert _existing(engine, made) == []
    assert (tmp_path / "m").exists() == (raised is None)


@pytest.mark.parametrize("table", ["duckdb", "sqlite"], indirect=True)
def test_duckdb_and_sqlite_trainings_make_no_scratch_table(
    table: tuple[Engine, str], made: list[str], tmp_path: Path
) -> None:
    engine, name = table
    with engine.source() as source:
        sqlfeed.ml.train(
            f"SELECT id, f1, f2, y FROM {name}",
            source,
            label="y",
            out=tmp_path / "m",
            family="gbdt",
            trees=3,
            key="id",
            report=False,
        )
    assert made == []


# -- the command line: SIGINT, SIGKILL ---------------------------------------------------


def _url(engine: Engine) -> str:
    if engine.name == "postgres":
        return POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
    return f"mysql+pymysql://{netloc}/{engine.schema}"


def _train(engine: Engine, name: str, out: Path, trees: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sqlfeed",
        "train",
        "--db",
        _url(engine),
        "--label",
        "y",
        "--key",
        "id",
        "--family",
        "gbdt",
        "--trees",
        str(trees),
        "--no-report",
        "--out",
        str(out),
        f"SELECT id, f1, f2, y FROM {name}",
    ]


def _owned(engine: Engine, out: Path) -> list[dict[str, Any]]:
    """``sqlfeed scratch list``'s tables owned by ``train --out OUT``."""
    listed = run_cli(
        ["scratch", "list", "--db", _url(engine), "--schema", DEFAULT_SCRATCH, "--format", "json"]
    )
    assert listed.code == 0, listed.err
    owner = f"train --out {out.resolve()} ("
    return [t for t in json.loads(listed.out) if (t["owner"] or "").startswith(owner)]


def _started(engine: Engine, name: str, out: Path) -> subprocess.Popen[str]:
    """``sqlfeed train`` with many trees, once it trains (its splits materialized)."""
    child = subprocess.Popen(
        _train(engine, name, out, 100_000),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert child.stderr is not None
    for line in child.stderr:
        if "trees, validation" in line:
            return child
    child.wait(timeout=60)
    raise AssertionError(f"train ended before training: exit {child.returncode}")


@pytest.mark.slow  # a training process per test
@pytest.mark.parametrize("table", SERVERS, indirect=True)
def test_sqlfeed_train_interrupted_by_sigint_drops_its_tables(
    table: tuple[Engine, str], tmp_path: Path
) -> None:
    engine, name = table
    out = tmp_path / "m"
    child = _started(engine, name, out)
    try:
        running = _owned(engine, out)
        assert running, "the run owns no scratch table while it trains"
        assert all(not t["owner"].endswith(", ended)") for t in running)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=120) == 130
    finally:
        child.kill()
        child.wait()
    assert _owned(engine, out) == []
    assert _existing(engine, [f"{t['schema']}.{t['table']}" for t in running]) == []
    assert not out.exists()


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.slow  # two training processes
@pytest.mark.parametrize("table", SERVERS, indirect=True)
def test_a_killed_trains_tables_are_listed_as_the_models_and_dropped_by_the_next_run(
    table: tuple[Engine, str], tmp_path: Path
) -> None:
    engine, name = table
    out = tmp_path / "m"
    child = _started(engine, name, out)
    try:
        running = _owned(engine, out)
        assert running
    finally:
        child.kill()  # SIGKILL: nothing of the run's runs any more
        child.wait()
    left = _owned(engine, out)
    assert {t["table"] for t in left} == {t["table"] for t in running}
    assert all(t["owner"].endswith(", ended)") for t in left)
    text = run_cli(["scratch", "list", "--db", _url(engine), "--schema", DEFAULT_SCRATCH])
    assert f"train --out {out.resolve()} (pid {child.pid} " in text.out

    again = subprocess.run(
        _train(engine, name, out, 5), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert _owned(engine, out) == []
    assert _existing(engine, [f"{t['schema']}.{t['table']}" for t in left]) == []
