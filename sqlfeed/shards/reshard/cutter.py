"""Phase 3, the write: the ordered rows read ahead, and cut into shard files.

The ordered rows stream out in record batches (:class:`Prefetch`) and are cut into
shards of a row count or about a byte size (:class:`Cutter`). For a byte target the bytes
per row are measured on a sample encoded in the output format and on the shard being
written, so each shard is closed near the target. With groups, a shard is only cut
between two groups, at the group boundary nearest the target (:class:`Rows`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from sqlfeed.shards.manifest import ShardEntry, shard_file_name
from sqlfeed.shards.reshard.engine import engine_errors
from sqlfeed.shards.writer import ShardWriter

_SAMPLE_ROWS = 1_000
_WRITER_BUFFERS = 1 << 15
"""Bytes a shard writer may hold before they reach the file (text and tar buffers)."""


class Prefetch:
    """Reads the ordered rows in a thread, a few batches ahead of the writer."""

    _END = object()

    def __init__(
        self, reader: pa.RecordBatchReader, engine: duckdb.DuckDBPyConnection, depth: int = 2
    ) -> None:
        self.reader = reader
        self.engine = engine
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlfeed-reshard-read")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    batch = self.reader.read_next_batch()
                except StopIteration:
                    break
                if not self._put(batch):
                    return
            self._put(self._END)
        except BaseException as err:
            self._put(err)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                with engine_errors("reading the ordered rows"):
                    raise item
            yield item

    def close(self) -> None:
        """Stop reading (interrupting DuckDB) and close the reader."""
        if self._thread.is_alive():
            self._stop.set()
            with contextlib.suppress(Exception):
                self.engine.interrupt()
            self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.reader.close()


class Rows:
    """The ordered rows: take the next n, or find a group boundary near a position."""

    def __init__(
        self,
        batches: Iterator[pa.RecordBatch],
        convert: Callable[[pa.RecordBatch], pa.RecordBatch],
        group_index: int | None,
    ) -> None:
        self._batches = batches
        self._convert = convert
        self._group_index = group_index
        self._buffer: list[tuple[pa.RecordBatch, Any]] = []
        self.buffered = 0
        self.eof = False
        self.read_rows = 0
        self.read_bytes = 0
        self._last_group: Any = None

    def fill(self, n: int) -> None:
        """Buffer at least ``n`` rows (fewer at the end)."""
        while self.buffered < n and not self.eof:
            try:
                raw = next(self._batches)
            except StopIteration:
                self.eof = True
                return
            if raw.num_rows == 0:
                continue
            self.read_rows += raw.num_rows
            self.read_bytes += raw.nbytes
            groups = None
            if self._group_index is not None:
                groups = raw.column(self._group_index).to_numpy(zero_copy_only=False)
            self._buffer.append((self._convert(raw), groups))
            self.buffered += raw.num_rows

    def exhausted(self) -> bool:
        """No row is left."""
        self.fill(1)
        return self.buffered == 0

    def head(self, n: int) -> pa.Table:
        """The next ``n`` rows without taking them."""
        self.fill(n)
        batches, left = [], n
        for batch, _ in self._buffer:
            if left <= 0:
                break
            piece = batch.slice(0, min(left, batch.num_rows))
            batches.append(piece)
            left -= piece.num_rows
        return pa.Table.from_batches(batches, schema=self._buffer[0][0].schema)

    def take(self, n: int) -> list[pa.RecordBatch]:
        """Remove and return the next ``n`` rows (fewer at the end)."""
        self.fill(n)
        taken: list[pa.RecordBatch] = []
        left = min(n, self.buffered)
        while left > 0:
            batch, groups = self._buffer[0]
            if batch.num_rows <= left:
                self._buffer.pop(0)
                taken.append(batch)
                if groups is not None:
                    self._last_group = groups[-1]
                left -= batch.num_rows
                self.buffered -= batch.num_rows
            else:
                taken.append(batch.slice(0, left))
                rest = batch.slice(left)
                if groups is not None:
                    self._last_group = groups[left - 1]
                    groups = groups[left:]
                self._buffer[0] = (rest, groups)
                self.buffered -= left
                left = 0
        return taken

    def cut(self, n: int, allow_zero: bool) -> int:
        """A position near ``n`` where a shard may end: never inside a group.

        Without groups that is ``n`` (or the rows left). With groups, the group boundary
        nearest ``n``: backwards (not before 1, or 0 when ``allow_zero``) or forwards.
        """
        n = max(n, 0 if allow_zero else 1)
        self.fill(n + 1)
        if self._group_index is None or (self.buffered <= n and self.eof):
            return min(n, self.buffered)
        groups = np.concatenate([g for _, g in self._buffer])
        changes = np.flatnonzero(groups[1:] != groups[:-1]) + 1  # boundaries inside
        before = changes[changes <= n]
        backward = int(before[-1]) if before.size else None
        if (
            backward is None
            and allow_zero
            and (self._last_group is None or groups[0] != self._last_group)
        ):
            backward = 0
        after = changes[changes >= n]
        while not after.size and not self.eof:  # the group goes on: read further
            self.fill(self.buffered + 1)
            groups = np.concatenate([g for _, g in self._buffer])
            changes = np.flatnonzero(groups[1:] != groups[:-1]) + 1
            after = changes[changes >= n]
        forward = int(after[0]) if after.size else self.buffered
        if backward is not None and n - backward < forward - n:
            return backward
        return forward


class Cutter:
    """Cuts the ordered rows into shard files of a row count or a byte size.

    Rows are written in chunks of a couple of record batches, so memory does not grow
    with the shard size (a Parquet chunk is one row group).
    """

    def __init__(
        self,
        folder: Path,
        fmt: str,
        schema: pa.Schema,
        file_schema: pa.Schema,
        uid: str,
        shard_rows: int | None,
        shard_bytes: int | None,
        work: Path,
        chunk_rows: int,
        on_rows: Callable[[int], None],
    ) -> None:
        self.folder, self.fmt, self.schema, self.file_schema = folder, fmt, schema, file_schema
        self.uid = uid
        self.shard_rows, self.shard_bytes = shard_rows, shard_bytes
        self.work = work
        self.chunk_rows = max(1, chunk_rows)
        self.on_rows = on_rows
        self.entries: list[ShardEntry] = []
        self.rows = 0
        self._data_rows = 0  # rows and bytes (before closing) of the shards so far
        self._data_bytes = 0
        self._opened, self._empty = self._empty_size()
        # What closing adds (footer, tar padding, buffers): an empty shard's, then measured.
        self._closing = max(0, self._empty - self._opened)

    def run(self, rows: Rows) -> list[ShardEntry]:
        """Write all the rows into shards; their entries."""
        if rows.exhausted():
            self._write_shard(rows)  # one empty shard: the shardset keeps its schema
        while not rows.exhausted():
            self._write_shard(rows)
        return self.entries

    def _write_shard(self, rows: Rows) -> None:
        index = len(self.entries)
        path = self.folder / shard_file_name(index, self.fmt)
        writer = ShardWriter(path, self.fmt, self.file_schema, uid=self.uid)
        try:
            opened = path.stat().st_size
            if rows.exhausted():
                written = 0
            elif self.shard_rows is not None:
                written = self._write(writer, rows, self.shard_rows, last=True, started=False)
            else:
                written = self._fill_bytes(writer, rows, opened)
            before_close = path.stat().st_size
            size = writer.close()
        except BaseException:
            with contextlib.suppress(Exception):
                writer.close()
            raise
        if written:
            if self.fmt in ("parquet", "tar"):  # a footer; end blocks and padding
                self._closing = max(0, size - before_close)
            self._data_rows += written
            self._data_bytes += max(size - self._empty, 0)
        self.entries.append(ShardEntry(index, path.name, written, size, writer.uid_digest))

    def _write(self, writer: ShardWriter, rows: Rows, n: int, *, last: bool, started: bool) -> int:
        """Write the next ``n`` rows, chunk by chunk; when ``last``, end the shard there.

        Ending the shard means ending it between two groups: at the group boundary
        nearest the ``n``-th row (searched from the last chunk on).
        """
        written = 0
        while n - written > self.chunk_rows:
            added = self._put(writer, rows.take(self.chunk_rows))
            if not added:
                return written
            written += added
        left = n - written
        if last:
            left = rows.cut(left, allow_zero=started or written > 0)
        return written + self._put(writer, rows.take(left))

    def _put(self, writer: ShardWriter, batches: list[pa.RecordBatch]) -> int:
        if not batches:
            return 0
        table = pa.Table.from_batches(batches, schema=self.schema)
        writer.write(table)
        self.rows += table.num_rows
        self.on_rows(self.rows)
        return int(table.num_rows)

    def _fill_bytes(self, writer: ShardWriter, rows: Rows, opened: int) -> int:
        """Write pieces, measuring the file, until the shard is about ``shard_bytes``.

        The first piece is 90 % of the rows the estimate calls for; then the bytes per
        row of this very shard give the rest. Parquet takes few pieces (each ends a row
        group), the last one cut where the estimate says; the other formats stream, so the
        rest is approached in halving pieces, which copes with rows of very different
        sizes (images). The text and tar writers hold up to a few buffers of bytes not yet
        in the file: until the file is well past that, the estimate stands in for it.
        """
        assert self.shard_bytes is not None
        target = self.shard_bytes - self._closing
        if self._data_rows:
            estimate = max(self._data_bytes, 1) / self._data_rows
        else:
            estimate = self._sample_per_row(rows)
        per_row = estimate
        streaming = self.fmt != "parquet"
        steps = 48 if streaming else 4
        written = 0
        for step in range(steps):
            size = writer.path.stat().st_size
            if size - opened >= 2 * _WRITER_BUFFERS:
                per_row = max(size - opened, 1) / written
            else:
                size = max(size, opened + round(written * estimate))
            remaining = target - size
            wanted = max(remaining, 0) / per_row
            if step == steps - 1 or (wanted < 2.5 if streaming else remaining <= 0.2 * target):
                return written + self._write(
                    writer, rows, round(wanted), last=True, started=written > 0
                )
            piece = max(1, int(wanted * (0.5 if streaming and written else 0.9)))
            added = self._write(writer, rows, piece, last=False, started=written > 0)
            if not added:
                return written
            written += added
        return written

    def _sample_per_row(self, rows: Rows) -> float:
        """Output bytes per row of the first rows, encoded in the output format."""
        sample = rows.head(min(_SAMPLE_ROWS, self.chunk_rows))
        path = self.work / f"sample.{self.fmt}"
        with ShardWriter(path, self.fmt, self.file_schema, uid=self.uid) as shard:
            shard.write(sample)
        size = path.stat().st_size
        path.unlink()
        return max(size - self._empty, 1) / max(int(sample.num_rows), 1)

    def _empty_size(self) -> tuple[int, int]:
        """The size of an empty shard when opened and when closed."""
        path = self.work / f"empty.{self.fmt}"
        writer = ShardWriter(path, self.fmt, self.file_schema, uid=self.uid)
        opened = path.stat().st_size
        closed = writer.close()
        path.unlink()
        return opened, closed
