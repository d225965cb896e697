"""Lease keeping: the leases a worker holds, and every queue call about them.

A :class:`LeaseKeeper` holds up to two leases of one job: the partition being read, and
the next one, claimed ahead in a background thread (with the current one's completion, in
one queue call). What it knows of each (renewed when, lost or not, batches taken but not
yet acknowledged) is kept per lease in a :class:`Hold`: a heartbeat that fails for one
lease never touches another. A queue that is briefly busy or unreachable is asked again,
never taken for lost.

The keeper does not read partitions: the worker (:mod:`sqlfeed.dispatch.worker`) reads
them, notes in a hold what its consumer took, and decides when that is acknowledged; the
keeper stores the acknowledgements, completes the partition or gives the lease back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from sqlfeed.dialects import EngineError
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, QueueBusyError, Wait

__all__ = ["STOPPED", "Hold", "LeaseKeeper", "Taken"]

_log = logging.getLogger("sqlfeed.dispatch")
_R = TypeVar("_R")
STOPPED = object()
""":meth:`LeaseKeeper.next`'s answer when the worker was asked to stop while waiting for
the queue (or while claiming: the lease is given back at once)."""
_UNASKED = object()
"""``_complete``'s answer when it did not claim the next lease in the same round trip."""


class Taken(Protocol):
    """What the keeper needs of a batch the consumer took: its place and its rows."""

    @property
    def offset(self) -> int:
        """The batch's position within its partition (0-based)."""
        ...

    @property
    def batch(self) -> pa.RecordBatch:
        """The batch (its number of rows is acknowledged)."""
        ...


T = TypeVar("T", bound=Taken)


class Hold(Generic[T]):
    """One lease a worker holds, and what it knows of it."""

    def __init__(self, lease: Lease, renewed: float) -> None:
        self.lease = lease
        self.renewed = renewed
        """``time.monotonic()`` when the last successful renewal was sent."""
        self.lost = False
        """The queue said the lease is no longer ours (taken over, or the job reset)."""
        self.over = False
        """Completed or given back: nothing more to do with it."""
        self.taken: list[T] = []
        """Taken by the consumer, not acknowledged yet."""
        self.since = 0.0
        """When the oldest of :attr:`taken` was taken."""
        self.refused = False
        """The consumer could not take the batch in hand (``Worker.refuse``)."""
        self.lock = threading.Lock()
        """Serializes acknowledging, completing and giving back (main thread, close())."""
        self.ended = False
        """Every batch was taken: giving it back completes it."""

    def pending(self) -> dict[str, Any]:
        """The acknowledgement :attr:`taken` calls for: ``offset``, ``rows`` and ``batches``.

        ``offset``: the next batch's, None when nothing was taken.
        """
        taken = self.taken
        return {
            "offset": taken[-1].offset + 1 if taken else None,
            "rows": sum(t.batch.num_rows for t in taken),
            "batches": len(taken),
        }


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


def _lease_name(lease: Lease) -> str:
    """A lease as log lines name it."""
    return f"partition {lease.partition} of epoch {lease.epoch} (job {lease.job!r})"


