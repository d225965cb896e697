"""The lease keeper alone (no partition read), against the memory and SQLite queues."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dispatch.leases import STOPPED, Hold, LeaseKeeper
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, Wait
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery
from tests.dispatch.test_leases import _states, make_spec, queue_url


@pytest.fixture(params=["memory", "sqlite"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseQueue]:
    opened: LeaseQueue = (
        MemoryQueue() if request.param == "memory" else SQLQueue(queue_url("sqlite", tmp_path))
    )
    yield opened
    opened.close()


pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(1000)"})


class Keeper:
    """A keeper of ``spec`` and what it reported."""

    def __init__(self, queue: LeaseQueue, spec: JobSpec, worker: str = "w") -> None:
        self.acked: list[Delivery] = []
        self.completed: list[Lease] = []
        self.stop = threading.Event()
        self.keeper: LeaseKeeper[Delivery] = LeaseKeeper(
            queue,
            spec,
            worker,
            stop=self.stop,
            on_acked=self.acked.extend,
            on_completed=self.completed.append,
        )

    def claim(self) -> Hold[Delivery]:
        got = self.keeper.next(None)
        assert isinstance(got, Hold), got
        return got


def taken(hold: Hold[Delivery], rows: int, batches: int) -> None:
    """The consumer took ``batches`` batches of ``rows`` rows from ``hold``."""
    lease = hold.lease
    for offset in range(lease.offset, lease.offset + batches):
        batch = pa.record_batch({"id": list(range(rows))})
        hold.taken.append(Delivery(lease.epoch, lease.partition, offset, batch))


def test_heartbeats_keep_a_lease_past_its_ttl(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.6))
    kept = Keeper(queue, spec)
    hold = kept.claim()
    time.sleep(1.5)  # 2.5 TTLs: renewed every 0.2 s
    assert isinstance(queue.acquire(spec.name, "other"), Wait)
    assert not hold.lost
    assert kept.keeper.trusted(hold)
    kept.keeper.close()


def test_a_lease_no_longer_heartbeated_expires(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=0.5))
    kept = Keeper(queue, spec)
    kept.claim()
    kept.keeper.close()  # no more heartbeats, nothing given back
    time.sleep(1.0)
    got = queue.acquire(spec.name, "other")
    assert isinstance(got, Lease)
    assert got.partition == 0


def test_a_given_back_lease_is_claimable_at_once_after_what_was_taken(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=1, lease_ttl=60))
    kept = Keeper(queue, spec)
    hold = kept.claim()
    taken(hold, rows=10, batches=2)
    kept.keeper.give_back(hold, None)
    assert hold.over
    assert [(d.partition, d.offset) for d in kept.acked] == [(0, 0), (0, 1)]
    got = queue.acquire(spec.name, "other")  # no TTL (60 s) to wait for
    assert isinstance(got, Lease)
    assert (got.partition, got.offset, got.rows) == (0, 2, 20)
    assert kept.completed == []
    kept.keeper.close()


def test_claim_ahead_holds_at_most_one_lease_beside_the_current(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=3, lease_ttl=60, order="index"))
    kept = Keeper(queue, spec)
    current = kept.claim()
    kept.keeper.claim_ahead(None)
    ahead = kept.keeper.take_ahead()
    assert ahead is not None
    assert kept.keeper.take_ahead() is None  # one claim ahead at a time
    following = ahead.result(timeout=30)
    assert isinstance(following, Hold)
    assert (current.lease.partition, following.lease.partition) == (0, 1)
    assert _states(queue, spec.name) == {"leased": 2, "pending": 1}
    kept.keeper.give_back_all(None)
    assert _states(queue, spec.name) == {"pending": 3}
    kept.keeper.close()


def test_claiming_ahead_completes_the_finished_lease_in_the_same_call(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60, order="index"))
    kept = Keeper(queue, spec)
    finished = kept.claim()
    taken(finished, rows=5, batches=3)
    finished.ended = True
    kept.keeper.claim_ahead(finished)
    ahead = kept.keeper.take_ahead()
    assert ahead is not None
    following = ahead.result(timeout=30)
    assert isinstance(following, Hold)
    assert following.lease.partition == 1
    assert finished.over
    assert [d.offset for d in kept.acked] == [0, 1, 2]
    assert kept.completed == [finished.lease]
    assert _states(queue, spec.name) == {"done": 1, "leased": 1}
    kept.keeper.give_back_all(None)
    kept.keeper.close()


def test_a_stopped_keeper_claims_nothing(queue: LeaseQueue, source: sqlfeed.Source) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60))
    kept = Keeper(queue, spec)
    kept.stop.set()
    assert kept.keeper.next(None) is STOPPED
    assert _states(queue, spec.name) == {"pending": 2}
    kept.keeper.close()


def test_a_given_back_lease_that_was_read_to_its_end_is_completed(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(make_spec(source, partitions=2, lease_ttl=60, order="index"))
    kept = Keeper(queue, spec)
    hold = kept.claim()
    taken(hold, rows=7, batches=1)
    hold.ended = True
    kept.keeper.give_back_all(None)
    assert _states(queue, spec.name) == {"done": 1, "pending": 1}
    assert [d.offset for d in kept.acked] == [0]
    kept.keeper.close()
