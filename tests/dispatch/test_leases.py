"""The lease queue's contract, on every backend: memory, SQLite file, PostgreSQL, MariaDB."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlalchemy as sa

import sqlfeed
from sqlfeed.dialects import EngineError
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import (
    CorruptStateError,
    JobSpec,
    JobStatus,
    Lease,
    LeaseQueue,
    QueueBusyError,
    UnknownJobError,
    Wait,
)
from sqlfeed.dispatch.sessions import IDLE_TRANSACTION_SECONDS, LOCK_WAIT_SECONDS
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery, Worker
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

BACKENDS = ("memory", "sqlite", "postgres", "mysql")


def queue_url(backend: str, tmp_path: Path) -> str:
    """A queue URL whose tables live in this test run's own schema/database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    if backend == "postgres":
        schema = get_engine("postgres").schema
        base = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        return f"{base}?options=-csearch_path%3D{schema}"
    schema = get_engine("mysql").schema
    netloc = MYSQL_URL.split("://", 1)[1].split("/", 1)[0]
    return f"mysql+pymysql://{netloc}/{schema}"


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseQueue]:
    backend = request.param
    opened: LeaseQueue = (
        MemoryQueue() if backend == "memory" else SQLQueue(queue_url(backend, tmp_path))
    )
    yield opened
    opened.close()


pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(1000)"})


def make_spec(source: sqlfeed.Source, partitions: int = 6, **options: Any) -> JobSpec:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=partitions, strategy="ctid")
    return JobSpec(f"job-{uuid.uuid4().hex[:8]}", plan, **options)


def lease_of(queue: LeaseQueue, job: str, worker: str) -> Lease:
    got = queue.acquire(job, worker)
    assert isinstance(got, Lease), got
    return got


def test_creating_the_same_job_twice_is_fine(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = make_spec(source)
    queue.create_job(spec)
    assert queue.create_job(spec).definition() == spec.definition()


def test_a_conflicting_definition_is_refused(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = make_spec(source, epochs=1)
    queue.create_job(spec)
    other = JobSpec(spec.name, spec.plan, epochs=2)
    with pytest.raises(sqlfeed.InvalidArgumentError, match="another definition"):
        queue.create_job(other)


def test_an_unknown_job_is_a_clear_error(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    queue.create_job(make_spec(source))  # the queue exists, without that job
    with pytest.raises(UnknownJobError, match="no job named 'ghost'"):
        queue.acquire("ghost", "w")


def test_each_partition_is_handed_out_once_per_epoch(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=5, epochs=2, seed=4))
    handed: list[tuple[int, int]] = []
    while True:
        got = queue.acquire(spec.name, "w")
        if got is None:
            break
        assert isinstance(got, Lease)
        handed.append((got.epoch, got.partition))
        assert queue.complete(got)
    assert sorted(handed) == [(e, p) for e in range(2) for p in range(5)]
    # The hand-out order is the job's seeded permutation, different per epoch.
    order = [[p for e, p in handed if e == epoch] for epoch in range(2)]
    positions = [spec.positions(epoch) for epoch in range(2)]
    assert order == [sorted(range(5), key=lambda p, e=e: positions[e][p]) for e in range(2)]
    assert queue.status(spec.name).complete


def test_an_epoch_waits_for_leased_partitions(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, epochs=2, lease_ttl=30))
    first = lease_of(queue, spec.name, "a")
    second = lease_of(queue, spec.name, "b")
    assert queue.complete(second)
    waiting = queue.acquire(spec.name, "c")
    assert isinstance(waiting, Wait)
    assert waiting.epoch == 0
    assert queue.complete(first)
    assert lease_of(queue, spec.name, "c").epoch == 1


def test_an_expired_lease_is_taken_over_and_resumes_after_acknowledged_batches(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.3))
    first = lease_of(queue, spec.name, "a")
    assert queue.ack(first, 1, 10)
    assert queue.ack(first, 2, 10)
    assert isinstance(queue.acquire(spec.name, "b"), Wait)
    time.sleep(0.5)
    second = lease_of(queue, spec.name, "b")
    assert (second.partition, second.offset, second.attempt) == (0, 2, 2)
    # The old holder lost everything: it can neither acknowledge nor complete.
    assert not queue.heartbeat(first)
    assert not queue.ack(first, 3, 10)
    assert not queue.complete(first)
    assert queue.complete(second)