class LeaseKeeper(Generic[T]):
    """Claims a job's leases, heartbeats them, acknowledges, completes and gives them back.

    Heartbeats start at once, in a daemon thread, every third of the job's lease TTL, and
    stop with :meth:`close` (or when :attr:`finished` is set).

    Args:
        queue: the job's lease queue.
        spec: the job.
        worker_id: the worker's name in the job.
        stop: set when the worker must stop at its next safe point: claims are no longer
            asked for, and a lease claimed meanwhile is given back at once.
        on_acked: called with the batches whose acknowledgement was stored (in the thread
            that stored it).
        on_completed: called with a lease once the queue stored its completion.
    """

    def __init__(
        self,
        queue: LeaseQueue,
        spec: JobSpec,
        worker_id: str,
        *,
        stop: threading.Event,
        on_acked: Callable[[list[T]], None],
        on_completed: Callable[[Lease], None],
        partial_acks: bool = True,
    ) -> None:
        self.queue = queue
        self.spec = spec
        self.worker_id = worker_id
        self.stop = stop
        self.on_acked = on_acked
        self.on_completed = on_completed
        self.partial_acks = partial_acks
        """False: what was taken of a partition is acknowledged only with its completion
        (a lease given back before is read again from its first row)."""
        self.ahead: Future[Any] | None = None
        """The claim running in the background (:meth:`claim_ahead`), if any."""
        self._holds: dict[str, Hold[T]] = {}
        self._guard = threading.Lock()
        self.finished = threading.Event()
        """No more heartbeats: every epoch is done, or the worker is closed."""
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="sqlfeed-heartbeat")
        self._beat.start()

    def close(self) -> None:
        """Stop heartbeating (the leases still held expire after their TTL)."""
        self.finished.set()

    def holds(self, epoch: int, partition: int) -> list[Hold[T]]:
        """The holds on ``partition`` of ``epoch`` (none, or one)."""
        with self._guard:
            return [
                h
                for h in self._holds.values()
                if (h.lease.epoch, h.lease.partition) == (epoch, partition)
            ]

    # -- claiming -----------------------------------------------------------------------

    def claim_ahead(self, finished: Hold[T] | None) -> None:
        """Run :meth:`next` in a background thread; :meth:`take_ahead` gets its answer."""
        self.ahead = _in_background(partial(self.next, finished))

    def take_ahead(self) -> Future[Any] | None:
        """The claim started by :meth:`claim_ahead`, if any, forgotten here."""
        ahead, self.ahead = self.ahead, None
        return ahead

    def next(self, finished: Hold[T] | None) -> Hold[T] | Wait | object | None:
        """Complete ``finished`` (read to its end) and claim the next lease.

        Both in one round trip when the queue can: the lease is held (heartbeated) from then
        on, or given back at once when the worker was stopped meanwhile.

        Returns:
            the new hold; a :class:`Wait`; None when every epoch is done; or
            :data:`STOPPED`.
        """
        got: object = _UNASKED
        if finished is not None:
            got, asked = self._complete(finished, claim=not self.stop.is_set())
        if got is _UNASKED:
            got, asked = self._acquire()
        if not isinstance(got, Lease):
            return got
        hold: Hold[T] = Hold(got, asked)
        with self._guard:
            if not self.stop.is_set():
                self._holds[got.token] = hold
                return hold
        self.give_back(hold, None)  # close() or SIGTERM came while claiming
        return STOPPED

    def _acquire(self) -> tuple[Lease | Wait | object | None, float]:
        """The queue's answer and when it was asked (the lease runs from then on).

        A busy queue is asked again until it answers or the worker is stopped.
        """
        pause = 0.05
        while not self.stop.is_set():
            asked = time.monotonic()
            try:
                return self.queue.acquire(self.spec.name, self.worker_id), asked
            except QueueBusyError as err:
                _log.warning("the queue is busy, asking again: %s", err)
                self.stop.wait(pause)
                pause = min(pause * 2, 2.0)
        return STOPPED, 0.0

    # -- heartbeats and trust -----------------------------------------------------------

    def _heartbeat(self) -> None:
        interval = max(self.spec.lease_ttl / 3, 0.05)
        while not self.finished.wait(interval):
            with self._guard:
                holds = list(self._holds.values())
            for hold in holds:
                if not (hold.over or hold.lost):
                    try:
                        self._renew(hold)
                    except Exception:  # a bug; heartbeats must go on for the other leases
                        _log.exception("heartbeat of %s", _lease_name(hold.lease))

    def _renew(self, hold: Hold[T]) -> bool | None:
        """Renew one lease: True, False when it is lost, None when the queue did not say."""
        sent = time.monotonic()
        try:
            held = self.queue.heartbeat(hold.lease)
        except EngineError as err:  # busy, or down: the lease is not known to be lost
            _log.warning("heartbeat of %s failed, trying again: %s", _lease_name(hold.lease), err)
            return None
        if held:
            hold.renewed = max(hold.renewed, sent)
        elif not hold.over:
            hold.lost = True
        return held

    def trusted(self, hold: Hold[T]) -> bool:
        """Whether the lease is certainly ours before handing out a batch.

        A lease is trusted for half its TTL after the last renewal was *sent*, measured
        on this process's monotonic clock (a duration, so clock skew does not matter);
        after that it is renewed first. A worker that stalled past its TTL (swapped out,
        a long GC) thus never delivers from a lease another worker has taken over. While
        the queue does not answer, the renewal is tried again until the lease would have
        expired.
        """
        ttl = self.spec.lease_ttl
        while not (hold.lost or hold.over or self.stop.is_set()):
            if time.monotonic() - hold.renewed < ttl / 2:
                return True
            held = self._renew(hold)
            if held is not None:
                return held
            if time.monotonic() - hold.renewed >= ttl:
                return False  # it may have expired meanwhile: not ours to deliver from
            self.stop.wait(min(0.2, ttl / 10))
        return False

    def _patiently(self, hold: Hold[T], call: Callable[[], _R]) -> _R | None:
        """``call()``, asked again while the queue is busy and the lease may still be ours.

        None when it never answered.
        """
        while True:
            sent = time.monotonic()
            try:
                answer = call()
            except QueueBusyError as err:
                if time.monotonic() - hold.renewed >= self.spec.lease_ttl:
                    _log.warning("%s: the queue did not answer: %s", _lease_name(hold.lease), err)
                    return None
                time.sleep(min(0.2, self.spec.lease_ttl / 10))
                continue
            if answer:
                hold.renewed = max(hold.renewed, sent)
            return answer

    # -- acknowledging, completing, giving back -----------------------------------------

    def acknowledge(self, hold: Hold[T]) -> bool:
        """Store the acknowledgements of the batches taken; False when the lease is lost."""
        with hold.lock:
            taken = hold.taken
            if hold.over or hold.lost or not taken:
                return not (hold.lost or hold.over)
            rows = sum(t.batch.num_rows for t in taken)
            offset = taken[-1].offset + 1
            held = self._patiently(
                hold, lambda: self.queue.ack(hold.lease, offset, rows, len(taken))
            )
            if held:
                hold.taken = []
            elif held is False:
                hold.lost = True
        if held:
            self.on_acked(taken)
        return bool(held)

    def _complete(self, hold: Hold[T], claim: bool) -> tuple[Any, float]:
        """Every batch was taken: acknowledge the rest and complete, in one round trip.

        With ``claim``, claim the next lease in it too. Returns the claim's answer
        (``_UNASKED``: not claimed) and when it was sent.
        """
        lease, answer, sent = hold.lease, _UNASKED, time.monotonic()
        with hold.lock:
            if hold.over or hold.lost:
                return answer, sent
            taken, last = hold.taken, hold.pending()
            done: bool | None = None
            if claim:
                try:
                    done, answer = self.queue.complete_and_acquire(lease, self.worker_id, **last)
                    hold.renewed = max(hold.renewed, sent)
                except QueueBusyError as err:  # nothing changed: one call at a time then
                    _log.warning("%s: the queue is busy, asking again: %s", _lease_name(lease), err)
                    claim = False
            if not claim:
                done = self._patiently(hold, lambda: self.queue.complete(lease, **last))
            if done:
                hold.taken, hold.over = [], True
            elif done is False:
                hold.lost = True
        self.give_back(hold, None)  # forgets it (or completes it when the queue was silent)
        if done:
            self.on_acked(taken)
            self.on_completed(lease)
        return answer, sent

    def give_back(self, hold: Hold[T], timeout: float | None) -> None:
        """Acknowledge what was taken and release the lease, unless it is over or lost.

        A lease whose every batch was taken (:attr:`Hold.ended`) is completed instead. Best
        effort: a lease the queue cannot be told about expires after its TTL. ``timeout``:
        how long to wait for the hold's lock (None: as long as it takes).
        """
        if not hold.lock.acquire(timeout=-1 if timeout is None else timeout):
            return
        taken: list[T] = []
        try:
            if hold.ended and not (hold.over or hold.lost):
                if self.queue.complete(hold.lease, **hold.pending()):
                    taken, hold.taken = hold.taken, []
            elif not (hold.over or hold.lost):
                if hold.taken and self.partial_acks:
                    last = hold.pending()
                    if self.queue.ack(hold.lease, last["offset"], last["rows"], last["batches"]):
                        taken, hold.taken = hold.taken, []
                self.queue.release(hold.lease)
        except EngineError as err:  # it expires after its TTL instead
            _log.warning("could not give back %s: %s", _lease_name(hold.lease), err)
        finally:
            hold.over = True
            hold.lock.release()
            with self._guard:
                self._holds.pop(hold.lease.token, None)
        self.on_acked(taken)

    def give_back_all(self, timeout: float | None) -> None:
        """:meth:`give_back` every lease held.

        A claim running in the background is waited for first (``timeout``), so the lease it
        brings is given back too.
        """
        ahead = self.ahead
        if ahead is not None:
            wait([ahead], timeout)
        with self._guard:
            holds = list(self._holds.values())
        for hold in holds:
            self.give_back(hold, timeout)
