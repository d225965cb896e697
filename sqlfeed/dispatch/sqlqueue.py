"""The lease table in a SQL database through SQLAlchemy: a SQLite file, PostgreSQL, MySQL/MariaDB.

It keeps the guarantees of :mod:`sqlfeed.dispatch.queue` with the database's clock, in
short transactions: a task is claimed with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL, MySQL 8,
MariaDB 10.6) or under SQLite's ``BEGIN IMMEDIATE`` write lock, and a transaction that hit a
deadlock or lock time-out is run again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import LONGTEXT

from dialects import EngineError, InvalidArgumentError
from sqlfeed.dispatch.queue import (
    STATES,
    CorruptStateError,
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
from sqlfeed.io import driver_message, redact_url

__all__ = ["SQLQueue"]


_NOW = {
    "postgresql": "EXTRACT(EPOCH FROM clock_timestamp())",
    "mysql": "UNIX_TIMESTAMP(NOW(6))",
    "mariadb": "UNIX_TIMESTAMP(NOW(6))",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}

_ALL_DONE = object()
"""Every epoch of the job is finished (checked outside the claim's transaction)."""


class SQLQueue(LeaseQueue):
    """The lease table in a SQL database (SQLite file, PostgreSQL, MySQL/MariaDB).

    Short transactions; a task is claimed with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL,
    MySQL 8, MariaDB 10.6) or under SQLite's ``BEGIN IMMEDIATE`` write lock.
    """

    def __init__(self, url: str) -> None:
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
        try:
            with self.engine.begin() as connection:
                yield connection
        except sa.exc.DBAPIError as err:
            error = EngineError(f"queue {self._label()}: {driver_message(err)}")
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
        return redact_url(self.url)

    def _tables(self) -> None:
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
            raise EngineError(f"cannot open queue {self._label()}: {driver_message(err)}") from None

    def _clock(self, connection: Any) -> float:
        return float(connection.exec_driver_sql(f"SELECT {self._now}").scalar())

    def create_job(self, spec: JobSpec) -> JobSpec:
        check_spec(spec)
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
                raise conflict_error(spec.name, existing, spec) from None
            return existing

    def job(self, name: str, *, cached: bool = True) -> JobSpec:
        """The job ``name``. A job's definition never changes once created, so it is read
        (and its plan decoded) once per queue object; ``cached=False`` reads it again."""
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
            worker_row({"worker": w, "joined": j, "seen": s, "batches": b, "rows": r})
            for w, j, s, b, r in workers
        ]
        return JobStatus(job, spec.epochs, spec.plan.num_partitions, per_epoch, rows)

    def completions(self, job: str) -> dict[tuple[int, int], int]:
        """How often each task was completed (always 1 for a done task)."""
        with self._tx() as c:
            rows = c.execute(
                sa.text("SELECT epoch, part, completions FROM sqlfeed_tasks WHERE job = :j"),
                {"j": job},
            ).all()
        return {(int(e), int(p)): int(n) for e, p, n in rows}

    def reset(self, job: str) -> None:
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