def test_heartbeats_keep_a_lease(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.4))
    held = lease_of(queue, spec.name, "a")
    for _ in range(4):
        time.sleep(0.2)
        assert queue.heartbeat(held)
    assert isinstance(queue.acquire(spec.name, "b"), Wait)
    assert queue.complete(held)


def test_release_gives_a_partition_back_at_once(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=60))
    held = lease_of(queue, spec.name, "a")
    assert queue.ack(held, 3, 30)
    queue.release(held)
    again = lease_of(queue, spec.name, "b")
    assert again.offset == 3


def test_reset_starts_over(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=2))
    for _ in range(2):
        assert queue.complete(lease_of(queue, spec.name, "a"))
    assert queue.acquire(spec.name, "a") is None
    queue.reset(spec.name)
    assert queue.status(spec.name).per_epoch[0]["pending"] == 2


def test_a_worker_resumes_a_dead_workers_partition(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.3))
    dying = Worker(queue, spec.name, source, worker_id="dying", batch_size=100, ack_interval=0)
    taken = dying.deliveries()
    first = [next(taken).batch for _ in range(4)]  # 3 acknowledged, the 4th only handed out
    dying._finished.set()  # dies: no more heartbeats, no release
    time.sleep(0.5)
    rest = [d.batch for d in Worker(queue, spec.name, source, batch_size=100).deliveries()]
    ids = [i for b in first + rest for i in b.column("id").to_pylist()]
    # Batches 0-2 were acknowledged and never come again; batch 3 was not, so it does.
    assert ids == list(range(400)) + list(range(300, 1000))


def test_status_counts_per_epoch_and_per_worker(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=4, epochs=2))
    rows = sum(b.num_rows for b in Worker(queue, spec.name, source, worker_id="w1").batches())
    status = queue.status(spec.name)
    assert rows == 2000
    assert status.per_epoch == [
        {"epoch": 0, "pending": 0, "leased": 0, "done": 4, "dropped": 0},
        {"epoch": 1, "pending": 0, "leased": 0, "done": 4, "dropped": 0},
    ]
    [worker] = status.workers
    assert (worker["worker"], worker["rows"]) == ("w1", 2000)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_corrupted_state_rows_are_reported_not_skipped(
    backend: str, source: sqlfeed.Source, tmp_path: Path
) -> None:
    queue = SQLQueue(queue_url(backend, tmp_path))
    spec = queue.create_job(make_spec(source, partitions=3))
    with queue.engine.begin() as c:
        c.exec_driver_sql(
            f"UPDATE sqlfeed_tasks SET state = 'bogus' WHERE job = '{spec.name}' AND part = 1"
        )
    for _ in range(2):
        got = queue.acquire(spec.name, "w")
        assert isinstance(got, Lease)
        queue.complete(got)
    with pytest.raises(CorruptStateError, match="sqlfeed job reset"):
        queue.acquire(spec.name, "w")
    queue.reset(spec.name)
    assert queue.status(spec.name).per_epoch[0]["pending"] == 3


def test_an_unreachable_queue_is_a_clear_error() -> None:
    with pytest.raises(sqlfeed.EngineError, match="cannot open queue"):
        SQLQueue("postgresql+psycopg://postgres@127.0.0.1:9/test")


