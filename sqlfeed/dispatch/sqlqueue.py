"""The lease table in a SQL database through SQLAlchemy: a SQLite file, PostgreSQL, MySQL/MariaDB.

It keeps the guarantees of :mod:`sqlfeed.dispatch.queue` with the database's clock, in
short transactions that never span I/O or user code: a task is claimed with ``FOR UPDATE
SKIP LOCKED`` (PostgreSQL, MySQL 8, MariaDB 10.6) or under SQLite's ``BEGIN IMMEDIATE``
write lock. Sessions are bounded (:mod:`sqlfeed.dispatch.sessions`): a statement waits a
few seconds at most for a lock, a frozen session's locks are dropped by the server, and a
transaction that hit a lock time-out, a deadlock or a lost connection is run again, with
jittered pauses, for up to :data:`~sqlfeed.dispatch.sessions.RETRY_SECONDS`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import sqlalchemy as sa

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.dispatch.ledger import SQLLedger, check_rewind, rewind_summary
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
from sqlfeed.dispatch.sessions import (
    READ_ONLY,
    RETRY_SECONDS,
    create_queue_engine,
    queue_dialect,
    retrying,
    transient,
)
from sqlfeed.dispatch.sqlschema import LEDGER, Survey, build, queue_tables, survey
from sqlfeed.io import driver_message, redact_url

__all__ = ["SQLQueue"]


CREATE_SECONDS = 30.0
"""How long opening a queue waits its turn to create or update the tables (the others'
turns are short: a few DDL statements each)."""

_ALL_DONE = object()
"""Every epoch of the job is finished (checked outside the claim's transaction)."""


class SQLQueue(LeaseQueue):
    """The lease table in a SQL database (SQLite file, PostgreSQL, MySQL/MariaDB).

    Short transactions; a task is claimed with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL,
    MySQL 8, MariaDB 10.6) or under SQLite's ``BEGIN IMMEDIATE`` write lock.
    """

    retry_seconds: float = RETRY_SECONDS
    """How long a call retries transient failures before raising :class:`QueueBusyError`."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = create_queue_engine(url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as err:
            raise InvalidArgumentError(f"bad queue URL {redact_url(url)!r}: {err}") from None
        self.backend = self.engine.dialect.name
        self.sql_dialect = queue_dialect(self.backend)
        """The engine's dialect: its queue SQL (the time, the claim's lock, ...)."""
        if self.sql_dialect.QUEUE_NOW is None:
            raise InvalidArgumentError(
                f"a queue lives in SQLite, PostgreSQL or MySQL/MariaDB, not {self.backend}"
            )
        self._now = self.sql_dialect.QUEUE_NOW
        self._specs: dict[str, JobSpec] = {}
        self._lock_clause = self.sql_dialect.QUEUE_LOCK_CLAUSE
        self._metadata = queue_tables()
        """The queue's tables (their name columns' collation known once surveyed)."""
        self._ready = False
        """The tables are there, up to date: no need to look again."""
        self._file = _sqlite_file(self.engine)
        """A SQLite queue's file: only :meth:`create_job` makes it."""
        if self._file is None or os.path.exists(self._file):
            try:
                self._open(create=False)  # connects: an unreachable server is said here
            except TypeError as err:  # the driver's connect() takes no such URL option
                if "keyword argument" not in str(err):
                    raise
                self.engine.dispose()
                raise InvalidArgumentError(
                    f"bad queue URL {redact_url(url)!r}: the driver refuses its options ({err})"
                ) from None

    @property
    def caveat(self) -> str | None:
        """What this queue cannot guarantee (SQLite: a frozen worker stalls the others)."""
        return self.sql_dialect.QUEUE_CAVEAT

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self, read_only: bool = False) -> Iterator[Any]:
        """One short transaction on the queue's tables (an error if there is no queue)."""
        self._require()
        with self._session(read_only) as connection:
            yield connection

    @contextmanager
    def _session(self, read_only: bool = False) -> Iterator[Any]:
        """One short transaction (``read_only``: SQLite need not take the write lock)."""
        try:
            with self.engine.connect() as connection:
                if read_only:
                    connection.execution_options(**READ_ONLY)
                with connection.begin():
                    yield connection
        except sa.exc.DBAPIError as err:
            error = EngineError(f"queue {self._label()}: {driver_message(err)}")
            error.transient = transient(err)  # type: ignore[attr-defined]
            raise error from None

    def _retrying(self, action: Any, *args: Any) -> Any:
        """``action(*args)``, run again after transient failures (:func:`retrying`)."""
        return retrying(action, args, self.retry_seconds)

    def _label(self) -> str:
        return redact_url(self.url)

    def _require(self) -> None:
        """The queue's tables, required: there when opened, or made since by another process.

        Raises:
            UnknownJobError: there is no queue: no job was created there.
        """
        if self._ready:
            return
        if self._file is None or os.path.exists(self._file):  # never make a SQLite file
            self._open(create=False)
        if not self._ready:
            where = self._label()
            if self._file is not None:
                where = f"{os.path.abspath(self._file)} ({where})"
            raise UnknownJobError(
                f"no lease queue at {where}: no job was created there (only creating a job "
                "makes a queue: sqlfeed job create, or a Feeder given a job); check the "
                "queue URL"
            )

    def _open(self, create: bool) -> None:
        """Find the queue's tables (:mod:`~sqlfeed.dispatch.sqlschema`).

        A queue made by an older sqlfeed is brought up to date; one not there is made only
        with ``create``, under the lock that makes processes opening it at once take turns.
        """
        try:
            found = self._retrying(self._survey)
            if not found.ready and (create or found.there):
                found = retrying(self._build, (), max(self.retry_seconds, CREATE_SECONDS))
        except EngineError as err:
            message = str(err).removeprefix(f"queue {self._label()}: ")
            raise EngineError(f"cannot open queue {self._label()}: {message}") from None
        self._metadata = found.metadata
        self._ready = found.ready

    def _survey(self) -> Survey:
        with self._session(read_only=True) as c:  # a read: never waits on SQLite's writer
            return survey(c, self.sql_dialect)

    def _build(self) -> Survey:
        lock = f"sqlfeed_queue {self.engine.url.database or ''}"[:64]  # GET_LOCK's limit
        with self._session() as c:
            return build(c, self.sql_dialect, lock)

    def _clock(self, connection: Any) -> float:
        return float(connection.exec_driver_sql(f"SELECT {self._now}").scalar())

    def create_job(self, spec: JobSpec) -> JobSpec:
        check_spec(spec)
        if not self._ready:
            self._open(create=True)
        try:
            self._retrying(self._insert_job, spec)
            return spec
        except EngineError as failure:
            try:  # the job existed (or another worker won the race): it must be the same job
                existing = self.job(spec.name, cached=False)
            except UnknownJobError:
                raise failure from None  # not a duplicate: the real error
            if existing.definition() != spec.definition():
                raise conflict_error(spec.name, existing, spec) from None
            return existing

    def _insert_job(self, spec: JobSpec) -> None:
        # Everything is computed before the transaction: a plan of thousands of partitions
        # takes seconds to encode on a loaded machine, and a session idle that long inside
        # a transaction is ended by the server (IDLE_TRANSACTION_SECONDS).
        job = {"n": spec.name, "f": spec.plan.fingerprint, "s": spec.to_json()}
        rows = [
            {"j": spec.name, "e": epoch, "p": part, "o": position}
            for epoch in range(spec.epochs)
            for part, position in enumerate(spec.positions(epoch))
        ]
        with self._tx() as c:
            now = self._clock(c)
            c.execute(
                sa.text(
                    "INSERT INTO sqlfeed_jobs (name, fingerprint, spec, created) "
                    "VALUES (:n, :f, :s, :t)"
                ),
                {**job, "t": now},
            )
            c.execute(
                sa.text(
                    "INSERT INTO sqlfeed_tasks (job, epoch, part, position, state, expires, "
                    "acked, rows_acked, attempts, completions) "
                    "VALUES (:j, :e, :p, :o, 'pending', 0, 0, 0, 0, 0)"
                ),
                rows,
            )

    def job(self, name: str, *, cached: bool = True) -> JobSpec:
        """The job ``name``.

        A job's definition never changes once created, so it is read (and its plan decoded)
        once per queue object; ``cached=False`` reads it again.
        """
        if cached and name in self._specs:
            return self._specs[name]
        text = self._retrying(self._read_spec, name)
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

    def _read_spec(self, name: str) -> str | None:
        with self._tx(read_only=True) as c:
            text = c.execute(
                sa.text("SELECT spec FROM sqlfeed_jobs WHERE name = :n"), {"n": name}
            ).scalar()
        return None if text is None else str(text)

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        spec = self.job(job)
        return self._claimed(spec, self._retrying(self._acquire, spec, worker, _Claim()))

    def _claimed(self, spec: JobSpec, result: Any) -> Lease | Wait | None:
        """A claim's answer.

        When every epoch looked finished, it is checked outside its transaction (the job
        deleted meanwhile, or rows missing, are errors).
        """
        if result is _ALL_DONE:
            self.job(spec.name, cached=False)  # deleted meanwhile? then say so
            self._retrying(self._check_complete, spec)
            return None
        assert result is None or isinstance(result, Lease | Wait)
        return result

    def complete_and_acquire(
        self,
        lease: Lease,
        worker: str,
        *,
        offset: int | None = None,
        rows: int = 0,
        batches: int = 0,
    ) -> tuple[bool, Lease | Wait | None]:
        """:meth:`complete` then :meth:`acquire`, in one transaction (one round trip)."""
        spec = self.job(lease.job)
        assignments, extra = _completion(offset, rows, batches)
        done, result = self._retrying(
            self._complete_acquire, lease, assignments, extra, worker, _Claim()
        )
        return done, self._claimed(spec, result)

    def _complete_acquire(
        self, lease: Lease, assignments: str, extra: dict[str, Any], worker: str, claim: _Claim
    ) -> tuple[bool, Lease | Wait | object]:
        with self._tx() as c:
            done = self._update_in(c, lease, assignments, extra, False, completing=True)
            seen = done and bool(extra.get("batches"))  # the worker's row was updated then
            return done, self._acquire_in(c, self.job(lease.job), worker, claim, seen)

    def _acquire(self, spec: JobSpec, worker: str, claim: _Claim) -> Lease | Wait | object:
        with self._tx() as c:
            return self._acquire_in(c, spec, worker, claim)

    def _acquire_in(
        self, c: Any, spec: JobSpec, worker: str, claim: _Claim, seen: bool = False
    ) -> Lease | Wait | object:
        """Claim the next task of ``spec`` for ``worker`` inside transaction ``c``.

        ``seen``: the worker's row was updated already in it. ``claim``: the claim's token,
        the same on every try of one call: a try after one that committed but whose reply was
        lost finds the task that try leased, instead of leaving it leased to nobody until its
        lease expires.
        """
        job = spec.name
        if claim.tries:
            earlier = self._claimed_before(c, spec, worker, claim.token)
            if earlier is not None:
                return earlier
        claim.tries += 1
        epoch, now = c.execute(  # the open epoch and the clock, in one round trip
            sa.text(
                f"SELECT MIN(epoch), {self._now} FROM sqlfeed_tasks WHERE job = :j "
                "AND state NOT IN ('done', 'dropped')"
            ),
            {"j": job},
        ).one()
        now = float(now)
        if not seen:
            self._seen(c, job, worker, now)
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
        row = self._claim(c, job, int(epoch), now)
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
        token = claim.token
        c.execute(
            sa.text(
                "UPDATE sqlfeed_tasks SET state = 'leased', worker = :w, token = :t, "
                "expires = :exp, attempts = attempts + 1 "
                "WHERE job = :j AND epoch = :e AND part = :p"
            ),
            {
                "w": worker,
                "t": token,
                "exp": now + spec.lease_ttl,
                "j": job,
                "e": epoch,
                "p": row.part,
            },
        )
        return Lease(
            job,
            int(epoch),
            int(row.part),
            token,
            worker,
            int(row.acked),
            int(row.attempts) + 1,
            int(row.rows_acked),
        )

    def _claimed_before(self, c: Any, spec: JobSpec, worker: str, token: str) -> Lease | None:
        """The task an earlier try of this claim leased (its reply lost), or None.

        Its lease is renewed: the tries may have outlasted its TTL.
        """
        renewed = c.execute(
            sa.text(
                f"UPDATE sqlfeed_tasks SET expires = {self._now} + :ttl "
                "WHERE job = :j AND token = :t AND state = 'leased'"
            ),
            {"ttl": spec.lease_ttl, "j": spec.name, "t": token},
        ).rowcount
        if not renewed:
            return None
        row = c.execute(
            sa.text(
                "SELECT epoch, part, acked, attempts, rows_acked FROM sqlfeed_tasks "
                "WHERE job = :j AND token = :t AND state = 'leased'"
            ),
            {"j": spec.name, "t": token},
        ).first()
        if row is None:
            return None
        return Lease(
            spec.name,
            int(row.epoch),
            int(row.part),
            token,
            worker,
            int(row.acked),
            int(row.attempts),
            int(row.rows_acked),
        )

    def _claim(self, c: Any, job: str, epoch: int, now: float) -> Any:
        """Lock the task to hand out next in ``epoch`` (part, acked, attempts, rows), or None.

        Expired leases first (taken over within their TTL), then pending tasks in order, one
        predicate each for the (job, epoch, state, position) index. Expired leases are read
        plainly, then locked by key: on MariaDB (also at READ COMMITTED) a locking scan
        keeps every live lease it passes locked until the claim commits.
        """
        where = "WHERE job = :j AND epoch = :e AND "
        values = {"j": job, "e": epoch, "now": now}
        expired = c.execute(
            sa.text(
                f"SELECT part FROM sqlfeed_tasks {where} state = 'leased' AND expires < :now "
                "ORDER BY position LIMIT 4"
            ),
            values,
        ).scalars()
        for part in list(expired):
            row = c.execute(
                sa.text(
                    f"SELECT part, acked, attempts, rows_acked FROM sqlfeed_tasks {where} "
                    "part = :p AND state = 'leased' AND expires < :now" + self._lock_clause
                ),
                {**values, "p": part},
            ).first()
            if row is not None:
                return row
        return c.execute(
            sa.text(
                f"SELECT part, acked, attempts, rows_acked FROM sqlfeed_tasks {where} "
                "state = 'pending' ORDER BY position LIMIT 1" + self._lock_clause
            ),
            values,
        ).first()

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

    def _check_complete(self, spec: JobSpec) -> None:
        with self._tx(read_only=True) as c:
            total = c.execute(
                sa.text(
                    "SELECT COUNT(*) FROM sqlfeed_tasks WHERE job = :j "
                    "AND state IN ('done', 'dropped')"
                ),
                {"j": spec.name},
            ).scalar()
        if int(total) != spec.epochs * spec.plan.num_partitions:
            raise CorruptStateError(
                f"job {spec.name!r}: {total} tasks done of {spec.epochs * spec.plan.num_partitions}"
                "; rows are missing from the queue: run 'sqlfeed job reset' to start over"
            )

    def _update_held(
        self,
        lease: Lease,
        assignments: str,
        extra: dict[str, Any],
        advance: bool = False,
        completing: bool = False,
    ) -> bool:
        return bool(self._retrying(self._update, lease, assignments, extra, advance, completing))

    def _update(
        self,
        lease: Lease,
        assignments: str,
        extra: dict[str, Any],
        advance: bool,
        completing: bool = False,
    ) -> bool:
        """Update the task while ``lease`` holds it.

        Count acknowledged batches and rows for its worker when they are new. With
        ``advance``, only an offset beyond the stored one changes the row; a repeated one (a
        retry after a lost reply) changes nothing and is answered by whether the lease still
        holds. With ``completing``, a task this lease completed already (a retry after a
        commit whose reply was lost) answers True: done, not lost.
        """
        with self._tx() as c:
            return self._update_in(c, lease, assignments, extra, advance, completing)

    def _update_in(
        self,
        c: Any,
        lease: Lease,
        assignments: str,
        extra: dict[str, Any],
        advance: bool,
        completing: bool = False,
    ) -> bool:
        where = "WHERE job = :j AND epoch = :e AND part = :p AND token = :t"
        held = f"{where} AND state = 'leased'"
        key = {"j": lease.job, "e": lease.epoch, "p": lease.partition, "t": lease.token}
        changed = c.execute(
            sa.text(
                f"UPDATE sqlfeed_tasks SET {assignments} {held}"
                + (" AND acked < :o" if advance else "")
            ),
            {**key, **extra},
        ).rowcount
        if changed and extra.get("batches"):
            c.execute(
                sa.text(
                    f"UPDATE sqlfeed_workers SET seen = {self._now}, batches = batches + :b, "
                    "rows_acked = rows_acked + :rows WHERE job = :j AND worker = :w"
                ),
                {"b": extra["batches"], "rows": extra["rows"], "j": lease.job, "w": lease.worker},
            )
        if not changed and advance:
            changed = c.execute(sa.text(f"SELECT COUNT(*) FROM sqlfeed_tasks {held}"), key).scalar()
        if not changed and completing:  # a done task keeps the token of the lease that did it
            done = f"{where} AND state = 'done'"
            changed = c.execute(sa.text(f"SELECT COUNT(*) FROM sqlfeed_tasks {done}"), key).scalar()
        return bool(changed)

    def heartbeat(self, lease: Lease) -> bool:
        ttl = self.job(lease.job).lease_ttl
        return self._update_held(lease, f"expires = {self._now} + :ttl", {"ttl": ttl})

    def ack(self, lease: Lease, offset: int, rows: int, batches: int = 1) -> bool:
        ttl = self.job(lease.job).lease_ttl
        return self._update_held(
            lease,
            f"acked = :o, rows_acked = rows_acked + :rows, expires = {self._now} + :ttl",
            {"o": offset, "rows": rows, "batches": batches, "ttl": ttl},
            advance=True,
        )

    def complete(
        self, lease: Lease, *, offset: int | None = None, rows: int = 0, batches: int = 0
    ) -> bool:
        return self._update_held(lease, *_completion(offset, rows, batches), completing=True)

    def release(self, lease: Lease) -> None:
        self._update_held(lease, "state = 'pending', token = NULL, worker = NULL", {})

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        """Idempotent, also when two threads of a worker say it at once (claim-ahead)."""
        statement = self.sql_dialect.insert_ignoring("sqlfeed_shares", "(:j, :e, :w)")

        def record() -> None:
            with self._tx() as c:
                c.execute(sa.text(statement), {"j": job, "e": epoch, "w": worker})

        self._retrying(record)

    def status(self, job: str) -> JobStatus:
        spec = self.job(job)
        counts, workers = self._retrying(self._progress, job)
        per_epoch = [{"epoch": e, **dict.fromkeys(STATES, 0)} for e in range(spec.epochs)]
        for epoch, state, n in counts:
            if 0 <= epoch < spec.epochs:
                per_epoch[epoch][str(state)] = per_epoch[epoch].get(str(state), 0) + int(n)
        rows = [
            worker_row({"worker": w, "joined": j, "seen": s, "batches": b, "rows": r})
            for w, j, s, b, r in workers
        ]
        return JobStatus(job, spec.epochs, spec.plan.num_partitions, per_epoch, rows)

    def leases(self, job: str) -> list[tuple[str, int, float]]:
        def read() -> list[tuple[str, int, float]]:
            with self._tx(read_only=True) as c:
                rows = c.execute(
                    sa.text(
                        f"SELECT worker, epoch, expires - {self._now} FROM sqlfeed_tasks "
                        "WHERE job = :j AND state = 'leased'"
                    ),
                    {"j": job},
                ).all()
            return [(str(w), int(e), float(s)) for w, e, s in rows]

        leased: list[tuple[str, int, float]] = self._retrying(read)
        return leased

    def _progress(self, job: str) -> tuple[list[Any], list[Any]]:
        with self._tx(read_only=True) as c:
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
        return list(counts), list(workers)

    def completions(self, job: str) -> dict[tuple[int, int], int]:
        """How often each task was completed (always 1 for a done task)."""
        with self._tx(read_only=True) as c:
            rows = c.execute(
                sa.text("SELECT epoch, part, completions FROM sqlfeed_tasks WHERE job = :j"),
                {"j": job},
            ).all()
        return {(int(e), int(p)): int(n) for e, p, n in rows}

    def reset(self, job: str) -> None:
        self.job(job)
        self._retrying(self._reset, job)
        self.ledger.delete(job)

    def _reset(self, job: str) -> None:
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
        self._retrying(self._delete, job)
        self.ledger.delete(job)

    def _delete(self, job: str) -> None:
        with self._tx() as c:
            for table in ("sqlfeed_tasks", "sqlfeed_workers", "sqlfeed_shares"):
                c.execute(sa.text(f"DELETE FROM {table} WHERE job = :j"), {"j": job})
            c.execute(sa.text("DELETE FROM sqlfeed_jobs WHERE name = :j"), {"j": job})

    @cached_property
    def ledger(self) -> SQLLedger:
        """The job ledger's table (:mod:`sqlfeed.dispatch.ledger`)."""
        return SQLLedger(
            self.engine, self._label(), self._metadata.tables[LEDGER], self.retry_seconds
        )

    def record(self, job: str, checkpoint: int, worker: str, entries: Sequence[Any]) -> None:
        self.job(job)
        self.ledger.record(job, checkpoint, worker, entries)

    def checkpoints(self, job: str) -> list[int]:
        self.job(job)
        return self.ledger.checkpoints(job)

    def rewind(self, job: str, checkpoint: int) -> dict[str, int]:
        check_rewind(self.job(job), checkpoint, self.ledger.checkpoints(job))
        states = self.ledger.rewind(job, checkpoint, "sqlfeed_tasks")
        with self._tx() as c:
            c.execute(sa.text("DELETE FROM sqlfeed_shares WHERE job = :j"), {"j": job})
        return rewind_summary(states)


def _sqlite_file(engine: Any) -> str | None:
    """The file of a SQLite queue URL (None: a server, or an in-memory or URI database)."""
    path = engine.url.database or ""
    if not queue_dialect(engine.dialect.name).FILE_DATABASE:
        return None
    if path in ("", ":memory:") or path.startswith("file:"):
        return None
    return str(path)


class _Claim:
    """One claim's token, kept across the tries of its call (see :meth:`SQLQueue._acquire_in`)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.tries = 0


def _completion(offset: int | None, rows: int, batches: int) -> tuple[str, dict[str, Any]]:
    """The SET clause and values that complete a task, acknowledging its last batches."""
    # the token stays: a retry of a completion whose reply was lost finds its own task done
    done = "state = 'done', completions = completions + 1"
    if offset is None or not batches:
        return done, {}
    # rows_acked before acked: MySQL evaluates SET assignments left to right
    return (
        "rows_acked = rows_acked + CASE WHEN acked < :o THEN :rows ELSE 0 END, "
        f"acked = CASE WHEN acked < :o THEN :o ELSE acked END, {done}",
        {"o": offset, "rows": rows, "batches": batches},
    )
