"""The direct reader of a lakehouse source: pieces of Parquet files read by pyarrow.

A ``fragments`` partition of a query that only picks columns of the table (``SELECT *`` or
``SELECT a, b AS c``) needs nothing of an engine: its rows are the pieces' rows, deletes
removed. Such a partition's SQL starts with a comment naming its pieces
(:func:`marked`); :class:`LakeArrowReader`, first in a lake source's reader table, reads
them with pyarrow (the selected row groups and columns only), drops the rows position
deletes and deletion vectors remove (a mask per batch), renames and casts as the snapshot's
schema says. The same rows as DuckDB's read of the SQL, in the same order, without a
``file_row_number`` column or an ordered engine pipeline. Partitions with equality deletes
or Delta partition values are read by DuckDB (the next reader), as is any other query.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.lake.model import Column, DataFile
from sqlfeed.lake.pieces import Piece
from sqlfeed.plans import filemeta
from sqlfeed.sql import ParsedQuery

__all__ = ["MARK", "LakeArrowReader", "marked", "marker", "projection"]

MARK = "/* sqlfeed-lake "
"""How a partition SQL the direct reader can read begins."""


_MORE = (
    "where",
    "joins",
    "group",
    "having",
    "qualify",
    "distinct",
    "order",
    "limit",
    "offset",
    "with_",
    "laterals",
    "windows",
)
"""What a query that only picks columns has none of."""


def projection(parsed: ParsedQuery, view: str) -> list[tuple[str, str]] | None:
    """``(output name, table column)`` of a query that only picks columns of ``view``.

    None: it does more (filters, expressions, joins, ...).
    """
    tree = parsed.tree
    if not isinstance(tree, exp.Select) or any(tree.args.get(arg) for arg in _MORE):
        return None
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or table.name != view or table.db:
        return None
    out: list[tuple[str, str]] = []
    for item in tree.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            out.append(("*", "*"))
        elif isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            out.append((item.alias_or_name, node.name))
        else:
            return None
    return out


def marked(
    sql: str,
    snapshot: int,
    since: int | None,
    columns: Sequence[tuple[str, str]] | None,
    pieces: Sequence[Piece],
) -> str:
    """``sql`` with the comment that names its snapshot and pieces.

    With ``columns`` (a query that only picks them), :class:`LakeArrowReader` reads it.
    """
    spec = {
        "at": snapshot,
        "since": since,
        "columns": None if columns is None else [list(c) for c in columns],
        "pieces": [[p.file.path, p.start, p.end] for p in pieces],
    }
    text = json.dumps(spec, separators=(",", ":")).replace("*/", "*\\/")
    return f"{MARK}{text} */ {sql}"


def marker(sql: str) -> dict[str, Any] | None:
    """What a partition's marker comment says (None: it has none)."""
    if not sql.startswith(MARK):
        return None
    end = sql.find(" */", len(MARK))
    try:
        spec: dict[str, Any] = json.loads(sql[len(MARK) : end])
    except ValueError:
        return None
    return spec


class LakeArrowReader(Reader):
    """Pieces of Parquet files read by pyarrow, for partitions that only pick columns."""

    name = "lakearrow"

    def carries(self, request: ReadRequest) -> bool:
        """Whether the request is a marked partition whose pieces need no join."""
        spec = marker(request.sql)
        if spec is None or spec["columns"] is None:
            return False
        files = self._files(spec)
        for path, _start, _end in spec["pieces"]:
            file = files.get(path)
            if file is None or file.equality_deletes:
                return False
            if any(c.constant is not None for c in file.columns):
                return False
        return True

    def _files(self, spec: dict[str, Any]) -> dict[str, DataFile]:
        found = self.source.snapshot_at(spec["at"], spec["since"])
        return {f.path: f for f in found.files}

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        """The pieces' rows, deletes removed, as the request's columns."""
        spec = marker(request.sql)
        assert spec is not None
        files = self._files(spec)
        for path, start, end in spec["pieces"]:
            file = files[path]
            columns = _columns(spec["columns"], file)
            for batch in _piece_batches(file, start, end, columns, request):
                if request.stopped:
                    return
                yield batch


def _columns(wanted: Sequence[Sequence[str]], file: DataFile) -> list[tuple[str, Column]]:
    by_name = {c.name: c for c in file.columns}
    out: list[tuple[str, Column]] = []
    for name, column in wanted:
        if column == "*":
            out.extend((c.name, c) for c in file.columns)
        else:
            out.append((name, by_name[column]))
    return out


def _piece_batches(
    file: DataFile,
    start: int,
    end: int | None,
    columns: list[tuple[str, Column]],
    request: ReadRequest,
) -> Iterator[pa.RecordBatch]:
    stop = file.rows if end is None else min(end, file.rows)
    groups = [
        number
        for number, (first, _rows) in enumerate(filemeta.parquet_row_groups(file.path))
        if start <= first < stop
    ]
    stored = sorted({c.source for _n, c in columns if c.source is not None})
    deleted = deleted_rows(file) if file.has_deletes else _NONE
    parquet = pq.ParquetFile(file.path)
    row = start
    for batch in parquet.iter_batches(
        batch_size=request.batch_rows, row_groups=groups, columns=stored, use_threads=True
    ):
        count = batch.num_rows
        first, last = np.searchsorted(deleted, [row, row + count])
        if last > first:
            keep = np.ones(count, dtype=bool)
            keep[deleted[first:last] - row] = False
            batch = batch.filter(pa.array(keep))
        row += count
        yield _project(batch, columns, request.schema)


_NONE = np.empty(0, dtype=np.int64)
_DELETED: dict[tuple[str, tuple[str, ...], str | None], np.ndarray] = {}
_DELETED_LOCK = threading.Lock()
_KEPT = 64
"""Data files whose deleted rows are kept in memory (a file's pieces read them once)."""


def deleted_rows(file: DataFile) -> np.ndarray:
    """The row numbers of ``file`` its position deletes and deletion vector remove.

    Sorted and unique; read once per file and process (the pieces of a file share them).
    """
    key = (file.uri, file.position_deletes, file.deleted_positions)
    with _DELETED_LOCK:
        found = _DELETED.get(key)
    if found is not None:
        return found
    parts = []
    if file.position_deletes:
        table = pq.read_table(
            list(file.position_deletes), columns=["pos"], filters=[("file_path", "=", file.uri)]
        )
        parts.append(table.column("pos").to_numpy())
    if file.deleted_positions:
        parts.append(
            pq.read_table(file.deleted_positions, columns=["pos"]).column("pos").to_numpy()
        )
    rows = np.unique(np.concatenate(parts).astype(np.int64)) if parts else _NONE
    with _DELETED_LOCK:
        if len(_DELETED) >= _KEPT:
            _DELETED.pop(next(iter(_DELETED)))
        _DELETED[key] = rows
    return rows


def _project(
    batch: pa.RecordBatch, columns: list[tuple[str, Column]], schema: pa.Schema | None
) -> pa.RecordBatch:
    arrays, names = [], []
    for name, column in columns:
        target = schema.field(name).type if schema is not None and name in schema.names else None
        if column.source is None:
            values: pa.Array = pa.nulls(batch.num_rows, type=target or pa.null())
        else:
            values = batch.column(column.source)
            if target is not None and not values.type.equals(target):
                values = values.cast(target)
        arrays.append(values)
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)
