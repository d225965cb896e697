"""Workers: pull partitions from a job's lease queue and stream their batches.

A batch counts as *taken* when the consumer asks for the next one (or ends the
iteration normally), and is then acknowledged: at once, or together with the batches
taken after it within ``ack_interval`` seconds, and always before the partition is
completed or given back. A worker that dies holding batches it has not acknowledged
leaves them to the next holder of that partition, which delivers them again; everything
acknowledged before is skipped. Resuming by batch count assumes the engine returns a
partition's rows in the same order on every read: true for scans of a table no one
writes meanwhile on DuckDB, SQLite and MySQL; for PostgreSQL sqlfeed turns off parallel
plans and synchronized scans in the sessions it reads with. It is not true of a table
written during the run (PostgreSQL moves an updated row), nor of every plan (DuckDB may
return a join's rows in another order): consumers that must not depend on it take
``whole_partitions`` (a partition given back is read again from its first row), as the
table sink does.

A worker holds up to two leases: the partition it reads, and the next one, claimed ahead
in a background thread. Keeping them (claims, heartbeats, acknowledgements, completions,
giving back) is its :class:`~sqlfeed.dispatch.leases.LeaseKeeper`'s work; the worker reads
partitions, resumes them after the rows acknowledged, and decides when what was taken is
acknowledged. Leases are given back on every way out of :meth:`Worker.deliveries` (the job
done, an error, the consumer stopping early, :meth:`Worker.close`, SIGTERM with
:meth:`Worker.release_on_sigterm`), and a queue that is briefly busy or unreachable is
asked again, never taken for lost.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.leases import Hold, LeaseKeeper
from sqlfeed.dispatch.ledger import DeliveryLog
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, Wait
from sqlfeed.dispatch.shutdown import DEADLINE_SECONDS, on_sigterm
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
    row: int = 0
    """The position of the batch's first row within its partition (0-based), in this
    read of it (another read may order the rows otherwise: see the module)."""


def default_worker_id() -> str:
    """``host:pid:random``: unique per process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Pulls a job's partitions, heartbeats its leases, acknowledges what was taken.

    Args:
        queue: a :class:`LeaseQueue` or its URL (``memory://``, ``sqlite:///state.db``,
            a PostgreSQL or MySQL URL).
        job: the job's name (create it with ``queue.create_job`` first).
        source: where the plan's partitions run (the plan's dialect).
        worker_id: a unique name for this worker (default: host, pid and a random part).
        batch_size: rows per batch within a partition (None: as read). Batches never span
            partitions, so acknowledged offsets are per partition.
        poll: seconds between asks while the epoch waits on other workers' leases.
        on_ack: called with each delivery once its acknowledgement is stored.
        ack_interval: taken batches are acknowledged together at most this many seconds
            after the first of them was taken (0: each one at once). A worker that dies
            leaves at most that much to be delivered again; the last acknowledgements of a
            partition go with its completion, in one round trip.
        on_lease: called with each lease taken, before its partition is read.
        on_partition: called with a lease and its partition's number of batches once
            every batch is acknowledged, before the partition is completed (e.g. to write
            a manifest); an error it raises gives the lease back uncompleted.
        claim_ahead: while a partition streams, claim the next one in a background thread
            (held and heartbeated like the current one, given back on every way out; a
            worker that dies leaves it to expire after its TTL): the next partition starts
            without waiting for the queue, and the completion of a partition goes with
            the claim of the one after next, in one round trip on a SQL queue. False: one
            lease at a time, claimed when the previous partition is done.
        whole_partitions: nothing of a partition is acknowledged before it is complete, and
            ``on_partition`` runs before that acknowledgement: a partition given back or
            lost is read again from its first row by its next holder, whatever order its
            rows come in then (the table sink commits a partition's rows at once).

    Raises:
        InvalidArgumentError: the job's plan is for another engine than ``source``, or a
            batch size the job's ``even_batches`` contradicts.
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
        ack_interval: float = 1.0,
        on_lease: Callable[[Lease], None] | None = None,
        on_partition: Callable[[Lease, int], None] | None = None,
        claim_ahead: bool = True,
        whole_partitions: bool = False,
    ) -> None:
        self.queue = open_queue(queue)
        self.spec: JobSpec = self.queue.job(job)
        self.source: Source = connect(source)
        if self.source.dialect.name != self.spec.plan.dialect:
            raise InvalidArgumentError(
                f"job {job!r} reads {self.spec.plan.dialect}, but the worker's source is "
                f"{self.source.dialect.name}: give it a {self.spec.plan.dialect} database URL"
            )
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
        self._log = DeliveryLog()
        """What was handed out since the last :meth:`checkpoint` (the job's ledger)."""
        self.poll = poll
        self.on_ack = on_ack
        self.ack_interval = ack_interval
        self.on_lease = on_lease
        self.on_partition = on_partition
        self.claim_ahead = claim_ahead
        self.whole_partitions = whole_partitions
        self._ack_lock = threading.Lock()
        """``on_ack`` runs in one thread at a time (completions may run in the claim's)."""
        self.schema = self.spec.plan.arrow_schema() or self.source.schema(self.spec.plan.sql)
        self._reads: set[threading.Event] = set()
        """The stop events of the partitions being read (:meth:`request_stop` sets them)."""
        self._guard = threading.Lock()
        self._stop = threading.Event()
        """Stop at the next safe point (close(), SIGTERM)."""
        self._signal = 0
        self.done = False
        """Every epoch of the job is done (:meth:`deliveries` ran to the end)."""
        self._leases: LeaseKeeper[Delivery] = LeaseKeeper(
            self.queue,
            self.spec,
            self.worker_id,
            stop=self._stop,
            on_acked=self._acknowledged,
            on_completed=self._completed,
            partial_acks=not whole_partitions,
        )
        """The leases held, their heartbeats (which start here) and queue calls."""
        self._finished = self._leases.finished
        """No more heartbeats: every epoch is done, or the worker is closed."""

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Acknowledge what was taken, give back the leases held now, stop heartbeating."""
        self._stop.set()
        self.give_back(timeout=None)
        self._leases.close()

    def release_on_sigterm(self, deadline: float = DEADLINE_SECONDS) -> None:
        """On SIGTERM, stop, give back the leases and exit 143 (for worker processes).

        The signal handler only notes the signal; the worker stops at its next safe point
        (before handing out a batch, while waiting for work), gives its leases back, and
        :meth:`deliveries` raises ``SystemExit(143)``. Whatever the process is doing, it
        exits 143 within ``deadline`` seconds (see :mod:`sqlfeed.dispatch.shutdown`).
        Call it from the main thread.
        """
        on_sigterm(self, deadline)

    def request_stop(self, signum: int = 0) -> None:
        """Stop at the next safe point.

        ``signum``: the signal that asked (then :meth:`deliveries` raises
        ``SystemExit(128 + signum)`` once the leases are back).
        """
        self._signal = self._signal or signum
        self._stop.set()
        with self._guard:
            reads = list(self._reads)
        for stop in reads:
            stop.set()

    def still_holds(self, epoch: int, partition: int) -> bool:
        """Whether the lease on ``partition`` of ``epoch`` is still certainly this worker's.

        The lease is renewed first when due. For a consumer about to make a batch of it
        permanent.
        """
        return any(self._leases.trusted(hold) for hold in self._leases.holds(epoch, partition))

    def refuse(self, delivery: Delivery) -> None:
        """The consumer could not take ``delivery`` (e.g. :meth:`still_holds` said no).

        It is not acknowledged, and the rest of its partition is given back.
        """
        for hold in self._leases.holds(delivery.epoch, delivery.partition):
            hold.refused = True

    def give_back(self, timeout: float | None = None) -> None:
        """Acknowledge what was taken and release every lease still held.

        Best effort: a lease the queue cannot be told about expires after its TTL. A
        partition whose every batch was taken is completed instead. A claim running in the
        background is waited for first (``timeout``), so the lease it brings is given back
        too.
        """
        self._leases.give_back_all(timeout)

    # -- the stream ---------------------------------------------------------------------

    def deliveries(self) -> Iterator[Delivery]:
        """Batches of every partition this worker gets, epoch after epoch, until done.

        Raises:
            SystemExit: 128 + the signal, after giving the leases back, when a signal
                installed by :meth:`release_on_sigterm` stopped the worker.
        """
        leases = self._leases
        finished: Hold[Delivery] | None = None  # read to its end, its completion not yet sent
        try:
            while not self._stop.is_set():
                ahead = leases.take_ahead()
                if ahead is not None:
                    got = ahead.result()
                else:
                    got, finished = leases.next(finished), None
                if got is None:
                    self.done = True
                    leases.close()  # every epoch is done: stop heartbeating
                    break
                if isinstance(got, Wait):
                    if finished is None:  # else: complete it and ask again at once
                        self._stop.wait(min(self.poll, max(got.seconds, 0.01)))
                    continue
                if not isinstance(got, Hold):
                    break  # stopped while waiting for the queue
                if self.claim_ahead:  # the next lease, claimed while this one streams
                    leases.claim_ahead(finished)
                    finished = None
                if (yield from self._partition(got)):
                    finished = got
        finally:
            self.give_back()  # the claim ahead waited for; what `finished` holds completed
            leases.ahead = None
        if self._signal:
            raise SystemExit(128 + self._signal)

    def checkpoint(self, step: int, untaken: Sequence[Delivery] = ()) -> None:
        """Record in the job's ledger what this worker handed out since its last checkpoint.

        Call it in every worker when the model is checkpointed at ``step`` (an id that
        grows), after the model took its last batch: ``queue.rewind(job, step)`` (or
        ``sqlfeed job rewind --to STEP``) can then hand out again exactly what was
        delivered after it, for a training restored from that checkpoint.

        Args:
            step: the checkpoint's id (e.g. the global training step).
            untaken: deliveries handed out but not consumed by the model (read ahead):
                left for the next checkpoint.
        """
        _check_step(step)
        held = [(d.epoch, d.partition, d.offset, d.batch.num_rows) for d in untaken]
        self.queue.record(self.spec.name, step, self.worker_id, self._log.drain(held))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The record batches of :meth:`deliveries`."""
        for delivery in self.deliveries():
            yield delivery.batch

    @property
    def share(self) -> int | None:
        """With ``even_batches``: the batches each replica delivers per epoch."""
        return self.spec.share

    # -- one partition ------------------------------------------------------------------

    def _partition(self, hold: Hold[Delivery]) -> Generator[Delivery, None, bool]:
        """The partition's batches; True once every one was taken.

        Its completion is then left to the caller: with the next claim, or when the lease is
        given back.
        """
        lease = hold.lease
        if self.on_lease is not None:
            self.on_lease(lease)  # an error here gives the lease back (see deliveries)
        if self._share_done(hold):
            return False
        stop = threading.Event()
        batches = self._read(lease, stop)
        offset = 0 if self.whole_partitions else lease.offset  # after the acknowledged ones
        row = 0 if self.whole_partitions else lease.rows or 0
        try:
            for batch in _after_rows(batches, row):
                if not self._may_hand_out(hold):
                    return False  # stopping, another worker holds it now, or our share is full
                delivery = self._handed(lease, offset, batch, row)
                yield delivery
                row += batch.num_rows
                if hold.refused:
                    self._log.forget(lease.epoch, lease.partition, offset, batch.num_rows)
                    return False
                offset += 1
                if not self._take(hold, delivery):
                    return False  # lost
            if stop.is_set():  # request_stop() cut the read short: not the partition's end
                return False
            return self._ended(hold, offset)
        finally:
            self._end_read(hold, stop, batches)

    def _read(self, lease: Lease, stop: threading.Event) -> Iterator[pa.RecordBatch]:
        """The lease's partition read in the job's snapshot and order, rebatched.

        ``stop`` (registered for :meth:`request_stop`) cuts the read short.
        """
        with self._guard:
            self._reads.add(stop)
        partition = self.spec.plan.partitions[lease.partition]
        snapshot, rows = self.spec.snapshot, partition.estimated_rows
        reads = self.source.read(
            partition.sql, schema=self.schema, stop=stop, ordered=True, snapshot=snapshot, rows=rows
        )
        return rebatch(reads, self.batch_size) if self.batch_size else reads

    def _may_hand_out(self, hold: Hold[Delivery]) -> bool:
        """Not stopping, the lease certainly ours, and (even batches) our share not full."""
        return not (self._stop.is_set() or not self._leases.trusted(hold) or self._share_done(hold))

    def _handed(self, lease: Lease, offset: int, batch: pa.RecordBatch, row: int) -> Delivery:
        """The delivery of ``batch``, counted and noted in the ledger's log."""
        self.delivered[lease.epoch] = self.delivered.get(lease.epoch, 0) + 1
        self._log.handed(lease.epoch, lease.partition, offset, batch.num_rows)
        return Delivery(lease.epoch, lease.partition, offset, batch, row)

    def _take(self, hold: Hold[Delivery], delivery: Delivery) -> bool:
        """The consumer took ``delivery``; acknowledge what is due. False: the lease is lost."""
        now = time.monotonic()
        if not hold.taken:
            hold.since = now
        hold.taken.append(delivery)
        if now - hold.since >= self.ack_interval and not self.whole_partitions:
            return self._leases.acknowledge(hold)
        return not hold.lost

    def _ended(self, hold: Hold[Delivery], offset: int) -> bool:
        """Every batch (``offset`` of them) was taken: noted in the ledger's log.

        With ``on_partition``, also acknowledged and handed to it. False: the lease is lost.
        """
        lease = hold.lease
        self._log.ended(lease.epoch, lease.partition, offset)
        if self.on_partition is not None:
            if not self.whole_partitions and not self._leases.acknowledge(hold):
                return False
            self.on_partition(lease, offset)  # an error: given back, not completed
        hold.ended = True
        return True

    def _end_read(
        self, hold: Hold[Delivery], stop: threading.Event, batches: Iterator[pa.RecordBatch]
    ) -> None:
        """The read stopped and closed; the lease given back unless every batch was taken."""
        stop.set()
        with self._guard:
            self._reads.discard(stop)
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        if not hold.ended:
            self._leases.give_back(hold, None)

    # -- what the keeper reports --------------------------------------------------------

    def _acknowledged(self, deliveries: list[Delivery]) -> None:
        if self.on_ack is not None:
            with self._ack_lock:
                for delivery in deliveries:
                    self.on_ack(delivery)

    def _completed(self, lease: Lease) -> None:
        """The queue stored ``lease``'s completion.

        With even batches, a full share is recorded as finished.
        """
        share = self.spec.share
        if share is not None and self.delivered.get(lease.epoch, 0) >= share:
            self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)

    def _share_done(self, hold: Hold[Delivery]) -> bool:
        """Even batches: this worker delivered its share of the epoch; give the rest back."""
        share = self.spec.share
        lease = hold.lease
        if share is None or self.delivered.get(lease.epoch, 0) < share:
            return False
        self._leases.give_back(hold, None)
        self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)
        return True


def _after_rows(batches: Iterator[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` after their first ``skip`` rows.

    Those rows were acknowledged by earlier holders of the lease, whose batch sizes may have
    differed: a batch across the boundary is cut.
    """
    for batch in batches:
        if batch.num_rows <= skip:  # acknowledged by an earlier holder (or empty)
            skip -= batch.num_rows
            continue
        if skip:
            batch, skip = batch.slice(skip), 0
        yield batch


def _check_step(step: object) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidArgumentError(f"a checkpoint id is an integer >= 0, not {step!r}")
