"""A job worker's deliveries as tf.data iterations: one iteration per epoch of the job.

Owns :class:`JobEpochs`, which decides when a delivered batch counts as taken, so that
Keras' throw-away iterators and the read-ahead that finds an epoch's end lose no batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

__all__ = ["JobEpochs"]


class JobEpochs:
    """A job worker's deliveries cut into epochs: each call of :meth:`epoch_batches` is one.

    A batch counts as taken when the next one is asked for (the Worker acknowledges it
    then). A batch handed out by an iteration that was abandoned before asking for the
    next one (Keras pulls one batch from a throw-away iterator to build a distributed
    model) was not acknowledged, so the next iteration hands it out again first. The
    first batch of the next epoch, read to find the end of this one, waits the same way.
    """

    def __init__(self, worker: Any) -> None:
        """Epochs of ``worker``'s deliveries.

        Args:
            worker: a :class:`~sqlfeed.dispatch.worker.Worker` (its ``deliveries()``).
        """
        self._deliveries: Iterator[Any] = worker.deliveries()
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
        """The record batches of the job's next epoch (an iteration of the dataset).

        Starts with the batch an earlier iteration handed out but did not see taken; ends
        at the job's next epoch, at its end, or when a newer iteration takes over.
        """
        with self._lock:
            self._generation += 1
            generation = self._generation
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
            yield delivery.batch
            with self._lock:
                if generation == self._generation and self._pending is delivery:
                    self._pending = None  # asked for the next one: taken
