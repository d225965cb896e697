"""Jobs over an Iceberg table that grows while its workers read it (issue #28, "Must show").

A job planned over a catalog table (``iceberg://CATALOG/lake.grow?...``) is pinned to the
snapshot current when it was created: ``sqlfeed worker`` processes (each opening the URL
itself, at whatever snapshot is current then) read that snapshot in every epoch, while the
test process appends rows and commits position deletes; a worker SIGKILLed mid-epoch and
replaced changes nothing (every partition once per epoch); a worker started only after an
append still reads the pinned snapshot. The rows are the committed batches of the workers'
``--out`` folder, compared with :func:`tests.lake.oracle.iceberg_rows` of the pinned
snapshot (pyiceberg's metadata and pyarrow, no sqlfeed code).

The appends are committed while the workers are frozen (SIGSTOP) mid-epoch: the commits land
while the job is certainly running, however fast the machine reads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

import sqlfeed
from sqlfeed.dispatch import JobSpec
from sqlfeed.dispatch.folder import committed_files
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.dispatch.test_leases import queue_url
from tests.helpers.cli import run_cli
from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows, same_rows
from tests.lake.tables import CATALOG, LakeTable, rows

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ROWS = 12_000
FILE_ROWS = 3_000
"""Rows per data file (4 row groups each): 4 files, split into several partitions."""
PARTITIONS = 12
BATCH = 250
SELECT = "SELECT id, a, s, d, x FROM t"
QUEUES = ["sqlite", pytest.param("postgres", marks=pytest.mark.engine)]
Queues = Callable[[str, str], SQLQueue]
ENV = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}


@dataclass
class Growing:
    """An Iceberg catalog table, its sqlfeed URL, and the job's workers over it."""

    table: Table
    url: str
    folder: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: list[IO[bytes]] = field(default_factory=list)
    appended: int = 0

    @property
    def out(self) -> Path:
        return self.folder / "out"

    @property
    def current(self) -> int:
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def start(self, queue: str, job: str, name: str) -> subprocess.Popen[bytes]:
        """``sqlfeed worker`` process ``name`` on the job, writing to :attr:`out`."""
        log = (self.folder / f"{name}.log").open("ab")
        self.logs.append(log)
        argv = [
            sys.executable,
            "-m",
            "sqlfeed",
            "worker",
            "--queue",
            queue,
            "--job",
            job,
            "--db",
            self.url,
            "--out",
            str(self.out),
            "--batch-size",
            str(BATCH),
            "--worker-id",
            name,
            "--checkpoint-every",
            "0",
        ]
        process = subprocess.Popen(argv, cwd=self.folder, env=ENV, stdout=log, stderr=log)
        self.workers[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def join(self, *names: str, timeout: float = 120) -> None:
        """Wait for the workers; each must exit 0 (its log in the failure)."""
        for name in names:
            code = self.workers[name].wait(timeout=timeout)
            assert code == 0, f"worker {name} exited {code}: {self.log(name)}"

    def grow(self) -> None:
        """A new snapshot of 1,500 rows, then position deletes over old and new files."""
        start = 1_000_000 + self.appended
        b.append(self.table, rows(start, 1_500))
        self.appended += 1_500
        files = b.live_data_files(self.table)
        b.delete_positions(self.table, {files[0].path: [1, 2, 3], files[-1].path: [0, 7]})

    def frozen(self, action: Callable[[], None]) -> None:
        """Runs ``action`` while every running worker is stopped (SIGSTOP ... SIGCONT)."""
        running = [p for p in self.workers.values() if p.poll() is None]
        for process in running:
            process.send_signal(signal.SIGSTOP)
        try:
            action()
        finally:
            for process in running:
                process.send_signal(signal.SIGCONT)


@pytest.fixture
def grow_table(tmp_path: Path) -> Iterator[Growing]:
    """12,000 rows in 4 files, then position deletes (the snapshot a job pins has deletes)."""
    catalog = b.iceberg_catalog(tmp_path / "iceberg", CATALOG)
    name = f"grow_{uuid.uuid4().hex[:8]}"
    table = b.iceberg_table(catalog, name, rows(0, ROWS), target_file_rows=FILE_ROWS)
    b.delete_positions(
        table, {f.path: list(range(5, f.record_count, 13)) for f in b.live_data_files(table)}
    )
    entry = LakeTable(
        name=name,
        format="iceberg",
        location="",
        snapshots=[],
        expected={},
        catalog={
            "name": CATALOG,
            "uri": f"sqlite:///{tmp_path / 'iceberg' / 'catalog.db'}",
            "warehouse": (tmp_path / "iceberg").resolve().as_uri(),
        },
        table_name=f"{b.NAMESPACE}.{name}",
    )
    growing = Growing(table, f"{entry.catalog_url}&view=t", tmp_path)
    yield growing
    for process in growing.workers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(timeout=10)
    for log in growing.logs:
        log.close()


def _create(growing: Growing, queue: SQLQueue, job: str, epochs: int, ttl: float) -> int:
    """The job, planned through the Python API; the snapshot it pinned (current now)."""
    pinned = growing.current
    with sqlfeed.connect(growing.url) as source:
        plan = sqlfeed.plan(SELECT, source, partitions=PARTITIONS)
    assert plan.strategy == "fragments", plan.reason
    assert str(pinned) in plan.reason, plan.reason
    queue.create_job(JobSpec(job, plan, epochs=epochs, seed=3, lease_ttl=ttl))
    return pinned


def _stopped_holding(
    process: subprocess.Popen[bytes], queue: SQLQueue, job: str, worker: str
) -> bool:
    """Whether ``worker`` holds a lease: then it is left stopped (SIGSTOP) holding it, so a
    kill lands mid-partition however fast it reads; else it goes on."""
    if not _holds_lease(queue, job, worker):
        return False
    process.send_signal(signal.SIGSTOP)
    if _holds_lease(queue, job, worker):
        return True
    process.send_signal(signal.SIGCONT)  # it gave the lease back meanwhile: try again
    return False


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, f"no {what} in {timeout} s"
        time.sleep(0.02)


def _started(out: Path, epoch: int) -> Callable[[], bool]:
    """Whether a worker wrote a batch of ``epoch`` (committed or not)."""
    return lambda: any((out / f"epoch={epoch}").glob("part-*.parquet"))


def _check(growing: Growing, queue: SQLQueue, job: str, epochs: int, pinned: int) -> None:
    """Every partition completed once per epoch; each epoch's committed rows are exactly
    the pinned snapshot's, none of the rows appended (or deleted) since."""
    expected = iceberg_rows(growing.table, pinned).select(["id", "a", "s", "d", "x"])
    latest = iceberg_rows(growing.table, growing.current)
    assert latest.num_rows != expected.num_rows  # the table did change under the job
    completions = queue.completions(job)
    assert set(completions.values()) == {1}, completions
    assert len(completions) == epochs * PARTITIONS
    assert queue.status(job).complete
    for epoch in range(epochs):
        files = committed_files(growing.out, epoch)
        got = pa.concat_tables([pq.read_table(f) for f in files])
        try:
            same_rows(got, expected)
        except AssertionError as err:
            raise AssertionError(f"epoch {epoch} vs snapshot {pinned}: {err}") from None


def _holds_lease(queue: SQLQueue, job: str, name: str) -> bool:
    return any(worker == name for worker, _, _ in queue.leases(job))


@pytest.fixture
def queues() -> Iterator[Callable[[str, str], SQLQueue]]:
    """``(url, job) -> queue``: opened; afterwards the job is deleted and the queue closed."""
    opened: list[tuple[SQLQueue, str]] = []

    def open_(url: str, job: str) -> SQLQueue:
        opened.append((SQLQueue(url), job))
        return opened[-1][0]

    yield open_
    for queue, job in opened:
        with contextlib.suppress(Exception):  # best-effort cleanup: the job may not exist
            queue.delete(job)
        queue.close()


@pytest.mark.parametrize("backend", QUEUES)
def test_two_workers_read_the_pinned_snapshot_while_the_table_grows(
    grow_table: Growing, tmp_path: Path, queues: Queues, backend: str
) -> None:
    """2 workers, 3 epochs; rows appended and deleted during epochs 0 and 1: every epoch
    holds exactly the rows of the snapshot current when the job was created."""
    url, job = queue_url(backend, tmp_path), f"grow-{uuid.uuid4().hex[:8]}"
    queue = queues(url, job)
    pinned = _create(grow_table, queue, job, epochs=3, ttl=30)
    for name in ("a", "b"):
        grow_table.start(url, job, name)
    for epoch in (0, 1):
        _wait(_started(grow_table.out, epoch), f"batch of epoch {epoch}")
        grow_table.frozen(grow_table.grow)
    grow_table.join("a", "b")
    _check(grow_table, queue, job, 3, pinned)


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("backend", QUEUES)
def test_a_worker_killed_mid_epoch_and_replaced_leaves_every_epoch_exact(
    grow_table: Growing, tmp_path: Path, queues: Queues, backend: str
) -> None:
    """Worker a is SIGKILLed holding a lease in epoch 0; the table grows; worker c (opening
    the URL at the new snapshot) joins b; the leases of a expire and are read again."""
    url, job = queue_url(backend, tmp_path), f"kill-{uuid.uuid4().hex[:8]}"
    queue = queues(url, job)
    pinned = _create(grow_table, queue, job, epochs=2, ttl=3)
    killed = grow_table.start(url, job, "a")
    _wait(lambda: _stopped_holding(killed, queue, job, "a"), "worker a stopped holding a lease")
    killed.send_signal(signal.SIGKILL)
    grow_table.start(url, job, "b")
    assert killed.wait(timeout=30) == -signal.SIGKILL
    assert _holds_lease(queue, job, "a")  # killed mid-partition: its lease waits to expire
    grow_table.frozen(grow_table.grow)
    grow_table.start(url, job, "c")
    grow_table.join("b", "c")
    _check(grow_table, queue, job, 2, pinned)


def test_a_cli_job_read_by_a_worker_started_after_an_append_reads_the_pinned_snapshot(
    grow_table: Growing, tmp_path: Path, queues: Queues
) -> None:
    """``sqlfeed job create`` pins the snapshot current then; the table grows; a worker
    started afterwards (its URL now opens at the new snapshot) reads the pinned one."""
    url, job = f"sqlite:///{tmp_path / 'queue.db'}", "cli"
    pinned = grow_table.current
    made = run_cli(
        [
            "job",
            "create",
            "--queue",
            url,
            "--job",
            job,
            "--db",
            grow_table.url,
            "-m",
            str(PARTITIONS),
            "--epochs",
            "2",
            SELECT,
        ]
    )
    assert made.code == 0, made.err
    grow_table.grow()
    assert grow_table.current != pinned
    grow_table.start(url, job, "late")
    grow_table.join("late")
    queue = queues(url, job)
    _check(grow_table, queue, job, 2, pinned)
    plan = queue.job(job).plan
    assert plan.strategy == "fragments", plan.reason
    assert str(pinned) in plan.reason, plan.reason
