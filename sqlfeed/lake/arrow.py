"""The direct reader of a lakehouse source: pieces of Parquet files read by pyarrow.

A ``fragments`` partition of a query that only picks columns of the table (``SELECT *`` or
``SELECT a, b AS c``) needs nothing of an engine: its rows are the pieces' rows, deletes
removed. Such a partition's SQL starts with a comment naming its pieces
(:func:`marked`); :class:`LakeArrowReader`, first in a lake source's reader table, reads
them with pyarrow (the selected row groups and columns only), drops the rows position
deletes and deletion vectors remove (a mask per batch), renames and casts as the snapshot's
schema says; equality deletes drop the rows whose key equals a deleted key (a NULL
matches a NULL, as in the Iceberg spec: :func:`equality_mask`). The same rows as DuckDB's
read of the SQL, in the same order, without a ``file_row_number`` column, an anti-join or
an ordered engine pipeline. Partitions with Delta partition values are read by DuckDB (the
next reader), as is any other query.

Why this is long: the reader and the three kinds of deletes it applies are one read path,
kept together.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlglot import exp

from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.lake.model import Column, DataFile, EqualityDeletes
from sqlfeed.lake.pieces import Piece
from sqlfeed.plans import filemeta
from sqlfeed.sql import ParsedQuery

__all__ = [
    "MARK",
    "LakeArrowReader",
    "deleted_keys",
    "equality_mask",
    "marked",
    "marker",
    "projection",
]

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
        """Whether the request is a marked partition whose pieces hold no constant column."""
        spec = marker(request.sql)
        if spec is None or spec["columns"] is None:
            return False
        files = self._files(spec)
        for path, _start, _end in spec["pieces"]:
            file = files.get(path)
            if file is None:
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
    keys = [deleted_keys(group) for group in file.equality_deletes]
    stored = {c.source for _n, c in columns if c.source is not None}
    stored.update(data for group in file.equality_deletes for _d, data in group.pairs if data)
    deleted = deleted_rows(file) if file.position_deletes or file.deleted_positions else _NONE
    parquet = pq.ParquetFile(file.path, memory_map=True)  # no copy into read buffers
    row = start
    for batch in parquet.iter_batches(
        batch_size=request.batch_rows, row_groups=groups, columns=sorted(stored), use_threads=True
    ):
        count = batch.num_rows
        first, last = np.searchsorted(deleted, [row, row + count])
        keep = None
        if last > first:
            keep = np.ones(count, dtype=bool)
            keep[deleted[first:last] - row] = False
        for group, found in zip(file.equality_deletes, keys, strict=True):
            hit = equality_mask(batch, group, found)
            if hit is not None:
                keep = ~hit if keep is None else keep & ~hit
        if keep is not None:
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
    parts = [
        _positions_by_file(path).get(file.uri, _NONE)
        for path in dict.fromkeys(file.position_deletes)  # a file listed twice is read once
    ]
    if file.deleted_positions:
        parts.append(
            pq.ParquetFile(file.deleted_positions).read(columns=["pos"]).column("pos").to_numpy()
        )
    rows = _distinct(np.concatenate(parts).astype(np.int64)) if parts else _NONE
    with _DELETED_LOCK:
        if len(_DELETED) >= _KEPT:
            _DELETED.pop(next(iter(_DELETED)))
        _DELETED[key] = rows
    return rows


_POSITIONS: dict[str, dict[str, np.ndarray]] = {}


def _positions_by_file(path: str) -> dict[str, np.ndarray]:
    """A position delete file's ``pos`` by the data file they name, read once (then kept).

    One read of ``file_path`` (as a dictionary) and ``pos`` for all the data files it names
    (``read_table`` filtered by ``file_path`` for each data file scanned a dataset, 0.2 s a
    data file at TPC-H SF1).
    """
    with _DELETED_LOCK:
        known = _POSITIONS.get(path)
    if known is not None:
        return known
    parquet = pq.ParquetFile(path, read_dictionary=["file_path"])
    table = parquet.read(columns=["file_path", "pos"], use_threads=False).unify_dictionaries()
    names = table.column("file_path").chunks
    if not table.num_rows:
        found: dict[str, np.ndarray] = {}
    else:
        codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in names])
        positions = table.column("pos").to_numpy().astype(np.int64)
        order = np.argsort(codes, kind="stable")
        ends = np.cumsum(np.bincount(codes, minlength=len(names[0].dictionary)))
        runs = np.split(positions[order], ends[:-1])
        found = dict(zip(names[0].dictionary.to_pylist(), runs, strict=True))
    with _DELETED_LOCK:
        if len(_POSITIONS) >= _KEPT:
            _POSITIONS.pop(next(iter(_POSITIONS)))
        _POSITIONS[path] = found
    return found


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


class _KeyColumn:
    """The distinct deleted values of one equality column, and how a value is coded.

    A value's code is its place among them (-1: not there); NULL has one too when a delete
    holds NULL. Signed integers are sorted and looked up with numpy (no hash table built
    per batch); other types are looked up with Arrow's ``index_in``.
    """

    __slots__ = ("distinct", "null_code", "size", "sorted")

    def __init__(self, values: pa.ChunkedArray) -> None:
        distinct = pc.unique(values.combine_chunks())
        self.sorted: np.ndarray | None = None
        self.null_code = -1
        if pa.types.is_signed_integer(distinct.type):
            self.sorted = np.sort(distinct.drop_null().to_numpy().astype(np.int64))
            self.null_code = len(self.sorted) if distinct.null_count else -1
        self.distinct = distinct
        self.size = len(distinct)

    def codes(self, values: pa.Array) -> np.ndarray:
        """The code of each of ``values`` (NULL matches NULL), -1 where it is not deleted."""
        if self.sorted is None:
            try:
                found = pc.index_in(values, value_set=self.distinct, skip_nulls=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a type the value lacks
                cast = values.cast(self.distinct.type)
                found = pc.index_in(cast, value_set=self.distinct, skip_nulls=False)
            out: np.ndarray = found.fill_null(-1).to_numpy(zero_copy_only=False)
            return out.astype(np.int64)
        if not pa.types.is_signed_integer(values.type):
            values = values.cast(pa.int64())
        plain = values.fill_null(0) if values.null_count else values
        numbers = plain.to_numpy(zero_copy_only=False)
        if not len(self.sorted):
            codes = np.full(len(numbers), -1, dtype=np.int64)
        else:
            at = np.minimum(np.searchsorted(self.sorted, numbers), len(self.sorted) - 1)
            codes = np.where(self.sorted[at] == numbers, at, -1)
        if values.null_count:
            nulls = values.is_null().to_numpy(zero_copy_only=False)
            codes[nulls] = self.null_code
        return codes


class DeletedKeys:
    """The distinct key tuples of equality delete files, coded for look-ups.

    ``columns[j]``: the distinct values of the ``j``-th equality column; ``steps[j - 1]``:
    the sorted distinct codes ``prefix * columns[j].size + code`` of the deleted tuples'
    first ``j + 1`` columns, a prefix's code being its place in the step before.
    """

    __slots__ = ("columns", "empty", "steps")

    def __init__(self, columns: list[_KeyColumn], steps: list[np.ndarray], empty: bool):
        self.columns, self.steps, self.empty = columns, steps, empty


_KEYS: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], DeletedKeys] = {}


def deleted_keys(group: EqualityDeletes) -> DeletedKeys:
    """The key tuples ``group``'s delete files remove, read once per process (then kept)."""
    key = (group.files, group.pairs)
    with _DELETED_LOCK:
        found = _KEYS.get(key)
    if found is not None:
        return found
    names = [deleted for deleted, _data in group.pairs]
    tables = [pq.ParquetFile(path).read(columns=names) for path in dict.fromkeys(group.files)]
    table = pa.concat_tables(tables, promote_options="permissive")
    columns = [_KeyColumn(table.column(name)) for name in names]
    combined = columns[0].codes(table.column(names[0]).combine_chunks())
    steps: list[np.ndarray] = []
    for j in range(1, len(columns)):
        pairs = combined * columns[j].size + columns[j].codes(
            table.column(names[j]).combine_chunks()
        )
        step = _distinct(pairs)
        steps.append(step)
        combined = np.searchsorted(step, pairs)
    found = DeletedKeys(columns, steps, table.num_rows == 0)
    with _DELETED_LOCK:
        if len(_KEYS) >= _KEPT:
            _KEYS.pop(next(iter(_KEYS)))
        _KEYS[key] = found
    return found


