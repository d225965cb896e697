"""The lease table: hands a job's partitions to workers that may join or die at any time.

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

Backends: a SQL database through SQLAlchemy (a SQLite file, the local default, safe
across processes; PostgreSQL and MySQL/MariaDB with ``FOR UPDATE SKIP LOCKED``), and
:class:`MemoryQueue` for the threads of one process.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dialects import EngineError, InvalidArgumentError, SqlfeedError
from sqlfeed.plans.model import Plan

__all__ = [
    "ORDERS",
    "JobSpec",
    "JobStatus",
    "Lease",
    "LeaseQueue",
    "MemoryQueue",
    "SQLQueue",
    "UnknownJobError",
    "Wait",
    "open_queue",
]

ORDERS = ("shuffle", "lpt", "index")
"""Hand-out order within an epoch: seeded permutation, largest first, or plan order."""

STATES = ("pending", "leased", "done", "dropped")
"""``dropped``: left over once every replica delivered its even share of the epoch."""
_FINISHED = ("done", "dropped")


class UnknownJobError(InvalidArgumentError):
    """No job of that name exists in the queue."""


class CorruptStateError(SqlfeedError):
    """The queue's rows contradict the job (missing tasks, unknown states)."""


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
        }

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if k != "plan"}
        data["plan"] = self.plan.to_dict()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
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
    """Batches of this partition already acknowledged: the holder resumes after them."""
    attempt: int


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
        return all(e["done"] + e["dropped"] == self.partitions for e in self.per_epoch)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"complete": self.complete}


