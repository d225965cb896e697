"""Pieces of local files that DuckDB reads by name: byte ranges of text files, ORC stripes.

Partition queries over plain files name everything they read, so they run in any
process. DuckDB reads CSV and JSON itself but has no byte-range option, and no ORC
reader at all; this module gives it both, by name:

* ``sqlfeedrange://<prefix>-<start>-<end>/<path>`` (:func:`range_url`) is a virtual
  file: the first ``prefix`` bytes of ``<path>`` (a CSV header) followed by its bytes
  ``[start, end)``. :class:`~sqlfeed.io.rangefs.RangeFileSystem` serves it to DuckDB (an
  fsspec file system, registered on the connection when a query names such a URL), so
  ``read_csv`` and ``read_json`` parse a line-aligned piece of a file with the options they
  are given.
* :func:`orc_reader` streams ORC files (some of their stripes) as Arrow batches through
  pyarrow; :class:`~sqlfeed.io.duckdb.DuckDBSource` turns ``read_orc(...)`` in a query
  into such a stream.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc

from sqlfeed.dialects import InvalidArgumentError

__all__ = [
    "RANGE_PROTOCOL",
    "RangeFile",
    "orc_reader",
    "orc_schema",
    "parse_range_url",
    "range_url",
]

RANGE_PROTOCOL = "sqlfeedrange"
"""The URL scheme of byte-range virtual files."""

_SPEC = re.compile(r"^(\d+)-(\d+)-(\d+)/(.+)$", re.DOTALL)


def range_url(path: str, prefix: int, start: int, end: int) -> str:
    """The virtual file of ``path``'s first ``prefix`` bytes, then its bytes ``[start, end)``.

    >>> range_url("/data/x.csv", 10, 100, 200)
    'sqlfeedrange://10-100-200//data/x.csv'
    >>> parse_range_url(range_url("/data/x.csv", 10, 100, 200))
    ('/data/x.csv', 10, 100, 200)
    """
    if not 0 <= prefix <= start <= end:
        raise InvalidArgumentError(f"bad byte range {prefix}, [{start}, {end}) of {path}")
    return f"{RANGE_PROTOCOL}://{prefix}-{start}-{end}/{path}"


def parse_range_url(url: str) -> tuple[str, int, int, int]:
    """``(path, prefix, start, end)`` of a :func:`range_url` (with or without its scheme)."""
    text = url.split("://", 1)[1] if url.startswith(RANGE_PROTOCOL + "://") else url
    match = _SPEC.match(text)
    if match is None:
        raise FileNotFoundError(f"not a sqlfeed byte-range file: {url}")
    return match.group(4), int(match.group(1)), int(match.group(2)), int(match.group(3))


class RangeFile(io.RawIOBase):
    """A read-only view of a file's prefix followed by one of its byte ranges."""

    def __init__(self, path: str, prefix: int, start: int, end: int) -> None:
        super().__init__()
        self._handle = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._prefix, self._start = prefix, start
        self.size = prefix + (end - start)
        self._position = 0
        self._lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        with self._lock:
            wanted = self.size - self._position if size is None or size < 0 else size
            wanted = max(0, min(wanted, self.size - self._position))
            parts = []
            while wanted > 0:
                if self._position < self._prefix:
                    where, count = self._position, min(wanted, self._prefix - self._position)
                else:
                    where, count = self._start + self._position - self._prefix, wanted
                block = os.pread(self._handle.fileno(), count, where)
                if not block:
                    break
                parts.append(block)
                self._position += len(block)
                wanted -= len(block)
            return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._handle.close()
        super().close()


# -- ORC through pyarrow ------------------------------------------------------------------


def orc_schema(files: Sequence[str]) -> pa.Schema:
    """The columns of ORC ``files`` by name (the union; a column's type must agree)."""
    if not files:
        raise InvalidArgumentError("read_orc: no file matches")
    try:
        return pa.unify_schemas([orc.ORCFile(path).schema for path in files])
    except (OSError, pa.ArrowException) as err:
        raise InvalidArgumentError(f"read_orc: {str(err).splitlines()[0]}") from None


def orc_reader(
    files: Sequence[str],
    *,
    only: Sequence[str] | None = None,
    stripes: tuple[int, int] | None = None,
) -> pa.RecordBatchReader:
    """The rows of ORC ``files``, in file and stripe order.

    Of ``only`` those of them; of stripes ``[a, b)``; with the columns of :func:`orc_schema`
    over all ``files``.
    """
    schema = orc_schema(files)
    chosen = [path for path in files if only is None or path in set(only)]

    def batches() -> Iterator[pa.RecordBatch]:
        for path in chosen:
            reader = orc.ORCFile(path)
            first, last = stripes if stripes is not None else (0, reader.nstripes)
            for stripe in range(first, min(last, reader.nstripes)):
                table = pa.Table.from_batches([reader.read_stripe(stripe)])
                for field in schema:
                    if field.name not in table.column_names:
                        table = table.append_column(field, pa.nulls(table.num_rows, field.type))
                yield from table.select(schema.names).cast(schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())
