"""A job worker's deliveries cut into epochs: one iteration of a dataset per epoch of the job.

Owns :class:`JobEpochs`, the one job-epoch cutter of :mod:`sqlfeed.tf` and
:mod:`sqlfeed.torch`: it decides where an epoch ends (the first delivery of the next one
is read ahead and kept for the next iteration) and when a delivered batch counts as
taken, so that Keras' throw-away iterators and the read-ahead that finds an epoch's end
lose no batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

__all__ = ["JobEpochs"]


class JobEpochs:
    """A job worker's deliveries cut into epochs.

    Each call of :meth:`epoch_deliveries` (or :meth:`epoch_batches`) is one epoch.

    A batch counts as taken when the next one is asked for (the Worker acknowledges it
    then). The first delivery of the next epoch, read to find the end of this one, is
    handed out first by the next iteration. With ``redeliver=True`` (tf.data), a batch
    handed out by an iteration that was abandoned before asking for the next one (Keras
    pulls one batch from a throw-away iterator to build a distributed model) was not
    taken either, so the next iteration hands it out again first; with False (a torch
    loop that breaks after training on it), it counts as taken.
    """

    def __init__(self, worker: Any, *, redeliver: bool = True) -> None:
        """Epochs of ``worker``'s deliveries.

        Args:
            worker: a :class:`~sqlfeed.dispatch.worker.Worker` (its ``deliveries()``).
            redeliver: hand out again a batch whose iteration was abandoned before the
                next one was asked for.
        """
        self.worker = worker
        """The job worker whose deliveries these are."""
        self._deliveries: Iterator[Any] = worker.deliveries()
        self._redeliver = redeliver
        self._pending: Any = None
        """Handed out (or read ahead) but not taken: the next iteration starts with it."""
        self._ahead: Any = None
        """The next epoch's first delivery, read to find this epoch's end, never yielded."""
        self._generation = 0
        self._lock = threading.Lock()

    def untaken(self) -> list[Any]:
        """Deliveries handed out by the worker but not to the model (read ahead)."""
        with self._lock:
            ahead = self._ahead
            return [ahead] if ahead is not None and self._pending is ahead else []

    def epoch_batches(self) -> Iterator[pa.RecordBatch]:
        """The record batches of the job's next epoch (see :meth:`epoch_deliveries`)."""
        for delivery in self.epoch_deliveries():
            yield delivery.batch

    def epoch_deliveries(self) -> Iterator[Any]:
        """The deliveries of the job's next epoch (an iteration of the dataset).

        Starts with the delivery an earlier iteration read ahead (or, with
        ``redeliver``, handed out but did not see taken); ends at the job's next epoch,
        at its end, or when a newer iteration takes over.
        """
        with self._lock:
            self._generation += 1
            generation = self._generation
            if not self._redeliver and self._pending is not self._ahead:
                self._pending = None  # handed to the loop that left: taken
        epoch = None
        while True:
            with self._lock:
                if generation != self._generation:
                    return  # a newer iteration took over
                delivery, self._pending = self._pending, None
                if delivery is None:
                    delivery = next(self._deliveries, None)  # acknowledges the last one
                if delivery is None:
                    return  # every epoch of the job is done
                self._pending = delivery
                if epoch is None:
                    epoch = delivery.epoch
                elif delivery.epoch != epoch:
                    self._ahead = delivery
                    return  # the next epoch's first batch: the next iteration's
                if delivery is self._ahead:
                    self._ahead = None
            yield delivery
            with self._lock:
                if generation == self._generation and self._pending is delivery:
                    self._pending = None  # asked for the next one: taken