def _distinct(values: np.ndarray) -> np.ndarray:
    """``values`` sorted, each once (``np.unique`` hashes, many times slower here)."""
    ordered = np.sort(values)
    if not len(ordered):
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def equality_mask(
    batch: pa.RecordBatch, group: EqualityDeletes, keys: DeletedKeys
) -> np.ndarray | None:
    """Which rows of ``batch`` (a data file's columns) ``group`` deletes (None: none).

    A row is deleted when its value of every equality column is not distinct from a deleted
    tuple's (``IS NOT DISTINCT FROM``: NULL equals NULL); a column the data file predates
    is NULL in every row. Each column after the first is looked up for the rows whose
    columns before it match a deleted tuple's only.
    """
    if keys.empty or not batch.num_rows:
        return None
    rows = None
    combined = np.empty(0, dtype=np.int64)
    for j, ((_deleted, data), column) in enumerate(zip(group.pairs, keys.columns, strict=True)):
        values = batch.column(data) if data else pa.nulls(batch.num_rows, column.distinct.type)
        if rows is not None:
            values = values.take(pa.array(rows))
        codes = column.codes(values)
        if j == 0:
            combined = codes
        else:
            step = keys.steps[j - 1]
            pairs = combined * column.size + codes
            at = np.minimum(np.searchsorted(step, pairs), len(step) - 1)
            combined = np.where((codes >= 0) & (step[at] == pairs), at, -1)
        there = np.flatnonzero(combined >= 0)
        if not len(there):
            return None
        rows = there if rows is None else rows[there]
        combined = combined[there]
    hit = np.zeros(batch.num_rows, dtype=bool)
    hit[rows] = True
    return hit
