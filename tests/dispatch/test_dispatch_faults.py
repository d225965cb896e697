"""Worker processes killed, terminated and frozen at random, also inside their own queue
transactions, on SQLite, PostgreSQL and MariaDB queues: every partition completes exactly
once per epoch, the acknowledged rows are exactly the query's rows once per epoch, a
terminated worker exits within the deadline with its lease given back, and a frozen one
is taken over (where the backend can: not from inside a SQLite transaction).

Workers are processes forked from a server that imported sqlfeed once (multiprocessing's
forkserver), running :mod:`tests.scripts.fault_worker`, which logs what it delivers and what was
acknowledged.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sqlfeed
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.sessions import READ_ONLY
from sqlfeed.dispatch.shutdown import DEADLINE_SECONDS, RELEASE_MARGIN
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.dispatch.test_leases import queue_url
from tests.helpers import sweep
from tests.scripts import fault_worker

# Each test's cases (one a backend) rotate: a share a run, never none (tests/helpers/sweep.py).
pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.rotate]

BACKENDS = ("sqlite", "postgres", "mysql")
ROWS = 12_000
SLACK = 3.0
"""Seconds allowed beyond a bound for a loaded machine to schedule the processes."""


@dataclass
class Run:
    """A job on a queue backend, its worker processes and their logs."""

    queue: SQLQueue
    job: str
    source: str
    logs: Path
    plan: sqlfeed.Plan
    epochs: int
    processes: dict[str, Any] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)
    """Workers that were SIGSTOPped at some point (they may deliver late, see _check)."""

    def start(self, name: str, *options: str) -> Any:
        """Fork worker ``name`` (its log: LOGS/name.log)."""
        argv = [
            self.queue.url,
            self.job,
            self.source,
            str(self.logs / f"{name}.log"),
            name,
            *options,
        ]
        process = _context().Process(target=fault_worker.main, args=(argv,), name=name)
        process.start()
        self.processes[name] = process
        return process

    def log(self, name: str) -> list[list[str]]:
        path = self.logs / f"{name}.log"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return [line.split() for line in text.splitlines() if line]

    def wait_for(self, name: str, kind: str, timeout: float = 60) -> list[str]:
        """The first log line of ``kind`` of worker ``name``, once it appears."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            found = [line for line in self.log(name) if line[0] == kind]
            if found:
                return found[0]
            assert self.processes[name].is_alive(), f"{name} exited before a {kind} line"
            time.sleep(0.01)
        raise AssertionError(f"no {kind} line from {name} in {timeout}s")

    def tasks(self, where: str = "1 = 1") -> list[Any]:
        """Rows of the job's tasks (state, worker, acked, ...)."""
        with self.queue.engine.connect() as c:
            c.execution_options(**READ_ONLY)  # SQLite: never waits for the write lock
            return list(
                c.execute(
                    sa.text(f"SELECT * FROM sqlfeed_tasks WHERE job = :j AND {where}"),
                    {"j": self.job},
                )
            )

    def done(self) -> int:
        return sum(e["done"] for e in self.queue.status(self.job).per_epoch)

    def finish(self, timeout: float = 120) -> None:
        """Let the workers complete the job (one more if none is running), then check it."""
        until = time.monotonic() + timeout
        for name in self.frozen:
            _signal(self.processes[name], signal.SIGCONT)
        if not any(p.is_alive() for p in self.processes.values()):
            self.start("finisher")
        while not self.queue.status(self.job).complete:
            assert time.monotonic() < until, self.queue.status(self.job).to_dict()
            time.sleep(0.1)
        for process in self.processes.values():
            process.join(timeout=max(1.0, until - time.monotonic()))
            assert not process.is_alive(), f"{process.name} did not stop once the job was done"
        _check(self)
        self.queue.delete(self.job)


_CONTEXT: Any = None


