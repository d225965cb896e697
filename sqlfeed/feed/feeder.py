"""The Feeder: iterate a plan's rows as Arrow, pandas or numpy batches.

>>> import sqlfeed
>>> feeder = sqlfeed.Feeder("SELECT range AS x FROM range(10)", batch_size=4, partitions=2)
>>> [len(batch) for batch in feeder]
[4, 4, 2]

Partitions are read ahead by ``readers`` threads, each into a small bounded queue, and
consumed in a fixed order, so the output order depends only on the seed (and on the
engine returning each partition's rows in the same order, which DuckDB does for scans;
PostgreSQL parallel plans may not). Memory stays near
``(readers x 3 + 1) x read batch + shuffle_buffer`` rows, never the whole result.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dialects import InvalidArgumentError
from sqlfeed.io.arrow import DEFAULT_BATCH_ROWS
from sqlfeed.io.sources import Source, connect
from sqlfeed.plans.model import Partition, Plan, fragment_order

__all__ = ["FORMATS", "Feeder", "Progress"]

FORMATS = ("arrow", "pandas", "numpy")
_QUEUE_DEPTH = 2
_DONE = object()


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives after each partition."""

    epoch: int
    partitions_done: int
    partitions_total: int
    rows: int
    """Rows read so far in this epoch."""
    partition: Partition