def test_lease_times_come_from_the_database_clock(
    source: sqlfeed.Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose clock is a day off neither expires nor extends leases."""
    queue = SQLQueue(queue_url("sqlite", tmp_path))
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=30))
    held = lease_of(queue, spec.name, "a")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400)
    monkeypatch.setattr(time, "monotonic", lambda: real() + 86_400)
    assert isinstance(queue.acquire(spec.name, "b"), Wait)
    assert queue.heartbeat(held)


@pytest.mark.engine
def test_workers_read_inside_the_jobs_snapshot_on_postgres() -> None:
    """Rows written after the job's snapshot are invisible to every worker."""
    engine = get_engine("postgres")
    table = engine.qualify(f"snap_{uuid.uuid4().hex[:6]}")
    engine.execute(f"CREATE TABLE {table} AS SELECT i AS id FROM generate_series(1, 500) g(i)")
    with engine.source() as source:
        plan = sqlfeed.plan(f"SELECT id FROM {table}", source, partitions=5, strategy="hash")
        queue = MemoryQueue()
        with source.export_snapshot() as holder:
            queue.create_job(JobSpec("snap", plan, snapshot=holder.snapshot))
            queue.create_job(JobSpec("live", plan))
            engine.execute(f"INSERT INTO {table} SELECT generate_series(501, 700)")
            engine.execute(f"DELETE FROM {table} WHERE id <= 100")
            snap = [i for b in Worker(queue, "snap", source).batches() for i in b["id"].to_pylist()]
        live = [i for b in Worker(queue, "live", source).batches() for i in b["id"].to_pylist()]
    assert sorted(snap) == list(range(1, 501))
    assert sorted(live) == list(range(101, 701))


def test_snapshots_exist_on_postgres_only(source: sqlfeed.Source) -> None:
    with pytest.raises(sqlfeed.UnsupportedError, match="snapshot"):
        source.export_snapshot()


def test_even_batches_give_every_replica_the_same_number_of_batches(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    import threading

    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=7, strategy="ctid")
    spec = JobSpec(
        f"even-{uuid.uuid4().hex[:6]}",
        plan,
        epochs=2,
        even_batches=True,
        replicas=3,
        batch_size=40,
        rows=1000,
    )
    queue.create_job(spec)
    assert spec.share == 8  # 1000 // (3 x 40)
    got: dict[str, list[tuple[int, list[int]]]] = {}

    def replica(name: str) -> None:
        worker = Worker(queue, spec.name, source, worker_id=name, poll=0.01)
        got[name] = [(d.epoch, d.batch["id"].to_pylist()) for d in worker.deliveries()]

    threads = [threading.Thread(target=replica, args=(f"r{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for name, deliveries in got.items():
        for epoch in range(2):
            assert sum(1 for e, _ in deliveries if e == epoch) == 8, name
    for epoch in range(2):
        ids = [i for d in got.values() for e, batch in d if e == epoch for i in batch]
        assert len(ids) == len(set(ids)), "a row delivered twice in one epoch"
    status = queue.status(spec.name)
    assert status.complete
    assert all(e["done"] + e["dropped"] == 7 for e in status.per_epoch)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_a_job_of_many_partitions_fits_the_queue(backend: str, tmp_path: Path) -> None:
    """A plan's JSON grows with its partitions: 3000 of them is ~0.5 MB (MySQL TEXT: 64 KiB)."""
    queue = SQLQueue(queue_url(backend, tmp_path))
    plan = sqlfeed.plan(
        "SELECT range AS id FROM range(10)",
        sqlfeed.connect("duckdb://"),
        partitions=3000,
        strategy="hash",
    )
    spec = queue.create_job(JobSpec(f"big-{uuid.uuid4().hex[:6]}", plan))
    assert queue.job(spec.name, cached=False).plan.num_partitions == 3000
    queue.delete(spec.name)


def test_a_failing_create_reports_the_real_error(source: sqlfeed.Source, tmp_path: Path) -> None:
    queue = SQLQueue(queue_url("sqlite", tmp_path))
    queue.create_job(make_spec(source))  # makes the queue file
    with queue.engine.begin() as c:
        c.exec_driver_sql("DROP TABLE sqlfeed_tasks")
    with pytest.raises(sqlfeed.EngineError, match="sqlfeed_tasks"):
        queue.create_job(make_spec(source))


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_concurrent_claims_skip_locked_rows_instead_of_waiting(
    backend: str, source: sqlfeed.Source, tmp_path: Path
) -> None:
    """A claim while another session holds the first pending task gets the next one."""
    queue = SQLQueue(queue_url(backend, tmp_path))
    spec = queue.create_job(make_spec(source, partitions=4, order="index"))
    other = SQLQueue(queue_url(backend, tmp_path))
    with queue.engine.connect() as holder:
        transaction = holder.begin()
        holder.exec_driver_sql(
            f"SELECT part FROM sqlfeed_tasks WHERE job = '{spec.name}' AND epoch = 0 AND part = 0 "
            "FOR UPDATE"
        )
        got = other.acquire(spec.name, "w")
        transaction.rollback()
    assert isinstance(got, Lease)
    assert got.partition == 1


class _Proxy(LeaseQueue):
    """A queue that passes every call on to ``inner``; tests override what they break."""

    def __init__(self, inner: LeaseQueue) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def create_job(self, spec: JobSpec) -> JobSpec:
        return self.inner.create_job(spec)

    def job(self, name: str) -> JobSpec:
        return self.inner.job(name)

    def acquire(self, job: str, worker: str) -> Lease | Wait | None:
        self._count("acquire")
        return self.inner.acquire(job, worker)

    def heartbeat(self, lease: Lease) -> bool:
        self._count("heartbeat")
        return self.inner.heartbeat(lease)

    def ack(self, lease: Lease, offset: int, rows: int, batches: int = 1) -> bool:
        self._count("ack")
        return self.inner.ack(lease, offset, rows, batches)

    def complete(
        self, lease: Lease, *, offset: int | None = None, rows: int = 0, batches: int = 0
    ) -> bool:
        self._count("complete")
        return self.inner.complete(lease, offset=offset, rows=rows, batches=batches)

    def release(self, lease: Lease) -> None:
        self._count("release")
        self.inner.release(lease)

    def finish_share(self, job: str, epoch: int, worker: str) -> None:
        self.inner.finish_share(job, epoch, worker)

    def status(self, job: str) -> JobStatus:
        return self.inner.status(job)


def _ids(deliveries: list[Delivery]) -> list[int]:
    return [i for d in deliveries for i in d.batch.column("id").to_pylist()]


def _states(queue: LeaseQueue, job: str) -> dict[str, int]:
    [epoch] = queue.status(job).per_epoch
    return {k: v for k, v in epoch.items() if k != "epoch" and v}


@pytest.mark.parametrize("failure", ["lost", "busy"])
def test_a_failed_heartbeat_of_one_lease_does_not_drop_another(
    queue: LeaseQueue, source: sqlfeed.Source, failure: str
) -> None:
    """The heartbeat of the partition just finished fails once the next one has started
    (it was completed meanwhile, or the queue was busy): the next one is delivered whole."""
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=0.6, order="index"))
    second_taken = threading.Event()

    class LateHeartbeats(_Proxy):
        def complete(self, lease: Lease, **last: Any) -> bool:
            done = super().complete(lease, **last)
            if lease.partition == 0:
                second_taken.set()  # the worker holds partition 1 by now (claimed ahead)
            return done

        def heartbeat(self, lease: Lease) -> bool:
            if lease.partition == 0:
                assert second_taken.wait(10)
                if failure == "busy":
                    raise QueueBusyError("queue: database is locked")
                return False  # partition 0 was completed meanwhile
            return super().heartbeat(lease)

    flaky = LateHeartbeats(queue)
    worker = Worker(flaky, spec.name, source, batch_size=100, ack_interval=0)
    got = []
    for delivery in worker.deliveries():
        got.append(delivery)
        time.sleep(0.08)  # the heartbeat thread (every 0.2 s) fires during partition 0
    assert flaky.calls["heartbeat"] >= 1
    assert sorted(_ids(got)) == list(range(1000))
    assert _states(queue, spec.name) == {"done": 2}
    assert queue.status(spec.name).workers[0]["rows"] == 1000


def test_a_consumer_stopping_early_gives_the_lease_back(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=60))
    worker = Worker(queue, spec.name, source, batch_size=100)
    stream = worker.deliveries()
    taken = [next(stream) for _ in range(3)]  # two taken (the third is only in hand)
    stream.close()
    assert _states(queue, spec.name) == {"pending": 1}
    again = lease_of(queue, spec.name, "other")
    assert again.offset == 2  # the taken batches were acknowledged before the release
    assert [d.offset for d in taken] == [0, 1, 2]
    worker.close()


def test_breaking_out_then_closing_gives_the_lease_back(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60))
    with Worker(queue, spec.name, source, batch_size=100) as worker:
        for _ in worker.deliveries():
            break
    assert _states(queue, spec.name) == {"pending": 2}


