"""Batch machinery shared by the Feeder and the job workers: read-ahead, shuffle, rebatch, convert.

Every function streams: it holds a bounded number of rows, never a whole partition or
result. Partitions are read ahead by threads, each into a small bounded queue, and their
batches consumed in a fixed order (:func:`read_ahead`); :func:`shuffle_rows` mixes rows
through a seeded buffer; :func:`rebatch` cuts exact-size batches; :func:`convert` turns an
Arrow batch into the requested :data:`FORMATS`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sqlfeed.io import Source
from sqlfeed.io.views import plain
from sqlfeed.plans.model import Partition

__all__ = [
    "FORMATS",
    "READ_AHEAD_BATCHES",
    "convert",
    "read_ahead",
    "rebatch",
    "shuffle_rows",
    "shuffle_windows",
    "skip_rows",
]

FORMATS = ("arrow", "pandas", "numpy")
"""What a Feeder yields: ``pyarrow.RecordBatch``, pandas ``DataFrame``, dict of numpy arrays."""

READ_AHEAD_BATCHES = 2
"""Batches each reader of :func:`read_ahead` holds ahead of the consumer."""
_DONE = object()


def convert(batch: pa.RecordBatch, format: str) -> Any:
    """``batch`` in ``format`` (one of :data:`FORMATS`).

    Args:
        batch: the Arrow batch.
        format: ``arrow`` (returned as is), ``pandas`` (a ``DataFrame``) or ``numpy`` (a
            dict of column name to ``numpy.ndarray``; NULLs in integer columns make them
            float with NaN, as in pandas).

    Returns:
        The converted batch.
    """
    if format == "pandas":
        return batch.to_pandas()
    if format == "numpy":
        return {
            name: column.to_numpy(zero_copy_only=False)
            for name, column in zip(batch.schema.names, batch.columns, strict=True)
        }
    return batch


def read_ahead(
    source: Source,
    order: Sequence[Partition],
    *,
    schema: pa.Schema,
    readers: int,
    batch_rows: int,
    on_partition: Callable[[int, int, Partition], None] | None = None,
    ordered: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Batches of ``order``'s partitions in that order, ``readers`` partitions read ahead.

    ``readers`` threads read the partitions in turn (thread ``i`` reads partitions ``i``,
    ``i + readers``, ...), each into a queue of :data:`READ_AHEAD_BATCHES` batches, and
    starts its next one when the consumer is done with its last: at most ``readers``
    partitions are read at once. A thread lives for the whole read, so a source that keeps
    a connection per thread (PostgreSQL, SQLite's ADBC reader) opens ``readers`` of them,
    not one per partition. Closing the iterator stops and joins the threads. An error of
    a reader is raised here, when the consumer reaches that partition.

    Args:
        source: where the partitions' queries run.
        order: the partitions, in the order their batches are yielded.
        schema: the Arrow schema every batch is conformed to.
        readers: partitions read at once (>= 1).
        batch_rows: rows per batch read from the database.
        on_partition: called after each partition with (partitions done, rows yielded so
            far, that partition).
        ordered: ask the engine for the same row order on every read of a partition (so
            a feed can resume inside one, see :meth:`sqlfeed.io.Source.read`).

    Yields:
        The partitions' record batches.
    """
    stop = threading.Event()
    readers = max(1, min(readers, len(order)))
    lanes = [_Lane() for _ in range(readers)]
    threads = [
        threading.Thread(
            target=_read_lane,
            args=(source, order[i::readers], schema, batch_rows, lanes[i], stop, ordered),
            daemon=True,
            name="sqlfeed-reader",
        )
        for i in range(readers)
    ]
    for thread in threads:
        thread.start()
    rows = 0
    try:
        for done, partition in enumerate(order, start=1):
            lane = lanes[(done - 1) % readers]
            slot = lane.slots.get()
            while True:
                item = slot.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                rows += item.num_rows
                yield item
            lane.go.release()  # that reader may start its next partition
            if on_partition is not None:
                on_partition(done, rows, partition)
    finally:
        stop.set()
        for lane in lanes:
            lane.go.release()
            while not lane.slots.empty():
                _drain(lane.slots.get_nowait())
        for thread in threads:
            thread.join(timeout=10)


class _Lane:
    """What the consumer and one reader thread exchange.

    The queue of each partition the thread reads (in its order), and the go-ahead to start
    the next one.
    """

    def __init__(self) -> None:
        self.slots: queue.Queue[queue.Queue[Any]] = queue.Queue()
        self.go = threading.Semaphore(1)


def _read_lane(
    source: Source,
    partitions: Sequence[Partition],
    schema: pa.Schema,
    batch_rows: int,
    lane: _Lane,
    stop: threading.Event,
    ordered: bool,
) -> None:
    for partition in partitions:
        lane.go.acquire()
        if stop.is_set():
            return
        slot: queue.Queue[Any] = queue.Queue(maxsize=READ_AHEAD_BATCHES)
        lane.slots.put(slot)
        _pump(source, partition, schema, batch_rows, slot, stop, ordered)


