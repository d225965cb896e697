"""What files say about themselves: row groups, stripes, line-aligned byte ranges.

Fragment plans are sized and cut from the files' own metadata, never by a scan of the
rows: Parquet footers (rows per row group), ORC footers (rows, stripes), file sizes and
line starts of CSV / JSON-lines files. Both kinds of fragment plans use these helpers: a
shardset dataset's shards (:mod:`sqlfeed.shards.source`) and queries over plain files
(:mod:`sqlfeed.plans.files`).

A :class:`Piece` is what one partition reads of one file: all of it, a run of row groups
(as a row range), a run of stripes, or a byte range that starts and ends at line starts.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

from sqlfeed.dialects import ShardsetError

__all__ = [
    "Piece",
    "data_start",
    "even_runs",
    "first_line_is_object",
    "line_cuts",
    "orc_open",
    "orc_stripes",
    "parquet_row_groups",
    "quoted_newlines",
    "text_rows_estimate",
]

_BLOCK = 16 << 20
_SAMPLE = 1 << 20
_ALL_BITS = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


@dataclass(frozen=True)
class Piece:
    """A part of one file that one partition reads.

    ``kind`` is ``file`` (all of it), ``rows`` (rows ``[start, end)``: whole Parquet row
    groups), ``stripes`` (ORC stripes ``[start, end)``) or ``bytes`` (bytes ``[start,
    end)``, both at line starts).
    """

    file: str
    kind: str
    start: int
    end: int
    rows: int
    """Rows in the piece (estimated for stripes and byte ranges)."""
    note: str = ""
    """Why a big file stayed whole, when it did."""


def parquet_row_groups(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """``(first row, rows)`` of every row group of a Parquet file, from its footer."""
    meta = pq.ParquetFile(path).metadata
    out, first = [], 0
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group).num_rows
        out.append((first, rows))
        first += rows
    return out


def orc_open(path: str | os.PathLike[str]) -> Any:
    """The ``pyarrow.orc.ORCFile`` of ``path``; ShardsetError when it is not ORC."""
    try:
        return orc.ORCFile(path)
    except (OSError, pa.ArrowException) as err:
        raise ShardsetError(f"cannot read orc file {path}: {str(err).splitlines()[0]}") from None


def orc_stripes(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """``(stripe, estimated rows)`` of an ORC file, from its footer.

    Rows are spread evenly: pyarrow reports no per-stripe count without reading the stripe.
    """
    reader = orc_open(path)
    count, rows = int(reader.nstripes), int(reader.nrows)
    return [(s, rows * (s + 1) // count - rows * s // count) for s in range(count)]


def even_runs(
    file: str, kind: str, units: Sequence[tuple[int, int]], target_rows: int, *, by_rows: bool
) -> list[Piece]:
    """Consecutive units (row groups, stripes) gathered into runs of about ``target_rows``.

    ``units`` are ``(first row or unit number, rows)``; runs never split a unit, and
    there are at most ``ceil(total / target_rows)`` of them, as even as the units allow.
    With ``by_rows`` a run is a row range, else a unit range. One run: the whole file.
    """
    total = sum(rows for _first, rows in units)
    wanted = max(1, -(-total // max(1, target_rows)))
    runs: list[tuple[int, Piece]] = []
    row = 0
    for number, (_first, rows) in enumerate(units):
        bucket = (2 * row + rows) * wanted // max(1, 2 * total)  # by the unit's middle row
        start, end = (row, row + rows) if by_rows else (number, number + 1)
        if runs and runs[-1][0] == bucket:
            last = runs[-1][1]
            runs[-1] = (bucket, Piece(file, kind, last.start, end, last.rows + rows))
        else:
            runs.append((bucket, Piece(file, kind, start, end, rows)))
        row += rows
    if len(runs) <= 1:
        return [Piece(file, "file", 0, 0, total)]
    return [piece for _bucket, piece in runs]


# -- text files (CSV, JSON lines) ---------------------------------------------------------


def data_start(path: str | os.PathLike[str], lines: int) -> int:
    """The offset just after the first ``lines`` lines (a CSV header, skipped lines)."""
    offset = 0
    with open(path, "rb") as handle:
        for _ in range(lines):
            line = handle.readline()
            if not line:
                break
            offset += len(line)
    return offset


def text_rows_estimate(path: str | os.PathLike[str], start: int = 0) -> int:
    """Lines after byte ``start``, estimated from the first megabyte (no full read)."""
    size = os.path.getsize(path)
    if size <= start:
        return 0
    with open(path, "rb") as handle:
        handle.seek(start)
        sample = handle.read(_SAMPLE)
    newlines = sample.count(b"\n") + (0 if sample.endswith(b"\n") else 1)
    if len(sample) >= size - start:
        return newlines
    return max(1, round((size - start) * newlines / max(1, len(sample))))


def line_cuts(path: str | os.PathLike[str], start: int, pieces: int) -> list[int]:
    """Offsets that cut bytes ``[start, size)`` into at most ``pieces`` ranges of whole lines.

    The ranges are of about the same size, each cut just after a newline (so every range
    holds whole lines).

    Returns the boundaries, ``start`` first and the file size last.
    """
    size = os.path.getsize(path)
    cuts = [start]
    with open(path, "rb") as handle:
        for k in range(1, max(1, pieces)):
            target = start + (size - start) * k // pieces
            cut = _line_start(handle, max(target, cuts[-1]), size)
            if cuts[-1] < cut < size:
                cuts.append(cut)
    cuts.append(size)
    return cuts if size > start else [start, start]


def _line_start(handle: Any, position: int, size: int) -> int:
    """The offset of the first line starting at or after ``position`` (``size`` if none)."""
    if position <= 0:
        return 0
    handle.seek(position - 1)
    while True:
        block = handle.read(1 << 16)
        if not block:
            return size
        newline = block.find(b"\n")
        if newline >= 0:
            return int(handle.tell() - len(block) + newline + 1)


_quoted_cache: dict[tuple[str, int, int, int, int], bool] = {}


def quoted_newlines(path: str | os.PathLike[str], quote: str, escape: str = "") -> bool:
    """Whether a CSV file may hold a value with a newline in it, so that its lines are not its rows.

    It may when some line has an odd number of ``quote`` characters, or an ``escape``
    character other than the quote appears (it would hide a quote from the count).

    A vectorized scan of the bytes (no parsing), remembered for the file's size and
    modification time.
    """
    stat = os.stat(path)
    quote_byte = quote.encode()[:1]
    escape_byte = escape.encode()[:1] if escape and escape != quote else b""
    key = (
        os.fspath(path),
        stat.st_size,
        stat.st_mtime_ns,
        quote_byte[0] if quote_byte else -1,
        escape_byte[0] if escape_byte else -1,
    )
    if key not in _quoted_cache:
        _quoted_cache[key] = _scan_quotes(Path(path), quote_byte, escape_byte)
    return _quoted_cache[key]


def _scan_quotes(path: Path, quote: bytes, escape: bytes) -> bool:
    """Whether a newline comes after an odd number of quotes, over the mapped file.

    The file is scanned in blocks by a few threads at once (numpy releases the GIL), each
    for both parities it may start with; the blocks' parities then tell which answer holds.
    """
    if not quote or path.stat().st_size == 0:
        return False
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if escape and m.find(escape) >= 0:
            return True
        if m.find(quote) < 0:
            return False
        data = np.frombuffer(m, np.uint8)
        try:
            blocks = [data[start : start + _BLOCK] for start in range(0, len(data), _BLOCK)]
            workers = max(1, min(len(blocks), os.cpu_count() or 1, 4))
            with ThreadPoolExecutor(workers) as pool:
                scanned = list(pool.map(lambda block: _odd_newline(block, quote[0]), blocks))
        finally:
            del data, blocks  # before the map closes
    odd = 0  # quotes before the block, mod 2
    for found, parity in scanned:
        if found[odd]:
            return True
        odd ^= parity
    return False


def _odd_newline(block: np.ndarray, quote: int) -> tuple[tuple[bool, bool], int]:
    """Whether a newline of ``block`` comes after an odd number of quotes.

    Answered for when an even and when an odd number came before it, together with the
    parity of its own quotes: quote and newline bytes as bit masks, the parity as a prefix
    XOR within 64-bit words and across them.
    """
    if len(block) % 64:
        block = np.concatenate([block, np.zeros(64 - len(block) % 64, np.uint8)])
    quotes = np.packbits(block == quote, bitorder="little").view("<u8")
    newlines = np.packbits(block == 10, bitorder="little").view("<u8")
    parity = quotes.copy()  # bit i: parity of the word's quotes up to bit i
    for shift in (1, 2, 4, 8, 16, 32):
        parity ^= parity << np.uint64(shift)
    words = (np.bitwise_count(quotes) & 1).astype(np.uint8)
    before = (np.bitwise_xor.accumulate(words) ^ words).astype(bool)
    parity[before] ^= _ALL_BITS  # odd quotes in the words before: flip
    even_start = bool(np.any(parity & newlines))
    odd_start = bool(np.any(~parity & newlines))
    return (even_start, odd_start), int(words.sum()) & 1


def first_line_is_object(path: str | os.PathLike[str], start: int = 0) -> bool:
    """Whether the first line after ``start`` is one whole JSON object.

    True for JSON lines of records: a pretty-printed object or an array does not start so.
    """
    with open(path, "rb") as handle:
        handle.seek(start)
        line = handle.readline(_SAMPLE)
    if not line.strip():
        return os.path.getsize(path) <= start + len(line)
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict)
