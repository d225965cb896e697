"""Kill and resume: ``sqlfeed.ml.train(..., checkpoint_dir=...)`` SIGKILLed mid-epoch, run again.

:mod:`tests.scripts.train_child` trains a ``dnn`` on a 6,000-row table in a child process,
on every engine: once uninterrupted, once SIGKILLed a few batches after its first
checkpoint (in the middle of the first epoch), and once more with the same call. The
resumed call finishes and writes a whole model folder (no partial one beside it); the rows
the killed run trained on up to the checkpoint it is restored from, plus the rows of the
resumed run, are every training row exactly once per epoch (the rows taken after that
checkpoint are trained on again, as they must be); the uninterrupted run's epochs are the
same rows.

On PostgreSQL and MariaDB the training split is materialized into a scratch table: the
killed run's is listed by ``sqlfeed scratch list`` as the model's, the resumed run reads it
(the feed's position in the checkpoint names the same rows) and drops it when it finishes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pytest

import sqlfeed.ml as sqlfeed_ml
from sqlfeed import connect
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.run import RUN_FILE, TrainingRun
from sqlfeed.plans.materialize import DEFAULT_SCRATCH, drop_scratch
from sqlfeed.plans.model import Plan
from sqlfeed.tf.checkpoint import STATE_FILE
from tests.helpers.cli import run_cli
from tests.helpers.engines import (
    MYSQL_URL,
    POSTGRES_URL,
    Engine,
    EngineUnavailable,
    open_engine,
)
from tests.scripts.train_child import QUERY

ROOT = Path(__file__).resolve().parents[2]
ROWS = 6000
EPOCHS = 2
BATCH_SIZE = 64

Epochs = list[list[list[float]]]
"""Per epoch, the batches the model trained on, each as its ``x`` values."""

COLUMNS = [
    ("id", "bigint"),
    ("x", "float"),
    ("f1", "float"),
    ("f2", "float"),
    ("color", "text"),
    ("y", "int"),
]


def table_rows() -> list[tuple[Any, ...]]:
    """``(id, x, f1, f2, color, y)``: a binary label of the features; ``x`` names the row."""
    rows = []
    for i in range(ROWS):
        f1 = ((i * 37) % 101) / 10.0
        f2 = math.sin(i)
        color = ("red", "green", "blue", "grey")[i % 4]
        rows.append((i, float(i), f1, f2, color, int(f1 + 3 * f2 > 5)))
    return rows


@dataclass
class Data:
    """Where the child trains: its URL and table, and how the test reads the rows."""

    url: str
    table: str
    engine: Engine | None
    """The engine harness (None: DuckDB, a file the test opens itself)."""
    workdir: Path

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.engine is not None:
            return self.engine.rows(sql)
        with duckdb.connect(str(self.workdir / "data.duckdb"), read_only=True) as conn:
            return conn.execute(sql).fetchall()


@pytest.fixture
def data(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Data]:
    """The table ``t`` on the engine ``request.param`` (its own schema on a server)."""
    name = request.param
    if name == "duckdb":
        columns = list(zip(*table_rows(), strict=True))
        arrow = pa.table({c: list(v) for (c, _), v in zip(COLUMNS, columns, strict=True)})
        with duckdb.connect(str(tmp_path / "data.duckdb")) as conn:
            conn.register("rows", arrow)
            conn.execute("CREATE TABLE t AS SELECT * FROM rows")
        yield Data(f"duckdb:///{tmp_path / 'data.duckdb'}", "t", None, tmp_path)
        return
    try:
        engine = open_engine(name)
    except EngineUnavailable as err:
        pytest.skip(str(err))
    try:
        engine.create_table(engine.qualify("t"), COLUMNS, table_rows())
        yield Data(_url(engine), engine.qualify("t"), engine, tmp_path)
    finally:
        engine.close()


def _url(engine: Engine) -> str:
    """A URL of ``engine``'s database for the child process."""
    if engine.name == "sqlite":
        return f"sqlite:///{engine.path}"  # type: ignore[attr-defined]
    if engine.name == "postgres":
        return POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
    return f"mysql+pymysql://{netloc}/{engine.schema}"


