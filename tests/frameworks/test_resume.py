"""Kill and resume: train N steps, checkpoint, SIGKILL the process, restore, finish the epoch.

Each mode runs :mod:`tests.scripts.resume_child` in subprocesses: the uninterrupted run, a run
killed (SIGKILL) a few batches after its checkpoint, and the run resumed from that
checkpoint. The rows the consumer took before the checkpoint plus those after the restore
must be the epoch exactly once; in static mode, in the uninterrupted run's order.
"""

from __future__ import annotations

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
ROWS = 3000


def make_data(workdir: Path, rows: int = ROWS) -> None:
    """``workdir/data.duckdb`` with the table ``t`` of ids 0 .. rows - 1."""
    with duckdb.connect(str(workdir / "data.duckdb")) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT range AS id FROM range({rows})")


def run_phase(mode: str, phase: str, workdir: Path, steps: int = 0, *extra: str) -> None:
    """Run one phase of the child; ``first`` is SIGKILLed a few batches after its checkpoint."""
    command = [
        sys.executable,
        "-m",
        "tests.scripts.resume_child",
        mode,
        phase,
        str(workdir),
        str(steps),
        *extra,
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if phase != "first":
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "CHECKPOINT":
                break
        else:
            child.wait(timeout=60)
            raise AssertionError(f"no checkpoint: {child.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(read_log(workdir / "first.log")[1]) < 3:
            time.sleep(0.05)  # let the consumer take a few batches past the checkpoint
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


def read_log(path: Path) -> tuple[list[list[int]], list[list[int]]]:
    """The batches (lists of ids) logged before the ``C`` line, and after it."""
    before: list[list[int]] = []
    after: list[list[int]] = []
    target = before
    if not path.exists():
        return before, after
    for line in path.read_text().splitlines():
        if line == "C":
            target = after
        else:
            target.append([int(i) for i in line.split()])
    return before, after


def flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def kill_and_resume(mode: str, workdir: Path, steps: int, *extra: str) -> dict[str, list[int]]:
    """The three runs; returns the ids of the full run, before the checkpoint and resumed."""
    make_data(workdir)
    run_phase(mode, "full", workdir, 0, *extra)
    run_phase(mode, "first", workdir, steps, *extra)
    before, lost = read_log(workdir / "first.log")
    assert len(before) == steps
    assert lost, "the process was killed before it took a batch past the checkpoint"
    run_phase(mode, "resume", workdir, 0, *extra)
    full = read_log(workdir / "full.log")[0]
    resumed = read_log(workdir / "resume.log")[0]
    seen = flat(before) + flat(resumed)
    assert Counter(seen) == Counter(range(ROWS)), "not the epoch exactly once"
    return {"full": flat(full), "before": flat(before), "resumed": flat(resumed)}


@pytest.mark.slow
def test_a_killed_shuffled_feeder_resumes_in_the_uninterrupted_order(tmp_path: Path) -> None:
    ids = kill_and_resume("static", tmp_path, 7)
    assert ids["before"] + ids["resumed"] == ids["full"]
    assert ids["full"] != sorted(ids["full"])  # it was shuffled


@pytest.mark.slow
def test_a_killed_torch_dataloader_with_two_workers_resumes_in_order(tmp_path: Path) -> None:
    pytest.importorskip("torchdata")
    ids = kill_and_resume("torch", tmp_path, 9)
    assert ids["before"] + ids["resumed"] == ids["full"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_a_killed_keras_training_resumes_from_its_checkpoint_in_order(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    ids = kill_and_resume("keras", tmp_path, 12)
    assert ids["before"] + ids["resumed"] == ids["full"]


def sqlfeed_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "sqlfeed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_two_killed_job_workers_rewound_to_their_checkpoint_see_each_row_once(
    tmp_path: Path,
) -> None:
    make_data(tmp_path)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    sqlfeed_cli(
        "job",
        "create",
        "--queue",
        queue,
        "--job",
        "j",
        "--db",
        f"duckdb:///{tmp_path / 'data.duckdb'}",
        "--partitions",
        "8",
        "--seed",
        "3",
        "SELECT id FROM t",
    )
    steps = 10
    command = [sys.executable, "-m", "tests.scripts.resume_child", "elastic"]
    children = [
        subprocess.Popen(
            [*command, "first", str(tmp_path), str(steps), name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("w0", "w1")
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "CHECKPOINT"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(
        len(read_log(tmp_path / f"first-{n}.log")[1]) < 3 for n in ("w0", "w1")
    ):
        time.sleep(0.05)
    for child in children:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        assert child.stdout is not None
        child.stdout.close()
    assert "rewound to checkpoint 10" in sqlfeed_cli(
        "job", "rewind", "--queue", queue, "--job", "j", "--to", str(steps)
    )
    resumed = [
        subprocess.Popen([*command, "resume", str(tmp_path), "0", name], cwd=ROOT)
        for name in ("w0", "w1")
    ]
    for child in resumed:
        assert child.wait(timeout=300) == 0
    seen: list[int] = []
    for name in ("w0", "w1"):
        before, lost = read_log(tmp_path / f"first-{name}.log")
        assert len(before) == steps
        assert lost  # delivered after the checkpoint, lost with the process
        seen += flat(before) + flat(read_log(tmp_path / f"resume-{name}.log")[0])
    assert Counter(seen) == Counter(range(ROWS))
    assert "complete" in sqlfeed_cli("job", "status", "--queue", queue, "--job", "j")


@pytest.mark.slow
def test_a_killed_torch_job_with_two_dataloader_workers_rewound_sees_each_row_once(
    tmp_path: Path,
) -> None:
    make_data(tmp_path)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    steps = 9
    run_phase("torch-job", "first", tmp_path, steps)  # the DataLoader workers are orphaned
    before, lost = read_log(tmp_path / "first.log")
    assert len(before) == steps
    assert lost, "the process was killed before it took a batch past the checkpoint"
    rewound = sqlfeed_cli("job", "rewind", "--queue", queue, "--job", "j", "--to", str(steps))
    assert f"rewound to checkpoint {steps}" in rewound
    run_phase("torch-job", "resume", tmp_path)
    resumed = read_log(tmp_path / "resume.log")[0]
    assert Counter(flat(before) + flat(resumed)) == Counter(range(ROWS))
    assert "complete" in sqlfeed_cli("job", "status", "--queue", queue, "--job", "j")
