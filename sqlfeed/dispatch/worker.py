"""Workers: pull partitions from a job's lease queue and stream their batches.

A batch counts as *taken* when the consumer asks for the next one (or ends the
iteration normally), and is then acknowledged. A worker that dies holding a batch has
not acknowledged it, so the next holder of that partition delivers it again; everything
acknowledged before is skipped. Resuming by batch count assumes the engine returns a
partition's rows in the same order on every read: true for DuckDB scans, SQLite and
MySQL; for PostgreSQL sqlfeed turns off parallel plans and synchronized scans in the
sessions it reads with, so a partition reads back in the same order.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pyarrow as pa

from dialects import InvalidArgumentError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, Wait
from sqlfeed.feed.batches import rebatch
from sqlfeed.io import Source, connect

__all__ = ["Delivery", "Worker", "default_worker_id"]


@dataclass(frozen=True)
class Delivery:
    """One batch handed to the consumer, and where it came from."""

    epoch: int
    partition: int
    offset: int
    """The batch's position within its partition (0-based)."""
    batch: pa.RecordBatch


def default_worker_id() -> str:
    """``host:pid:random``: unique per process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Pulls a job's partitions, heartbeats its lease, acknowledges what was taken.

    Args:
        queue: a :class:`LeaseQueue` or its URL (``memory://``, ``sqlite:///state.db``,
            a PostgreSQL or MySQL URL).
        job: the job's name (create it with ``queue.create_job`` first).
        source: where the plan's partitions run.
        worker_id: a unique name for this worker (default: host, pid and a random part).
        batch_size: rows per batch within a partition (None: as read). Batches never span
            partitions, so acknowledged offsets are per partition.
        poll: seconds between asks while the epoch waits on other workers' leases.
        on_ack: called with each delivery once its acknowledgement is stored.
    """

    def __init__(
        self,
        queue: LeaseQueue | str,
        job: str,
        source: Any = None,
        *,
        worker_id: str | None = None,
        batch_size: int | None = None,
        poll: float = 0.5,
        on_ack: Callable[[Delivery], None] | None = None,
    ) -> None:
        self.queue = open_queue(queue)
        self.spec: JobSpec = self.queue.job(job)
        self.source: Source = connect(source)
        self.worker_id = worker_id or default_worker_id()
        if self.spec.even_batches:
            if batch_size not in (None, self.spec.batch_size):
                raise InvalidArgumentError(
                    f"the job batches by {self.spec.batch_size} rows (even_batches), "
                    f"not {batch_size}"
                )
            batch_size = self.spec.batch_size
        self.batch_size = batch_size
        self.delivered: dict[int, int] = {}
        """Batches delivered per epoch by this worker."""
        self.poll = poll
        self.on_ack = on_ack
        self.schema = self.spec.plan.arrow_schema() or self.source.schema(self.spec.plan.sql)
        self._lease: Lease | None = None
        self._renewed = 0.0
        self._lost = threading.Event()
        self._closed = threading.Event()
        self._guard = threading.Lock()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="sqlfeed-heartbeat")
        self._beat.start()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give back the lease held now, at once, and stop heartbeating."""
        self._closed.set()
        with self._guard:
            lease, self._lease = self._lease, None
        if lease is not None:
            self.queue.release(lease)

    def release_on_sigterm(self) -> None:
        """On SIGTERM, give back the lease and exit (for worker processes)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self.close()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, handler)

    def _heartbeat(self) -> None:
        interval = max(self.spec.lease_ttl / 3, 0.05)
        while not self._closed.wait(interval):
            with self._guard:
                lease = self._lease
            if lease is not None:
                self._renew(lease)

    def _renew(self, lease: Lease) -> bool:
        sent = time.monotonic()
        if self.queue.heartbeat(lease):
            self._renewed = max(self._renewed, sent)
            return True
        self._lost.set()
        return False

    def _still_held(self, lease: Lease) -> bool:
        """Whether the lease is certainly ours before handing out a batch.

        A lease is trusted for half its TTL after the last renewal was *sent*, measured
        on this process's monotonic clock (a duration, so clock skew does not matter);
        after that it is renewed first. A worker that stalled past its TTL (swapped out,
        a long GC) thus never delivers from a lease another worker has taken over.
        """
        if self._lost.is_set():
            return False
        if time.monotonic() - self._renewed < self.spec.lease_ttl / 2:
            return True
        return self._renew(lease)

    def deliveries(self) -> Iterator[Delivery]:
        """Batches of every partition this worker gets, epoch after epoch, until done."""
        while not self._closed.is_set():
            asked = time.monotonic()
            got = self.queue.acquire(self.spec.name, self.worker_id)
            if got is None:
                self._closed.set()  # every epoch is done: stop heartbeating
                return
            if isinstance(got, Wait):
                time.sleep(min(self.poll, max(got.seconds, 0.01)))
                continue
            with self._guard:
                self._lease = got
                self._lost.clear()
                self._renewed = asked
            try:
                yield from self._partition(got)
            finally:
                with self._guard:
                    self._lease = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The record batches of :meth:`deliveries`."""
        for delivery in self.deliveries():
            yield delivery.batch

    @property
    def share(self) -> int | None:
        """With ``even_batches``: the batches each replica delivers per epoch."""
        return self.spec.share

    def _share_done(self, lease: Lease) -> bool:
        """Even batches: this worker delivered its share of the epoch; give the rest back."""
        share = self.spec.share
        if share is None or self.delivered.get(lease.epoch, 0) < share:
            return False
        self.queue.release(lease)
        self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)
        return True

    def _partition(self, lease: Lease) -> Iterator[Delivery]:
        if self._share_done(lease):
            return
        partition = self.spec.plan.partitions[lease.partition]
        stop = threading.Event()
        offset = 0
        reads = self.source.read(
            partition.sql, schema=self.schema, stop=stop, ordered=True, snapshot=self.spec.snapshot
        )
        batches = rebatch(reads, self.batch_size) if self.batch_size else reads
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if offset < lease.offset:  # acknowledged by an earlier holder: skip
                    offset += 1
                    continue
                if not self._still_held(lease):
                    return  # another worker holds this partition now
                if self._share_done(lease):
                    return  # the rest of the partition goes to the others
                delivery = Delivery(lease.epoch, lease.partition, offset, batch)
                self.delivered[lease.epoch] = self.delivered.get(lease.epoch, 0) + 1
                yield delivery
                offset += 1
                sent = time.monotonic()
                if not self.queue.ack(lease, offset, batch.num_rows):
                    self._lost.set()
                    return
                self._renewed = max(self._renewed, sent)  # an ack renews the lease too
                if self.on_ack is not None:
                    self.on_ack(delivery)
            if not self._lost.is_set() and self.queue.complete(lease):
                share = self.spec.share
                if share is not None and self.delivered.get(lease.epoch, 0) >= share:
                    self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)
        finally:
            stop.set()
            close = getattr(batches, "close", None)
            if close is not None:
                close()
