"""Measure the elastic dispatcher's lease queue: throughput, and its cost per partition.

Two measurements, side by side in one run, on each queue backend (``memory``: a
:class:`~sqlfeed.dispatch.memory.MemoryQueue` shared by threads; ``sqlite``: a SQLite file;
``postgres``; ``mariadb``):

1. **Lease throughput.** A job of M tasks (``--partitions``, default 2000 and 300; a cheap
   hash plan over an in-memory DuckDB ``range``) is created in this process; then 1, 4 and
   16 concurrent workers (``--workers``, e.g. ``1,16,64``) each loop, by ``--protocol``:
   ``ahead`` (the default, what a Worker claiming ahead does): one ``acquire``, then per
   task one ``complete_and_acquire`` (the task's one batch acknowledged with its
   completion, and the next task claimed, in one transaction); ``serial``: ``acquire ->
   complete``; ``per-batch``: ``acquire -> ack(offset 1) -> complete``; until the job
   runs out or ``--seconds`` have passed (each size and worker count in a new job).
   M=300 because a larger spec does not fit MySQL/MariaDB's ``TEXT`` column. Workers on
   SQL backends are processes forked from a fork server that imported this module once
   (started before any timing and reused: 64 of them take ~1.5 GB PSS together, where
   spawned ones would import sqlfeed each, ~165 MB apiece); on ``memory`` they are
   threads. All workers start together at
   a set moment; throughput is completed tasks / (time of the last completion - start).
   ``calls/s`` is about 1 x ``tasks/s`` with ``ahead`` (2 x ``serial``, 3 x
   ``per-batch``; plus ``Wait`` answers). After each run the
   queue is checked: every task counted as completed is ``done`` exactly once. Transient
   errors (deadlocks, lock time-outs, ``database is locked``) that the queue retried
   internally are counted in ``retries``.
2. **Dispatch overhead per partition.** In this process, single worker: the time of one
   dispatch cycle (median of ``--cycles``) against the time to read one typical partition,
   for three protocols: ``per-batch`` is ``acquire + heartbeat + ack x A + complete``;
   ``ahead`` (timed on a job of its own) is what a Worker claiming ahead does per
   partition: one ``complete_and_acquire`` carrying the A acks, started in a background
   thread (``handoff``: the time the consumer's thread spends starting it) while the next
   partition, claimed before, streams; ``serial`` (timed on cycles alternating with
   ``per-batch``) is one lease at a time in separate calls, all on the consumer's path,
   as a :class:`~sqlfeed.dispatch.worker.Worker` did before it claimed ahead (with its
   default ``ack_interval``, 1 s, when a partition streams within it): ``acquire +
   complete`` with the A acknowledgements in the completion (heartbeats run in a
   background thread, every TTL / 3). The partition read:
   TPC-H ``lineitem`` SF1 in PostgreSQL planned with ``strategy="ctid"`` into
   ``--read-partitions`` partitions, read through sqlfeed's PostgreSQL source as a
   :class:`~sqlfeed.dispatch.worker.Worker` reads them (ordered, in ``--batch-rows``
   batches; ``A`` = batches per partition). The cycle is timed for a job of that lineitem
   plan and for a job of the large synthetic plan (a larger stored spec; ``spec`` is the
   time to read and decode it, which a queue does once per job).
   ``overhead % = cycle time / partition read time``.

Queue sessions are bounded (:mod:`sqlfeed.dispatch.sessions`: lock and idle-transaction
time-outs set once per connection, not per call), so the figures include what they cost.

Queue tables live in scratch places created for the run and removed at the end: a
temporary directory (SQLite), a new schema reached through ``search_path`` (PostgreSQL)
and a new database (MariaDB). Jobs get unique names and are deleted after each
measurement.

Run from the repository root (PostgreSQL with ``lineitem_sf1`` loaded, see
:mod:`benchmarks.tpch`, and MariaDB must be running)::

    .venv/bin/python -m benchmarks.dispatch
    .venv/bin/python -m benchmarks.dispatch --backends memory sqlite --workers 1 4 \\
        --seconds 5 --parts throughput --json /tmp/dispatch.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import queue as queue_module
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import sqlalchemy as sa

import sqlfeed
from benchmarks.common import progress as _progress
from benchmarks.harness import add_smoke_flag
from sqlfeed import Plan
from sqlfeed.dialects import EngineError
from sqlfeed.dispatch import JobSpec, Lease, LeaseQueue, MemoryQueue, SQLQueue, Wait

__all__ = [
    "BACKENDS",
    "CycleCell",
    "ReadResult",
    "ThroughputCell",
    "WorkerResult",
    "drive",
    "main",
]

BACKENDS = ("memory", "sqlite", "postgres", "mariadb")
PARTS = ("throughput", "overhead")
DEFAULT_PG_URL = os.environ.get(
    "SQLFEED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
).replace("postgresql://", "postgresql+psycopg://", 1)
"""The tests' PostgreSQL (``SQLFEED_TEST_POSTGRES_URL``) as a SQLAlchemy URL."""
DEFAULT_MYSQL_URL = os.environ.get(
    "SQLFEED_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"
).replace("mysql://", "mysql+pymysql://", 1)
"""The tests' MariaDB/MySQL (``SQLFEED_TEST_MYSQL_URL``) as a SQLAlchemy URL."""
SYNTHETIC_SQL = "SELECT range AS id FROM range(100000)"
LEASE_TTL = 30.0
PROTOCOLS = ("ahead", "serial", "per-batch")
DRIVERS = (
    "psycopg",
    "pymysql",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
)
WAIT_SLEEP = 0.005
"""Seconds a benchmark worker sleeps on a :class:`Wait` (the Worker's ``poll`` is 0.5)."""


def _error_text(err: BaseException) -> str:
    """A one-line description of ``err``, and of the error it was raised while handling."""
    text = " ".join(str(err).split())
    line = f"{type(err).__name__}: {text[:300]}"
    if err.__context__ is not None and err.__context__ is not err.__cause__:
        context = " ".join(str(err.__context__).split())
        line += f" (raised while handling {type(err.__context__).__name__}: {context[:300]})"
    return line


# -- one worker's loop ------------------------------------------------------------------


