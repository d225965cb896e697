"""``sqlfeed worker``: it says what it waits for, and records checkpoints for ``job rewind``.

A worker that has nothing to take waits for the leases other workers hold (until they
are completed, or expire when their worker was killed): it says so once on stderr instead
of waiting in silence. Its deliveries are recorded in the job's ledger (checkpoint ids =
Unix seconds), so ``sqlfeed job rewind --to ID`` hands out again exactly what came after.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.cli.worker import waiting_line
from sqlfeed.dispatch import JobSpec, Lease, open_queue
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

ROWS = 4000


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT range AS id FROM range({ROWS})")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _create(job: str, *flags: str) -> None:
    made = run_cli(
        [
            "job",
            "create",
            "--queue",
            "sqlite:///q.db",
            "--job",
            job,
            "--db",
            "duckdb:///d.duckdb",
            "--strategy",
            "hash",
            *flags,
            "SELECT id FROM t",
        ]
    )
    assert made.code == 0, made.err


def test_a_waiting_worker_says_once_whose_leases_it_waits_for(work: Path) -> None:
    _create("j", "-m", "4", "--lease-ttl", "4")
    queue = open_queue("sqlite:///q.db")
    taken = [queue.acquire("j", "ghost") for _ in range(2)]  # a worker killed at once
    assert all(lease is not None for lease in taken)
    run = run_cli(
        [
            "worker",
            "--queue",
            "sqlite:///q.db",
            "--job",
            "j",
            "--db",
            "duckdb:///d.duckdb",
            "--worker-id",
            "me",
        ]
    )
    assert run.code == 0, run.err
    (line,) = run.err.splitlines()
    assert re.fullmatch(
        r"sqlfeed: waiting for 2 leases held by worker ghost \(they expire in \d s unless it "
        r"renews them: lease TTL 4 s\)",
        line,
    ), line
    status = queue.status("j")
    assert status.complete
    assert {w["worker"]: w["rows"] for w in status.workers} == {"ghost": 0, "me": ROWS}


def test_the_waiting_line_names_each_holder_and_nothing_when_busy() -> None:
    leases = [("a", 0, 30.2), ("b", 0, 12.6), ("a", 0, 40.0)]
    assert waiting_line(leases, "me", 60) == (
        "waiting for 3 leases held by workers a (2), b (1) (they expire in 13 s unless their "
        "workers renew them: lease TTL 60 s)"
    )
    assert waiting_line([("a", 1, 5.0)], "me", 60) == (
        "waiting for 1 lease held by worker a (it expires in 5 s unless it renews it: "
        "lease TTL 60 s)"
    )
    assert waiting_line(leases, "a", 60) is None  # it reads a partition itself
    assert waiting_line([], "me", 60) is None


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["job", "create", "--help"], "(default 60)"),
        (["worker", "--help"], "default 60 s"),
    ],
)
def test_the_default_lease_ttl_is_stated(argv: list[str], text: str) -> None:
    run = run_cli(argv)
    assert run.code == 0
    assert text in " ".join(run.out.split())


def test_a_finished_worker_leaves_a_checkpoint_that_rewinds_to_nothing(work: Path) -> None:
    _create("j", "-m", "4")
    run = run_cli(
        ["worker", "--queue", "sqlite:///q.db", "--job", "j", "--db", "duckdb:///d.duckdb"]
    )
    assert run.code == 0, run.err
    queue = open_queue("sqlite:///q.db")
    (checkpoint,) = queue.checkpoints("j")
    assert abs(checkpoint - time.time()) < 60
    rewound = run_cli(
        ["job", "rewind", "--queue", "sqlite:///q.db", "--job", "j", "--to", str(checkpoint)]
    )
    assert rewound.code == 0, rewound.err
    assert "4 partitions done then" in rewound.out
    status = run_cli(["job", "status", "--queue", "sqlite:///q.db", "--job", "j"])
    assert f"checkpoints (sqlfeed job rewind --to ID): {checkpoint}\n" in status.out
    assert queue.status("j").complete


def test_no_checkpoint_with_checkpoint_every_zero(work: Path) -> None:
    _create("j", "-m", "2")
    run = run_cli(
        [
            "worker",
            "--queue",
            "sqlite:///q.db",
            "--job",
            "j",
            "--db",
            "duckdb:///d.duckdb",
            "--checkpoint-every",
            "0",
        ]
    )
    assert run.code == 0, run.err
    assert open_queue("sqlite:///q.db").checkpoints("j") == []


def _ids(folder: Path) -> list[int]:
    """The ids of every batch file a worker wrote there (committed or not)."""
    return [i for f in folder.rglob("part-*.parquet") for i in pq.read_table(f)["id"].to_pylist()]


@pytest.mark.slow
def test_rewinding_to_a_stopped_workers_checkpoint_hands_out_exactly_the_rest(work: Path) -> None:
    """Worker A is stopped (SIGTERM) mid-job and records its checkpoint; worker B finishes
    the job; rewound to A's checkpoint, the job hands out again exactly what B delivered."""
    _create("j", "-m", "4", "--lease-ttl", "30")
    env = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}
    worker = [
        sys.executable,
        "-m",
        "sqlfeed",
        "worker",
        "--queue",
        "sqlite:///q.db",
        "--job",
        "j",
        "--db",
        "duckdb:///d.duckdb",
        "--batch-size",
        "5",
    ]
    first = subprocess.Popen(
        [*worker, "--out", "a"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while len(list(work.glob("a/epoch=0/part-*.parquet"))) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 143, err
    done_by_a = int(re.search(r": (\d+) rows in", out).group(1))  # type: ignore[union-attr]
    assert 0 < done_by_a < ROWS
    (checkpoint,) = open_queue("sqlite:///q.db").checkpoints("j")
    time.sleep(1.1)  # B's checkpoint gets a later id
    second = subprocess.run(
        [*worker[:-2], "--out", "b"], env=env, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr
    rewound = run_cli(
        ["job", "rewind", "--queue", "sqlite:///q.db", "--job", "j", "--to", str(checkpoint)]
    )
    assert rewound.code == 0, rewound.err
    third = run_cli([*worker[3:], "--out", "c"])  # the same batches: offsets count them
    assert third.code == 0, third.err
    assert f": {ROWS - done_by_a} rows in" in third.out
    a_rows = [
        i for f in Path("a").rglob("part-*.parquet") for i in pq.read_table(f)["id"].to_pylist()
    ]
    assert len(a_rows) == done_by_a
    assert sorted(a_rows + _ids(Path("c"))) == list(range(ROWS))


@pytest.mark.engine
@pytest.mark.parametrize("name", ["memory", "sqlite", "postgres", "mysql"])
def test_every_queue_says_who_holds_its_leases_and_for_how_long(name: str, tmp_path: Path) -> None:
    if name in ("postgres", "mysql"):
        get_engine(name)
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path}/q.db",
        "postgres": POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1),
        "mysql": MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1),
    }[name]
    queue = open_queue(url)
    job = f"leases_{uuid.uuid4().hex[:8]}"
    queue.create_job(
        JobSpec(job, sqlfeed.plan("SELECT 1 AS x", partitions=2, strategy="hash"), lease_ttl=30.0)
    )
    try:
        assert queue.leases(job) == []
        lease = queue.acquire(job, "w1")
        assert isinstance(lease, Lease)
        ((worker, epoch, seconds),) = queue.leases(job)
        assert (worker, epoch) == ("w1", 0)
        assert 25 < seconds <= 30
        queue.complete(lease)
        assert queue.leases(job) == []
    finally:
        queue.delete(job)
