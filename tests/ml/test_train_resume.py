"""Kill and resume: ``sqlfeed.ml.train(..., checkpoint_dir=...)`` SIGKILLed mid-epoch, run again.

:mod:`tests.scripts.train_child` trains a ``dnn`` on a 6,000-row DuckDB table in a child
process: once uninterrupted, once SIGKILLed a few batches after its first checkpoint (in
the middle of the first epoch), and once more with the same call. The resumed call
finishes and writes a whole model folder (no partial one beside it); the rows the killed
run trained on up to the checkpoint it is restored from, plus the rows of the resumed run,
are every training row exactly once per epoch (the rows taken after that checkpoint are
trained on again, as they must be); the uninterrupted run's epochs are the same rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]
ROWS = 6000
EPOCHS = 2
BATCH_SIZE = 64

Epochs = list[list[list[float]]]
"""Per epoch, the batches the model trained on, each as its ``x`` values."""


def make_data(workdir: Path) -> None:
    """``workdir/data.duckdb``: ``t(id, f1, f2, color, y)``, a binary label of the features."""
    with duckdb.connect(str(workdir / "data.duckdb")) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT range AS id, ((range * 37) % 101) / 10.0 AS f1, "
            "sin(range) AS f2, ['red', 'green', 'blue', 'grey'][range % 4 + 1] AS color, "
            "CASE WHEN ((range * 37) % 101) / 10.0 + 3 * sin(range) > 5 THEN 1 ELSE 0 END AS y "
            f"FROM range({ROWS})"
        )


def command(phase: str, workdir: Path) -> list[str]:
    return [sys.executable, "-m", "tests.scripts.train_child", phase, str(workdir)]


ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def run(phase: str, workdir: Path) -> None:
    """Run a phase to its end."""
    done = subprocess.run(
        command(phase, workdir), cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "DONE", done.stdout[-2000:]


def run_killed(workdir: Path) -> None:
    """The ``first`` phase, SIGKILLed once it took a few batches past its first checkpoint."""
    with subprocess.Popen(
        command("first", workdir),
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
        while time.monotonic() < deadline and past_checkpoint(workdir / "first.log") < 3:
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


def training_rows(model_path: Path, workdir: Path) -> Counter[float]:
    """The ``x`` of every row of the model's training split, read from DuckDB directly."""
    manifest = json.loads((model_path / "manifest.json").read_text())
    with duckdb.connect(str(workdir / "data.duckdb"), read_only=True) as conn:
        rows = conn.execute(f"SELECT x FROM ({manifest['training_sql']}) AS q").fetchall()
    assert len(rows) == manifest["rows"]["training"]
    return Counter(float(x) for (x,) in rows)


def check_model(models: Path, workdir: Path) -> None:
    """The folder holds the whole model and nothing else; it loads and evaluates."""
    import sqlfeed.ml

    assert sorted(p.name for p in models.iterdir()) == ["m"]  # no .m.partial-* left
    model = sqlfeed.ml.load(models / "m")
    assert model.task == "binary"
    assert [f.name for f in model.features] == ["x", "f1", "f2", "color"]
    metrics = sqlfeed.ml.evaluate(models / "m", source=f"duckdb:///{workdir / 'data.duckdb'}")
    assert metrics["rows"] == model.manifest["rows"]["validation"]
    assert metrics["accuracy"] > metrics["baseline"]["accuracy"]


@pytest.mark.slow  # three training processes (about 15 s each)
def test_a_killed_training_run_again_finishes_and_trains_on_every_row_once_per_epoch(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    make_data(tmp_path)
    run("full", tmp_path)
    run_killed(tmp_path)
    assert not (tmp_path / "models" / "m").exists()
    saved = json.loads((tmp_path / "ck" / "training_metadata.json").read_text())
    restored = (int(saved["epoch"]), int(saved["batch"]))
    before, replayed = read_log(tmp_path / "first.log", restored)
    assert restored[0] == 0, f"not killed in the first epoch: restored to {restored}"
    assert len(before[0]) == restored[1] + 1
    assert not before[1]
    assert replayed >= 3, "killed before it took a batch past the checkpoint"
    run("resume", tmp_path)

    check_model(tmp_path / "models", tmp_path)
    check_model(tmp_path / "models-full", tmp_path)
    rows = training_rows(tmp_path / "models" / "m", tmp_path)
    assert rows == training_rows(tmp_path / "models-full" / "m", tmp_path)
    assert sum(rows.values()) == len(rows) > 4000
    full, _ = read_log(tmp_path / "full.log")
    after, _ = read_log(tmp_path / "resume.log")
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