def test_a_worker_for_another_engine_takes_no_lease(
    queue: LeaseQueue, source: sqlfeed.Source, tmp_path: Path
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60))
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    with pytest.raises(sqlfeed.InvalidArgumentError, match=r"reads duckdb.*sqlite"):
        Worker(queue, spec.name, f"sqlite:///{other}")
    assert _states(queue, spec.name) == {"pending": 2}
    assert queue.status(spec.name).workers == []


def test_an_error_while_reading_gives_the_lease_back(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE gone AS SELECT range AS id FROM range(100)")
    doomed = sqlfeed.connect(conn)
    plan = sqlfeed.plan("SELECT id FROM gone", doomed, partitions=2, strategy="ctid")
    spec = queue.create_job(JobSpec(f"err-{uuid.uuid4().hex[:6]}", plan, lease_ttl=60))
    worker = Worker(queue, spec.name, doomed)
    conn.execute("DROP TABLE gone")
    with pytest.raises(sqlfeed.EngineError):
        list(worker.deliveries())
    assert _states(queue, spec.name) == {"pending": 2}


def test_a_busy_queue_is_asked_again_and_nothing_is_delivered_twice(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=3, lease_ttl=30))

    class Busy(_Proxy):
        def _count(self, name: str) -> None:
            super()._count(name)
            if self.calls[name] % 3 == 1:  # the first call of each kind, then every third
                raise QueueBusyError("queue: lock wait timeout")

    busy = Busy(queue)
    got = list(Worker(busy, spec.name, source, batch_size=50, ack_interval=0).deliveries())
    assert sorted(_ids(got)) == list(range(1000))
    assert _states(queue, spec.name) == {"done": 3}
    assert busy.calls["ack"] > 1


