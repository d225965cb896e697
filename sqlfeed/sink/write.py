"""``sqlfeed.write_table``: batches a program holds, written into a table exactly once."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.sink.report import WriteReport
from sqlfeed.sink.table import TableSink

__all__ = ["write_table"]


def write_table(
    data: Any,
    url: Any,
    table: str,
    *,
    mode: str = "create",
    key: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> WriteReport:
    """Write ``data`` into ``table`` of the database ``url``: all of it or nothing.

    The rows go into a staging table, batch by batch under the sink's commit protocol
    (:class:`~sqlfeed.sink.TableSink`), and are put in place at the end: ``create`` makes
    the table (refused if it exists), ``replace`` swaps it in atomically (readers see the
    old table or the new one), ``append`` inserts them in one transaction. A failure
    leaves the table as it was. Without a ``key`` the output gets ``_sqlfeed_partition,
    _sqlfeed_row`` (each row's position); with one, its distinct count is checked.

    Args:
        data: a ``pyarrow.Table`` or ``RecordBatch``, a pandas DataFrame, or an iterable
            of record batches of one schema (a ``Feeder``'s, for one).
        url: the output database (URL or source); a SQLite or DuckDB file is made if
            missing.
        table: ``name`` or ``schema.name``.
        mode: ``create``, ``replace`` or ``append``.
        key: columns identifying a row (checked unique by their distinct count).
        progress: called with the rows written so far.

    Raises:
        InvalidArgumentError: bad input (nothing written).
        EngineError: the output failed (the table is as it was).
    """
    start = time.monotonic()
    batches = _batches(data)
    first = next(batches, None)
    if first is None:
        raise InvalidArgumentError(
            "write_table was given no batches: give at least one (it may be empty)"
        )
    rows: list[int] = []
    sink = TableSink.create(url, table, first.schema, mode=mode, key=key, first_batch=first)
    try:
        offset = 0
        for batch in itertools.chain([first], batches):
            if batch.schema != first.schema:
                raise InvalidArgumentError(
                    f"a batch has the schema {batch.schema}, not {first.schema}: give batches "
                    "of one schema"
                )
            sink.commit(0, offset, batch)
            offset += batch.num_rows
            rows.append(batch.num_rows)
            if progress is not None:
                progress(offset)
        sink.spec["expected_rows"] = offset
        if key:  # a key identifies a row: as many distinct keys as rows
            sink.spec["expected_keys"] = offset
        report = sink.finish(keep=False)
    except BaseException:
        sink.abort()
        raise
    finally:
        sink.close()
    report.seconds = time.monotonic() - start
    return report


def _batches(data: Any) -> Iterator[pa.RecordBatch]:
    if isinstance(data, pa.RecordBatch):
        return iter([data])
    if isinstance(data, pa.Table):
        return iter(data.to_batches() or [pa.RecordBatch.from_pylist([], schema=data.schema)])
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_records"):
        table = pa.Table.from_pandas(data, preserve_index=False)
        return _batches(table)
    if isinstance(data, Iterable):
        return (_batch(item) for item in data)
    raise InvalidArgumentError(
        f"write_table cannot write a {type(data).__name__}: give a pyarrow Table or "
        "RecordBatch, a pandas DataFrame or an iterable of record batches"
    )


def _batch(item: Any) -> pa.RecordBatch:
    if isinstance(item, pa.RecordBatch):
        return item
    if isinstance(item, pa.Table):
        return (
            item.combine_chunks().to_batches()[0]
            if item.num_rows
            else pa.RecordBatch.from_pylist([], schema=item.schema)
        )
    raise InvalidArgumentError(
        f"write_table got a {type(item).__name__} among its batches: give record batches"
    )