def _pump(
    source: Source,
    partition: Partition,
    schema: pa.Schema,
    batch_rows: int,
    slot: queue.Queue[Any],
    stop: threading.Event,
    ordered: bool,
) -> None:
    try:
        reads = source.read(
            partition.sql,
            schema=schema,
            batch_rows=batch_rows,
            stop=stop,
            ordered=ordered,
            rows=partition.estimated_rows,
        )
        for batch in reads:
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


def rebatch(
    batches: Iterator[pa.RecordBatch], size: int, drop_remainder: bool = False
) -> Iterator[pa.RecordBatch]:
    """Batches of exactly ``size`` rows (the last may be smaller unless dropped).

    Args:
        batches: record batches of any sizes (empty ones are skipped).
        size: rows per output batch (>= 1).
        drop_remainder: drop the last batch when it has fewer than ``size`` rows.

    Yields:
        The rows of ``batches`` in order, cut into ``size``-row batches: slices of the
        input where a batch holds them (no copy), else the held rows topped up with the
        head of the next batch (``size`` rows copied, not the whole next batch).
    """
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        count = batch.num_rows
        offset = 0
        if held and count:
            offset = min(size - held, count)
            pending.append(batch.slice(0, offset))
            held += offset
            if held < size:
                continue
            yield pa.concat_batches(pending)
            pending, held = [], 0
        while count - offset >= size:
            yield batch.slice(offset, size)
            offset += size
        if offset < count:
            pending.append(batch.slice(offset))
            held = count - offset
    if held and not drop_remainder:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


def shuffle_rows(
    batches: Iterator[pa.RecordBatch], buffer_rows: int, rng: np.random.Generator
) -> Iterator[pa.RecordBatch]:
    """Record-level shuffle through a buffer of ``buffer_rows`` rows (seeded).

    Each time the buffer holds ``buffer_rows + chunk`` rows it is permuted and ``chunk``
    rows leave; ``chunk`` is half the buffer, so each row costs O(1) work on average.

    Args:
        batches: the record batches to mix (empty ones are skipped).
        buffer_rows: rows held back and mixed (>= 1).
        rng: the random generator (seeded by the caller, for repeatable orders).

    Yields:
        The same rows in a random order, in batches of varying sizes.
    """
    chunk = max(1, buffer_rows // 2)
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(plain(batch))  # view types have no take kernel
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


def skip_rows(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` without their first ``rows`` rows (read, then dropped).

    Args:
        batches: record batches of any sizes.
        rows: rows to drop at the start (>= 0).

    Yields:
        The remaining rows, in order.
    """
    for batch in batches:
        if rows >= batch.num_rows:
            rows -= batch.num_rows
            continue
        yield batch.slice(rows) if rows else batch
        rows = 0


def shuffle_windows(
    batches: Iterator[pa.RecordBatch],
    window_rows: int,
    rng_of: Callable[[int], np.random.Generator],
    *,
    first_window: int = 0,
    skip: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Record-level shuffle in windows: every ``window_rows`` rows are permuted together.

    Window ``w`` holds rows ``[w x window_rows, (w + 1) x window_rows)`` of the stream (the
    last one fewer) and is permuted by ``rng_of(w)``, so where a row goes depends only on
    its window, never on how the rows were cut into batches: a feed resumed at a window's
    first row (``first_window``), dropping the ``skip`` rows of that window it delivered
    already, yields exactly what the uninterrupted stream yields from there.

    Args:
        batches: the record batches to mix, starting at window ``first_window``'s first row.
        window_rows: rows per window (>= 1).
        rng_of: the seeded random generator of a window, from its index.
        first_window: the index of the first window of ``batches``.
        skip: rows of the first (permuted) window to drop.

    Yields:
        The same rows, each window's in a random order, one batch per window.
    """
    pending: list[pa.RecordBatch] = []
    held = 0
    window = first_window

    def mix() -> pa.RecordBatch:
        nonlocal pending, held, window, skip
        merged = pa.concat_batches(pending) if len(pending) > 1 else pending[0]
        mixed = merged.take(pa.array(rng_of(window).permutation(held)))
        pending, held, window = [], 0, window + 1
        if skip:
            mixed, skip = mixed.slice(min(skip, mixed.num_rows)), 0
        return mixed

    for batch in batches:
        batch = plain(batch)  # view types have no take kernel
        while batch.num_rows:
            take = min(batch.num_rows, window_rows - held)
            pending.append(batch.slice(0, take) if take < batch.num_rows else batch)
            held += take
            batch = batch.slice(take)
            if held == window_rows:
                yield mix()
    if held:
        yield mix()