def test_acknowledgements_go_together_and_with_the_completion(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=30))
    counting = _Proxy(queue)
    acked: list[Delivery] = []
    worker = Worker(
        counting, spec.name, source, batch_size=100, ack_interval=60, on_ack=acked.append
    )
    got = list(worker.deliveries())
    assert len(got) == 10
    assert "ack" not in counting.calls  # each partition's acks went with its completion
    assert counting.calls["complete"] == 2
    assert [(d.partition, d.offset) for d in acked] == [(d.partition, d.offset) for d in got]
    [record] = queue.status(spec.name).workers
    assert (record["batches"], record["rows"]) == (10, 1000)


def test_a_dying_worker_with_batched_acks_leaves_its_batches_to_the_next(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.3))
    dying = Worker(queue, spec.name, source, batch_size=100, ack_interval=60)
    stream = dying.deliveries()
    first = [next(stream) for _ in range(4)]  # taken, but nothing acknowledged yet
    dying._finished.set()  # dies: no more heartbeats, no release
    time.sleep(0.5)
    rest = list(Worker(queue, spec.name, source, batch_size=100).deliveries())
    assert [d.offset for d in rest] == list(range(10))
    assert _ids(first) == list(range(400))
    assert sorted(_ids(rest)) == list(range(1000))