def command(phase: str, data: Data) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.scripts.train_child",
        phase,
        str(data.workdir),
        data.url,
        data.table,
    ]


ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def run(phase: str, data: Data) -> None:
    """Run a phase to its end."""
    done = subprocess.run(
        command(phase, data), cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "DONE", done.stdout[-2000:]


def run_killed(data: Data) -> None:
    """The ``first`` phase, SIGKILLed once it took a few batches past its first checkpoint."""
    with subprocess.Popen(
        command("first", data),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    ) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        for line in child.stdout:
            if line.strip() == "CHECKPOINT":
                break
        else:
            child.wait(timeout=60)
            raise AssertionError(f"no checkpoint: {child.stderr.read()[-3000:]}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and past_checkpoint(data.workdir / "first.log") < 3:
            time.sleep(0.02)  # a few batches past the checkpoint: they must be replayed
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line]


def past_checkpoint(path: Path) -> int:
    """Batches logged after the last checkpoint line (0 before the first one)."""
    logged = "".join(line[0] for line in lines(path)) if path.exists() else ""
    return logged[logged.rindex("C") :].count("B") if "C" in logged else 0


def read_log(path: Path, until: tuple[int, int] | None = None) -> tuple[Epochs, int]:
    """The batches of each epoch in a child's log, up to the checkpoint ``until`` (epoch,
    batch) when given; and the batches logged after that checkpoint."""
    epochs: Epochs = [[] for _ in range(EPOCHS)]
    epoch, cut, after = -1, False, 0
    for line in lines(path):
        if line[0] == "E":
            epoch = int(line[1])
        elif line[0] == "C" and until is not None and (int(line[1]), int(line[2])) == until:
            cut, after = True, 0
        elif line[0] == "B":
            after += 1
            if not cut:
                epochs[epoch].append([float(x) for x in line[1:]])
    if until is not None:
        assert cut, f"{path.name} has no checkpoint {until}"
    return epochs, after if cut else 0


def flat(batches: list[list[float]]) -> list[float]:
    return [x for batch in batches for x in batch]


def training_rows(model_path: Path, data: Data) -> Counter[float]:
    """The ``x`` of every row of the model's training split, read by the engine's own driver."""
    manifest = json.loads((model_path / "manifest.json").read_text())
    rows = data.rows(f"SELECT x FROM ({manifest['training_sql']}) AS q")
    assert len(rows) == manifest["rows"]["training"]
    return Counter(float(x) for (x,) in rows)


def check_model(models: Path, data: Data) -> None:
    """The folder holds the whole model and nothing else; it loads and evaluates."""
    import sqlfeed.ml

    assert sorted(p.name for p in models.iterdir()) == ["m"]  # no .m.partial-* left
    model = sqlfeed.ml.load(models / "m")
    assert model.task == "binary"
    assert [f.name for f in model.features] == ["x", "f1", "f2", "color"]
    metrics = sqlfeed.ml.evaluate(models / "m", source=data.url)
    assert metrics["rows"] == model.manifest["rows"]["validation"]
    assert metrics["accuracy"] > metrics["baseline"]["accuracy"]


def owned_tables(data: Data, models: Path) -> list[dict[str, Any]]:
    """``sqlfeed scratch list``'s tables that name the model folder ``models/m`` as owner."""
    if data.engine is None or data.engine.name not in ("postgres", "mysql"):
        return []
    listed = run_cli(
        ["scratch", "list", "--db", data.url, "--schema", DEFAULT_SCRATCH, "--format", "json"]
    )
    assert listed.code == 0, listed.err
    owner = f"train --out {(models / 'm').resolve()} "
    return [t for t in json.loads(listed.out) if (t["owner"] or "").startswith(owner)]


@pytest.mark.slow  # three training processes (about 15 s each) per engine
@pytest.mark.sweep  # an engine or two a run, each engine every third run (make test-full: all)
@pytest.mark.parametrize("data", ["duckdb", "sqlite", "postgres", "mysql"], indirect=True)
def test_a_killed_training_run_again_finishes_and_trains_on_every_row_once_per_epoch(
    data: Data,
) -> None:
    pytest.importorskip("tensorflow")
    workdir = data.workdir
    run("full", data)
    run_killed(data)
    assert not (workdir / "models" / "m").exists()
    kept = owned_tables(data, workdir / "models")
    if data.engine is not None and data.engine.name in ("postgres", "mysql"):
        # the killed run's materialized training split, listed as the model's, kept
        assert len(kept) == 1, kept
        assert kept[0]["owner"].endswith(", ended)")
    saved = json.loads((workdir / "ck" / "training_metadata.json").read_text())
    restored = (int(saved["epoch"]), int(saved["batch"]))
    before, replayed = read_log(workdir / "first.log", restored)
    assert restored[0] == 0, f"not killed in the first epoch: restored to {restored}"
    assert len(before[0]) == restored[1] + 1
    assert not before[1]
    assert replayed >= 3, "killed before it took a batch past the checkpoint"
    run("resume", data)

    assert owned_tables(data, workdir / "models") == []  # the resumed run dropped it
    assert owned_tables(data, workdir / "models-full") == []
    check_model(workdir / "models", data)
    check_model(workdir / "models-full", data)
    rows = training_rows(workdir / "models" / "m", data)
    assert rows == training_rows(workdir / "models-full" / "m", data)
    assert sum(rows.values()) == len(rows) > 4000
    full, _ = read_log(workdir / "full.log")
    after, _ = read_log(workdir / "resume.log")
    steps = -(-len(rows) // BATCH_SIZE)
    assert [len(e) for e in full] == [steps] * EPOCHS
    for epoch in range(EPOCHS):
        assert Counter(flat(full[epoch])) == rows, f"uninterrupted epoch {epoch}"
        seen = Counter(flat(before[epoch]) + flat(after[epoch]))
        assert seen == rows, (
            f"epoch {epoch} across the kill: {sum(seen.values())} rows, {len(seen)} distinct, "
            f"of {len(rows)}; {sum(n - 1 for n in seen.values() if n > 1)} seen twice or more"
        )
    assert len(before[0]) + len(after[0]) == steps  # the resumed epoch ends where it should
    assert len(after[1]) == steps  # and the next epoch is whole


# -- checkpoints of another run ------------------------------------------------------------


def _checkpointed_run(data: Data, folder: Path, **options: Any) -> Plan:
    """What a run killed after its first checkpoint leaves in ``folder``: the record of the
    run and its plan, and a feed state."""
    opts = TrainOptions(family="dnn", key="id", checkpoint_dir=str(folder), report=False, **options)
    with connect(data.url) as source:
        run = TrainingRun(QUERY.format(table=data.table), source, "y", data.workdir / "m", opts)
        split = f"SELECT * FROM (SELECT * FROM {data.table}) AS q WHERE id >= 1000"
        made = run.training_plan(split, None)  # a subquery: materialized on a server
    (folder / STATE_FILE).write_text('{"entries": []}')
    return made


@pytest.mark.slow  # trains in a child process (tests/scripts/train_child.py)
@pytest.mark.parametrize("data", ["duckdb"], indirect=True)
def test_checkpoints_of_another_training_run_are_refused_in_one_line(data: Data) -> None:
    folder = data.workdir / "ck"
    _checkpointed_run(data, folder, seed=5)
    args = ["train", "--db", data.url, "--label", "y", "--key", "id", "--seed", "6"]
    args += ["--checkpoint-dir", str(folder), "--out", str(data.workdir / "m")]
    run_ = run_cli([*args, QUERY.format(table=data.table)])
    assert run_.code == 2
    assert run_.err.count("\n") == 1, run_.err
    assert f"{folder} holds the checkpoints of another training run (seed 5 there, 6 here)" in (
        run_.err
    )
    assert "Feeder" not in run_.err
    assert "rank" not in run_.err
    (folder / RUN_FILE).unlink()  # checkpoints with no record of their run
    with pytest.raises(InvalidArgumentError, match="without a readable record of their"):
        sqlfeed_ml.train(
            QUERY.format(table=data.table),
            data.url,
            label="y",
            out=data.workdir / "m",
            key="id",
            checkpoint_dir=str(folder),
        )


@pytest.mark.slow  # trains in a child process (tests/scripts/train_child.py)
@pytest.mark.parametrize("data", ["postgres", "mysql"], indirect=True)
def test_a_resume_whose_scratch_table_is_gone_says_so(data: Data) -> None:
    folder = data.workdir / "ck"
    made = _checkpointed_run(data, folder)
    assert made.scratch_table is not None
    with connect(data.url) as source:
        drop_scratch(made, source)
    with pytest.raises(InvalidArgumentError, match=f"{made.scratch_table}, which is gone"):
        sqlfeed_ml.train(
            QUERY.format(table=data.table),
            data.url,
            label="y",
            out=data.workdir / "m",
            family="dnn",
            key="id",
            checkpoint_dir=str(folder),
            report=False,
        )
