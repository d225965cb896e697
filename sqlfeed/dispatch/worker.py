"""Workers: pull partitions from a job's lease queue and stream their batches.

A batch counts as *taken* when the consumer asks for the next one (or ends the
iteration normally), and is then acknowledged: at once, or together with the batches
taken after it within ``ack_interval`` seconds, and always before the partition is
completed or given back. A worker that dies holding batches it has not acknowledged
leaves them to the next holder of that partition, which delivers them again; everything
acknowledged before is skipped. Resuming by batch count assumes the engine returns a
partition's rows in the same order on every read: true for DuckDB scans, SQLite and
MySQL; for PostgreSQL sqlfeed turns off parallel plans and synchronized scans in the
sessions it reads with, so a partition reads back in the same order.

A worker holds up to two leases: the partition it reads, and the next one, claimed ahead
in a background thread (with the current one's completion, in one queue call). What it
knows of each (renewed when, lost or not, batches taken but not yet acknowledged) is kept
per lease: a heartbeat that fails for one lease never touches another. Leases are given
back on every way out of :meth:`Worker.deliveries` (the job done, an error, the consumer
stopping early, :meth:`Worker.close`, SIGTERM with :meth:`Worker.release_on_sigterm`),
and a queue that is briefly busy or unreachable is asked again, never taken for lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import pyarrow as pa

from dialects import EngineError, InvalidArgumentError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.ledger import DeliveryLog
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, QueueBusyError, Wait
from sqlfeed.dispatch.shutdown import DEADLINE_SECONDS, on_sigterm
from sqlfeed.feed.batches import rebatch
from sqlfeed.io import Source, connect

__all__ = ["Delivery", "Worker", "default_worker_id"]

_log = logging.getLogger("sqlfeed.dispatch")
_T = TypeVar("_T")
_STOPPED = object()
"""``_acquire``'s answer when the worker was asked to stop while waiting for the queue."""
_UNASKED = object()
"""``_complete``'s answer when it did not claim the next lease in the same round trip."""


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


class _Hold:
    """One lease this worker holds, and what it knows of it."""

    def __init__(self, lease: Lease, renewed: float) -> None:
        self.lease = lease
        self.renewed = renewed
        """``time.monotonic()`` when the last successful renewal was sent."""
        self.lost = False
        """The queue said the lease is no longer ours (taken over, or the job reset)."""
        self.over = False
        """Completed or given back: nothing more to do with it."""
        self.taken: list[Delivery] = []
        """Taken by the consumer, not acknowledged yet."""
        self.since = 0.0
        """When the oldest of :attr:`taken` was taken."""
        self.refused = False
        """The consumer could not take the batch in hand (:meth:`Worker.refuse`)."""
        self.lock = threading.Lock()
        """Serializes acknowledging, completing and giving back (main thread, close())."""
        self.ended = False
        """Every batch was taken: giving it back completes it."""


