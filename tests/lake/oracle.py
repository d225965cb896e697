"""What a snapshot of an Iceberg table, or a version of a Delta table, holds: the reference.

:func:`iceberg_rows` follows the Iceberg spec (format v2) by hand: pyiceberg only reads the
metadata (table metadata, manifest list, manifests, with the inherited sequence numbers);
the data and delete files are read with pyarrow. It applies

* the snapshot's schema (its ``schema-id``), columns matched to file columns by field id:
  renamed columns keep their values, columns added later read as NULL, promoted types cast;
* position deletes to a data file when the delete file's data sequence number is >= the data
  file's, the delete names the file, and both have the same spec and partition;
* equality deletes when the delete's data sequence number is strictly greater, scoped to the
  same spec and partition unless the delete file's spec is unpartitioned (a global delete);
  NULL equals NULL;
* deletion vectors (v3, Puffin ``deletion-vector-v1`` blobs, decoded here with pyroaring) like
  position deletes, matched by the blob's ``referenced-data-file``.

:func:`delta_rows` is delta-rs' own reader. :func:`same_rows` compares two results as
multisets of rows.

Nothing here imports sqlfeed.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import StaticTable, Table
from pyiceberg.table.metadata import TableMetadata
from pyroaring import BitMap

FIELD_ID = b"PARQUET:field_id"


@dataclass
class _Data:
    file: DataFile
    sequence: int


@dataclass
class _Deletes:
    positions: list[tuple[DataFile, int]] = field(default_factory=list)
    equalities: list[tuple[DataFile, int]] = field(default_factory=list)
    vectors: list[tuple[DataFile, int]] = field(default_factory=list)


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme in ("file", "") else uri


def _load(table_or_location: Table | str | Path) -> Table:
    if isinstance(table_or_location, Table):
        return table_or_location
    return StaticTable.from_metadata(str(table_or_location))


def _partition_key(data_file: DataFile) -> tuple[int, tuple[Any, ...]]:
    record = data_file.partition
    return data_file.spec_id, tuple(record[i] for i in range(len(record)))


def iceberg_rows(table_or_metadata_location: Table | str | Path, snapshot_id: int) -> pa.Table:
    """Every row of snapshot ``snapshot_id``, deletes applied, in the snapshot's schema.

    Args:
        table_or_metadata_location: A pyiceberg table or a ``…metadata.json`` path or URI.
        snapshot_id: The snapshot.
    """
    table = _load(table_or_metadata_location)
    metadata: TableMetadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise ValueError(f"no snapshot {snapshot_id} in {table.metadata_location}")
    schema_id = snapshot.schema_id if snapshot.schema_id is not None else metadata.current_schema_id
    schema = next(s for s in metadata.schemas if s.schema_id == schema_id)
    unpartitioned = {sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()}
    data: list[_Data] = []
    deletes = _Deletes()
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            seq = int(entry.sequence_number or 0)
            if f.content == DataFileContent.DATA:
                data.append(_Data(f, seq))
            elif f.file_format == FileFormat.PUFFIN:
                deletes.vectors.append((f, seq))
            elif f.content == DataFileContent.POSITION_DELETES:
                deletes.positions.append((f, seq))
            else:
                deletes.equalities.append((f, seq))
    positions = _position_deletes(deletes.positions)
    for path, found in _deletion_vectors(deletes.vectors).items():
        positions.setdefault(path, []).extend(found)
    equalities = [(f, seq, _read_equality(f)) for f, seq in deletes.equalities]
    out = [
        _file_rows(schema, d, positions, equalities, unpartitioned)
        for d in sorted(data, key=lambda d: d.file.file_path)
    ]
    empty = schema_to_pyarrow(schema, include_field_ids=False).empty_table()
    return pa.concat_tables([empty, *out]) if out else empty


def _position_deletes(
    files: Sequence[tuple[DataFile, int]],
) -> dict[str, list[tuple[tuple[int, tuple[Any, ...]], int, pa.Array]]]:
    """Data file path -> (delete's spec and partition, delete's sequence number, positions)."""
    out: dict[str, list[tuple[tuple[int, tuple[Any, ...]], int, pa.Array]]] = {}
    for f, seq in files:
        rows = pq.read_table(_local(f.file_path), columns=["file_path", "pos"])
        for path in pc.unique(rows["file_path"]).to_pylist():
            positions = rows.filter(pc.equal(rows["file_path"], path))["pos"].combine_chunks()
            out.setdefault(path, []).append((_partition_key(f), seq, positions))
    return out


def _deletion_vectors(
    files: Sequence[tuple[DataFile, int]],
) -> dict[str, list[tuple[tuple[int, tuple[Any, ...]], int, pa.Array]]]:
    """Data file path -> (spec and partition, sequence number, positions) from Puffin files.

    A manifest entry names a Puffin file; its footer names each blob's data file
    (``referenced-data-file``), so every blob is read once per Puffin file.
    """
    out: dict[str, list[tuple[tuple[int, tuple[Any, ...]], int, pa.Array]]] = {}
    seen: set[str] = set()
    for f, seq in files:
        if f.file_path in seen:
            continue
        seen.add(f.file_path)
        data = Path(_local(f.file_path)).read_bytes()
        if data[:4] != b"PFA1" or data[-4:] != b"PFA1" or data[-8] & 1:
            raise ValueError(f"{f.file_path}: not a Puffin file with a plain footer")
        size = int.from_bytes(data[-12:-8], "little")
        footer = json.loads(data[-12 - size : -12])
        for blob in footer["blobs"]:
            if blob["type"] != "deletion-vector-v1" or blob.get("compression-codec"):
                raise ValueError(f"{f.file_path}: unexpected blob {blob['type']}")
            raw = data[blob["offset"] : blob["offset"] + blob["length"]]
            positions = _vector_positions(raw)
            target = blob["properties"]["referenced-data-file"]
            out.setdefault(target, []).append((_partition_key(f), seq, pa.array(positions)))
    return out


def _vector_positions(blob: bytes) -> list[int]:
    """The positions of a ``deletion-vector-v1`` blob (length, magic, bitmaps, CRC checked)."""
    length = int.from_bytes(blob[:4], "big")
    body = blob[4 : 4 + length]
    if body[:4] != b"\xd1\xd3\x39\x64":
        raise ValueError("deletion vector: bad magic")
    if zlib.crc32(body) != int.from_bytes(blob[4 + length : 8 + length], "big"):
        raise ValueError("deletion vector: bad CRC")
    rest = body[4:]
    count, rest = int.from_bytes(rest[:8], "little"), rest[8:]
    out: list[int] = []
    for _ in range(count):
        key, rest = int.from_bytes(rest[:4], "little"), rest[4:]
        bitmap = BitMap.deserialize(rest)
        out.extend((key << 32) | p for p in bitmap)
        rest = rest[len(bitmap.serialize()) :]
    return out


@dataclass
class _Equality:
    ids: list[int]
    keys: set[tuple[Any, ...]]


def _read_equality(f: DataFile) -> _Equality:
    ids = list(f.equality_ids or [])
    rows = pq.read_table(_local(f.file_path))
    by_id = _columns_by_id(rows)
    columns = [by_id[i].to_pylist() for i in ids]
    return _Equality(ids, {_key(values) for values in zip(*columns, strict=True)})


def _key(values: Iterable[Any]) -> tuple[Any, ...]:
    """A hashable row key where NULL equals NULL and NaN equals NaN."""
    return tuple(("NaN",) if isinstance(v, float) and math.isnan(v) else v for v in values)


def _columns_by_id(rows: pa.Table) -> dict[int, pa.ChunkedArray]:
    out = {}
    for i, f in enumerate(rows.schema):
        if f.metadata and FIELD_ID in f.metadata:
            out[int(f.metadata[FIELD_ID])] = rows.column(i)
    return out


def _file_rows(
    schema: Schema,
    data: _Data,
    positions: dict[str, list[tuple[tuple[int, tuple[Any, ...]], int, pa.Array]]],
    equalities: list[tuple[DataFile, int, _Equality]],
    unpartitioned: set[int],
) -> pa.Table:
    rows = pq.read_table(_local(data.file.file_path))
    by_id = _columns_by_id(rows)
    keep = [True] * rows.num_rows
    where = _partition_key(data.file)
    for partition, seq, deleted in positions.get(data.file.file_path, []):
        if seq >= data.sequence and partition == where:
            for p in deleted.to_pylist():
                keep[p] = False
    for f, seq, eq in equalities:
        scoped = f.spec_id in unpartitioned or _partition_key(f) == where
        if seq <= data.sequence or not scoped:
            continue
        columns = [by_id[i].to_pylist() if i in by_id else [None] * rows.num_rows for i in eq.ids]
        for n, values in enumerate(zip(*columns, strict=True)):
            if keep[n] and _key(values) in eq.keys:
                keep[n] = False
    target = schema_to_pyarrow(schema, include_field_ids=False)
    arrays = []
    for column, arrow_field in zip(schema.fields, target, strict=True):
        if column.field_id in by_id:
            arrays.append(by_id[column.field_id].cast(arrow_field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, arrow_field.type))
    projected = pa.Table.from_arrays(arrays, schema=target)
    return projected.filter(pa.array(keep, pa.bool_()))


def delta_rows(path: str | Path, version: int) -> pa.Table:
    """Every row of version ``version`` of the Delta table at ``path``, read by delta-rs."""
    table = DeltaTable(str(path), version=version)
    return pa.RecordBatchReader.from_stream(table.scan()).read_all()


def _normal(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return value


def _rows(table: pa.Table, names: Sequence[str]) -> Counter[tuple[Any, ...]]:
    columns = [table.column(n).to_pylist() for n in names]
    return Counter(tuple(_normal(v) for v in row) for row in zip(*columns, strict=True))


def same_rows(a: pa.Table, b: pa.Table, *, limit: int = 10) -> None:
    """Asserts ``a`` and ``b`` hold the same rows (any order, duplicates counted).

    Columns are matched by name (their order may differ); NULL equals NULL, NaN equals NaN;
    values are compared as Python values (an int32 1 equals an int64 1).
    """
    if sorted(a.column_names) != sorted(b.column_names):
        raise AssertionError(f"columns differ: {a.column_names} vs {b.column_names}")
    names = a.column_names
    left, right = _rows(a, names), _rows(b, names)
    if left == right:
        return
    only_a = sorted((left - right).items(), key=repr)[:limit]
    only_b = sorted((right - left).items(), key=repr)[:limit]
    raise AssertionError(
        f"rows differ ({a.num_rows} vs {b.num_rows} rows; columns {names}): "
        f"{sum((left - right).values())} only in the first, e.g. {only_a}; "
        f"{sum((right - left).values())} only in the second, e.g. {only_b}"
    )