class LeaseQueue:
    """The interface every backend implements."""

    def create_job(self, spec: JobSpec) -> JobSpec:
        """Create ``spec`` or return the existing job of that name if it is the same job.

        Raises:
            InvalidArgumentError: a job of that name exists with another definition.
        """
        raise NotImplementedError

    def job(self, name: str) -> JobSpec:
        """The job ``name``. Raises :class:`UnknownJobError`."""
        raise NotImplementedError

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        """A lease on the next task, a :class:`Wait`, or None when every epoch is done."""
        raise NotImplementedError

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease; False when it was lost (taken over or completed)."""
        raise NotImplementedError

    def ack(self, lease: Lease, offset: int, rows: int) -> bool:
        """Record that the consumer took ``offset`` batches (``rows`` rows); renews the lease."""
        raise NotImplementedError

    def complete(self, lease: Lease) -> bool:
        """Mark the task done; False when the lease was lost (someone else completes it)."""
        raise NotImplementedError

    def release(self, lease: Lease) -> None:
        """Give the task back at once (shutdown), keeping its acknowledged offset."""
        raise NotImplementedError

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        """``even_batches``: ``worker`` delivered its share of ``epoch`` (it then waits)."""
        raise NotImplementedError

    def status(self, job: str) -> JobStatus:
        raise NotImplementedError

    def reset(self, job: str) -> None:
        """Every task pending again, from offset 0."""
        raise NotImplementedError

    def delete(self, job: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


def _check_spec(spec: JobSpec) -> None:
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


def _conflict(name: str, existing: JobSpec, spec: JobSpec) -> InvalidArgumentError:
    theirs, ours = existing.definition(), spec.definition()
    diff = ", ".join(f"{k}: {theirs[k]!r} != {ours[k]!r}" for k in ours if theirs[k] != ours[k])
    return InvalidArgumentError(
        f"job {name!r} exists with another definition ({diff}); pick another name, or "
        "delete/reset the job"
    )


# -- in memory --------------------------------------------------------------------------


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

    def create_job(self, spec: JobSpec) -> JobSpec:
        _check_spec(spec)
        with self._lock:
            existing = self._jobs.get(spec.name)
            if existing is not None:
                if existing.definition() != spec.definition():
                    raise _conflict(spec.name, existing, spec)
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
            open_epochs = sorted({e for (e, _), t in tasks.items() if t.state not in _FINISHED})
            if not open_epochs:
                return None
            epoch = open_epochs[0]
            if spec.even_batches:
                shares = {w for e, w in self._shares[job] if e == epoch}
                if spec.replicas is not None and len(shares) >= spec.replicas:
                    for (e, _), task in tasks.items():  # every replica has its share
                        if e == epoch and task.state not in _FINISHED:
                            task.state, task.token = "dropped", None
                    return Wait(epoch, 0.0)  # the next epoch is open now: ask again
                if worker in shares:
                    return Wait(epoch, 0.05)
            candidates = [
                (t.position, part, t)
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
            _, part, task = min(candidates, key=lambda c: c[0])
            task.state, task.worker, task.token = "leased", worker, uuid.uuid4().hex
            task.expires = now + spec.lease_ttl
            task.attempts += 1
            return Lease(job, epoch, part, task.token, worker, task.acked, task.attempts)

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

    def ack(self, lease: Lease, offset: int, rows: int) -> bool:
        with self._lock:
            task = self._held(lease)
            if task is None:
                return False
            task.expires = time.monotonic() + self._jobs[lease.job].lease_ttl
            if offset > task.acked:
                record = self._seen(lease.job, lease.worker, time.monotonic())
                record["batches"] += offset - task.acked
                record["rows"] += rows
                task.acked, task.rows = offset, task.rows + rows
            return True

    def complete(self, lease: Lease) -> bool:
        with self._lock:
            task = self._held(lease)
            if task is None:
                return False
            task.state, task.token = "done", None
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
            workers = [_worker_row(dict(w)) for w in self._workers[job].values()]
            return JobStatus(job, spec.epochs, spec.plan.num_partitions, per_epoch, workers)

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


def _free(task: _Task, now: float) -> bool:
    return task.state == "pending" or (task.state == "leased" and task.expires < now)


def _worker_row(record: dict[str, Any]) -> dict[str, Any]:
    span = max(record["seen"] - record["joined"], 1e-9)
    record["rows_per_second"] = round(record["rows"] / span, 1) if record["rows"] else 0.0
    return record


# -- SQL -------------------------------------------------------------------------------

_NOW = {
    "postgresql": "EXTRACT(EPOCH FROM clock_timestamp())",
    "mysql": "UNIX_TIMESTAMP(NOW(6))",
    "mariadb": "UNIX_TIMESTAMP(NOW(6))",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}


class SQLQueue(LeaseQueue):
    """The lease table in a SQL database (SQLite file, PostgreSQL, MySQL/MariaDB).

    Short transactions; a task is claimed with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL,
    MySQL 8, MariaDB 10.6) or under SQLite's ``BEGIN IMMEDIATE`` write lock.
    """

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.url = url
        try:
            self.engine = sa.create_engine(url, **_engine_options(url))
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as err:
            raise InvalidArgumentError(f"bad queue URL {url!r}: {err}") from None
        self.backend = self.engine.dialect.name
        if self.backend not in _NOW:
            raise InvalidArgumentError(
                f"a queue lives in SQLite, PostgreSQL or MySQL/MariaDB, not {self.backend}"
            )
        if self.backend == "sqlite":
            _sqlite_locking(self.engine)
        self._now = _NOW[self.backend]
        self._specs: dict[str, JobSpec] = {}
        self._lock_clause = "" if self.backend == "sqlite" else " FOR UPDATE SKIP LOCKED"
        self._tables()

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        import sqlalchemy as sa

        try:
            with self.engine.begin() as connection:
                yield connection
        except sa.exc.DBAPIError as err:
            from sqlfeed.io.sources import _driver_message

            error = EngineError(f"queue {self._label()}: {_driver_message(err)}")
            error.transient = _transient(err)  # type: ignore[attr-defined]
            raise error from None

    def _retrying(self, action: Any, *args: Any) -> Any:
        """Run a short transaction again after a deadlock or lock time-out (up to 8 times)."""
        for attempt in range(8):
            try:
                return action(*args)
            except EngineError as err:
                if not getattr(err, "transient", False) or attempt == 7:
                    raise
                time.sleep(0.01 * 2**attempt)
        raise AssertionError("unreachable")

    def _label(self) -> str:
        from sqlfeed.io.sources import _redact

        return _redact(self.url)

    def _tables(self) -> None:
        import sqlalchemy as sa
        from sqlalchemy.dialects.mysql import LONGTEXT

        metadata = sa.MetaData()
        name = sa.String(200)
        sa.Table(
            "sqlfeed_jobs", metadata,
            sa.Column("name", name, primary_key=True),
            sa.Column("fingerprint", sa.String(64), nullable=False),
            # LONGTEXT on MySQL: TEXT stops at 64 KiB, a plan of ~300 partitions.
            sa.Column("spec", sa.Text().with_variant(LONGTEXT(), "mysql", "mariadb"),
                      nullable=False),
            sa.Column("created", sa.Double, nullable=False),
        )  # fmt: skip
        tasks = sa.Table(
            "sqlfeed_tasks", metadata,
            sa.Column("job", name, primary_key=True),
            sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("position", sa.Integer, nullable=False),
            sa.Column("state", sa.String(10), nullable=False),
            sa.Column("worker", name),
            sa.Column("token", sa.String(32)),
            sa.Column("expires", sa.Double, nullable=False),
            sa.Column("acked", sa.Integer, nullable=False),
            sa.Column("rows_acked", sa.BigInteger, nullable=False),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("completions", sa.Integer, nullable=False),
        )  # fmt: skip
        sa.Index("sqlfeed_tasks_next", tasks.c.job, tasks.c.epoch, tasks.c.state, tasks.c.position)
        sa.Table(
            "sqlfeed_workers", metadata,
            sa.Column("job", name, primary_key=True),
            sa.Column("worker", name, primary_key=True),
            sa.Column("joined", sa.Double, nullable=False),
            sa.Column("seen", sa.Double, nullable=False),
            sa.Column("batches", sa.BigInteger, nullable=False),
            sa.Column("rows_acked", sa.BigInteger, nullable=False),
        )  # fmt: skip
        sa.Table(
            "sqlfeed_shares", metadata,
            sa.Column("job", name, primary_key=True),
            sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("worker", name, primary_key=True),
        )  # fmt: skip
        try:
            metadata.create_all(self.engine)
        except sa.exc.DBAPIError as err:
            from sqlfeed.io.sources import _driver_message

            raise EngineError(
                f"cannot open queue {self._label()}: {_driver_message(err)}"
            ) from None

    def _clock(self, connection: Any) -> float:
        return float(connection.exec_driver_sql(f"SELECT {self._now}").scalar())

    def create_job(self, spec: JobSpec) -> JobSpec:
        import sqlalchemy as sa

        _check_spec(spec)
        try:
            with self._tx() as c:
                now = self._clock(c)
                c.execute(
                    sa.text(
                        "INSERT INTO sqlfeed_jobs (name, fingerprint, spec, created) "
                        "VALUES (:n, :f, :s, :t)"
                    ),
                    {"n": spec.name, "f": spec.plan.fingerprint, "s": spec.to_json(), "t": now},
                )
                rows = [
                    {"j": spec.name, "e": epoch, "p": part, "o": position}
                    for epoch in range(spec.epochs)
                    for part, position in enumerate(spec.positions(epoch))
                ]
                c.execute(
                    sa.text(
                        "INSERT INTO sqlfeed_tasks (job, epoch, part, position, state, expires, "
                        "acked, rows_acked, attempts, completions) "
                        "VALUES (:j, :e, :p, :o, 'pending', 0, 0, 0, 0, 0)"
                    ),
                    rows,
                )
            return spec
        except EngineError as failure:
            try:  # the job existed (or another worker won the race): it must be the same job
                existing = self.job(spec.name, cached=False)
            except UnknownJobError:
                raise failure from None  # not a duplicate: the real error
            if existing.definition() != spec.definition():
                raise _conflict(spec.name, existing, spec) from None
            return existing

    def job(self, name: str, *, cached: bool = True) -> JobSpec:
        """The job ``name``. A job's definition never changes once created, so it is read
        (and its plan decoded) once per queue object; ``cached=False`` reads it again."""
        import sqlalchemy as sa

        if cached and name in self._specs:
            return self._specs[name]
        with self._tx() as c:
            text = c.execute(
                sa.text("SELECT spec FROM sqlfeed_jobs WHERE name = :n"), {"n": name}
            ).scalar()
        if text is None:
            self._specs.pop(name, None)
            raise UnknownJobError(f"no job named {name!r} in queue {self._label()}")
        try:
            spec = JobSpec.from_json(text)
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptStateError(
                f"job {name!r}: its stored definition is unreadable ({err}); delete the job"
            ) from None
        self._specs[name] = spec
        return spec

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        spec = self.job(job)
        result = self._retrying(self._acquire, spec, worker)
        if result is _ALL_DONE:
            self.job(job, cached=False)  # deleted meanwhile? then say so
            with self._tx() as c:
                self._check_complete(c, spec)
            return None
        assert result is None or isinstance(result, Lease | Wait)
        return result

    def _acquire(self, spec: JobSpec, worker: str) -> Lease | Wait | object:
        import sqlalchemy as sa

        job = spec.name
        with self._tx() as c:
            now = self._clock(c)
            self._seen(c, job, worker, now)
            epoch = c.execute(
                sa.text(
                    "SELECT MIN(epoch) FROM sqlfeed_tasks WHERE job = :j "
                    "AND state NOT IN ('done', 'dropped')"
                ),
                {"j": job},
            ).scalar()
            if epoch is None:
                return _ALL_DONE
            if spec.even_batches:
                finished = (
                    c.execute(
                        sa.text("SELECT worker FROM sqlfeed_shares WHERE job = :j AND epoch = :e"),
                        {"j": job, "e": epoch},
                    )
                    .scalars()
                    .all()
                )
                if spec.replicas is not None and len(finished) >= spec.replicas:
                    c.execute(
                        sa.text(
                            "UPDATE sqlfeed_tasks SET state = 'dropped', token = NULL "
                            "WHERE job = :j AND epoch = :e AND state IN ('pending', 'leased')"
                        ),
                        {"j": job, "e": epoch},
                    )
                    return Wait(int(epoch), 0.0)  # the next epoch is open now: ask again
                if worker in finished:
                    return Wait(int(epoch), 0.05)
            # Pending tasks first, then expired leases: one predicate each, so the claim uses
            # the (job, epoch, state, position) index. With "pending OR expired", MariaDB
            # sorts the whole epoch, and SKIP LOCKED then returns no row at all whenever
            # another session holds the first candidate.
            row = None
            for condition in ("state = 'pending'", "state = 'leased' AND expires < :now"):
                row = c.execute(
                    sa.text(
                        "SELECT part, acked, attempts FROM sqlfeed_tasks "
                        f"WHERE job = :j AND epoch = :e AND {condition} "
                        "ORDER BY position LIMIT 1" + self._lock_clause
                    ),
                    {"j": job, "e": epoch, "now": now},
                ).first()
                if row is not None:
                    break
            if row is None:
                self._check_states(c, spec, epoch)
                soonest = c.execute(
                    sa.text(
                        "SELECT MIN(expires) FROM sqlfeed_tasks WHERE job = :j AND epoch = :e "
                        "AND state = 'leased'"
                    ),
                    {"j": job, "e": epoch},
                ).scalar()
                return Wait(int(epoch), max(0.0, float(soonest or now) - now))
            token = uuid.uuid4().hex
            c.execute(
                sa.text(
                    "UPDATE sqlfeed_tasks SET state = 'leased', worker = :w, token = :t, "
                    "expires = :exp, attempts = attempts + 1 "
                    "WHERE job = :j AND epoch = :e AND part = :p"
                ),
                {"w": worker, "t": token, "exp": now + spec.lease_ttl, "j": job,
                 "e": epoch, "p": row.part},
            )  # fmt: skip
            return Lease(job, int(epoch), int(row.part), token, worker, int(row.acked),
                         int(row.attempts) + 1)  # fmt: skip

    def _seen(self, c: Any, job: str, worker: str, now: float) -> None:
        import sqlalchemy as sa

        updated = c.execute(
            sa.text("UPDATE sqlfeed_workers SET seen = :t WHERE job = :j AND worker = :w"),
            {"t": now, "j": job, "w": worker},
        ).rowcount
        if not updated:
            c.execute(
                sa.text(
                    "INSERT INTO sqlfeed_workers (job, worker, joined, seen, batches, rows_acked) "
                    "VALUES (:j, :w, :t, :t, 0, 0)"
                ),
                {"j": job, "w": worker, "t": now},
            )

    def _check_states(self, c: Any, spec: JobSpec, epoch: int) -> None:
        import sqlalchemy as sa

        rows = c.execute(
            sa.text(
                "SELECT state, COUNT(*) FROM sqlfeed_tasks WHERE job = :j AND epoch = :e "
                "GROUP BY state"
            ),
            {"j": spec.name, "e": epoch},
        ).all()
        counts = {str(state): int(n) for state, n in rows}
        unknown = set(counts) - set(STATES)
        if unknown or sum(counts.values()) != spec.plan.num_partitions:
            raise CorruptStateError(
                f"job {spec.name!r}, epoch {epoch}: the queue holds {counts} for "
                f"{spec.plan.num_partitions} partitions; run 'sqlfeed job reset' to start over"
            )

    def _check_complete(self, c: Any, spec: JobSpec) -> None:
        import sqlalchemy as sa

        total = c.execute(
            sa.text(
                "SELECT COUNT(*) FROM sqlfeed_tasks WHERE job = :j AND state IN ('done', 'dropped')"
            ),
            {"j": spec.name},
        ).scalar()
        if int(total) != spec.epochs * spec.plan.num_partitions:
            raise CorruptStateError(
                f"job {spec.name!r}: {total} tasks done of {spec.epochs * spec.plan.num_partitions}"
                "; rows are missing from the queue: run 'sqlfeed job reset' to start over"
            )

    def _update_held(self, lease: Lease, assignments: str, extra: dict[str, Any]) -> bool:
        return bool(self._retrying(self._update, lease, assignments, extra))

    def _update(self, lease: Lease, assignments: str, extra: dict[str, Any]) -> bool:
        import sqlalchemy as sa

        with self._tx() as c:
            now = self._clock(c)
            changed = c.execute(
                sa.text(
                    f"UPDATE sqlfeed_tasks SET {assignments} WHERE job = :j AND epoch = :e "
                    "AND part = :p AND token = :t AND state = 'leased'"
                ),
                {"j": lease.job, "e": lease.epoch, "p": lease.partition, "t": lease.token,
                 "now": now, **extra},
            ).rowcount  # fmt: skip
            if changed and "rows" in extra:
                c.execute(
                    sa.text(
                        "UPDATE sqlfeed_workers SET seen = :now, batches = batches + :b, "
                        "rows_acked = rows_acked + :rows WHERE job = :j AND worker = :w"
                    ),
                    {"now": now, "b": extra["batches"], "rows": extra["rows"], "j": lease.job,
                     "w": lease.worker},
                )  # fmt: skip
            return bool(changed)

    def heartbeat(self, lease: Lease) -> bool:
        ttl = self.job(lease.job).lease_ttl
        return self._update_held(lease, "expires = :now + :ttl", {"ttl": ttl})

    def ack(self, lease: Lease, offset: int, rows: int) -> bool:
        ttl = self.job(lease.job).lease_ttl
        return self._update_held(
            lease,
            # never backwards (a late, repeated ack)
            "acked = CASE WHEN acked < :o THEN :o ELSE acked END, "
            "rows_acked = rows_acked + :rows, expires = :now + :ttl",
            {"o": offset, "rows": rows, "batches": 1, "ttl": ttl},
        )

    def complete(self, lease: Lease) -> bool:
        return self._update_held(
            lease, "state = 'done', token = NULL, completions = completions + 1", {}
        )

    def release(self, lease: Lease) -> None:
        self._update_held(lease, "state = 'pending', token = NULL, worker = NULL", {})

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        import sqlalchemy as sa

        def record() -> None:
            with self._tx() as c:
                exists = c.execute(
                    sa.text(
                        "SELECT COUNT(*) FROM sqlfeed_shares WHERE job = :j AND epoch = :e "
                        "AND worker = :w"
                    ),
                    {"j": job, "e": epoch, "w": worker},
                ).scalar()
                if not exists:
                    c.execute(
                        sa.text("INSERT INTO sqlfeed_shares VALUES (:j, :e, :w)"),
                        {"j": job, "e": epoch, "w": worker},
                    )

        self._retrying(record)

    def status(self, job: str) -> JobStatus:
        import sqlalchemy as sa

        spec = self.job(job)
        with self._tx() as c:
            counts = c.execute(
                sa.text(
                    "SELECT epoch, state, COUNT(*) FROM sqlfeed_tasks WHERE job = :j "
                    "GROUP BY epoch, state"
                ),
                {"j": job},
            ).all()
            workers = c.execute(
                sa.text(
                    "SELECT worker, joined, seen, batches, rows_acked FROM sqlfeed_workers "
                    "WHERE job = :j ORDER BY worker"
                ),
                {"j": job},
            ).all()
        per_epoch = [{"epoch": e, **dict.fromkeys(STATES, 0)} for e in range(spec.epochs)]
        for epoch, state, n in counts:
            if 0 <= epoch < spec.epochs:
                per_epoch[epoch][str(state)] = per_epoch[epoch].get(str(state), 0) + int(n)
        rows = [
            _worker_row({"worker": w, "joined": j, "seen": s, "batches": b, "rows": r})
            for w, j, s, b, r in workers
        ]
        return JobStatus(job, spec.epochs, spec.plan.num_partitions, per_epoch, rows)

    def completions(self, job: str) -> dict[tuple[int, int], int]:
        """How often each task was completed (always 1 for a done task)."""
        import sqlalchemy as sa

        with self._tx() as c:
            rows = c.execute(
                sa.text("SELECT epoch, part, completions FROM sqlfeed_tasks WHERE job = :j"),
                {"j": job},
            ).all()
        return {(int(e), int(p)): int(n) for e, p, n in rows}

    def reset(self, job: str) -> None:
        import sqlalchemy as sa

        self.job(job)
        with self._tx() as c:
            c.execute(
                sa.text(
                    "UPDATE sqlfeed_tasks SET state = 'pending', worker = NULL, token = NULL, "
                    "expires = 0, acked = 0, rows_acked = 0, attempts = 0, completions = 0 "
                    "WHERE job = :j"
                ),
                {"j": job},
            )
            c.execute(sa.text("DELETE FROM sqlfeed_workers WHERE job = :j"), {"j": job})
            c.execute(sa.text("DELETE FROM sqlfeed_shares WHERE job = :j"), {"j": job})

    def delete(self, job: str) -> None:
        import sqlalchemy as sa

        self._specs.pop(job, None)
        with self._tx() as c:
            for table in ("sqlfeed_tasks", "sqlfeed_workers", "sqlfeed_shares"):
                c.execute(sa.text(f"DELETE FROM {table} WHERE job = :j"), {"j": job})
            c.execute(sa.text("DELETE FROM sqlfeed_jobs WHERE name = :j"), {"j": job})


def _transient(err: Any) -> bool:
    """A deadlock, serialization failure or lock time-out: the transaction may be retried."""
    inner = getattr(err, "orig", err)
    code = getattr(inner, "sqlstate", None) or ""
    args = getattr(inner, "args", ())
    mysql_code = args[0] if args and isinstance(args[0], int) else None
    text = str(inner).lower()
    return (
        code in ("40001", "40P01", "55P03")
        or mysql_code in (1205, 1213)
        or "database is locked" in text
        or "deadlock" in text
    )


def _engine_options(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60, "check_same_thread": False}}
    return {"pool_pre_ping": True}


def _sqlite_locking(engine: Any) -> None:
    """SQLite: WAL, and BEGIN IMMEDIATE so a transaction takes the write lock up front."""
    import sqlalchemy as sa

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlalchemy emits BEGIN below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


_ALL_DONE = object()
"""Every epoch of the job is finished (checked outside the claim's transaction)."""

_MEMORY: dict[str, MemoryQueue] = {}


def open_queue(url: str | LeaseQueue | None) -> LeaseQueue:
    """The queue at ``url``: ``memory://NAME`` (this process), or a SQLAlchemy URL."""
    if isinstance(url, LeaseQueue):
        return url
    if url is None or url.startswith("memory://"):
        name = (url or "memory://").removeprefix("memory://")
        return _MEMORY.setdefault(name, MemoryQueue())
    return SQLQueue(url)
