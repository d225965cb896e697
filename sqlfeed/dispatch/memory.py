"""The in-memory lease queue: the lease table of one process, shared by its threads.

It keeps the guarantees of :mod:`sqlfeed.dispatch.queue` with ``time.monotonic`` as its
clock; ``memory://NAME`` URLs (:func:`sqlfeed.dispatch.backends.open_queue`) name them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlfeed.dispatch.ledger import LedgerEntry, check_rewind, rewind_summary, states_at
from sqlfeed.dispatch.queue import (
    FINISHED,
    STATES,
    JobSpec,
    JobStatus,
    Lease,
    LeaseQueue,
    UnknownJobError,
    Wait,
    check_spec,
    conflict_error,
    worker_row,
)

__all__ = ["MemoryQueue"]


@dataclass
class _Task:
    position: int
    state: str = "pending"
    worker: str | None = None
    token: str | None = None
    expires: float = 0.0
    acked: int = 0
    rows: int = 0
    attempts: int = 0
    completions: int = 0


class MemoryQueue(LeaseQueue):
    """The lease table of one process, for threads (its clock: ``time.monotonic``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, JobSpec] = {}
        self._tasks: dict[str, dict[tuple[int, int], _Task]] = {}
        self._workers: dict[str, dict[str, dict[str, Any]]] = {}
        self._shares: dict[str, set[tuple[int, str]]] = {}
        self._ledger: dict[str, dict[tuple[int, str], list[LedgerEntry]]] = {}
        """Per job: (checkpoint, worker) -> what it recorded."""

    def create_job(self, spec: JobSpec) -> JobSpec:
        check_spec(spec)
        with self._lock:
            existing = self._jobs.get(spec.name)
            if existing is not None:
                if existing.definition() != spec.definition():
                    raise conflict_error(spec.name, existing, spec)
                return existing
            self._jobs[spec.name] = spec
            self._tasks[spec.name] = {
                (epoch, part): _Task(position)
                for epoch in range(spec.epochs)
                for part, position in enumerate(spec.positions(epoch))
            }
            self._workers[spec.name] = {}
            self._shares[spec.name] = set()
            return spec

    def job(self, name: str) -> JobSpec:
        with self._lock:
            return self._job(name)

    def _job(self, name: str) -> JobSpec:
        if name not in self._jobs:
            raise UnknownJobError(f"no job named {name!r} in this queue")
        return self._jobs[name]

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        with self._lock:
            spec = self._job(job)
            now = time.monotonic()
            tasks = self._tasks[job]
            open_epochs = sorted({e for (e, _), t in tasks.items() if t.state not in FINISHED})
            if not open_epochs:
                return None
            epoch = open_epochs[0]
            if spec.even_batches:
                shares = {w for e, w in self._shares[job] if e == epoch}
                if spec.replicas is not None and len(shares) >= spec.replicas:
                    for (e, _), task in tasks.items():  # every replica has its share
                        if e == epoch and task.state not in FINISHED:
                            task.state, task.token = "dropped", None
                    return Wait(epoch, 0.0)  # the next epoch is open now: ask again
                if worker in shares:
                    return Wait(epoch, 0.05)
            candidates = [  # expired leases first, then pending tasks; in position order
                (t.state == "pending", t.position, part, t)
                for (e, part), t in tasks.items()
                if e == epoch
                and (t.state == "pending" or (t.state == "leased" and t.expires < now))
            ]
            self._seen(job, worker, now)
            if not candidates:
                soonest = min(
                    t.expires for (e, _), t in tasks.items() if e == epoch and t.state == "leased"
                )
                return Wait(epoch, max(0.0, soonest - now))
            _, _, part, task = min(candidates, key=lambda c: c[:2])
            task.state, task.worker, task.token = "leased", worker, uuid.uuid4().hex
            task.expires = now + spec.lease_ttl
            task.attempts += 1
            return Lease(job, epoch, part, task.token, worker, task.acked, task.attempts, task.rows)

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        with self._lock:
            self._job(job)
            self._shares[job].add((epoch, worker))

    def _seen(self, job: str, worker: str, now: float) -> dict[str, Any]:
        record = self._workers[job].setdefault(
            worker, {"worker": worker, "joined": now, "seen": now, "batches": 0, "rows": 0}
        )
        record["seen"] = now
        return record

    def _held(self, lease: Lease) -> _Task | None:
        task = self._tasks.get(lease.job, {}).get((lease.epoch, lease.partition))
        if task is None or task.token != lease.token or task.state != "leased":
            return None
        return task

    def heartbeat(self, lease: Lease) -> bool:
        with self._lock:
            task = self._held(lease)
            if task is None:
                return False
            task.expires = time.monotonic() + self._jobs[lease.job].lease_ttl
            return True

    def ack(self, lease: Lease, offset: int, rows: int, batches: int = 1) -> bool:
        with self._lock:
            task = self._held(lease)
            if task is None:
                return False
            task.expires = time.monotonic() + self._jobs[lease.job].lease_ttl
            self._record(lease, task, offset, rows, batches)
            return True

    def _record(self, lease: Lease, task: _Task, offset: int, rows: int, batches: int) -> None:
        if offset > task.acked:
            record = self._seen(lease.job, lease.worker, time.monotonic())
            record["batches"] += batches
            record["rows"] += rows
            task.acked, task.rows = offset, task.rows + rows

    def complete(
        self, lease: Lease, *, offset: int | None = None, rows: int = 0, batches: int = 0
    ) -> bool:
        with self._lock:
            task = self._held(lease)
            if task is None:  # done by this very lease already (a repeated call): done
                done = self._tasks.get(lease.job, {}).get((lease.epoch, lease.partition))
                return done is not None and done.state == "done" and done.token == lease.token
            if offset is not None and batches:
                self._record(lease, task, offset, rows, batches)
            task.state = "done"  # the token stays: a repeated completion answers done
            task.completions += 1
            return True

    def release(self, lease: Lease) -> None:
        with self._lock:
            task = self._held(lease)
            if task is not None:
                task.state, task.token, task.worker = "pending", None, None

    def status(self, job: str) -> JobStatus:
        with self._lock:
            spec = self._job(job)
            per_epoch = []
            for epoch in range(spec.epochs):
                counts = dict.fromkeys(STATES, 0)
                for (e, _), task in self._tasks[job].items():
                    if e == epoch:
                        counts[task.state] += 1
                per_epoch.append({"epoch": epoch, **counts})
            workers = [worker_row(dict(w)) for w in self._workers[job].values()]
            return JobStatus(job, spec.epochs, spec.plan.num_partitions, per_epoch, workers)

    def leases(self, job: str) -> list[tuple[str, int, float]]:
        with self._lock:
            self._job(job)
            now = time.monotonic()
            return [
                (str(t.worker), e, t.expires - now)
                for (e, _), t in self._tasks[job].items()
                if t.state == "leased"
            ]

    def completions(self, job: str) -> dict[tuple[int, int], int]:
        """How often each task was completed (always 1 for a done task)."""
        with self._lock:
            return {key: t.completions for key, t in self._tasks[job].items()}

    def reset(self, job: str) -> None:
        with self._lock:
            spec = self._job(job)
            self._jobs.pop(job)
        self.delete(job)
        self.create_job(spec)

    def delete(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)
            self._tasks.pop(job, None)
            self._workers.pop(job, None)
            self._shares.pop(job, None)
            self._ledger.pop(job, None)

    def record(self, job: str, checkpoint: int, worker: str, entries: Sequence[Any]) -> None:
        with self._lock:
            self._job(job)
            ledger = self._ledger.setdefault(job, {})
            ledger.setdefault((checkpoint, worker), []).extend(entries)

    def checkpoints(self, job: str) -> list[int]:
        with self._lock:
            self._job(job)
            return sorted({at for at, _ in self._ledger.get(job, {})})

    def rewind(self, job: str, checkpoint: int) -> dict[str, int]:
        with self._lock:
            spec = self._job(job)
            ledger = self._ledger.get(job, {})
            check_rewind(spec, checkpoint, sorted({at for at, _ in ledger}))
            pairs = [(at, e) for (at, _), entries in ledger.items() for e in entries]
            states = states_at(pairs, checkpoint)
            for key, task in self._tasks[job].items():
                state = states.get(key)
                task.state = "done" if state is not None and state.done else "pending"
                task.worker = task.token = None
                task.expires = 0.0
                task.acked = state.acked if state is not None else 0
                task.rows = state.rows if state is not None else 0
                task.completions = int(task.state == "done")
            self._ledger[job] = {k: v for k, v in ledger.items() if k[0] <= checkpoint}
            self._shares[job] = set()
        return rewind_summary(states)
