"""The lease table's model and interface: jobs, leases, and what every queue backend does.

A job is a plan, a number of epochs and a seed. Each (epoch, partition) is a *task* with
a state (``pending``, ``leased``, ``done``), a lease token and expiry, and the number of
batches its consumer acknowledged. Guarantees:

* every task of an epoch is completed exactly once: only the current lease holder (its
  token) can acknowledge or complete, and a takeover issues a new token;
* an expired lease is handed out again, and the new holder resumes after the last
  acknowledged batch: acknowledged batches are never delivered again, a batch handed to
  a consumer that died before acknowledging it is (at-least-once for those);
* epochs are barriers: a worker finding nothing pending waits for leased tasks (which may
  expire and come back) until the epoch is complete, then moves on;
* all times come from the database's clock, never the workers', so clock skew between
  machines cannot expire or extend a lease.

Backends: a SQL database through SQLAlchemy (:class:`sqlfeed.dispatch.sqlqueue.SQLQueue`:
a SQLite file, the local default, for the processes of one machine; PostgreSQL and
MySQL/MariaDB with ``FOR UPDATE SKIP LOCKED``; sessions bounded as
:mod:`sqlfeed.dispatch.sessions` says, which also says what SQLite cannot guarantee), and
:class:`sqlfeed.dispatch.memory.MemoryQueue` for the threads of one process;
:func:`sqlfeed.dispatch.backends.open_queue` opens either by URL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.errors import CorruptStateError, QueueBusyError, UnknownJobError
from sqlfeed.plans.model import Plan

__all__ = [
    "FINISHED",
    "ORDERS",
    "STATES",
    "CorruptStateError",
    "JobSpec",
    "JobStatus",
    "Lease",
    "LeaseQueue",
    "QueueBusyError",
    "UnknownJobError",
    "Wait",
    "check_spec",
    "conflict_error",
    "worker_row",
]

ORDERS = ("shuffle", "lpt", "index")
"""Hand-out order within an epoch: seeded permutation, largest first, or plan order."""

STATES = ("pending", "leased", "done", "dropped")
"""``dropped``: left over once every replica delivered its even share of the epoch."""
FINISHED = ("done", "dropped")
"""The states of a task that is over for its epoch."""


@dataclass(frozen=True)
class JobSpec:
    """What a job is: created once, then every worker must agree on it."""

    name: str
    plan: Plan = field(repr=False)
    epochs: int = 1
    seed: int = 0
    lease_ttl: float = 60.0
    order: str = "shuffle"
    snapshot: str | None = None
    """A PostgreSQL snapshot id every worker reads inside (``snapshot=True`` on create)."""
    even_batches: bool = False
    """Every replica delivers the same number of batches per epoch (:attr:`share`)."""
    replicas: int | None = None
    """The number of synchronous replicas (workers in lockstep), for ``even_batches``."""
    batch_size: int | None = None
    """Rows per batch, for ``even_batches`` (workers then batch with it)."""
    rows: int | None = None
    """The query's exact row count, for ``even_batches``."""
    sink: dict[str, Any] | None = None
    """Where the job's output goes (:class:`sqlfeed.sink.TableSink`'s spec): workers
    joining the job write there. Its ``identity`` part must match on every create."""
    follow: dict[str, Any] | None = None
    """An epoch of a followed job (:mod:`sqlfeed.dispatch.follow`): the followed job's
    name, this epoch's number and what it read (``entry``), and what every later epoch
    is planned from (the query, ``epochs``, ``new_only``, ``watermark``, plan options)."""

    @property
    def share(self) -> int | None:
        """Batches per replica per epoch with ``even_batches``: rows // (replicas x batch)."""
        if not self.even_batches:
            return None
        assert self.rows is not None
        assert self.replicas
        assert self.batch_size
        return self.rows // (self.replicas * self.batch_size)

    def definition(self) -> dict[str, Any]:
        """What must match when a worker creates the same job again."""
        return {
            "fingerprint": self.plan.fingerprint,
            "epochs": self.epochs,
            "seed": self.seed,
            "order": self.order,
            "even_batches": self.even_batches,
            "replicas": self.replicas,
            "batch_size": self.batch_size,
            "sink": (self.sink or {}).get("identity"),
        }

    def to_json(self) -> str:
        """The job as JSON (its plan included), as a SQL queue stores it."""
        data = {k: v for k, v in asdict(self).items() if k != "plan"}
        data["plan"] = self.plan.to_dict()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        """The job :meth:`to_json` wrote."""
        data = json.loads(text)
        data["plan"] = Plan.from_dict(data["plan"])
        return cls(**data)

    def positions(self, epoch: int) -> list[int]:
        """For each partition index, its place in the hand-out order of ``epoch``."""
        count = self.plan.num_partitions
        if self.order == "shuffle":
            order = list(np.random.default_rng([self.seed, epoch]).permutation(count))
        elif self.order == "lpt":
            sizes = [p.estimated_rows or 0 for p in self.plan.partitions]
            order = sorted(range(count), key=lambda i: (-sizes[i], i))
        else:
            order = list(range(count))
        positions = [0] * count
        for place, index in enumerate(order):
            positions[int(index)] = place
        return positions


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one task until ``expires`` (database time)."""

    job: str
    epoch: int
    partition: int
    token: str
    worker: str
    offset: int
    """Batches of this partition already acknowledged: the holder numbers its batches on
    from there."""
    attempt: int
    rows: int | None = None
    """Rows of those batches: the holder resumes after as many rows, whatever its batch
    size (an earlier holder's may have been another). Every queue here counts them; None
    (unknown) reads the partition again from its first row: rows may repeat, none is lost."""


@dataclass(frozen=True)
class Wait:
    """Nothing to hand out now, but the epoch is not complete: ask again later."""

    epoch: int
    seconds: float


@dataclass
class JobStatus:
    """Progress of a job: per epoch done/leased/pending, and per worker."""

    name: str
    epochs: int
    partitions: int
    per_epoch: list[dict[str, int]]
    workers: list[dict[str, Any]]

    @property
    def complete(self) -> bool:
        """Every task of every epoch is done or dropped."""
        return all(e["done"] + e["dropped"] == self.partitions for e in self.per_epoch)

    def to_dict(self) -> dict[str, Any]:
        """The status as plain data, ``complete`` included."""
        return asdict(self) | {"complete": self.complete}


class LeaseQueue:
    """The interface every backend implements."""

    @property
    def caveat(self) -> str | None:
        """What this queue cannot guarantee, in a sentence (None: nothing to say)."""
        return None

    def create_job(self, spec: JobSpec) -> JobSpec:
        """Create ``spec`` or return the existing job of that name if it is the same job.

        Raises:
            InvalidArgumentError: a job of that name exists with another definition.
        """
        raise NotImplementedError

    def job(self, name: str) -> JobSpec:
        """The job ``name``. Raises :class:`UnknownJobError`."""
        raise NotImplementedError

    def find_job(self, name: str) -> JobSpec | None:
        """The job ``name``, or None when there is none (a queue not made yet included)."""
        try:
            return self.job(name)
        except UnknownJobError:
            return None

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        """A lease on the next task, a :class:`Wait`, or None when every epoch is done."""
        raise NotImplementedError

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease; False when it was lost (taken over or completed)."""
        raise NotImplementedError

    def ack(self, lease: Lease, offset: int, rows: int, batches: int = 1) -> bool:
        """Record that the consumer took the first ``offset`` batches of the partition.

        Args:
            lease: the lease on the task.
            offset: batches taken so far (an offset not beyond the stored one is a repeat:
                nothing changes, and the answer is whether the lease still holds).
            rows: rows in the batches newly taken (the ``batches`` before ``offset``).
            batches: how many batches this acknowledges (several at once when batched).

        Returns:
            False when the lease was lost. The lease is renewed.
        """
        raise NotImplementedError

    def complete(
        self, lease: Lease, *, offset: int | None = None, rows: int = 0, batches: int = 0
    ) -> bool:
        """Mark the task done; False when the lease was lost (someone else completes it).

        Idempotent: completing a task this lease completed already answers True again and
        counts nothing twice (a retry after a lost reply).

        ``offset``, ``rows`` and ``batches`` acknowledge the last batches in the same
        step, as :meth:`ack` would (one round trip fewer per partition).
        """
        raise NotImplementedError

    def complete_and_acquire(
        self,
        lease: Lease,
        worker: str,
        *,
        offset: int | None = None,
        rows: int = 0,
        batches: int = 0,
    ) -> tuple[bool, Lease | Wait | None]:
        """:meth:`complete` ``lease``, then :meth:`acquire` the next task for ``worker``.

        A SQL queue does both in one transaction (one round trip per partition for a
        worker that claims ahead). Here, the two calls one after the other: a busy queue
        on the second is answered ``Wait(epoch, 0)`` (ask again), so that a
        :class:`QueueBusyError` still means that nothing changed.

        Returns:
            Whether the task was completed (as :meth:`complete`), and the claim's answer.
        """
        done = self.complete(lease, offset=offset, rows=rows, batches=batches)
        try:
            return done, self.acquire(lease.job, worker)
        except QueueBusyError:
            return done, Wait(lease.epoch, 0.0)

    def release(self, lease: Lease) -> None:
        """Give the task back at once (shutdown), keeping its acknowledged offset."""
        raise NotImplementedError

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        """``even_batches``: ``worker`` delivered its share of ``epoch`` (it then waits)."""
        raise NotImplementedError

    def status(self, job: str) -> JobStatus:
        """The job's progress per epoch and per worker."""
        raise NotImplementedError

    def leases(self, job: str) -> list[tuple[str, int, float]]:
        """The job's leases now held.

        Each is ``(worker, epoch, seconds until it expires)``, by the queue's clock
        (negative: expired, not yet taken over). A live worker's heartbeats keep pushing the
        expiry back; a dead one's runs out.
        """
        raise NotImplementedError

    def reset(self, job: str) -> None:
        """Every task pending again, from offset 0."""
        raise NotImplementedError

    def delete(self, job: str) -> None:
        """Remove the job and its tasks (nothing when there is no such job)."""
        raise NotImplementedError

    def record(self, job: str, checkpoint: int, worker: str, entries: Sequence[Any]) -> None:
        """Add to the job's ledger what ``worker`` delivered up to ``checkpoint``.

        See :mod:`sqlfeed.dispatch.ledger`; :meth:`Worker.checkpoint` calls it.
        """
        raise NotImplementedError

    def checkpoints(self, job: str) -> list[int]:
        """The checkpoint ids recorded in the job's ledger, in order."""
        raise NotImplementedError

    def rewind(self, job: str, checkpoint: int) -> dict[str, int]:
        """Hand out again everything delivered after ``checkpoint``.

        Stop every worker first. Returns counts of the tasks ``done`` and ``resumed``
        (part-way) then.

        Raises:
            InvalidArgumentError: no such checkpoint in the job's ledger.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


def check_spec(spec: JobSpec) -> None:
    """Refuse a job definition a queue cannot run.

    Raises:
        InvalidArgumentError: a bad order, epochs, lease_ttl or name, or ``even_batches``
            without replicas, batch_size or the row count.
    """
    if spec.order not in ORDERS:
        raise InvalidArgumentError(f"order must be one of {', '.join(ORDERS)}, not {spec.order!r}")
    if isinstance(spec.epochs, bool) or not isinstance(spec.epochs, int) or spec.epochs < 1:
        raise InvalidArgumentError(f"epochs must be an integer >= 1, got {spec.epochs!r}")
    if not spec.lease_ttl > 0:
        raise InvalidArgumentError(f"lease_ttl must be > 0 seconds, got {spec.lease_ttl!r}")
    if not spec.name or len(spec.name) > 200:
        raise InvalidArgumentError("a job name must have 1 to 200 characters")
    if spec.even_batches:
        for value, what in ((spec.replicas, "replicas"), (spec.batch_size, "batch_size")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"even_batches needs {what} >= 1, got {value!r}")
        if spec.rows is None:
            raise InvalidArgumentError(
                "even_batches needs the query's exact row count: plan it without "
                "partitions=... (the planner counts), or give rows="
            )


def conflict_error(name: str, existing: JobSpec, spec: JobSpec) -> InvalidArgumentError:
    """The error for creating job ``name`` as ``spec`` when it exists as ``existing``."""
    theirs, ours = existing.definition(), spec.definition()
    diff = ", ".join(f"{k}: {theirs[k]!r} != {ours[k]!r}" for k in ours if theirs[k] != ours[k])
    return InvalidArgumentError(
        f"job {name!r} exists with another definition ({diff}); pick another name, or "
        "delete/reset the job"
    )


def worker_row(record: dict[str, Any]) -> dict[str, Any]:
    """A worker's status row: ``record`` plus its ``rows_per_second`` since it joined."""
    span = max(record["seen"] - record["joined"], 1e-9)
    record["rows_per_second"] = round(record["rows"] / span, 1) if record["rows"] else 0.0
    return record