def _in_background(call: Callable[[], Any]) -> Future[Any]:
    """``call()`` in a daemon thread: its answer (or error) in the future returned."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as err:  # raised in the consumer's thread by result()
            future.set_exception(err)

    threading.Thread(target=run, daemon=True, name="sqlfeed-claim-ahead").start()
    return future


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
        self._ahead: Future[Any] | None = None
        """The claim running in the background (claim_ahead), if any."""
        self._ack_lock = threading.Lock()
        """``on_ack`` runs in one thread at a time (completions may run in the claim's)."""
        self.schema = self.spec.plan.arrow_schema() or self.source.schema(self.spec.plan.sql)
        self._holds: dict[str, _Hold] = {}
        self._reads: set[threading.Event] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        """Stop at the next safe point (close(), SIGTERM)."""
        self._signal = 0
        self.done = False
        """Every epoch of the job is done (:meth:`deliveries` ran to the end)."""
        self._finished = threading.Event()
        """No more heartbeats: every epoch is done, or the worker is closed."""
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="sqlfeed-heartbeat")
        self._beat.start()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Acknowledge what was taken, give back the leases held now, stop heartbeating."""
        self._stop.set()
        self.give_back(timeout=None)
        self._finished.set()

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
        """Stop at the next safe point; ``signum``: the signal that asked (then
        :meth:`deliveries` raises ``SystemExit(128 + signum)`` once the leases are back)."""
        self._signal = self._signal or signum
        self._stop.set()
        with self._guard:
            reads = list(self._reads)
        for stop in reads:
            stop.set()

    def still_holds(self, epoch: int, partition: int) -> bool:
        """Whether the lease on ``partition`` of ``epoch`` is still certainly this worker's
        (renewed first when due): for a consumer about to make a batch of it permanent."""
        with self._guard:
            holds = [
                h
                for h in self._holds.values()
                if (h.lease.epoch, h.lease.partition) == (epoch, partition)
            ]
        return any(self._trusted(hold) for hold in holds)

    def refuse(self, delivery: Delivery) -> None:
        """The consumer could not take ``delivery`` (e.g. :meth:`still_holds` said no):
        it is not acknowledged, and the rest of its partition is given back."""
        with self._guard:
            for hold in self._holds.values():
                if (hold.lease.epoch, hold.lease.partition) == (delivery.epoch, delivery.partition):
                    hold.refused = True

    def give_back(self, timeout: float | None = None) -> None:
        """Acknowledge what was taken and release every lease still held (best effort:
        a lease the queue cannot be told about expires after its TTL); a partition whose
        every batch was taken is completed instead. A claim running in the background is
        waited for first (``timeout``), so the lease it brings is given back too."""
        ahead = self._ahead
        if ahead is not None:
            wait([ahead], timeout)
        with self._guard:
            holds = list(self._holds.values())
        for hold in holds:
            self._give_back(hold, timeout)

    # -- heartbeats and trust -----------------------------------------------------------

    def _heartbeat(self) -> None:
        interval = max(self.spec.lease_ttl / 3, 0.05)
        while not self._finished.wait(interval):
            with self._guard:
                holds = list(self._holds.values())
            for hold in holds:
                if not (hold.over or hold.lost):
                    try:
                        self._renew(hold)
                    except Exception:  # a bug; heartbeats must go on for the other leases
                        _log.exception("heartbeat of %s", _name(hold.lease))

    def _renew(self, hold: _Hold) -> bool | None:
        """Renew one lease: True, False when it is lost, None when the queue did not say."""
        sent = time.monotonic()
        try:
            held = self.queue.heartbeat(hold.lease)
        except EngineError as err:  # busy, or down: the lease is not known to be lost
            _log.warning("heartbeat of %s failed, trying again: %s", _name(hold.lease), err)
            return None
        if held:
            hold.renewed = max(hold.renewed, sent)
        elif not hold.over:
            hold.lost = True
        return held

    def _trusted(self, hold: _Hold) -> bool:
        """Whether the lease is certainly ours before handing out a batch.

        A lease is trusted for half its TTL after the last renewal was *sent*, measured
        on this process's monotonic clock (a duration, so clock skew does not matter);
        after that it is renewed first. A worker that stalled past its TTL (swapped out,
        a long GC) thus never delivers from a lease another worker has taken over. While
        the queue does not answer, the renewal is tried again until the lease would have
        expired.
        """
        ttl = self.spec.lease_ttl
        while not (hold.lost or hold.over or self._stop.is_set()):
            if time.monotonic() - hold.renewed < ttl / 2:
                return True
            held = self._renew(hold)
            if held is not None:
                return held
            if time.monotonic() - hold.renewed >= ttl:
                return False  # it may have expired meanwhile: not ours to deliver from
            self._stop.wait(min(0.2, ttl / 10))
        return False

    def _patiently(self, hold: _Hold, call: Callable[[], _T]) -> _T | None:
        """``call()``, asked again while the queue is busy and the lease may still be ours;
        None when it never answered."""
        while True:
            sent = time.monotonic()
            try:
                answer = call()
            except QueueBusyError as err:
                if time.monotonic() - hold.renewed >= self.spec.lease_ttl:
                    _log.warning("%s: the queue did not answer: %s", _name(hold.lease), err)
                    return None
                time.sleep(min(0.2, self.spec.lease_ttl / 10))
                continue
            if answer:
                hold.renewed = max(hold.renewed, sent)
            return answer

    # -- the stream ---------------------------------------------------------------------

    def deliveries(self) -> Iterator[Delivery]:
        """Batches of every partition this worker gets, epoch after epoch, until done.

        Raises:
            SystemExit: 128 + the signal, after giving the leases back, when a signal
                installed by :meth:`release_on_sigterm` stopped the worker.
        """
        finished: _Hold | None = None  # read to its end, its completion not yet sent
        try:
            while not self._stop.is_set():
                ahead, self._ahead = self._ahead, None
                if ahead is not None:
                    got = ahead.result()
                else:
                    got, finished = self._next(finished), None
                if got is None:
                    self.done = True
                    self._finished.set()  # every epoch is done: stop heartbeating
                    break
                if isinstance(got, Wait):
                    if finished is None:  # else: complete it and ask again at once
                        self._stop.wait(min(self.poll, max(got.seconds, 0.01)))
                    continue
                if not isinstance(got, _Hold):
                    break  # stopped while waiting for the queue
                if self.claim_ahead:  # the next lease, claimed while this one streams
                    self._ahead, finished = _in_background(partial(self._next, finished)), None
                if (yield from self._partition(got)):
                    finished = got
        finally:
            self.give_back()  # the claim ahead waited for; what `finished` holds completed
            self._ahead = None
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

    def _next(self, finished: _Hold | None) -> _Hold | Wait | object | None:
        """Complete ``finished`` (read to its end) and claim the next lease, in one round
        trip when the queue can: the lease is held (heartbeated) from then on, or given
        back at once when the worker was stopped meanwhile."""
        got: object = _UNASKED
        if finished is not None:
            got, asked = self._complete(finished, claim=not self._stop.is_set())
        if got is _UNASKED:
            got, asked = self._acquire()
        if not isinstance(got, Lease):
            return got
        hold = _Hold(got, asked)
        with self._guard:
            if not self._stop.is_set():
                self._holds[got.token] = hold
                return hold
        self._give_back(hold, None)  # close() or SIGTERM came while claiming
        return _STOPPED

    def _acquire(self) -> tuple[Lease | Wait | object | None, float]:
        """The queue's answer and when it was asked (the lease runs from then on); a busy
        queue is asked again until it answers or the worker is stopped."""
        pause = 0.05
        while not self._stop.is_set():
            asked = time.monotonic()
            try:
                return self.queue.acquire(self.spec.name, self.worker_id), asked
            except QueueBusyError as err:
                _log.warning("the queue is busy, asking again: %s", err)
                self._stop.wait(pause)
                pause = min(pause * 2, 2.0)
        return _STOPPED, 0.0

    def _partition(self, hold: _Hold) -> Generator[Delivery, None, bool]:
        """The partition's batches; True once every one was taken (its completion is then
        left to the caller: with the next claim, or when the lease is given back)."""
        lease = hold.lease
        if self.on_lease is not None:
            self.on_lease(lease)  # an error here gives the lease back (see deliveries)
        if self._share_done(hold):
            return False
        stop = threading.Event()
        with self._guard:
            self._reads.add(stop)
        partition = self.spec.plan.partitions[lease.partition]
        snapshot, rows = self.spec.snapshot, partition.estimated_rows
        reads = self.source.read(
            partition.sql, schema=self.schema, stop=stop, ordered=True, snapshot=snapshot, rows=rows
        )
        batches = rebatch(reads, self.batch_size) if self.batch_size else reads
        skip, offset = lease.rows or 0, lease.offset  # resume after the acknowledged rows
        try:
            for batch in batches:
                if batch.num_rows <= skip:  # acknowledged by an earlier holder (or empty)
                    skip -= batch.num_rows
                    continue
                if skip:  # the batch across the boundary, cut (holders' batch sizes may differ)
                    batch, skip = batch.slice(skip), 0
                if self._stop.is_set() or not self._trusted(hold) or self._share_done(hold):
                    return False  # stopping, another worker holds it now, or our share is full
                delivery = Delivery(lease.epoch, lease.partition, offset, batch)
                self.delivered[lease.epoch] = self.delivered.get(lease.epoch, 0) + 1
                self._log.handed(lease.epoch, lease.partition, offset, batch.num_rows)
                yield delivery
                if hold.refused:
                    self._log.forget(lease.epoch, lease.partition, offset, batch.num_rows)
                    return False
                offset += 1
                if not self._take(hold, delivery):
                    return False  # lost
            if stop.is_set():  # request_stop() cut the read short: not the partition's end
                return False
            self._log.ended(lease.epoch, lease.partition, offset)
            if self.on_partition is not None:
                if not self._acknowledge(hold):
                    return False
                self.on_partition(lease, offset)  # an error: given back, not completed
            hold.ended = True
            return True
        finally:
            stop.set()
            with self._guard:
                self._reads.discard(stop)
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            if not hold.ended:
                self._give_back(hold, None)

    def _take(self, hold: _Hold, delivery: Delivery) -> bool:
        """The consumer took ``delivery``; acknowledge what is due. False: the lease is lost."""
        now = time.monotonic()
        if not hold.taken:
            hold.since = now
        hold.taken.append(delivery)
        if now - hold.since >= self.ack_interval:
            return self._acknowledge(hold)
        return not hold.lost

    def _acknowledge(self, hold: _Hold) -> bool:
        """Store the acknowledgements of the batches taken; False when the lease is lost."""
        with hold.lock:
            taken = hold.taken
            if hold.over or hold.lost or not taken:
                return not (hold.lost or hold.over)
            rows = sum(d.batch.num_rows for d in taken)
            offset = taken[-1].offset + 1
            held = self._patiently(
                hold, lambda: self.queue.ack(hold.lease, offset, rows, len(taken))
            )
            if held:
                hold.taken = []
            elif held is False:
                hold.lost = True
        if held:
            self._acknowledged(taken)
        return bool(held)

    def _acknowledged(self, deliveries: list[Delivery]) -> None:
        if self.on_ack is not None:
            with self._ack_lock:
                for delivery in deliveries:
                    self.on_ack(delivery)

    def _complete(self, hold: _Hold, claim: bool) -> tuple[Any, float]:
        """Every batch was taken: acknowledge the rest and complete, in one round trip;
        with ``claim``, claim the next lease in it too. Returns the claim's answer
        (``_UNASKED``: not claimed) and when it was sent."""
        lease, answer, sent = hold.lease, _UNASKED, time.monotonic()
        with hold.lock:
            if hold.over or hold.lost:
                return answer, sent
            taken, rows = hold.taken, sum(d.batch.num_rows for d in hold.taken)
            offset = taken[-1].offset + 1 if taken else None
            last = {"offset": offset, "rows": rows, "batches": len(taken)}
            done: bool | None = None
            if claim:
                try:
                    done, answer = self.queue.complete_and_acquire(lease, self.worker_id, **last)
                    hold.renewed = max(hold.renewed, sent)
                except QueueBusyError as err:  # nothing changed: one call at a time then
                    _log.warning("%s: the queue is busy, asking again: %s", _name(lease), err)
                    claim = False
            if not claim:
                done = self._patiently(hold, lambda: self.queue.complete(lease, **last))
            if done:
                hold.taken, hold.over = [], True
            elif done is False:
                hold.lost = True
        self._give_back(hold, None)  # forgets it (or completes it when the queue was silent)
        if done:
            self._finished_partition(lease, taken)
        return answer, sent

    def _finished_partition(self, lease: Lease, taken: list[Delivery]) -> None:
        self._acknowledged(taken)
        share = self.spec.share
        if share is not None and self.delivered.get(lease.epoch, 0) >= share:
            self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)

    def _give_back(self, hold: _Hold, timeout: float | None) -> None:
        """Acknowledge what was taken and release the lease, unless it is over or lost."""
        if not hold.lock.acquire(timeout=-1 if timeout is None else timeout):
            return
        taken: list[Delivery] = []
        try:
            if hold.ended and not (hold.over or hold.lost):
                last = hold.taken[-1].offset + 1 if hold.taken else None
                rows = sum(d.batch.num_rows for d in hold.taken)
                if self.queue.complete(hold.lease, offset=last, rows=rows, batches=len(hold.taken)):
                    taken, hold.taken = hold.taken, []
            elif not (hold.over or hold.lost):
                if hold.taken:
                    rows = sum(d.batch.num_rows for d in hold.taken)
                    offset = hold.taken[-1].offset + 1
                    if self.queue.ack(hold.lease, offset, rows, len(hold.taken)):
                        taken, hold.taken = hold.taken, []
                self.queue.release(hold.lease)
        except EngineError as err:  # it expires after its TTL instead
            _log.warning("could not give back %s: %s", _name(hold.lease), err)
        finally:
            hold.over = True
            hold.lock.release()
            with self._guard:
                self._holds.pop(hold.lease.token, None)
        self._acknowledged(taken)

    def _share_done(self, hold: _Hold) -> bool:
        """Even batches: this worker delivered its share of the epoch; give the rest back."""
        share = self.spec.share
        lease = hold.lease
        if share is None or self.delivered.get(lease.epoch, 0) < share:
            return False
        self._give_back(hold, None)
        self.queue.finish_share(self.spec.name, lease.epoch, self.worker_id)
        return True


def _check_step(step: object) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidArgumentError(f"a checkpoint id is an integer >= 0, not {step!r}")


def _name(lease: Lease) -> str:
    return f"partition {lease.partition} of epoch {lease.epoch} (job {lease.job!r})"