def test_sqlite_reads_do_not_wait_for_the_write_lock(
    source: sqlfeed.Source, tmp_path: Path
) -> None:
    """Another process's write transaction (e.g. a frozen worker's) does not block status,
    and a queue call that cannot get the lock fails after its bounded retries."""
    queue = SQLQueue(queue_url("sqlite", tmp_path))
    queue.retry_seconds = 0.5
    spec = queue.create_job(make_spec(source, partitions=2))
    blocker = sqlite3.connect(tmp_path / "queue.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        assert SQLQueue(queue_url("sqlite", tmp_path)).status(spec.name).partitions == 2
        with pytest.raises(QueueBusyError, match="database is locked"):
            queue.acquire(spec.name, "w")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert isinstance(queue.acquire(spec.name, "w"), Lease)


def test_a_read_cut_short_by_a_stop_request_is_not_a_completed_partition(
    queue: LeaseQueue,
) -> None:
    """SIGTERM stops the partition's read too; the partition is then given back with what
    was taken acknowledged, never completed as if its rows had all been read."""
    conn = duckdb.connect()
    conn.execute("CREATE TABLE big AS SELECT range AS id FROM range(300000)")
    big = sqlfeed.connect(conn)
    plan = sqlfeed.plan("SELECT id FROM big", big, partitions=1, strategy="ctid")
    spec = queue.create_job(JobSpec(f"cut-{uuid.uuid4().hex[:6]}", plan, lease_ttl=60))
    worker = Worker(queue, spec.name, big, ack_interval=0)
    stream = worker.deliveries()
    first = next(stream)
    assert first.batch.num_rows < 300000  # the read goes on in more batches
    worker.request_stop()
    assert list(stream) == []
    assert _states(queue, spec.name) == {"pending": 1}
    assert lease_of(queue, spec.name, "next").offset == 1


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_queue_sessions_are_bounded(backend: str, source: sqlfeed.Source, tmp_path: Path) -> None:
    """A statement waits LOCK_WAIT_SECONDS at most for a row lock (then the call is retried,
    and fails as busy); a session idle inside a transaction for IDLE_TRANSACTION_SECONDS
    (a frozen worker) is ended by the server, and its row locks with it."""
    queue = SQLQueue(queue_url(backend, tmp_path))
    queue.retry_seconds = LOCK_WAIT_SECONDS / 2  # one wait for the lock, then busy
    spec = queue.create_job(make_spec(source, partitions=2, order="index", lease_ttl=60))
    held = lease_of(queue, spec.name, "w")
    lock = f"SELECT part FROM sqlfeed_tasks WHERE job = '{spec.name}' AND part = 0 FOR UPDATE"
    frozen = queue.engine.connect()
    try:
        frozen.begin()
        frozen.exec_driver_sql(lock)
        started = time.monotonic()
        with pytest.raises(QueueBusyError):
            queue.heartbeat(held)  # waits for the frozen session's lock, a bounded time
        assert time.monotonic() - started < IDLE_TRANSACTION_SECONDS
        time.sleep(IDLE_TRANSACTION_SECONDS + 1)
        assert queue.heartbeat(held)  # the server ended the frozen session: no lock now
        with pytest.raises(sa.exc.DBAPIError):
            frozen.exec_driver_sql("SELECT 1")
    finally:
        frozen.invalidate()
        queue.close()


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_a_frozen_claim_blocks_no_live_lease(
    backend: str, source: sqlfeed.Source, tmp_path: Path
) -> None:
    """A worker frozen inside its claim, which looked at every live lease for an expired
    one and took none, holds up none of their heartbeats (MariaDB locks every row a
    locking scan passes, also at READ COMMITTED: the claim reads them plainly)."""
    inside, thaw = threading.Event(), threading.Event()

    class Freezing(SQLQueue):
        def _claim(self, c: Any, job: str, epoch: int, now: float) -> Any:
            row = super()._claim(c, job, epoch, now)
            inside.set()
            thaw.wait(10)  # frozen with its transaction open
            return row

    queue = SQLQueue(queue_url(backend, tmp_path))
    queue.retry_seconds = 0.5  # less than one lock wait
    spec = queue.create_job(make_spec(source, partitions=3, lease_ttl=60))
    held = [lease_of(queue, spec.name, f"w{i}") for i in range(3)]
    freezing = Freezing(queue_url(backend, tmp_path))
    claimer = threading.Thread(target=freezing.acquire, args=(spec.name, "claimer"))
    claimer.start()
    try:
        assert inside.wait(10)
        assert all(queue.heartbeat(lease) for lease in held)  # no wait, no busy error
    finally:
        thaw.set()
        claimer.join(10)
        freezing.close()
        queue.close()


@pytest.mark.parametrize("claim", [False, True], ids=["complete", "complete_and_acquire"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_a_completion_whose_reply_was_lost_is_done_not_lost(
    backend: str,
    claim: bool,
    source: sqlfeed.Source,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The completion committed, then the connection died before the reply: the retry found
    its own task done and answered "lease lost", and the worker dropped a finished partition's
    last acknowledgements. A done task keeps its lease's token: the retry answers done."""
    queue = SQLQueue(queue_url(backend, tmp_path))
    try:
        spec = queue.create_job(make_spec(source, partitions=2))
        held = lease_of(queue, spec.name, "a")
        assert queue.ack(held, 2, 20)
        real, armed = queue._session, [True]

        @contextmanager
        def reply_lost(read_only: bool = False) -> Iterator[Any]:
            with real(read_only) as connection:
                yield connection
            if armed and not read_only:  # committed; the reply never came
                armed.clear()
                error = EngineError(f"queue {backend}: server closed the connection unexpectedly")
                error.transient = True  # type: ignore[attr-defined]
                raise error

        monkeypatch.setattr(queue, "_session", reply_lost)
        if claim:
            done, claimed = queue.complete_and_acquire(held, "a", offset=5, rows=30, batches=3)
        else:
            done = queue.complete(held, offset=5, rows=30, batches=3)
        assert not armed, "the reply was lost once"
        assert done is True
        assert queue.completions(spec.name)[(0, held.partition)] == 1
        status = queue.status(spec.name)
        assert status.per_epoch[0]["done"] == 1
        assert status.workers[0]["rows"] == 50  # 20 acknowledged, then 30 more: counted once
        if claim:
            assert isinstance(claimed, Lease)
            assert claimed.partition != held.partition
    finally:
        queue.close()