class Feeder:
    """Batches of a query's rows, for training loops.

    Args:
        query: a SQL SELECT, or a :class:`Plan` made by :func:`sqlfeed.plan`.
        source: where the query runs (anything :func:`sqlfeed.connect` takes).
        format: ``arrow`` (``pyarrow.RecordBatch``), ``pandas`` (``DataFrame``) or
            ``numpy`` (a dict of column name to ``numpy.ndarray``; NULLs in integer
            columns make them float with NaN, as in pandas).
        batch_size: rows per batch (the last of an epoch may be smaller unless
            ``drop_remainder``); None: batches as the database delivers them.
        shuffle_buffer: rows mixed at random before batching (0: no record shuffle).
            The partition order is shuffled too whenever this is > 0 or ``shuffle``.
        shuffle: visit the partitions in a seeded random order (default: when
            shuffle_buffer > 0).
        shuffle_window: the partition order of a ``fragments`` plan instead: 0 storage
            order, -1 a seeded shuffle of all fragments, k > 0 files shuffled and then
            fragments shuffled within windows of k (see
            :func:`sqlfeed.plans.model.fragment_order`); seeded, different every epoch.
        seed: makes the partition order and the shuffle repeatable; each epoch differs.
        readers: partitions read ahead at once, each by its own thread and connection.
        rank, world_size: this worker's static share of the partitions.
        epochs: passes over the data when iterating the feeder.
        drop_remainder: drop each epoch's last, smaller batch.
        progress: called with a :class:`Progress` after each partition.
        job: pull partitions dynamically from this job of the lease ``queue`` (created
            from the plan, epochs, seed, lease_ttl and order if it does not exist yet;
            every worker may create it). Batches never span partitions then, and there
            is no record shuffle across partitions (the partition order is shuffled).
        queue: the lease queue's URL (``sqlite:///state.db``, PostgreSQL, MySQL,
            ``memory://``) or object; default ``memory://``.
        worker_id: this worker's unique name in the job (default: host, pid, random).
        lease_ttl: seconds a lease lives without a heartbeat.
        order: hand-out order within an epoch: ``shuffle`` (seeded), ``lpt`` (largest
            first) or ``index``.
        even_batches: with ``job``, every one of ``replicas`` workers delivers the same
            number of batches per epoch, rows // (replicas x batch_size), so synchronous
            replicas stay in lockstep; the rows left over are dropped (a batch may be
            short at the end of a partition).
        replicas: the number of synchronous replicas, for ``even_batches``.
        **plan_options: for a SQL query, passed to :func:`sqlfeed.plan` (partitions,
            strategy, key, target_rows, workers, scratch, allow_unstable).
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        format: str = "arrow",
        batch_size: int | None = None,
        shuffle_buffer: int = 0,
        shuffle: bool | None = None,
        seed: int = 0,
        readers: int = 2,
        rank: int = 0,
        world_size: int = 1,
        epochs: int = 1,
        drop_remainder: bool = False,
        read_batch_rows: int = DEFAULT_BATCH_ROWS,
        progress: Callable[[Progress], None] | None = None,
        job: str | None = None,
        queue: Any = None,
        worker_id: str | None = None,
        lease_ttl: float = 60.0,
        order: str = "shuffle",
        even_batches: bool = False,
        replicas: int | None = None,
        shuffle_window: int | None = None,
        **plan_options: Any,
    ) -> None:
        if format not in FORMATS:
            raise InvalidArgumentError(
                f"format must be one of {', '.join(FORMATS)}, not {format!r}"
            )
        for value, what, lowest in (
            (readers, "readers", 1),
            (epochs, "epochs", 1),
            (world_size, "world_size", 1),
            (shuffle_buffer, "shuffle_buffer", 0),
            (read_batch_rows, "read_batch_rows", 1),
        ):
            _check_int(value, what, lowest)
        if batch_size is not None:
            _check_int(batch_size, "batch_size", 1)
        self.source: Source = connect(source)
        if isinstance(query, Plan):
            if plan_options:
                raise InvalidArgumentError(
                    f"plan options ({', '.join(plan_options)}) need a SQL query, not a Plan"
                )
            if query.dialect != self.source.dialect.name:
                raise InvalidArgumentError(
                    f"the plan is for {query.dialect}, the source is {self.source.dialect.name}"
                )
            self.plan = query
        else:
            from sqlfeed.plans.planner import plan as make_plan

            plan_options.setdefault("workers", world_size)
            self.plan = make_plan(query, self.source, **plan_options)
        self.share = self.plan.share(rank, world_size)
        self.format = format
        self.batch_size = batch_size
        self.shuffle_buffer = shuffle_buffer
        self.shuffle = shuffle_buffer > 0 if shuffle is None else shuffle
        self.shuffle_window = shuffle_window
        if shuffle_window is not None:
            fragment_order(self.share, shuffle_window, seed, 0)  # validates the window
        self.seed = seed
        self.readers = readers
        self.epochs = epochs
        self.drop_remainder = drop_remainder
        self.read_batch_rows = read_batch_rows
        self.progress = progress
        self.schema: pa.Schema = self.plan.arrow_schema() or self.source.schema(self.plan.sql)
        self.worker: Any = None
        if job is not None:
            if shuffle_buffer:
                raise InvalidArgumentError(
                    "shuffle_buffer mixes rows across partitions, which a job acknowledges one "
                    "by one: with job=..., the partition order is shuffled instead"
                )
            if world_size != 1 or rank != 0:
                raise InvalidArgumentError("rank/world_size split statically; a job splits itself")
            from sqlfeed.dispatch.queue import JobSpec, open_queue
            from sqlfeed.dispatch.worker import Worker

            lease_queue = open_queue(queue)
            rows = self.plan.rows
            if even_batches and rows is None:
                rows = self.source.count(self.plan.sql, columns=list(self.plan.columns))
            lease_queue.create_job(
                JobSpec(
                    job,
                    self.plan,
                    epochs=epochs,
                    seed=seed,
                    lease_ttl=lease_ttl,
                    order=order,
                    even_batches=even_batches,
                    replicas=replicas,
                    batch_size=batch_size if even_batches else None,
                    rows=rows if even_batches else None,
                )
            )
            self.worker = Worker(
                lease_queue, job, self.source, worker_id=worker_id, batch_size=batch_size
            )

    def __repr__(self) -> str:
        return (
            f"Feeder({self.plan.strategy}, {len(self.share)}/{self.plan.num_partitions} "
            f"partitions, format={self.format!r}, batch_size={self.batch_size})"
        )

    def __iter__(self) -> Iterator[Any]:
        if self.worker is not None:
            for delivery in self.worker.deliveries():
                yield self._convert(delivery.batch)
            return
        for epoch in range(self.epochs):
            yield from self.epoch(epoch)

    def close(self) -> None:
        """Give back a job's lease held now (dynamic mode); nothing otherwise."""
        if self.worker is not None:
            self.worker.close()

    def epoch(self, epoch: int = 0) -> Iterator[Any]:
        """The batches of one epoch (its partition order and shuffle depend on the seed)."""
        rng = np.random.default_rng([self.seed, epoch])
        order: Sequence[Partition] = [self.share[i] for i in self._positions(epoch)]
        batches = self._read(order, epoch)
        if self.shuffle_buffer:
            batches = _shuffled(batches, self.shuffle_buffer, rng)
        if self.batch_size is not None:
            batches = _rebatched(batches, self.batch_size, self.drop_remainder)
        for batch in batches:
            yield self._convert(batch)

    def partition_order(self, epoch: int = 0) -> list[int]:
        """The partition indices of ``epoch`` in the order this feeder reads them."""
        return [self.share[i].index for i in self._positions(epoch)]

    def _positions(self, epoch: int) -> list[int]:
        if self.shuffle_window is not None:
            return fragment_order(self.share, self.shuffle_window, self.seed, epoch)
        if not self.shuffle:
            return list(range(len(self.share)))
        rng = np.random.default_rng([self.seed, epoch])
        return [int(i) for i in rng.permutation(len(self.share))]

    def _convert(self, batch: pa.RecordBatch) -> Any:
        if self.format == "pandas":
            return batch.to_pandas()
        if self.format == "numpy":
            return {
                name: column.to_numpy(zero_copy_only=False)
                for name, column in zip(batch.schema.names, batch.columns, strict=True)
            }
        return batch

    def _read(self, order: Sequence[Partition], epoch: int) -> Iterator[pa.RecordBatch]:
        """Batches of ``order``'s partitions in that order, ``readers`` read ahead."""
        stop = threading.Event()
        upcoming = iter(order)
        in_flight: deque[tuple[queue.Queue[Any], threading.Thread]] = deque()

        def start_next() -> None:
            partition = next(upcoming, None)
            if partition is None:
                return
            slot: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_DEPTH)
            thread = threading.Thread(
                target=self._pump, args=(partition, slot, stop), daemon=True, name="sqlfeed-reader"
            )
            thread.start()
            in_flight.append((slot, thread))

        for _ in range(self.readers):
            start_next()
        rows = 0
        done = 0
        try:
            for partition in order:
                slot, _thread = in_flight[0]
                while True:
                    item = slot.get()
                    if item is _DONE:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    rows += item.num_rows
                    yield item
                in_flight.popleft()
                done += 1
                start_next()
                if self.progress is not None:
                    self.progress(Progress(epoch, done, len(order), rows, partition))
        finally:
            stop.set()
            for slot, thread in in_flight:
                _drain(slot)
                thread.join(timeout=10)

    def _pump(self, partition: Partition, slot: queue.Queue[Any], stop: threading.Event) -> None:
        try:
            for batch in self.source.read(
                partition.sql, schema=self.schema, batch_rows=self.read_batch_rows, stop=stop
            ):
                if not _put(slot, batch, stop):
                    return
            _put(slot, _DONE, stop)
        except BaseException as err:  # handed to the consumer, raised there
            _put(slot, err, stop)


