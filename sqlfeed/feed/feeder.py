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

This Feeder reads its static share of the plan, or the partitions a lease queue hands
out (:class:`LeasedPartitions`); :class:`sqlfeed.Feeder` (in :mod:`sqlfeed.dispatch`)
adds the ``job=...`` options that build such a stream.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Unpack

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError, NotImplementedYetError
from sqlfeed.errors import UnequalSharesWarning
from sqlfeed.feed.batches import (
    FORMATS,
    READ_AHEAD_BATCHES,
    convert,
    read_ahead,
    rebatch,
    shuffle_windows,
    skip_rows,
)
from sqlfeed.feed.options import (
    FeederKeywords,
    ReadOptions,
    check_int,
    plan_options_of,
    read_options,
    resolve_plan,
)
from sqlfeed.feed.snapshots import ConsistentRead, check_snapshot_option, consistent_reads
from sqlfeed.feed.state import Cursor, Position, check_state, feed_state
from sqlfeed.io import Source, connect
from sqlfeed.io.arrow import without_hints
from sqlfeed.plans.model import Partition, Plan, fragment_order
from sqlfeed.plans.spans import ReadUnit, read_units

__all__ = [
    "FORMATS",
    "LeasedBatch",
    "LeasedPartitions",
    "PartitionFeeder",
    "Progress",
    "UnequalSharesWarning",
    "unequal_shares",
]


