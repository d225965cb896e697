"""Export a query's rows to files: partitioned, read in parallel, written atomically.

The output appears under its final name only when complete: it is written beside it
under a temporary name and renamed into place, so a failed or interrupted export leaves
no half-written file or folder under the final name.
"""

from __future__ import annotations

import io
import json
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.feeder import PartitionFeeder, Progress
from sqlfeed.feed.snapshots import consistent_reads
from sqlfeed.feed.textout import shown, shown_schema
from sqlfeed.io import Source
from sqlfeed.io.arrow import without_hints
from sqlfeed.plans.model import Plan
from sqlfeed.shards.paths import remove_path, replace_path

__all__ = ["EXPORT_FORMATS", "export"]

EXPORT_FORMATS = ("parquet", "csv", "jsonl")


def export(
    plan: Plan,
    source: Source,
    out: str | os.PathLike[str],
    *,
    format: str | None = None,
    readers: int = 2,
    overwrite: bool = False,
    on_partition: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write the plan's rows to ``out``.

    ``out`` ending in ``.parquet``, ``.csv`` or ``.jsonl`` is one file; anything else is
    a folder with one ``part-NNNNN.<format>`` file per partition (written in parallel).
    CSV and JSONL show durations, intervals and binary values as text, and CSV lists,
    structs and maps as JSON text (see :mod:`sqlfeed.feed.textout`). The files carry the
    plan's column names (repeated names made unique) and none of its reader hints.

    Args:
        plan: what to export.
        source: where it runs.
        out: the output file or folder.
        format: parquet, csv or jsonl; by default from the file suffix, else parquet.
        readers: partitions read (and, for a folder, written) at once.
        overwrite: replace an existing output.
        on_partition: called with (partitions done, rows so far) after each partition.

    Returns:
        ``{"path", "format", "rows", "files"}``.
    """
    target = Path(out)
    suffix = target.suffix.lstrip(".").lower()
    single_file = suffix in EXPORT_FORMATS
    fmt = format or (suffix if single_file else "parquet")
    if fmt not in EXPORT_FORMATS:
        raise InvalidArgumentError(f"export format must be one of {', '.join(EXPORT_FORMATS)}")
    if single_file and suffix != fmt:
        raise InvalidArgumentError(f"--format {fmt} does not match the file name {target.name}")
    if target.exists() and not overwrite:
        raise InvalidArgumentError(f"{target} exists; pass --overwrite to replace it")
    if not target.parent.exists():
        raise InvalidArgumentError(f"the folder {target.parent} does not exist")
    temporary = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    schema = plan.arrow_schema() or source.schema(plan.sql)
    check_writable(schema, fmt)  # before anything runs
    try:
        if single_file:
            rows = _write_file(plan, source, temporary, fmt, schema, readers, on_partition)
            files = 1
        else:
            temporary.mkdir()
            rows = _write_folder(plan, source, temporary, fmt, schema, readers, on_partition)
            files = plan.num_partitions
        replace_path(temporary, target)
    except BaseException:
        remove_path(temporary)
        raise
    return {"path": str(target), "format": fmt, "rows": rows, "files": files}


def _write_file(
    plan: Plan,
    source: Source,
    path: Path,
    fmt: str,
    schema: pa.Schema,
    readers: int,
    on_partition: Callable[[int, int], None] | None,
) -> int:
    def progress(event: Progress) -> None:
        if on_partition is not None:
            on_partition(event.partitions_done, event.rows)

    feeder = PartitionFeeder(plan, source, readers=readers, progress=progress)
    rows = 0
    with _writer(path, fmt, schema) as write:
        for batch in feeder:
            write(batch)
            rows += batch.num_rows
    return rows


def _write_folder(
    plan: Plan,
    source: Source,
    folder: Path,
    fmt: str,
    schema: pa.Schema,
    readers: int,
    on_partition: Callable[[int, int], None] | None,
) -> int:
    """One file per partition, every partition read inside one snapshot.

    See :mod:`sqlfeed.feed.snapshots`; the snapshot is held until the last file is written.
    """
    with consistent_reads(source, plan, plan.num_partitions, readers=readers) as reading:
        return _write_parts(
            plan, reading.source, folder, fmt, schema, reading.cap(readers), on_partition
        )


def _write_parts(
    plan: Plan,
    source: Source,
    folder: Path,
    fmt: str,
    schema: pa.Schema,
    readers: int,
    on_partition: Callable[[int, int], None] | None,
) -> int:
    lock = threading.Lock()
    state = {"done": 0, "rows": 0}
    stop = threading.Event()

    def one(index: int) -> None:
        partition = plan.partitions[index]
        written = 0
        with _writer(folder / f"part-{index:05d}.{fmt}", fmt, schema) as write:
            for batch in source.read(partition.sql, schema=schema, stop=stop):
                write(batch)
                written += batch.num_rows
        with lock:
            state["done"] += 1
            state["rows"] += written
            if on_partition is not None:
                on_partition(state["done"], state["rows"])

    with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="sqlfeed-export") as pool:
        futures = [pool.submit(one, i) for i in range(plan.num_partitions)]
        try:
            for future in futures:
                future.result()
        except BaseException:
            stop.set()
            for future in futures:
                future.cancel()
            raise
    return state["rows"]


def check_writable(schema: pa.Schema, fmt: str) -> None:
    """Refuse, before anything runs, a column the format cannot hold.

    The error names it, and the formats that can: an empty file of each column is written in
    memory.

    Raises:
        InvalidArgumentError: a column ``fmt`` cannot hold.
    """
    if _writes(schema, fmt):
        return
    for field in schema:
        if not _writes(pa.schema([field]), fmt):
            others = [f for f in EXPORT_FORMATS if f != fmt and _writes(pa.schema([field]), f)]
            can = f"write it as {' or '.join(others)}, or " if others else ""
            raise InvalidArgumentError(
                f"column {field.name!r} ({field.type}) cannot be written to {fmt}: {can}"
                "cast it in the query"
            )


def _writes(schema: pa.Schema, fmt: str) -> bool:
    """Whether a file of ``fmt`` can hold columns of ``schema``."""
    out = without_hints(schema)
    try:
        with _writer(io.BytesIO(), fmt, out) as write:
            write(pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in out], schema=out))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


class _writer:
    """A context manager yielding ``write(batch)`` for one output file.

    ``schema``'s reader hints are left out; CSV and JSONL values are shown as
    :mod:`sqlfeed.feed.textout` says.
    """

    def __init__(self, path: Path | io.BytesIO, fmt: str, schema: pa.Schema) -> None:
        self.path, self.fmt, self.schema = path, fmt, without_hints(schema)
        self._close: Callable[[], None] = lambda: None

    def __enter__(self) -> Callable[[pa.RecordBatch], None]:
        if self.fmt == "parquet":
            parquet = pq.ParquetWriter(self.path, self.schema)
            self._close = parquet.close
            write: Callable[[pa.RecordBatch], None] = parquet.write_batch
            return write
        if self.fmt == "csv":
            csv = pacsv.CSVWriter(self.path, shown_schema(self.schema, csv=True))
            self._close = csv.close

            def write_csv(batch: pa.RecordBatch) -> None:
                csv.write_batch(shown(batch, csv=True))

            return write_csv
        handle = (
            io.TextIOWrapper(self.path, encoding="utf-8")
            if isinstance(self.path, io.BytesIO)
            else open(self.path, "w", encoding="utf-8")
        )
        self._close = handle.close

        def write_jsonl(batch: pa.RecordBatch) -> None:
            for row in shown(batch, csv=False).to_pylist():
                handle.write(json.dumps(row, default=str, ensure_ascii=False))
                handle.write("\n")

        return write_jsonl

    def __exit__(self, *exc: object) -> None:
        self._close()