def _put(slot: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            slot.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _drain(slot: queue.Queue[Any]) -> None:
    while True:
        try:
            slot.get_nowait()
        except queue.Empty:
            return


def _rebatched(
    batches: Iterator[pa.RecordBatch], size: int, drop_remainder: bool
) -> Iterator[pa.RecordBatch]:
    """Batches of exactly ``size`` rows (the last may be smaller unless dropped)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        while held >= size:
            merged = pa.concat_batches(pending) if len(pending) > 1 else pending[0]
            yield merged.slice(0, size)
            rest = merged.slice(size)
            pending = [rest] if rest.num_rows else []
            held = rest.num_rows
    if held and not drop_remainder:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


def _shuffled(
    batches: Iterator[pa.RecordBatch], buffer_rows: int, rng: np.random.Generator
) -> Iterator[pa.RecordBatch]:
    """Record-level shuffle through a buffer of ``buffer_rows`` rows (seeded).

    Each time the buffer holds ``buffer_rows + chunk`` rows it is permuted and ``chunk``
    rows leave; ``chunk`` is half the buffer, so each row costs O(1) work on average.
    """
    chunk = max(1, buffer_rows // 2)
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        if held >= buffer_rows + chunk:
            merged = pa.concat_batches(pending)
            mixed = merged.take(pa.array(rng.permutation(merged.num_rows)))
            out = held - buffer_rows
            yield mixed.slice(0, out)
            pending = [mixed.slice(out)]
            held = buffer_rows
    if held:
        merged = pa.concat_batches(pending) if len(pending) > 1 else pending[0]
        yield merged.take(pa.array(rng.permutation(merged.num_rows)))


def _check_int(value: object, what: str, lowest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InvalidArgumentError(f"{what} must be an integer >= {lowest}, got {value!r}")