def _context() -> Any:
    """Forked from a server that imported sqlfeed once: a worker starts in milliseconds."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        drivers = [
            "sqlalchemy.dialects.postgresql.psycopg",
            "sqlalchemy.dialects.mysql.pymysql",
            "psycopg",
            "pymysql",
        ]
        _CONTEXT.set_forkserver_preload(["tests.scripts.fault_worker", *drivers])
    return _CONTEXT


def _signal(process: Any, signum: int) -> None:
    """Signal a worker that may have exited. Workers are forkserver children: the fork
    server reaps them and reports the exit code later through a pipe, so a worker whose
    `exitcode` still reads None may already be gone."""
    if process.pid is not None and process.exitcode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    data = tmp_path / "data.db"
    with sqlite3.connect(data) as conn:
        conn.execute("CREATE TABLE t (id INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(ROWS)])
    runs: list[Run] = []

    def make(backend: str, partitions: int, epochs: int = 1, ttl: float = 1.0) -> Run:
        source = f"sqlite:///{data}"
        plan = sqlfeed.plan(
            "SELECT id FROM t", source, partitions=partitions, strategy="range", key="id"
        )
        queue = SQLQueue(queue_url(backend, tmp_path))
        job = f"faults-{uuid.uuid4().hex[:8]}"
        queue.create_job(JobSpec(job, plan, epochs=epochs, seed=11, lease_ttl=ttl))
        logs = tmp_path / f"logs-{job}"
        logs.mkdir()
        runs.append(Run(queue, job, source, logs, plan, epochs))
        return runs[-1]

    yield make
    for run in runs:
        for process in run.processes.values():
            _signal(process, signal.SIGCONT)
            _signal(process, signal.SIGKILL)
            process.join(timeout=10)
        run.queue.close()


def _check(run: Run) -> None:
    """Every task completed once; acknowledged batches never delivered again (but late by
    a frozen worker, whose delivery then fails to acknowledge); the rows of each epoch,
    from the batches delivered, are exactly the table's, once; the queue's count too."""
    assert set(run.queue.completions(run.job).values()) == {1}
    assert len(run.queue.completions(run.job)) == run.epochs * run.plan.num_partitions
    delivered: dict[tuple[int, ...], list[tuple[float, str, tuple[int, ...]]]] = defaultdict(list)
    acknowledged: dict[tuple[int, ...], tuple[float, str]] = {}
    for log in run.logs.glob("*.log"):
        name = log.stem
        for parts in run.log(name):
            if parts[0] not in ("D", "A") or len(parts) < 5:
                continue  # a line cut short by SIGKILL, or another kind
            key = tuple(int(p) for p in parts[2:5])
            if parts[0] == "A":
                assert key not in acknowledged, f"batch {key} acknowledged twice"
                acknowledged[key] = (float(parts[1]), name)
            else:
                delivered[key].append((float(parts[1]), name, tuple(map(int, parts[5:]))))
    for key, copies in delivered.items():
        assert len({ids for _, _, ids in copies}) == 1, f"batch {key} changed between deliveries"
        if key in acknowledged:
            at, by = acknowledged[key]
            for when, name, _ in copies:
                late = when > at
                assert not late or (name in run.frozen and name != by), (
                    f"batch {key} delivered by {name} after {by} acknowledged it"
                )
    for epoch in range(run.epochs):
        rows = [i for (e, _, _), copies in delivered.items() if e == epoch for i in copies[0][2]]
        assert sorted(rows) == list(range(ROWS)), f"epoch {epoch}: rows lost or repeated"
    status = run.queue.status(run.job)
    assert sum(w["rows"] for w in status.workers) == run.epochs * ROWS


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_terminated_and_frozen_workers_lose_nothing_and_repeat_nothing_acknowledged(
    backend: str, make_run: Callable[..., Run]
) -> None:
    """8 workers, 3 epochs of 240 partitions; at random, 10 SIGKILLs, 8 SIGTERMs and 4
    SIGSTOPs of 1.5-2.5 s (past the 1 s TTL), each killed or terminated worker replaced by
    a new one mid-epoch."""
    run = make_run(backend, partitions=240, epochs=3)
    rng = random.Random(7)
    events = ["kill"] * 10 + ["term"] * 8 + ["stop"] * 4
    rng.shuffle(events)
    count = 0

    def start() -> None:
        nonlocal count
        count += 1
        acks = "0" if count % 2 else "0.05"
        run.start(f"w{count}", "--ack-interval", acks, "--consume", "0.02")

    for _ in range(8):
        start()
    terminated: dict[str, float] = {}
    exited: dict[str, float] = {}
    frozen_until: dict[str, float] = {}
    deadline = time.monotonic() + 300
    while not run.queue.status(run.job).complete:
        assert time.monotonic() < deadline, run.queue.status(run.job).to_dict()
        time.sleep(rng.uniform(0.05, 0.25))
        now = time.monotonic()
        for name, until in list(frozen_until.items()):
            if now >= until:
                _signal(run.processes[name], signal.SIGCONT)
                del frozen_until[name]
        for name in terminated.keys() - exited.keys():
            if not run.processes[name].is_alive():
                exited[name] = now
        running = [
            n
            for n, p in run.processes.items()
            if p.is_alive() and n not in terminated and n not in frozen_until
        ]
        if events and running:
            event, victim = events.pop(), rng.choice(running)
            process = run.processes[victim]
            if event == "kill":
                _signal(process, signal.SIGKILL)
                start()
            elif event == "term":
                _signal(process, signal.SIGTERM)
                terminated[victim] = now
                start()
            else:
                _signal(process, signal.SIGSTOP)
                run.frozen.add(victim)
                frozen_until[victim] = now + rng.uniform(1.5, 2.5)
        elif not running and not frozen_until:
            start()
    assert not events
    run.finish()
    for name, sent in terminated.items():
        process = run.processes[name]
        ready = any(line[0] == "R" for line in run.log(name))
        assert process.exitcode == 143 or (process.exitcode == -signal.SIGTERM and not ready), (
            name,
            process.exitcode,
        )
        assert exited.get(name, sent) - sent <= DEADLINE_SECONDS + SLACK, name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("at", [1, 3], ids=["in-claim", "in-ack"])
def test_sigterm_inside_a_queue_transaction_exits_and_gives_the_lease_back(
    backend: str, at: int, make_run: Callable[..., Run]
) -> None:
    """SIGTERM lands while the worker's own queue transaction holds its locks (the claim,
    or an acknowledgement), paused for 2 s: the worker finishes that transaction, gives
    its lease back and exits 143, within the deadline; the lease is pending at once."""
    run = make_run(backend, partitions=20, ttl=60)
    worker = run.start("w1", "--tx-sleep", "2", "--tx-at", str(at), "--ack-interval", "0")
    run.wait_for("w1", "T")
    sent = time.monotonic()
    _signal(worker, signal.SIGTERM)
    worker.join(timeout=DEADLINE_SECONDS + 30)
    took = time.monotonic() - sent
    assert worker.exitcode == 143
    assert took < DEADLINE_SECONDS, f"exited after {took:.1f}s: the deadline, not the release"
    assert run.tasks("state = 'leased'") == []  # pending again: no TTL (60 s) to wait for
    held = run.tasks("attempts = 1")  # the one read, and the one claimed ahead (in-ack)
    assert {row.state for row in held} == {"pending"}
    assert max(row.acked for row in held) == (0 if at == 1 else 2)
    run.finish()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_stuck_past_the_deadline_exits_and_its_lease_is_taken_over(
    backend: str, make_run: Callable[..., Run]
) -> None:
    """SIGTERM while the worker's own transaction stays open for a minute: the process
    exits 143 at the deadline anyway; its lease, which could not be given back while its
    own transaction held the lock, is taken over by another worker within TTL + 5 s."""
    ttl = 3.0
    run = make_run(backend, partitions=20, ttl=ttl)
    worker = run.start("w1", "--tx-sleep", "60", "--tx-at", "3", "--ack-interval", "0")
    run.wait_for("w1", "T")
    sent = time.monotonic()
    _signal(worker, signal.SIGTERM)
    worker.join(timeout=DEADLINE_SECONDS + 30)
    exited = time.monotonic()
    assert worker.exitcode == 143
    assert exited - sent < DEADLINE_SECONDS + SLACK
    assert exited - sent > DEADLINE_SECONDS - RELEASE_MARGIN  # it was stuck
    run.start("w2")
    while run.tasks("attempts = 1 AND state = 'leased'"):
        assert time.monotonic() - exited < ttl + 5, "the lease was not taken over"
        time.sleep(0.05)
    run.finish()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lease_claimed_ahead_by_a_killed_worker_is_done_once_by_others_after_expiry(
    backend: str, make_run: Callable[..., Run]
) -> None:
    """SIGKILL while the worker reads one partition and holds the next, claimed ahead,
    that it never read from: both expire (TTL 1 s) and another worker does them, each
    exactly once, after the batches the killed worker acknowledged."""
    run = make_run(backend, partitions=6)
    victim = run.start("w1", "--consume", "0.3", "--ack-interval", "0")
    run.wait_for("w1", "A")
    until = time.monotonic() + 30
    while len(run.tasks("worker = 'w1' AND state = 'leased'")) < 2:
        assert time.monotonic() < until, "no lease claimed ahead"
        time.sleep(0.01)
    held = _held_by(run, "w1")
    _signal(victim, signal.SIGKILL)
    victim.join(timeout=10)
    read = {(int(line[2]), int(line[3])) for line in run.log("w1") if line[0] == "D"}
    ahead = [task for task in held if task not in read]
    assert len(ahead) == 1, (held, read)
    run.start("w2")
    while not run.queue.status(run.job).complete:
        assert time.monotonic() < until + 120, run.queue.status(run.job).to_dict()
        time.sleep(0.05)
    [row] = run.tasks(f"epoch = {ahead[0][0]} AND part = {ahead[0][1]}")
    assert (row.state, row.worker, row.attempts, row.completions) == ("done", "w2", 2, 1)
    run.finish()  # every task completed once, no acknowledged batch delivered again


def _held_by(run: Run, name: str) -> list[tuple[int, int]]:
    """The tasks ``name`` holds: the one it reads, and the one it claimed ahead."""
    rows = run.tasks(f"worker = '{name}' AND state = 'leased'")
    assert rows, f"{name} holds no lease"
    return [(int(row.epoch), int(row.part)) for row in rows]


def _taken_over(run: Run, tasks: list[tuple[int, int]], name: str) -> bool:
    for epoch, part in tasks:
        [row] = run.tasks(f"epoch = {epoch} AND part = {part}")
        if row.state != "done" and row.worker == name:
            return False
    return True


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_a_worker_frozen_inside_a_queue_transaction_stops_nobody(
    backend: str, make_run: Callable[..., Run]
) -> None:
    """SIGSTOP while the worker's own acknowledgement holds its task's row lock: the others
    go on, and the server ends the frozen session, so its lease is taken over within
    TTL + 5 s. Once continued, the frozen worker finds its lease gone."""
    ttl = 2.0
    run = make_run(backend, partitions=60, ttl=ttl)
    others = [run.start(f"w{i}", "--consume", "0.01") for i in (2, 3)]
    frozen = run.start("w1", "--tx-sleep", "1", "--tx-at", "3", "--ack-interval", "0")
    run.wait_for("w1", "T")
    _signal(frozen, signal.SIGSTOP)
    stopped = time.monotonic()
    run.frozen.add("w1")
    tasks = _held_by(run, "w1")
    before = run.done()
    while run.done() < before + 3:
        assert time.monotonic() - stopped < 10, "the others stopped with the frozen worker"
        time.sleep(0.05)
    while not _taken_over(run, tasks, "w1"):
        assert time.monotonic() - stopped < ttl + 5, "the frozen worker's lease was not taken over"
        time.sleep(0.05)
    assert all(p.is_alive() for p in others)
    run.finish()
    assert frozen.exitcode == 0  # once continued, it found its session ended and went on


def test_sqlite_a_worker_frozen_outside_a_transaction_is_taken_over(
    make_run: Callable[..., Run],
) -> None:
    ttl = 2.0
    run = make_run("sqlite", partitions=60, ttl=ttl)
    run.start("w2", "--consume", "0.01")
    frozen = run.start("w1", "--consume", "0.5")  # frozen while its consumer works
    run.wait_for("w1", "D")
    _signal(frozen, signal.SIGSTOP)
    stopped = time.monotonic()
    run.frozen.add("w1")
    tasks = _held_by(run, "w1")
    while not _taken_over(run, tasks, "w1"):
        assert time.monotonic() - stopped < ttl + 5, "the frozen worker's lease was not taken over"
        time.sleep(0.05)
    run.finish()


def test_sqlite_a_worker_frozen_inside_a_transaction_stalls_the_others_but_fails_none(
    make_run: Callable[..., Run],
) -> None:
    """The documented limit of a SQLite queue: a worker frozen while it holds the write
    lock stalls every other worker (no server can end its transaction). They wait, none
    fails, a worker joining meanwhile waits too, and all go on once it continues."""
    run = make_run("sqlite", partitions=60, ttl=2.0)
    others = [run.start(f"w{i}", "--consume", "0.01") for i in (2, 3)]
    frozen = run.start("w1", "--tx-sleep", "1", "--tx-at", "3", "--ack-interval", "0")
    run.wait_for("w1", "T")
    _signal(frozen, signal.SIGSTOP)
    run.frozen.add("w1")
    others.append(run.start("w4"))
    time.sleep(4)
    assert all(p.is_alive() for p in others)
    run.finish()
    assert [p.exitcode for p in (frozen, *others)] == [0, 0, 0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_200_random_sigterms_never_hang(backend: str, make_run: Callable[..., Run]) -> None:
    """200 workers, 6 at a time, each SIGTERMed at a random moment: most within 0.4 s of
    their first delivery (reading, acknowledging, inside a queue transaction), some while
    starting (a plain run takes 70 of them, its moments drawn from the day's sweep seed,
    tests/helpers/sweep.py; ``make test-full`` all 200). Every one exits within the
    deadline, 143 once it handles SIGTERM, and gives its lease back: none is left held
    but by a worker that reached the deadline. (The moment counts from the first delivery,
    not from handling SIGTERM: how long a worker takes to deliver depends on the machine's
    load, what it is doing when hit must not.)"""
    workers = 200 if sweep.full() else 70  # a run's sample; the moments rotate daily
    run = make_run(backend, partitions=240, epochs=50, ttl=30)
    rng = random.Random(3 if sweep.full() else sweep.seed())
    due: dict[str, float] = {}  # when each worker gets its SIGTERM (inf: 0.4 s after D)
    ready: dict[str, float] = {}  # when it handled SIGTERM (R), for one that never delivers
    sent: dict[str, float] = {}
    exits: dict[str, float] = {}
    waiting = [f"t{i}" for i in range(workers)]
    while waiting or len(exits) < len(due):
        now = time.monotonic()
        for name, process in run.processes.items():
            if name in exits:
                continue
            if not process.is_alive():
                exits[name] = now
            elif name in sent:
                assert now - sent[name] < DEADLINE_SECONDS + SLACK, f"{name} hangs"
            elif due[name] == float("inf"):
                log = [line[0] for line in run.log(name)]
                if "R" in log:
                    ready.setdefault(name, now)
                if "D" in log:
                    due[name] = now + rng.uniform(0.0, 0.4)
                elif name in ready and now - ready[name] > 5.0:
                    due[name] = now  # it never delivered: signal it anyway
            elif due[name] <= now:
                _signal(process, signal.SIGTERM)
                sent[name] = now
        if waiting and len(run.processes) - len(exits) < 6:
            name = waiting.pop()
            run.start(name, "--ack-interval", rng.choice(["0", "0.05"]))
            early = rng.random() < 0.15
            due[name] = now + rng.uniform(0.0, 0.15) if early else float("inf")
        time.sleep(0.01)
    for name, process in run.processes.items():
        ready = any(line[0] == "R" for line in run.log(name))
        assert process.exitcode in (143, -signal.SIGTERM), (name, process.exitcode)
        assert process.exitcode == 143 or not ready, f"{name} ignored its SIGTERM handler"
    working = sum(1 for n in run.processes if any(line[0] == "D" for line in run.log(n)))
    assert working >= workers // 2  # most signals landed while the worker was at work
    stuck = DEADLINE_SECONDS - RELEASE_MARGIN
    slow = [n for n in exits if exits[n] - sent.get(n, exits[n]) > stuck]
    assert len(run.tasks("state = 'leased'")) <= len(slow)
    run.queue.delete(run.job)