class _CountingQueue(SQLQueue):
    """A :class:`SQLQueue` that counts the transient errors its transactions retry."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.retries = 0
        self.kinds: dict[str, int] = {}

    def _retrying(self, action: Any, *args: Any) -> Any:
        def counted(*inner: Any) -> Any:
            try:
                return action(*inner)
            except EngineError as err:
                if getattr(err, "transient", False):
                    self.retries += 1
                    kind = f"{action.__name__}: {str(err).split(': ', 1)[-1][:80]}"
                    self.kinds[kind] = self.kinds.get(kind, 0) + 1
                raise

        return super()._retrying(counted, *args)


@dataclass
class WorkerResult:
    """What one worker did during a throughput run.

    Attributes:
        worker: The worker id.
        tasks: Tasks completed (``complete`` returned True).
        acquires: ``acquire`` calls (leases, waits and the final None).
        acks: ``ack`` calls.
        completes: ``complete`` calls.
        waits: ``acquire`` answers that were a :class:`Wait`.
        lost: ``ack``/``complete`` calls that returned False (lease lost).
        retries: Transient errors retried inside the queue (None: not countable).
        retried: Those errors by call and message.
        finished: Whether ``acquire`` returned None (every task done).
        last: Monotonic time of the last successful ``complete`` (0: none).
        acquire_seconds: Time spent in ``acquire``.
        ack_seconds: Time spent in ``ack``.
        complete_seconds: Time spent in ``complete``.
        error: The exception that stopped the worker, if any.
    """

    worker: str
    tasks: int = 0
    acquires: int = 0
    acks: int = 0
    completes: int = 0
    waits: int = 0
    lost: int = 0
    retries: int | None = None
    retried: dict[str, int] = field(default_factory=dict)
    finished: bool = False
    last: float = 0.0
    acquire_seconds: float = 0.0
    ack_seconds: float = 0.0
    complete_seconds: float = 0.0
    error: str | None = None


def drive(
    queue: LeaseQueue,
    job: str,
    worker: str,
    start_at: float,
    deadline: float,
    protocol: str = "ahead",
) -> WorkerResult:
    """Run one of :data:`PROTOCOLS` from ``start_at`` until done or ``deadline``.

    Args:
        queue: The lease queue (shared by threads, or this process's own).
        job: The job's name.
        worker: This worker's id.
        start_at: ``time.monotonic()`` at which to start (all workers start together).
        deadline: ``time.monotonic()`` after which no new task is acquired.
        protocol: ``ahead``: each completion claims the next task in the same call
            (``complete_and_acquire``, a Worker's claim-ahead); ``serial``: ``acquire ->
            complete`` (the ack in the completion); ``per-batch``: ``acquire -> ack ->
            complete``.

    Returns:
        The counts and times of this worker.
    """
    result = WorkerResult(worker)
    counting = queue if isinstance(queue, _CountingQueue) else None
    retries_before = counting.retries if counting else 0
    kinds_before = dict(counting.kinds) if counting else {}
    time.sleep(max(0.0, start_at - time.monotonic()))
    try:
        if protocol == "ahead":
            _drive_ahead(queue, job, worker, deadline, result)
        else:
            _drive_serial(queue, job, worker, deadline, result, protocol == "per-batch")
    except Exception as err:  # reported in the table, the run goes on
        result.error = _error_text(err)
    if counting is not None:
        result.retries = counting.retries - retries_before
        new = {k: n - kinds_before.get(k, 0) for k, n in counting.kinds.items()}
        result.retried = {k: n for k, n in new.items() if n}
    return result


def _drive_ahead(
    queue: LeaseQueue, job: str, worker: str, deadline: float, result: WorkerResult
) -> None:
    """``acquire`` once, then ``complete_and_acquire`` per task: one call per task."""
    clock = time.perf_counter
    held: Lease | None = None
    while time.monotonic() < deadline:
        t0 = clock()
        if held is None:
            got = queue.acquire(job, worker)
            result.acquire_seconds += clock() - t0
            result.acquires += 1
        else:
            done, got = queue.complete_and_acquire(held, worker, offset=1, rows=1, batches=1)
            result.complete_seconds += clock() - t0
            result.completes += 1
            held = None
            if done:
                result.tasks += 1
                result.last = time.monotonic()
            else:
                result.lost += 1
        if got is None:
            result.finished = True
            return
        if isinstance(got, Wait):
            result.waits += 1
            time.sleep(min(max(got.seconds, 0.0), WAIT_SLEEP))
            continue
        held = got
    if held is not None:  # the time is up: the task claimed ahead goes back
        queue.release(held)


def _drive_serial(
    queue: LeaseQueue,
    job: str,
    worker: str,
    deadline: float,
    result: WorkerResult,
    per_batch_acks: bool,
) -> None:
    """``acquire -> complete`` (or ``acquire -> ack -> complete``) per task."""
    clock = time.perf_counter
    while time.monotonic() < deadline:
        t0 = clock()
        got = queue.acquire(job, worker)
        result.acquire_seconds += clock() - t0
        result.acquires += 1
        if got is None:
            result.finished = True
            break
        if isinstance(got, Wait):
            result.waits += 1
            time.sleep(min(max(got.seconds, 0.0), WAIT_SLEEP))
            continue
        t0 = clock()
        held = True
        if per_batch_acks:
            held = queue.ack(got, 1, 1)
            result.acks += 1
        t1 = clock()
        result.ack_seconds += t1 - t0
        if per_batch_acks:
            done = queue.complete(got)
        else:
            done = queue.complete(got, offset=1, rows=1, batches=1)
        result.complete_seconds += clock() - t1
        result.completes += 1
        if held and done:
            result.tasks += 1
            result.last = time.monotonic()
        else:
            result.lost += 1


# -- worker processes -------------------------------------------------------------------


def _process_main(index: int, commands: Any, results: Any) -> None:
    """A spawned worker process: prepares and drives one worker per throughput run.

    Messages in: ``("prepare", cell, url, job)`` then ``("go", cell, start_at,
    deadline, protocol)``; ``("exit",)``. Messages out: ``("up", index)``,
    ``("ready", index, cell, error)``, ``("done", index, cell, WorkerResult as dict)``.
    """
    queues: dict[str, _CountingQueue] = {}
    results.put(("up", index))
    try:
        while True:
            command = commands.get()
            if command[0] == "exit":
                return
            _, cell, url, job = command
            worker = f"proc{index}-{os.getpid()}"
            problem: str | None = None
            try:
                if url not in queues:
                    queues[url] = _CountingQueue(url)
                queues[url].job(job)  # connect, and check the job is there
            except Exception as err:
                problem = _error_text(err)
            results.put(("ready", index, cell, problem))
            go = commands.get()
            if go[0] == "exit":
                return
            _, _, start_at, deadline, protocol = go
            if problem is not None:
                outcome = WorkerResult(worker, error=problem)
            else:
                outcome = drive(queues[url], job, worker, start_at, deadline, protocol)
            results.put(("done", index, cell, asdict(outcome)))
    finally:
        for opened in queues.values():
            opened.close()


class ProcessPool:
    """Worker processes, started before any timing and reused by every run.

    They are forked from a multiprocessing fork server that imported this module (and
    the queue drivers) once: a worker starts in milliseconds and shares those pages with
    the server, where a spawned one would import sqlfeed again (~165 MB and seconds of
    CPU each). So 64 workers fit on a 2-core machine.
    """

    def __init__(self, size: int) -> None:
        """Start ``size`` processes and wait until each is up.

        Args:
            size: The largest number of concurrent workers any run needs.
        """
        self.size = size
        self._context = _fork_server()
        self._results: Any = None
        self._commands: list[Any] = []
        self._processes: list[Any] = []
        self._cell = 0
        self.spawn_seconds = 0.0
        self._start()

    def _start(self) -> None:
        started = time.perf_counter()
        self._results = self._context.Queue()
        self._commands = [self._context.Queue() for _ in range(self.size)]
        self._processes = [
            self._context.Process(
                target=_process_main,
                args=(i, self._commands[i], self._results),
                name=f"dispatch-bench-{i}",
                daemon=True,
            )
            for i in range(self.size)
        ]
        for process in self._processes:
            process.start()
        up = 0
        while up < self.size:
            message = self._results.get(timeout=300)
            up += message[0] == "up"
        self.spawn_seconds = time.perf_counter() - started

    def _collect(self, kind: str, cell: int, count: int, timeout: float) -> dict[int, Any]:
        got: dict[int, Any] = {}
        until = time.monotonic() + timeout
        while len(got) < count:
            left = until - time.monotonic()
            if left <= 0:
                break
            try:
                message = self._results.get(timeout=left)
            except queue_module.Empty:
                break
            if message[0] == kind and message[2] == cell:
                got[message[1]] = message[3]
        return got

    def run(
        self, url: str, job: str, workers: int, seconds: float, protocol: str = "ahead"
    ) -> tuple[float, list[WorkerResult]]:
        """Drive ``workers`` processes on ``job`` for at most ``seconds``.

        Args:
            url: The queue URL.
            job: The job's name (created already).
            workers: How many processes take part (at most ``size``).
            seconds: The run's time limit.
            protocol: see :func:`drive`.

        Returns:
            The common start (``time.monotonic()``) and one result per worker; a worker
            that sent nothing in time (hung, deadlocked or dead) gets an error, and the
            pool is restarted.
        """
        self._cell += 1
        cell = self._cell
        for i in range(workers):
            self._commands[i].put(("prepare", cell, url, job))
        ready = self._collect("ready", cell, workers, 120)
        start_at = time.monotonic() + 0.2
        for i in range(workers):
            self._commands[i].put(("go", cell, start_at, start_at + seconds, protocol))
        done = self._collect("done", cell, workers, seconds + 120)
        results = []
        for i in range(workers):
            if i in done:
                results.append(WorkerResult(**done[i]))
            else:
                where = "preparing" if i not in ready else "running"
                results.append(WorkerResult(f"proc{i}", error=f"no answer while {where}"))
        if len(done) < workers:
            _progress("  a worker process did not answer: restarting the pool")
            self.close()
            self._start()
        return start_at, results

    def close(self) -> None:
        """Ask every process to exit; terminate those that do not."""
        for commands in self._commands:
            commands.put(("exit",))
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


def _fork_server() -> Any:
    """The fork-server context, its server preloading this module and the drivers."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["benchmarks.dispatch", *DRIVERS])
    return context


def run_threads(
    queue: LeaseQueue, job: str, workers: int, seconds: float, protocol: str = "ahead"
) -> tuple[float, list[WorkerResult]]:
    """Drive ``workers`` threads of this process on ``job`` for at most ``seconds``.

    Args:
        queue: The shared queue (``MemoryQueue``).
        job: The job's name (created already).
        workers: How many threads.
        seconds: The run's time limit.
        protocol: see :func:`drive`.

    Returns:
        The common start (``time.monotonic()``) and one result per thread.
    """
    results: list[WorkerResult | None] = [None] * workers
    start_at = time.monotonic() + 0.05

    def body(i: int) -> None:
        results[i] = drive(queue, job, f"thread{i}", start_at, start_at + seconds, protocol)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return start_at, [
        r or WorkerResult(f"thread{i}", error="no result") for i, r in enumerate(results)
    ]


# -- part 1: throughput -----------------------------------------------------------------


@dataclass
class ThroughputCell:
    """One throughput run: a backend and a number of concurrent workers.

    Attributes:
        backend: A name in :data:`BACKENDS`.
        workers: Concurrent workers (processes, or threads for ``memory``).
        partitions: Tasks in the job.
        tasks: Tasks completed in the run, by all workers.
        seconds: From the common start to the last completion.
        tasks_per_second: ``tasks / seconds``.
        calls_per_second: Queue calls (acquire, ack, complete) per second.
        scaling: ``tasks_per_second`` / that of the backend's 1-worker run.
        acquire_ms: Mean latency of ``acquire``.
        ack_ms: Mean latency of ``ack``.
        complete_ms: Mean latency of ``complete``.
        waits: :class:`Wait` answers.
        lost: ``ack``/``complete`` calls that found the lease lost.
        retries: Transient errors retried inside the queue (None for ``memory``).
        retried: Those errors by queue call and message.
        finished: Whether the job ran out of tasks before the time limit.
        check: ``ok``, or what the queue's final state contradicts.
        create_seconds: Time to create the job.
        errors: Errors that stopped workers.
    """

    backend: str
    workers: int
    partitions: int
    tasks: int
    seconds: float
    tasks_per_second: float
    calls_per_second: float
    scaling: float | None
    acquire_ms: float
    ack_ms: float
    complete_ms: float
    waits: int
    lost: int
    retries: int | None
    retried: dict[str, int]
    finished: bool
    check: str
    create_seconds: float
    errors: list[str] = field(default_factory=list)


def _latency(results: Sequence[WorkerResult], call: str) -> float:
    """Mean milliseconds of one ``call`` (acquire, ack, complete) over all workers."""
    total = sum(getattr(r, f"{call}_seconds") for r in results)
    count = sum(getattr(r, f"{call}s") for r in results)
    return round(1000 * total / count, 3) if count else float("nan")


def _check_queue(queue: LeaseQueue, job: str, tasks: int) -> str:
    """``ok`` when the queue's done tasks are exactly the ``tasks`` completed, once each."""
    completions: dict[tuple[int, int], int] = queue.completions(job)  # type: ignore[attr-defined]
    done = sum(e["done"] for e in queue.status(job).per_epoch)
    twice = sum(1 for n in completions.values() if n > 1)
    problems = []
    if twice:
        problems.append(f"{twice} tasks completed more than once")
    if done != tasks:
        problems.append(f"{done} done in the queue != {tasks} counted")
    if sum(completions.values()) != done:
        problems.append(f"{sum(completions.values())} completions != {done} done")
    return "; ".join(problems) or "ok"


def _merged(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    """The sum of several counters."""
    total: dict[str, int] = {}
    for count in counts:
        for key, n in count.items():
            total[key] = total.get(key, 0) + n
    return total


def _failed_cell(backend: str, workers: int, plan: Plan, error: str) -> ThroughputCell:
    """The cell of a run that could not start (the job could not be created)."""
    nan = float("nan")
    return ThroughputCell(
        backend,
        workers,
        plan.num_partitions,
        0,
        0.0,
        0.0,
        0.0,
        None,
        nan,
        nan,
        nan,
        0,
        0,
        None,
        {},
        False,
        "not run",
        nan,
        [f"create_job: {error}"],
    )


def _open(backend: str, url: str) -> LeaseQueue:
    return MemoryQueue() if backend == "memory" else SQLQueue(url)


def measure_throughput(
    backend: str,
    url: str,
    plan: Plan,
    worker_counts: Sequence[int],
    seconds: float,
    pool: ProcessPool | None,
    tag: str,
    protocol: str = "ahead",
) -> list[ThroughputCell]:
    """Run the throughput measurement of one backend for every worker count.

    Args:
        backend: A name in :data:`BACKENDS`.
        url: The queue URL (ignored for ``memory``).
        plan: The job's plan.
        worker_counts: Numbers of concurrent workers.
        seconds: Time limit per run.
        pool: Worker processes (SQL backends).
        tag: Unique part of this run's job names.
        protocol: see :func:`drive`.

    Returns:
        One cell per worker count.
    """
    cells: list[ThroughputCell] = []
    base: float | None = None
    for workers in worker_counts:
        name = f"{tag}-tp-{backend}-{plan.num_partitions}-{workers}"
        queue = _open(backend, url)
        try:
            started = time.perf_counter()
            try:
                queue.create_job(JobSpec(name, plan, epochs=1, lease_ttl=LEASE_TTL))
            except Exception as err:
                cells.append(_failed_cell(backend, workers, plan, _error_text(err)))
                _progress(f"[{backend} M={plan.num_partitions} x{workers}] {cells[-1].errors[0]}")
                continue
            create = time.perf_counter() - started
            try:
                if backend == "memory":
                    start_at, results = run_threads(queue, name, workers, seconds, protocol)
                else:
                    assert pool is not None
                    start_at, results = pool.run(url, name, workers, seconds, protocol)
                tasks = sum(r.tasks for r in results)
                check = _check_queue(queue, name, tasks)
            finally:
                queue.delete(name)
        finally:
            queue.close()
        lasts = [r.last for r in results if r.last]
        elapsed = max(lasts) - start_at if lasts else 0.0
        calls = sum(r.acquires + r.acks + r.completes for r in results)
        rate = tasks / elapsed if elapsed > 0 else 0.0
        if workers == 1:
            base = rate
        retries = [r.retries for r in results if r.retries is not None]
        cell = ThroughputCell(
            backend=backend,
            workers=workers,
            partitions=plan.num_partitions,
            tasks=tasks,
            seconds=round(elapsed, 3),
            tasks_per_second=round(rate, 1),
            calls_per_second=round(calls / elapsed, 1) if elapsed > 0 else 0.0,
            scaling=round(rate / base, 2) if base else None,
            acquire_ms=_latency(results, "acquire"),
            ack_ms=_latency(results, "ack"),
            complete_ms=_latency(results, "complete"),
            waits=sum(r.waits for r in results),
            lost=sum(r.lost for r in results),
            retries=sum(retries) if retries else None,
            retried=_merged([r.retried for r in results]),
            finished=any(r.finished for r in results),
            check=check,
            create_seconds=round(create, 3),
            errors=[f"{r.worker}: {r.error}" for r in results if r.error],
        )
        cells.append(cell)
        _progress(
            f"[{backend} M={plan.num_partitions} x{workers}] {tasks} tasks in {elapsed:.2f}s = "
            f"{rate:.1f} tasks/s, "
            f"acquire {cell.acquire_ms:.2f} ms, retries {cell.retries}, waits {cell.waits}, "
            f"lost {cell.lost}, check {check}"
            + (f", {len(cell.errors)} errors: {cell.errors[0]}" if cell.errors else "")
        )
    return cells


# -- part 2: dispatch overhead per partition --------------------------------------------


@dataclass
class ReadResult:
    """Reading a sample of a plan's partitions through sqlfeed's PostgreSQL source.

    Attributes:
        table: The table read.
        partitions: Partitions in the plan.
        strategy: The plan's strategy.
        indexes: The partitions read (after one untimed warm-up read).
        seconds: Seconds per partition read.
        rows: Rows per partition read.
        batches: Batches per partition as read with ``batch_rows``.
        batch_rows: Rows per batch asked for.
        acks: Acks per partition: ceil(median rows / batch_rows).
    """

    table: str
    partitions: int
    strategy: str
    indexes: list[int]
    seconds: list[float]
    rows: list[int]
    batches: list[int]
    batch_rows: int
    acks: int

    @property
    def median_seconds(self) -> float:
        """The median read time of one partition."""
        return statistics.median(self.seconds)


def measure_read(
    pg_url: str, table: str, partitions: int, samples: int, batch_rows: int
) -> tuple[Plan, ReadResult]:
    """Plan ``SELECT * FROM table`` by ctid and time reading a few of its partitions.

    Args:
        pg_url: The PostgreSQL source URL.
        table: The table (e.g. ``lineitem_sf1``).
        partitions: Partitions in the plan.
        samples: Partitions to time, evenly spread over the plan.
        batch_rows: Rows per batch, as a Worker with ``batch_size`` would hand out.

    Returns:
        The plan and the read times.
    """
    source = sqlfeed.connect(pg_url)
    try:
        started = time.perf_counter()
        plan = sqlfeed.plan(
            f"SELECT * FROM {table}", source, partitions=partitions, strategy="ctid"
        )
        _progress(
            f"[read] planned {table}: {plan.num_partitions} partitions ({plan.strategy}) "
            f"in {time.perf_counter() - started:.2f}s"
        )
        schema = plan.arrow_schema()
        count = plan.num_partitions
        indexes = sorted({round(i * (count - 1) / max(samples - 1, 1)) for i in range(samples)})

        def read(index: int) -> tuple[float, int, int]:
            rows = batches = 0
            start = time.perf_counter()
            sql = plan.partitions[index].sql
            for batch in source.read(sql, schema=schema, batch_rows=batch_rows, ordered=True):
                rows += batch.num_rows
                batches += 1
            return time.perf_counter() - start, rows, batches

        warm, _, _ = read(indexes[0])
        _progress(f"[read] warm-up read of partition {indexes[0]}: {warm:.2f}s")
        seconds: list[float] = []
        rows: list[int] = []
        batches: list[int] = []
        for index in indexes:
            took, n, b = read(index)
            seconds.append(round(took, 4))
            rows.append(n)
            batches.append(b)
            _progress(f"[read] partition {index}: {n} rows in {b} batches, {took:.3f}s")
    finally:
        source.close()
    acks = max(1, math.ceil(statistics.median(rows) / batch_rows))
    return plan, ReadResult(
        table, count, plan.strategy, indexes, seconds, rows, batches, batch_rows, acks
    )


@dataclass
class CycleCell:
    """The dispatch cost of one partition on one backend, single worker.

    Attributes:
        backend: A name in :data:`BACKENDS`.
        plan: Which plan the job holds (``lineitem`` or ``synthetic``).
        partitions: Partitions in that plan (the stored spec grows with them).
        cycles: Cycles timed.
        acks: Acks per cycle.
        cycle_ms: Median time of ``acquire + heartbeat + ack x acks + complete`` (per-batch).
        acquire_ms: Median ``acquire``.
        heartbeat_ms: Median ``heartbeat``.
        ack_ms: Median ``ack``.
        complete_ms: Median ``complete``.
        spec_ms: Median ``job(name)``: reading and decoding the stored job spec, which
            ``acquire``, ``heartbeat`` and ``ack`` of a SQL queue each do.
        read_ms: Median time to read one lineitem partition.
        overhead_pct: ``cycle_ms / read_ms`` in percent.
        worker_ms: Median time of ``acquire + complete`` with the acks in the completion:
            a Worker's cycle on its consumer's path (see the module docstring).
        worker_overhead_pct: ``worker_ms / read_ms`` in percent.
        ahead_ms: Median ``complete_and_acquire`` carrying the acks: the one queue call per
            partition of a Worker claiming ahead, run in a background thread while the
            next partition streams.
        ahead_overhead_pct: ``ahead_ms / read_ms`` in percent (as if it were on the
            consumer's path, which it is not).
        handoff_ms: Median time the consumer's thread spends per partition with claim-ahead:
            starting that background call (the lease it reads next was claimed already).
        error: What stopped the measurement, if anything.
    """

    backend: str
    plan: str
    partitions: int
    cycles: int
    acks: int
    cycle_ms: float
    acquire_ms: float
    heartbeat_ms: float
    ack_ms: float
    complete_ms: float
    spec_ms: float
    read_ms: float
    overhead_pct: float
    worker_ms: float = float("nan")
    worker_overhead_pct: float = float("nan")
    ahead_ms: float = float("nan")
    ahead_overhead_pct: float = float("nan")
    handoff_ms: float = float("nan")
    error: str | None = None


def _median_ms(values: Sequence[float]) -> float:
    return round(1000 * statistics.median(values), 3) if values else float("nan")


def measure_cycle(
    backend: str,
    url: str,
    plan: Plan,
    label: str,
    cycles: int,
    acks: int,
    read_seconds: float,
    tag: str,
) -> CycleCell:
    """Time ``cycles`` dispatch cycles of a single worker on one backend, per protocol.

    Cycles alternate between the per-batch protocol (``acquire + heartbeat + ack x acks +
    complete``) and the Worker's (``acquire + complete`` carrying the acks).

    Args:
        backend: A name in :data:`BACKENDS`.
        url: The queue URL (ignored for ``memory``).
        plan: The job's plan.
        label: The plan's name in the table.
        cycles: Cycles to time (the job gets enough epochs to hold them).
        acks: Acks per cycle.
        read_seconds: Median read time of one partition, for ``overhead_pct``.
        tag: Unique part of this run's job names.

    Returns:
        The medians of each call and of the whole cycle.
    """
    name = f"{tag}-cycle-{backend}-{label}"
    epochs = math.ceil(2 * cycles / plan.num_partitions)
    calls = ("cycle", "acquire", "heartbeat", "ack", "complete", "spec", "worker")
    times: dict[str, list[float]] = {k: [] for k in calls}
    error: str | None = None
    queue = _open(backend, url)
    clock = time.perf_counter
    try:
        queue.create_job(JobSpec(name, plan, epochs=epochs, lease_ttl=LEASE_TTL))
        try:
            for _ in range(cycles):
                times["worker"].append(_worker_cycle(queue, name, acks))
                t0 = clock()
                lease = queue.acquire(name, "cycle-worker")
                t1 = clock()
                if not isinstance(lease, Lease):
                    raise RuntimeError(f"acquire returned {lease!r} with tasks left")
                ok = queue.heartbeat(lease)
                t2 = clock()
                ack_times = []
                for offset in range(1, acks + 1):
                    t = clock()
                    ok = queue.ack(lease, offset, 65536) and ok
                    ack_times.append(clock() - t)
                t3 = clock()
                ok = queue.complete(lease) and ok
                t4 = clock()
                if not ok:
                    raise RuntimeError(f"lease lost on {lease}")
                times["cycle"].append(t4 - t0)
                times["acquire"].append(t1 - t0)
                times["heartbeat"].append(t2 - t1)
                times["ack"].extend(ack_times)
                times["complete"].append(t4 - t3)
                queue.job(name)
                times["spec"].append(clock() - t4)
        finally:
            queue.delete(name)
        times["ahead"], times["handoff"] = _ahead_cycles(queue, f"{name}-ahead", plan, cycles, acks)
    except Exception as err:
        error = _error_text(err)
    finally:
        queue.close()
    cycle_ms = _median_ms(times["cycle"])
    worker_ms = _median_ms(times["worker"])
    read_ms = 1000 * read_seconds
    cell = CycleCell(
        backend=backend,
        plan=label,
        partitions=plan.num_partitions,
        cycles=len(times["cycle"]),
        acks=acks,
        cycle_ms=cycle_ms,
        acquire_ms=_median_ms(times["acquire"]),
        heartbeat_ms=_median_ms(times["heartbeat"]),
        ack_ms=_median_ms(times["ack"]),
        complete_ms=_median_ms(times["complete"]),
        spec_ms=_median_ms(times["spec"]),
        read_ms=round(read_ms, 1),
        overhead_pct=round(100 * cycle_ms / read_ms, 3) if read_ms > 0 else float("nan"),
        worker_ms=worker_ms,
        worker_overhead_pct=round(100 * worker_ms / read_ms, 3) if read_ms > 0 else float("nan"),
        ahead_ms=_median_ms(times.get("ahead", [])),
        ahead_overhead_pct=(
            round(100 * statistics.median(times["ahead"]) * 1000 / read_ms, 3)
            if read_ms > 0 and times.get("ahead")
            else float("nan")
        ),
        handoff_ms=_median_ms(times.get("handoff", [])),
        error=error,
    )
    _progress(
        f"[{backend} cycle, {label} M={plan.num_partitions}] {cell.cycles} cycles, median "
        f"per-batch {cycle_ms:.2f} ms = {cell.overhead_pct:.2f}%, worker {worker_ms:.2f} ms = "
        f"{cell.worker_overhead_pct:.2f}%, claim-ahead {cell.ahead_ms:.2f} ms = "
        f"{cell.ahead_overhead_pct:.2f}% in the background ({cell.handoff_ms:.3f} ms on the "
        f"consumer's path) of a {read_ms:.0f} ms read" + (f"; ERROR {error}" if error else "")
    )
    return cell


def _ahead_cycles(
    queue: LeaseQueue, name: str, plan: Plan, cycles: int, acks: int
) -> tuple[list[float], list[float]]:
    """A Worker's claim-ahead cycles on a job of its own: per partition, the consumer's
    thread starts ``complete_and_acquire`` (the acks of the partition just read, and the
    claim of the one after next) in a background thread, then reads the lease claimed
    before. Returns the seconds of each call, and of each start on the consumer's path."""
    epochs = math.ceil((cycles + 2) / plan.num_partitions)
    queue.create_job(JobSpec(name, plan, epochs=epochs, lease_ttl=LEASE_TTL))
    calls: list[float] = []
    handoffs: list[float] = []
    try:
        held = queue.acquire(name, "ahead-worker")
        for _ in range(cycles):
            if not isinstance(held, Lease):
                raise RuntimeError(f"acquire returned {held!r} with tasks left")
            answer: list[Any] = []
            lease = held

            def call(lease: Lease = lease, answer: list[Any] = answer) -> None:
                t = time.perf_counter()
                answer.append(
                    queue.complete_and_acquire(
                        lease, "ahead-worker", offset=acks, rows=65536 * acks, batches=acks
                    )
                )
                calls.append(time.perf_counter() - t)

            started = time.perf_counter()
            thread = threading.Thread(target=call, daemon=True)
            thread.start()
            handoffs.append(time.perf_counter() - started)
            thread.join()  # in a Worker: done while the next partition streams
            done, held = answer[0]
            if not done:
                raise RuntimeError(f"lease lost on {lease}")
    finally:
        queue.delete(name)
    return calls, handoffs


def _worker_cycle(queue: LeaseQueue, name: str, acks: int) -> float:
    """Seconds of one Worker cycle: ``acquire``, then ``complete`` carrying ``acks`` acks."""
    started = time.perf_counter()
    lease = queue.acquire(name, "cycle-worker")
    if not isinstance(lease, Lease):
        raise RuntimeError(f"acquire returned {lease!r} with tasks left")
    if not queue.complete(lease, offset=acks, rows=65536 * acks, batches=acks):
        raise RuntimeError(f"lease lost on {lease}")
    return time.perf_counter() - started


# -- scratch places for the queue tables ------------------------------------------------


def _sql_scratch(server_url: str, tag: str) -> tuple[str, str, Callable[[], None]]:
    """Create schema (PostgreSQL) or database (MySQL/MariaDB) ``tag`` for the queue.

    Args:
        server_url: A SQLAlchemy URL of the server.
        tag: The scratch schema/database name.

    Returns:
        (queue URL inside the scratch place, server version, a function that drops it).
    """
    base = sa.engine.make_url(server_url)
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    postgres = admin.dialect.name == "postgresql"
    with admin.connect() as c:
        version = str(c.exec_driver_sql("SELECT version()").scalar())
        if postgres:
            c.exec_driver_sql(f'CREATE SCHEMA "{tag}"')
            url = base.update_query_dict({"options": f"-csearch_path={tag}"})
        else:
            c.exec_driver_sql(f"CREATE DATABASE `{tag}`")
            url = base.set(database=tag)
    drop = (
        f'DROP SCHEMA IF EXISTS "{tag}" CASCADE' if postgres else f"DROP DATABASE IF EXISTS `{tag}`"
    )

    def cleanup() -> None:
        with admin.connect() as c:
            c.exec_driver_sql(drop)
        admin.dispose()

    return url.render_as_string(hide_password=False), f"{version}; scratch {tag}", cleanup


@contextmanager
def scratch_queues(
    backends: Sequence[str], pg_url: str, mysql_url: str, sqlite_dir: str | None, tag: str
) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Create a scratch place per backend for the queue tables; remove them on exit.

    Args:
        backends: The backends to prepare.
        pg_url: PostgreSQL URL (a schema ``tag`` is created and put on ``search_path``).
        mysql_url: MariaDB/MySQL URL (a database ``tag`` is created).
        sqlite_dir: Where the SQLite queue's temporary directory goes (None: the default).
        tag: The scratch schema/database name.

    Yields:
        (queue URL per usable backend, a version or problem line per backend).
    """
    urls: dict[str, str] = {}
    info: dict[str, str] = {}
    cleanups: list[tuple[str, Callable[[], None]]] = []
    try:
        for backend in backends:
            try:
                if backend == "memory":
                    urls[backend] = "memory://"
                    info[backend] = f"MemoryQueue, Python {platform.python_version()} threads"
                elif backend == "sqlite":
                    directory = tempfile.mkdtemp(prefix="sqlfeed-dispatch-", dir=sqlite_dir)
                    cleanups.append((backend, partial(shutil.rmtree, directory, True)))
                    urls[backend] = f"sqlite:///{directory}/queue.db"
                    info[backend] = f"SQLite {sqlite3.sqlite_version}, WAL, {directory}"
                else:
                    url, info[backend], cleanup = _sql_scratch(
                        pg_url if backend == "postgres" else mysql_url, tag
                    )
                    cleanups.append((backend, cleanup))
                    urls[backend] = url
            except Exception as err:
                info[backend] = f"unavailable: {_error_text(err)}"
                _progress(f"[{backend}] skipped: {info[backend]}")
        yield urls, info
    finally:
        for backend, cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as err:
                _progress(f"[{backend}] could not remove the scratch place: {_error_text(err)}")


# -- output -----------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """An aligned text table; the first ``left`` columns are left-aligned."""
    lines = [tuple(header), *map(tuple, rows)]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = []
    for n, row in enumerate(lines):
        texts = [t.ljust(widths[i]) if i < left else t.rjust(widths[i]) for i, t in enumerate(row)]
        out.append("  ".join(texts).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def format_throughput(cells: Sequence[ThroughputCell]) -> str:
    """The throughput table."""
    header = (
        "backend",
        "M",
        "workers",
        "tasks",
        "secs",
        "tasks/s",
        "calls/s",
        "scaling",
        "acquire ms",
        "ack ms",
        "complete ms",
        "waits",
        "retries",
        "lost",
        "errors",
        "check",
    )
    rows = [
        (
            c.backend,
            str(c.partitions),
            str(c.workers),
            str(c.tasks) + ("" if not c.finished else " all"),
            _num(c.seconds),
            _num(c.tasks_per_second, 1),
            _num(c.calls_per_second, 1),
            _num(c.scaling) + "x" if c.scaling is not None else "-",
            _num(c.acquire_ms),
            _num(c.ack_ms),
            _num(c.complete_ms),
            str(c.waits),
            "-" if c.retries is None else str(c.retries),
            str(c.lost),
            str(len(c.errors)),
            c.check,
        )
        for c in cells
    ]
    return _table(header, rows)


def format_cycles(cells: Sequence[CycleCell], read: ReadResult) -> str:
    """The dispatch-overhead table."""
    header = (
        "backend",
        "job plan",
        "M",
        "cycles",
        "acks",
        "cycle ms",
        "acquire",
        "heartbeat",
        "ack",
        "complete",
        "spec",
        "read ms",
        "overhead",
        "serial ms",
        "serial overhead",
        "ahead ms",
        "ahead overhead",
        "handoff ms",
    )
    rows = [
        (
            c.backend,
            c.plan,
            str(c.partitions),
            str(c.cycles),
            str(c.acks),
            _num(c.cycle_ms),
            _num(c.acquire_ms),
            _num(c.heartbeat_ms),
            _num(c.ack_ms),
            _num(c.complete_ms),
            _num(c.spec_ms),
            _num(c.read_ms, 0),
            ("ERROR" if c.error else _num(c.overhead_pct) + "%"),
            _num(c.worker_ms),
            ("ERROR" if c.error else _num(c.worker_overhead_pct) + "%"),
            _num(c.ahead_ms),
            ("ERROR" if c.error else _num(c.ahead_overhead_pct) + "%"),
            _num(c.handoff_ms, 3),
        )
        for c in cells
    ]
    return _table(header, rows, left=2)


def conclusion(throughput: Sequence[ThroughputCell], cycles: Sequence[CycleCell]) -> str:
    """One line summing up both measurements."""
    parts: list[str] = []
    groups: dict[int, dict[str, list[ThroughputCell]]] = {}
    for cell in throughput:
        if not cell.errors:
            groups.setdefault(cell.partitions, {}).setdefault(cell.backend, []).append(cell)
    for m, by_backend in groups.items():
        scaling = []
        for backend, cells in by_backend.items():
            top = max(cells, key=lambda c: c.workers)
            best = max(cells, key=lambda c: c.tasks_per_second)
            scaling.append(
                f"{backend} {best.tasks_per_second:.0f}/s peak (x{_num(top.scaling, 1)} at "
                f"{top.workers})"
            )
        parts.append(f"tasks/s with a {m}-task job: " + ", ".join(scaling))
    lineitem = [c for c in cycles if c.plan == "lineitem" and not c.error]
    if lineitem:
        worst = max(lineitem, key=lambda c: c.overhead_pct)
        parts.append(
            f"dispatch per {lineitem[0].read_ms:.0f} ms lineitem partition, per-batch acks: "
            + ", ".join(f"{c.backend} {c.overhead_pct:.2f}%" for c in lineitem)
            + f" (worst {worst.backend}); one lease at a time (acquire, then complete with "
            "the acks): "
            + ", ".join(f"{c.backend} {c.worker_overhead_pct:.2f}%" for c in lineitem)
            + "; a Worker claiming ahead (complete_and_acquire, one round trip per partition "
            "in the background): "
            + ", ".join(
                f"{c.backend} {c.ahead_overhead_pct:.2f}% ({c.handoff_ms:.3f} ms on the "
                "consumer's path)"
                for c in lineitem
            )
        )
    synthetic = [c for c in cycles if c.plan == "synthetic" and not c.error]
    if synthetic:
        parts.append(
            f"with a {synthetic[0].partitions}-partition spec: "
            + ", ".join(f"{c.backend} {c.cycle_ms:.1f} ms" for c in synthetic)
        )
    problems = [c for c in throughput if c.errors or c.check != "ok"]
    problems += [c for c in cycles if c.error]  # type: ignore[misc]
    parts.append(f"{len(problems)} runs with errors or failed checks")
    return "Conclusion: " + ". ".join(parts) + "."


# -- main -------------------------------------------------------------------------------


_PROTOCOL_TEXT = {
    "ahead": "complete (+ ack) and claim the next, in one call",
    "serial": "acquire -> complete (+ ack)",
    "per-batch": "acquire -> ack -> complete",
}


def _counts(text: str) -> list[int]:
    """``1,16,64`` (or one number) as a list of integers."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or a comma list: {text!r}") from None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Lease queue throughput and dispatch overhead per partition."
    )
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--workers",
        type=_counts,
        nargs="+",
        default=[[1, 4, 16]],
        metavar="N",
        help="concurrent workers per throughput run, e.g. 1 4 16 or 1,16,64 (default: 1 4 "
        "16); workers are processes forked from a preloaded server (SQL) or threads (memory)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[2000, 300],
        metavar="M",
        help="tasks in the throughput jobs (default: 2000 300; 300 fits the 64 KiB spec "
        "column of MySQL/MariaDB); the largest is the synthetic plan of part 2",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=8.0,
        help="time limit of each throughput run (default 8)",
    )
    parser.add_argument(
        "--cycles", type=int, default=64, help="dispatch cycles timed per backend (default 64)"
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="ahead",
        help="throughput: 'ahead' (default): each completion claims the next task in the "
        "same call, as a Worker claiming ahead; 'serial': acquire -> complete (+ ack); "
        "'per-batch': acquire -> ack -> complete",
    )
    parser.add_argument("--read-table", default="lineitem_sf1")
    parser.add_argument(
        "--read-partitions",
        type=int,
        default=64,
        help="partitions of the lineitem ctid plan (default 64)",
    )
    parser.add_argument(
        "--read-samples", type=int, default=5, help="partitions read and timed (default 5)"
    )
    parser.add_argument("--batch-rows", type=int, default=65536)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--sqlite-dir", default=None, help="where the SQLite queue file goes")
    parser.add_argument("--json", default=None, help="also write results here")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.partitions, args.seconds, args.cycles = [[1, 2]], [40], 1.0, 4
        args.read_partitions, args.read_samples = 4, 2
        if "overhead" in args.parts:
            from benchmarks.tpch import lineitem_parquet, load_postgres

            libpq = args.pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
            args.read_table = load_postgres(libpq, lineitem_parquet(0.01), "lineitem", 0.01)
    args.workers = [n for group in args.workers for n in group]
    if min(args.workers) < 1 or min(args.partitions) < 1 or args.cycles < 1:
        parser.error("--workers, --partitions and --cycles must be >= 1")
    if args.seconds <= 0 or args.read_samples < 1 or args.batch_rows < 1:
        parser.error("--seconds, --read-samples and --batch-rows must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print both tables and the conclusion, optionally write JSON.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        0, or 1 when a run had errors or the queue's final state failed its check.
    """
    args = _parse_args(argv)
    backends = list(dict.fromkeys(args.backends))
    worker_counts = sorted(dict.fromkeys(args.workers))
    started = time.perf_counter()
    load_before = os.getloadavg()
    _progress(f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    tag = f"sqlfeed_bench_{uuid.uuid4().hex[:8]}"

    sizes = list(dict.fromkeys(args.partitions))
    with sqlfeed.connect("duckdb://") as duck:
        plans = {m: sqlfeed.plan(SYNTHETIC_SQL, duck, partitions=m, strategy="hash") for m in sizes}
    synthetic = plans[max(sizes)]
    _progress(f"synthetic plans: {', '.join(str(p.num_partitions) for p in plans.values())}")

    throughput: list[ThroughputCell] = []
    cycles: list[CycleCell] = []
    read: ReadResult | None = None
    spawn_seconds = 0.0
    with scratch_queues(backends, args.pg_url, args.mysql_url, args.sqlite_dir, tag) as (
        urls,
        info,
    ):
        for backend, text in info.items():
            _progress(f"[{backend}] {text}")
        if "throughput" in args.parts:
            sql_backends = [b for b in backends if b in urls and b != "memory"]
            pool = None
            if sql_backends:
                _progress(f"spawning {max(worker_counts)} worker processes ...")
                pool = ProcessPool(max(worker_counts))
                spawn_seconds = pool.spawn_seconds
                _progress(f"spawned in {spawn_seconds:.1f}s")
            try:
                for backend in backends:
                    for plan in plans.values():
                        if backend in urls:
                            throughput += measure_throughput(
                                backend,
                                urls[backend],
                                plan,
                                worker_counts,
                                args.seconds,
                                pool,
                                tag,
                                args.protocol,
                            )
            finally:
                if pool is not None:
                    pool.close()
        if "overhead" in args.parts:
            lineitem, read = measure_read(
                args.pg_url,
                args.read_table,
                args.read_partitions,
                args.read_samples,
                args.batch_rows,
            )
            for backend in backends:
                if backend not in urls:
                    continue
                for label, plan in (("lineitem", lineitem), ("synthetic", synthetic)):
                    cell = measure_cycle(
                        backend,
                        urls[backend],
                        plan,
                        label,
                        args.cycles,
                        read.acks,
                        read.median_seconds,
                        tag,
                    )
                    cycles.append(cell)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    print(
        f"Elastic dispatch benchmark ({platform.node()}, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after, total {elapsed:.0f}s)"
    )
    if throughput:
        print()
        print(
            f"1. Lease throughput: {_PROTOCOL_TEXT[args.protocol]}, jobs of M "
            f"tasks, up to {args.seconds:g}s per run; workers are processes (SQL) or threads "
            "(memory)"
        )
        print(format_throughput(throughput))
        print(
            "tasks 'all': the job ran out of tasks before the time limit; scaling: vs the "
            "same backend and M with 1 worker"
        )
    if read is not None:
        print()
        print(
            f"2. Dispatch overhead, single worker: acquire + heartbeat + {read.acks} acks + "
            f"complete (per-batch), acquire + complete carrying the acks (serial: one lease "
            f"at a time) and complete_and_acquire carrying them (ahead: a Worker's claim-ahead, "
            f"in a background thread; handoff: its cost on the consumer's path), "
            f"vs reading one {args.read_table} partition ({read.strategy}, "
            f"M={read.partitions}, median {statistics.median(read.rows):.0f} rows, "
            f"{args.batch_rows}-row batches, median of {len(read.seconds)} reads "
            f"{1000 * read.median_seconds:.0f} ms)"
        )
        print(format_cycles(cycles, read))
    for run in throughput:
        for error in run.errors:
            print(f"ERROR {run.backend} M={run.partitions} x{run.workers}: {error}")
        for kind, n in run.retried.items():
            print(f"retried {n}x in {run.backend} M={run.partitions} x{run.workers}: {kind}")
    for cycle in cycles:
        if cycle.error:
            print(f"ERROR {cycle.backend} cycle {cycle.plan}: {cycle.error}")
    print()
    print(conclusion(throughput, cycles))

    if args.json is not None:
        doc = {
            "args": vars(args),
            "elapsed_seconds": round(elapsed, 2),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "host": {
                "node": platform.node(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "backends": info,
            "spawn_seconds": round(spawn_seconds, 2),
            "throughput": [asdict(c) for c in throughput],
            "read": asdict(read) if read is not None else None,
            "cycles": [asdict(c) for c in cycles],
            "conclusion": conclusion(throughput, cycles),
        }
        with open(args.json, "w") as out:
            out.write(json.dumps(doc, indent=2) + "\n")
        _progress(f"wrote {args.json}")
    failed = any(c.errors or c.check != "ok" for c in throughput) or any(c.error for c in cycles)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
