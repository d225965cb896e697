"""Workers SIGKILLed at random and replaced mid-epoch: every partition completes exactly
once per epoch, and the acknowledged rows are exactly the query's rows once per epoch."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

import sqlfeed
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.test_leases import queue_url

pytestmark = [pytest.mark.slow, pytest.mark.engine]

ROWS = 12_000
PARTITIONS = 240
EPOCHS = 2
WORKERS = 8
KILLS = 10


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_killed_workers_lose_nothing_and_repeat_nothing_acknowledged(
    backend: str, tmp_path: Path
) -> None:
    data = tmp_path / "data.db"
    with sqlite3.connect(data) as conn:
        conn.execute("CREATE TABLE t (id INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(ROWS)])
    source_url = f"sqlite:///{data}"
    plan = sqlfeed.plan("SELECT id FROM t", source_url, partitions=PARTITIONS,
                        strategy="range", key="id")  # fmt: skip
    assert plan.num_partitions >= 200
    queue = SQLQueue(queue_url(backend, tmp_path))
    job = f"faults-{uuid.uuid4().hex[:8]}"
    queue.create_job(JobSpec(job, plan, epochs=EPOCHS, seed=11, lease_ttl=1.0))
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = random.Random(7)
    started = 0

    def start() -> subprocess.Popen[bytes]:
        nonlocal started
        started += 1
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fault_worker", queue.url, job, source_url,
             str(logs / f"w{started}.log"), f"w{started}"],
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip

    workers = [start() for _ in range(WORKERS)]
    kills = 0
    deadline = time.monotonic() + 240
    try:
        while not queue.status(job).complete:
            assert time.monotonic() < deadline, queue.status(job).to_dict()
            time.sleep(rng.uniform(0.1, 0.4))
            alive = [w for w in workers if w.poll() is None]
            if kills < KILLS and alive:
                victim = rng.choice(alive)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                workers.append(start())  # a new worker joins mid-epoch
            elif not alive:
                workers.append(start())
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
    assert kills == KILLS

    # Every task was completed exactly once (the lease token guards completion).
    assert set(queue.completions(job).values()) == {1}
    assert len(queue.completions(job)) == EPOCHS * plan.num_partitions

    delivered: dict[tuple[int, int, int], list[tuple[float, tuple[int, ...]]]] = defaultdict(list)
    acknowledged: dict[tuple[int, int, int], float] = {}
    for log in logs.glob("*.log"):
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) < 5 or parts[0] not in "DA":
                continue  # a line cut short by SIGKILL
            key = (int(parts[2]), int(parts[3]), int(parts[4]))
            if parts[0] == "A":
                assert key not in acknowledged, f"batch {key} acknowledged twice"
                acknowledged[key] = float(parts[1])
            else:
                delivered[key].append((float(parts[1]), tuple(map(int, parts[5:]))))
    for key, copies in delivered.items():
        # A batch delivered again has the same rows, and was never acknowledged before.
        assert len({ids for _, ids in copies}) == 1, f"batch {key} changed between deliveries"
        if key in acknowledged:
            later = [t for t, _ in copies if t > acknowledged[key]]
            assert not later, f"batch {key} was delivered again after its acknowledgement"
    for epoch in range(EPOCHS):
        rows = [i for (e, _, _), copies in delivered.items() if e == epoch for i in copies[0][1]]
        assert sorted(rows) == list(range(ROWS)), f"epoch {epoch}: rows lost or repeated"
    # The queue's own count of acknowledged rows: exactly the table, once per epoch.
    status = queue.status(job)
    assert sum(w["rows"] for w in status.workers) == EPOCHS * ROWS
    queue.delete(job)
