"""Claim-ahead: a worker claims its next lease while the current partition streams.

On every backend (memory, SQLite file, PostgreSQL, MariaDB): the lease claimed ahead is
held and heartbeated, given back at once when the worker stops, left to expire when the
worker dies (then done exactly once by another worker), and a partition's completion goes
with the next claim (``complete_and_acquire``). Real worker processes killed with SIGKILL
while holding a lease claimed ahead: ``tests/dispatch/test_dispatch_faults.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sqlfeed
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import Lease, LeaseQueue, Wait
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery, Worker
from tests.dispatch.test_leases import BACKENDS, _ids, _states, lease_of, make_spec, queue_url


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseQueue]:
    backend = request.param
    opened: LeaseQueue = (
        MemoryQueue() if backend == "memory" else SQLQueue(queue_url(backend, tmp_path))
    )
    yield opened
    opened.close()


pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(1000)"})


def _until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, f"never: {what}"
        time.sleep(0.01)


def _leased(queue: LeaseQueue, job: str) -> int:
    return _states(queue, job).get("leased", 0)


def test_complete_and_acquire_completes_and_claims_in_one_call(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60, order="index"))
    first = lease_of(queue, spec.name, "w")
    done, second = queue.complete_and_acquire(first, "w", offset=3, rows=300, batches=3)
    assert done is True
    assert isinstance(second, Lease)
    assert second.partition == 1
    # Completed by this lease already (a retry after a lost reply): done, counted once.
    again, nothing = queue.complete_and_acquire(first, "w", offset=3, rows=300, batches=3)
    assert again is True
    assert nothing is not None
    assert not isinstance(nothing, Lease)
    assert queue.complete_and_acquire(second, "w") == (True, None)  # every epoch is done
    assert queue.completions(spec.name) == {(0, 0): 1, (0, 1): 1}  # type: ignore[attr-defined]
    assert queue.status(spec.name).workers[0]["rows"] == 300


def test_the_next_lease_is_held_while_a_partition_streams(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=4, lease_ttl=60))
    worker = Worker(queue, spec.name, source, batch_size=100)
    stream = worker.deliveries()
    got = [next(stream)]
    _until(lambda: _leased(queue, spec.name) == 2, "a lease claimed ahead")
    got += list(stream)
    assert sorted(_ids(got)) == list(range(1000))
    assert set(queue.completions(spec.name).values()) == {1}  # type: ignore[attr-defined]
    assert worker.done


def _stop_by(how: str, worker: Worker, stream: Iterator[Delivery]) -> None:
    if how == "close":
        worker.close()
    elif how == "consumer-stops":
        stream.close()  # type: ignore[attr-defined]
    else:  # what SIGTERM does (release_on_sigterm), then the stream ends
        worker.request_stop()
        assert list(stream) == []


@pytest.mark.parametrize("how", ["close", "consumer-stops", "request-stop"])
def test_a_graceful_stop_gives_the_lease_claimed_ahead_back_at_once(
    queue: LeaseQueue, source: sqlfeed.Source, how: str
) -> None:
    spec = queue.create_job(make_spec(source, partitions=3, lease_ttl=60, order="index"))
    worker = Worker(queue, spec.name, source, batch_size=100, ack_interval=0)
    stream = worker.deliveries()
    first = [next(stream), next(stream)]  # the first batch taken, the second in hand
    _until(lambda: _leased(queue, spec.name) == 2, "a lease claimed ahead")
    _stop_by(how, worker, stream)
    assert _states(queue, spec.name) == {"pending": 3}  # no TTL (60 s) to wait for
    rest = list(Worker(queue, spec.name, source, batch_size=100).deliveries())
    taken = 2 if how == "request-stop" else 1  # resuming the stream took the one in hand
    assert sorted(_ids(first[:taken] + rest)) == list(range(1000))  # no acked batch again
    assert set(queue.completions(spec.name).values()) == {1}  # type: ignore[attr-defined]
    worker.close()


def test_a_dead_workers_lease_claimed_ahead_is_done_once_by_another_after_it_expires(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    """The worker stops heartbeating and never gives anything back (as if SIGKILLed)
    while it holds the partition it reads and the one it claimed ahead."""
    spec = queue.create_job(make_spec(source, partitions=3, lease_ttl=0.5, order="index"))
    acked: list[Delivery] = []
    dying = Worker(
        queue,
        spec.name,
        source,
        worker_id="dying",
        batch_size=100,
        ack_interval=0,
        on_ack=acked.append,
    )
    stream = dying.deliveries()
    first = [next(stream) for _ in range(3)]
    _until(lambda: _leased(queue, spec.name) == 2, "a lease claimed ahead")
    dying._finished.set()  # dies: no more heartbeats, no release (the stream stays open)
    rest = list(Worker(queue, spec.name, source, worker_id="next", batch_size=100).deliveries())
    assert [(d.partition, d.offset) for d in acked] == [(0, 0), (0, 1)]
    assert sorted(_ids(acked) + _ids(rest)) == list(range(1000))  # acked never again
    assert {d.partition for d in rest} == {0, 1, 2}
    assert set(queue.completions(spec.name).values()) == {1}  # type: ignore[attr-defined]
    assert [d.offset for d in first] == [0, 1, 2]
    assert stream is not None


def test_finishing_a_share_from_several_threads_at_once_is_one_record(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    """With claim-ahead, a replica's completion (background) and its consumer may both
    say that it delivered its share of an epoch."""
    spec = queue.create_job(
        make_spec(source, partitions=3, even_batches=True, replicas=2, batch_size=10, rows=1000)
    )
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def finish() -> None:
        start.wait()
        try:
            queue.finish_share(spec.name, 0, "r1")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=finish) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    got = queue.acquire(spec.name, "r1")
    assert isinstance(got, Wait)  # r1 has its share: it waits for the other replica