def unequal_shares(partitions: int, world_size: int) -> str:
    """How ``partitions`` split over ``world_size`` ranks, and what evens them.

    E.g. ``7 partitions over 3 ranks are unequal shares (3/2/2)``.
    """
    shares = "/".join(str(len(range(r, partitions, world_size))) for r in range(world_size))
    lower = partitions // world_size * world_size
    multiples = " or ".join(str(m) for m in (lower, lower + world_size) if m > 0)
    return (
        f"{partitions} partitions over {world_size} ranks are unequal shares ({shares}): "
        f"synchronous replicas would run different numbers of steps; use a partition "
        f"count divisible by {world_size} ({multiples}) or even batches"
    )


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives after each partition."""

    epoch: int
    partitions_done: int
    partitions_total: int
    rows: int
    """Rows read so far in this epoch."""
    partition: Partition
    """The partition just read (adjacent partitions merged into one query: that query,
    see ``merge_reads``)."""
    queries: int = 0
    """Queries run so far in this epoch (fewer than ``partitions_done`` when adjacent
    partitions were read by one query)."""


class LeasedBatch(Protocol):
    """One batch of a leased partition (e.g. a :class:`sqlfeed.dispatch.worker.Delivery`)."""

    @property
    def batch(self) -> pa.RecordBatch:
        """The record batch."""
        ...


class LeasedPartitions(Protocol):
    """Partitions handed out one at a time by a lease queue (e.g. the dispatch Worker).

    Its batches are already cut to size, partition by partition, epoch after epoch.
    """

    def deliveries(self) -> Iterator[LeasedBatch]:
        """Every batch of every partition leased, until the job is done."""
        ...

    def close(self) -> None:
        """Give back the lease held now."""
        ...


class PartitionFeeder:
    """Batches of a query's rows, read from the partitions it is given (internal).

    The static share of a plan, or the leased partitions of a job: :class:`sqlfeed.Feeder`
    (:mod:`sqlfeed.dispatch.feeder`) is the one public Feeder, this class with the
    ``job=...`` options; its docstring lists every option. ``sqlfeed.feed.Feeder`` is a
    deprecated name of this class.

    Args:
        query: a SQL SELECT, or a :class:`Plan` made by :func:`sqlfeed.plan`.
        source: where the query runs (anything :func:`sqlfeed.connect` takes).
        format: ``arrow`` (``pyarrow.RecordBatch``), ``pandas`` (``DataFrame``) or
            ``numpy`` (a dict of column name to ``numpy.ndarray``; NULLs in integer
            columns make them float with NaN, as in pandas).
        batch_size: rows per batch (see :class:`~sqlfeed.feed.options.ReadOptions`).
        rank, world_size: this worker's static share of the partitions.
        leased: dynamic mode: called once with the plan and the connected source, it
            returns the :class:`LeasedPartitions` that iterating the feeder reads instead
            of the static share (:class:`sqlfeed.Feeder` builds one from ``job=...``).
        state: resume from what :meth:`state_dict` returned (see :meth:`load_state_dict`).
        read: the read options as one object, instead of their keywords.
        **options: the :class:`~sqlfeed.feed.options.ReadOptions` keywords
            (``shuffle_buffer``, ``shuffle``, ``shuffle_window``, ``seed``, ``readers``,
            ``read_batch_rows``, ``epochs``, ``drop_remainder``, ``merge_reads``,
            ``snapshot``, ``progress``) and, for a SQL query, the
            :class:`~sqlfeed.feed.options.PlanOptions` of :func:`sqlfeed.plan`.
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        format: str = "arrow",
        batch_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        leased: Callable[[Plan, Source], LeasedPartitions] | None = None,
        state: Mapping[str, Any] | None = None,
        read: ReadOptions | None = None,
        **options: Unpack[FeederKeywords],
    ) -> None:
        if format not in FORMATS:
            raise InvalidArgumentError(
                f"format must be one of {', '.join(FORMATS)}, not {format!r}"
            )
        self.read = read_options(read, batch_size, options)
        check_int(world_size, "world_size", 1)
        plan_options = plan_options_of(options, [ReadOptions], own=_OWN)
        self.source: Source = connect(source)
        self.plan = resolve_plan(
            query, self.source, owner=self, default_workers=world_size, **plan_options
        )  # a plan made here: its auto-materialized table goes with this Feeder
        self.share = self.plan.share(rank, world_size)
        self._rank, self._world_size = rank, world_size
        if leased is None and self.plan.num_partitions % world_size:
            warnings.warn(
                unequal_shares(self.plan.num_partitions, world_size)
                + " (a job with even_batches=True, replicas=world_size)",
                UnequalSharesWarning,
                stacklevel=2,
            )
        self.format = format
        if self.read.shuffle_window is not None:  # validates the window
            fragment_order(self.share, self.read.shuffle_window, self.read.seed, 0)
        check_snapshot_option(self.read.snapshot, self.plan.dialect)
        self.queries = 0
        """Partition queries this feeder ran (all epochs)."""
        self.read_schema: pa.Schema = self.plan.arrow_schema() or self.source.schema(self.plan.sql)
        """The plan's schema with the reader hints its partitions are read by."""
        self.schema: pa.Schema = without_hints(self.read_schema)
        """The schema of every batch (the reader hints left out)."""
        self.worker: LeasedPartitions | None = (
            None if leased is None else leased(self.plan, self.source)
        )
        """Dynamic mode: the leased partitions read instead of the static share."""
        self._cursor: Cursor | None = None
        self._resume: Position | None = None
        if state is not None:
            self.load_state_dict(state)

    # The read options, as the attributes they were before they were one object.
    batch_size = property(lambda self: self.read.batch_size, doc="``read.batch_size``")
    shuffle_buffer = property(lambda self: self.read.shuffle_buffer, doc="``read.shuffle_buffer``")
    shuffle = property(lambda self: self.read.shuffles, doc="``read.shuffles``")
    shuffle_window = property(lambda self: self.read.shuffle_window, doc="``read.shuffle_window``")
    seed = property(lambda self: self.read.seed, doc="``read.seed``")
    readers = property(lambda self: self.read.readers, doc="``read.readers``")
    epochs = property(lambda self: self.read.epochs, doc="``read.epochs``")
    drop_remainder = property(lambda self: self.read.drop_remainder, doc="``read.drop_remainder``")
    read_batch_rows = property(
        lambda self: self.read.read_batch_rows, doc="``read.read_batch_rows``"
    )
    progress = property(lambda self: self.read.progress, doc="``read.progress``")
    merge_reads = property(lambda self: self.read.merge_reads, doc="``read.merge_reads``")
    snapshot = property(lambda self: self.read.snapshot, doc="``read.snapshot``")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.plan.strategy}, "
            f"{len(self.share)}/{self.plan.num_partitions} partitions, "
            f"format={self.format!r}, batch_size={self.read.batch_size})"
        )

    def __iter__(self) -> Iterator[Any]:
        if self.worker is not None:
            for delivery in self.worker.deliveries():
                yield convert(delivery.batch, self.format)
            return
        first = self._resume.epoch if self._resume is not None else 0
        for epoch in range(first, self.read.epochs):
            yield from self.epoch(epoch)

    def close(self) -> None:
        """Give back a job's lease held now (dynamic mode); nothing otherwise."""
        if self.worker is not None:
            self.worker.close()

    def epoch(self, epoch: int = 0) -> Iterator[Any]:
        """The batches of one epoch (its partition order and shuffle depend on the seed).

        After :meth:`load_state_dict` of a position in this epoch, the rest of it.
        """
        order: Sequence[Partition] = [self.share[i] for i in self._positions(epoch)]
        start = Position(epoch)
        if self._resume is not None and self._resume.epoch == epoch:
            start, self._resume = self._resume, None
        cursor = Cursor(start, [p.index for p in order], self.read.shuffle_buffer or 1)
        self._cursor = cursor
        rest = order[start.partitions_done :]
        with consistent_reads(
            self.source, self.plan, len(rest), self.read.snapshot, self.read.readers
        ) as reading:
            yield from self._read_epoch(epoch, start, cursor, len(order), rest, reading)
        cursor.finished = True

    def _read_epoch(
        self,
        epoch: int,
        start: Position,
        cursor: Cursor,
        partitions: int,
        rest: Sequence[Partition],
        reading: ConsistentRead,
    ) -> Iterator[Any]:
        """The batches of ``rest`` read inside ``reading``'s snapshot.

        ``rest``: the epoch's partitions after ``start``. The read-ahead stops before the
        snapshot is let go.
        """
        readers = reading.cap(self.read.readers)
        units = self._units(rest, readers)

        def report(done: int, rows: int, partition: Partition) -> None:
            cursor.partition_read(rows, units[done - 1].count)
            self.queries += 1
            if self.read.progress is not None:
                parts = start.partitions_done + cursor.counts[-1]
                self.read.progress(
                    Progress(epoch, parts, partitions, cursor.base + rows, partition, done)
                )

        batches = ahead = read_ahead(
            reading.source,
            [unit.partition for unit in units],
            schema=self.read_schema,
            readers=readers,
            batch_rows=self.read.read_batch_rows,
            on_partition=report,
            ordered=True,
        )
        if start.offset:
            batches = skip_rows(batches, start.offset)
        if self.read.shuffle_buffer:
            window = self.read.shuffle_buffer
            batches = shuffle_windows(
                batches,
                window,
                lambda w: np.random.default_rng([self.read.seed, epoch, w]),
                first_window=start.start // window,
                skip=start.rows - start.start,
            )
        if self.read.batch_size is not None:
            batches = rebatch(batches, self.read.batch_size, self.read.drop_remainder)
        try:
            for batch in batches:
                cursor.delivered += batch.num_rows
                yield convert(batch, self.format)
        finally:
            stop_reading = getattr(ahead, "close", None)  # a generator: its readers stop,
            if stop_reading is not None:  # and leave the snapshot, before it is let go
                stop_reading()

    def _units(self, order: Sequence[Partition], readers: int) -> list[ReadUnit]:
        """The queries that read ``order``: adjacent spans merged (``merge_reads``)."""
        if not self.read.merge_reads:
            return [ReadUnit(partition, 1) for partition in order]
        if self.source.parallel_read:  # one query already runs on every core
            return read_units(order, 1)
        # A reader reads its next query while the consumer takes the one before, so that
        # query must fit its read-ahead.
        return read_units(order, readers, max_rows=READ_AHEAD_BATCHES * self.read.read_batch_rows)

    # -- resuming -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this feed stands: a small JSON-able dict to save with the model checkpoint.

        It holds the plan's fingerprint, the seed, the share and shuffle options, the
        epoch, the rows delivered in it, and where reading resumes (partitions done, rows
        into the next one): see :mod:`sqlfeed.feed.state`. Take it between batches: it
        counts every batch handed out so far.

        Raises:
            NotImplementedYetError: a job's feed (its position is the job's, in the queue).
        """
        return self.state_at()

    @property
    def reading(self) -> tuple[int, int] | None:
        """``(epoch, rows delivered)`` of the epoch being read (the latest begun), or None."""
        if self._cursor is None:
            return None
        return self._cursor.epoch, self._cursor.delivered

    def state_at(self, rows: int | None = None, epoch: int | None = None) -> dict[str, Any]:
        """The state after ``rows`` rows of the epoch being read (default: as delivered).

        For consumers that run behind the feed (a prefetching ``tf.data`` pipeline): the
        rows must have been read already, in the latest epoch begun (``epoch`` checks it).

        Raises:
            InvalidArgumentError: ``rows`` is not in the epoch being read.
        """
        if self.worker is not None:
            raise NotImplementedYetError(
                "a job's feed has no state of its own: its progress is in the queue (record "
                "checkpoints with Worker.checkpoint and rewind the job instead)"
            )
        cursor = self._cursor
        if rows is None and epoch is None:
            position = cursor.position() if cursor is not None else self._resume or Position(0)
            return feed_state(self._identity(), position)
        if cursor is None or (epoch is not None and epoch != cursor.epoch):
            if rows == 0 and epoch is not None:
                return feed_state(self._identity(), Position(epoch))
            raise InvalidArgumentError(f"epoch {epoch} is not the epoch being read")
        if rows is None or not 0 <= rows <= cursor.delivered:
            raise InvalidArgumentError(
                f"rows must be between 0 and the {cursor.delivered} rows read so far, got {rows!r}"
            )
        return feed_state(self._identity(), cursor.position(rows))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (from :meth:`state_dict`, maybe through JSON).

        The next iteration (``for batch in feeder``, or :meth:`epoch` of the saved epoch)
        delivers exactly the rows the uninterrupted run would have delivered after that
        point, in the same order. It re-reads only the partitions of the shuffle window
        the consumer was in (without a shuffle: the partition it was in), from their
        start, dropping what was delivered already.

        Raises:
            InvalidArgumentError: the state is not a feed state, or one of another plan,
                seed, share or shuffle options.
            NotImplementedYetError: a job's feed.
        """
        if self.worker is not None:
            self.state_at()  # raises: a job's feed has no state of its own
        self._resume = check_state(state, self._identity(), self.partition_order)
        self._cursor = None

    def _identity(self) -> dict[str, Any]:
        """What a state must match to be loaded: the rows and their order depend on it."""
        return {
            "plan": self.plan.fingerprint,
            "seed": self.read.seed,
            "rank": self._rank,
            "world_size": self._world_size,
            "shuffle_buffer": self.read.shuffle_buffer,
            "shuffle": self.read.shuffles,
            "shuffle_window": self.read.shuffle_window,
        }

    def partition_order(self, epoch: int = 0) -> list[int]:
        """The partition indices of ``epoch`` in the order this feeder reads them."""
        return [self.share[i].index for i in self._positions(epoch)]

    def _positions(self, epoch: int) -> list[int]:
        if self.read.shuffle_window is not None:
            return fragment_order(self.share, self.read.shuffle_window, self.read.seed, epoch)
        if not self.read.shuffles:
            return list(range(len(self.share)))
        rng = np.random.default_rng([self.read.seed, epoch])
        return [int(i) for i in rng.permutation(len(self.share))]


_OWN = ("format", "batch_size", "rank", "world_size", "leased", "state", "read")
"""The Feeder's own keywords (for the "did you mean" hint of an unknown one)."""


def __getattr__(name: str) -> Any:
    """``Feeder``: the deprecated name of :class:`PartitionFeeder` (one release)."""
    if name == "Feeder":
        warnings.warn(
            "sqlfeed.feed.feeder.Feeder is now sqlfeed.feed.feeder.PartitionFeeder (internal); "
            "use sqlfeed.Feeder, the one public Feeder (static and job mode)",
            DeprecationWarning,
            stacklevel=2,
        )
        return PartitionFeeder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
