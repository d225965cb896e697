"""Iceberg and Delta test tables written on the fly, deletes included.

pyiceberg (0.12) writes data files and schema changes; it has no writer for row-level
deletes, so :func:`delete_positions` and :func:`delete_equal` write the delete files per the
Iceberg spec with pyarrow and commit them through pyiceberg's snapshot producer, in a
``DELETES`` manifest whose sequence number the commit assigns. deltalake (delta-rs) writes the
Delta tables; its DELETE rewrites files (it writes no deletion vectors, even with the feature
enabled), so :func:`delta_delete` leaves rewritten files behind, not vectors.

Nothing here imports sqlfeed: the tests compare sqlfeed's partitions with
:mod:`tests.lake.oracle`, which must not share code with ``sqlfeed/lake``.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import json
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, WriterProperties, write_deltalake
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import IcebergType, LongType, PrimitiveType, StringType
from pyroaring import BitMap

NAMESPACE = "lake"
POS_FILE_PATH_ID = 2147483546
"""The spec's reserved field id of ``file_path`` in a position delete file."""
POS_POS_ID = 2147483545
"""The spec's reserved field id of ``pos`` in a position delete file."""
FILE_ROWS_PROPERTY = "sqlfeed-test.target-file-rows"
"""Our table property: :func:`append` cuts the data into files of at most this many rows."""
COLUMN_MAPPING = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}
"""Delta table configuration for column mapping by name (reader 2, writer 5)."""
ROW_GROUP_LIMIT = "write.parquet.row-group-limit"
"""pyiceberg 0.12 honours this one (rows per row group); ``row-group-size-bytes`` only warns."""


# --------------------------------------------------------------------------------------------
# Iceberg: tables, appends, schema evolution


def iceberg_catalog(folder: Path, name: str = "test") -> SqlCatalog:
    """A pyiceberg SQL catalog on a SQLite file in ``folder``, its warehouse in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        name,
        uri=f"sqlite:///{folder / 'catalog.db'}",
        warehouse=folder.resolve().as_uri(),
    )
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog


def iceberg_table(
    catalog: Catalog,
    name: str,
    data: pa.Table,
    *,
    partition_by: str | None = None,
    format_version: int = 2,
    target_file_rows: int | None = None,
    row_group_rows: int | None = None,
) -> Table:
    """A new table ``NAMESPACE.name`` holding ``data`` (its first snapshot).

    Args:
        catalog: From :func:`iceberg_catalog`.
        name: The table's name in the namespace ``lake``.
        data: The first snapshot's rows; its schema becomes the table's.
        partition_by: A column to partition on (identity); the table is created unpartitioned
            (spec 0) and then partitioned (spec 1), so a global equality delete has an
            unpartitioned spec to live in.
        format_version: 1 or 2 (pyiceberg 0.12 cannot write version 3 metadata).
        target_file_rows: Rows per data file (at most); every :func:`append` keeps to it.
        row_group_rows: Rows per Parquet row group; by default a quarter of
            ``target_file_rows`` so each file has several row groups.
    """
    properties = {"format-version": str(format_version)}
    if target_file_rows:
        properties[FILE_ROWS_PROPERTY] = str(target_file_rows)
        row_group_rows = row_group_rows or max(1, target_file_rows // 4)
    if row_group_rows:
        properties[ROW_GROUP_LIMIT] = str(row_group_rows)
    table = catalog.create_table(f"{NAMESPACE}.{name}", data.schema, properties=properties)
    if partition_by is not None:
        add_partition(table, partition_by)
    append(table, data)
    return table


def append(table: Table, data: pa.Table) -> int:
    """Appends ``data`` as one snapshot, in files of the table's target rows; its id."""
    rows = int(table.properties.get(FILE_ROWS_PROPERTY, max(1, data.num_rows)))
    counter = itertools.count(0)
    with table.transaction() as txn, txn.update_snapshot().fast_append() as producer:
        for start in range(0, data.num_rows, rows):
            for data_file in _dataframe_to_data_files(
                table_metadata=txn.table_metadata,
                df=data.slice(start, rows),
                io=table.io,
                write_uuid=producer.commit_uuid,
                counter=counter,
            ):
                producer.append_data_file(data_file)
    return _current_snapshot_id(table)


def add_partition(table: Table, column: str) -> None:
    """Adds an identity partition on ``column``: a new default spec (older files keep theirs)."""
    with table.update_spec() as spec:
        spec.add_identity(column)


def add_column(table: Table, name: str, type_: IcebergType) -> None:
    """Adds an optional column (existing files read it as NULL)."""
    with table.update_schema() as update:
        update.add_column(name, type_)


def rename_column(table: Table, old: str, new: str) -> None:
    """Renames a column (its field id stays: old files are matched by id)."""
    with table.update_schema() as update:
        update.rename_column(old, new)


def promote_column(table: Table, name: str, type_: PrimitiveType) -> None:
    """Widens a column's type (int to long, float to double): old files are cast on read."""
    with table.update_schema() as update:
        update.update_column(name, field_type=type_)


def snapshot_ids(table: Table) -> list[int]:
    """The table's snapshot ids, oldest first (the metadata lists them in commit order)."""
    return [s.snapshot_id for s in table.metadata.snapshots]


def _current_snapshot_id(table: Table) -> int:
    snapshot = table.current_snapshot()
    if snapshot is None:
        raise ValueError(f"table {table.name()} has no snapshot")
    return snapshot.snapshot_id


@dataclass(frozen=True)
class LiveFile:
    """A data file of a snapshot, as its manifest names it."""

    file_path: str
    record_count: int
    spec_id: int
    partition: Record
    sequence_number: int

    @property
    def path(self) -> str:
        """:attr:`file_path` (the key :func:`delete_positions` takes)."""
        return self.file_path


def live_data_files(table: Table, snapshot_id: int | None = None) -> list[LiveFile]:
    """The data files of a snapshot (the current one by default), in manifest order."""
    snapshot = (
        table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    )
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            seq = entry.sequence_number if entry.sequence_number is not None else 0
            out.append(LiveFile(f.file_path, f.record_count, f.spec_id, f.partition, seq))
    return out


# --------------------------------------------------------------------------------------------
# Iceberg: row-level deletes committed through pyiceberg


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, writing a manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _RowDelta(_FastAppendFiles):
    """A snapshot that adds delete files (operation ``delete``), keeping every manifest.

    The added files go to one new ``DELETES`` manifest per partition spec; their entries have
    no sequence number, so they inherit the one the commit assigns to the manifest.
    """

    def _manifests(self) -> list[Any]:
        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for delete_file in self._added_data_files:
            by_spec[delete_file.spec_id].append(delete_file)
        written = []
        for spec_id, files in by_spec.items():
            writer = _DeleteManifestWriter(
                spec=self.spec(spec_id),
                schema=self.schema(),
                output_file=self.new_manifest_output(),
                snapshot_id=self.snapshot_id,
                avro_compression=self._compression,
            )
            with writer:
                for delete_file in files:
                    writer.add_entry(_added_entry(self.snapshot_id, delete_file))
            written.append(writer.to_manifest_file())
        return written + self._existing_manifests()


def _added_entry(snapshot_id: int, data_file: DataFile) -> Any:
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

    return ManifestEntry.from_args(
        status=ManifestEntryStatus.ADDED,
        snapshot_id=snapshot_id,
        sequence_number=None,
        file_sequence_number=None,
        data_file=data_file,
    )


def _commit_delete_files(table: Table, files: Sequence[DataFile]) -> int:
    with table.transaction() as txn:
        producer = _RowDelta(operation=Operation.DELETE, transaction=txn, io=table.io)
        for delete_file in files:
            producer.append_data_file(delete_file)
        producer.commit()
    return _current_snapshot_id(table)


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(parsed.path) if parsed.scheme in ("file", "") else Path(uri)


def _delete_file_location(table: Table, kind: str) -> str:
    return f"{table.location().rstrip('/')}/data/{kind}-{uuid.uuid4()}.parquet"


def _write_parquet(location: str, rows: pa.Table) -> int:
    path = _local_path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    return path.stat().st_size


def delete_positions(table: Table, deletes: Mapping[str, Sequence[int]]) -> int:
    """Deletes rows by position: one position delete file per partition; the new snapshot's id.

    Args:
        table: The table (its current snapshot holds the data files).
        deletes: Data file path (as the manifests spell it, see :func:`live_data_files`) to
            0-based row positions in that file.
    """
    files = {f.file_path: f for f in live_data_files(table)}
    groups: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)
    for path, positions in deletes.items():
        if path not in files:
            raise ValueError(f"{path} is not a live data file of {table.name()}")
        live = files[path]
        key = (live.spec_id, repr(live.partition))
        groups[key].extend((path, int(p)) for p in positions)
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    out = []
    for pairs in groups.values():
        pairs = sorted(set(pairs))
        live = files[pairs[0][0]]
        rows = pa.table([[p for p, _ in pairs], [q for _, q in pairs]], schema=schema)
        location = _delete_file_location(table, "pos-deletes")
        size = _write_parquet(location, rows)
        bounds = {
            POS_FILE_PATH_ID: (pairs[0][0], pairs[-1][0], StringType()),
            POS_POS_ID: (min(q for _, q in pairs), max(q for _, q in pairs), LongType()),
        }
        out.append(
            _delete_data_file(
                DataFileContent.POSITION_DELETES,
                location,
                rows.num_rows,
                size,
                live.spec_id,
                live.partition,
                bounds=bounds,
            )
        )
    return _commit_delete_files(table, out)


def delete_equal(
    table: Table, rows: pa.Table, *, partition: Mapping[str, Any] | None = None
) -> int:
    """Deletes every row equal to one of ``rows`` on ``rows``' columns; the new snapshot's id.

    The delete file's columns are ``rows``' columns with their field ids, ``equality_ids`` name
    them; NULL in a delete row matches NULL. It applies to data files with a smaller data
    sequence number only (files appended later keep equal rows).

    Args:
        table: The table.
        rows: The equality columns (current names) and the values to delete.
        partition: For a partitioned table, the partition the delete is scoped to (column name
            to value, identity transforms); None: a global delete, written with the table's
            unpartitioned spec (every :func:`iceberg_table` has spec 0 unpartitioned).
    """
    schema: Schema = table.schema()
    ids = [schema.find_field(name).field_id for name in rows.column_names]
    arrow_schema = schema_to_pyarrow(schema.select(*rows.column_names))
    delete_rows = rows.select(arrow_schema.names).cast(arrow_schema)
    spec, record = _partition_of(table, partition)
    location = _delete_file_location(table, "eq-deletes")
    size = _write_parquet(location, delete_rows)
    delete_file = _delete_data_file(
        DataFileContent.EQUALITY_DELETES,
        location,
        delete_rows.num_rows,
        size,
        spec.spec_id,
        record,
        equality_ids=ids,
    )
    return _commit_delete_files(table, [delete_file])


def _partition_of(
    table: Table, partition: Mapping[str, Any] | None
) -> tuple[PartitionSpec, Record]:
    if partition is None:
        for spec in table.specs().values():
            if spec.is_unpartitioned():
                return spec, Record()
        raise ValueError(f"{table.name()} has no unpartitioned spec for a global delete")
    spec = table.spec()
    schema = table.schema()
    values = []
    for field in spec.fields:
        if not isinstance(field.transform, IdentityTransform):
            raise ValueError(f"only identity partitions are supported, not {field.transform}")
        value = partition[schema.find_field(field.source_id).name]
        if isinstance(value, datetime.date):
            value = (value - datetime.date(1970, 1, 1)).days
        values.append(value)
    return spec, Record(*values)


def _delete_data_file(
    content: DataFileContent,
    location: str,
    record_count: int,
    size: int,
    spec_id: int,
    partition: Record,
    *,
    equality_ids: list[int] | None = None,
    bounds: Mapping[int, tuple[Any, Any, PrimitiveType]] | None = None,
) -> DataFile:
    lower = {i: to_bytes(t, lo) for i, (lo, _, t) in (bounds or {}).items()}
    upper = {i: to_bytes(t, hi) for i, (_, hi, t) in (bounds or {}).items()}
    data_file = DataFile.from_args(
        content=content,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=record_count,
        file_size_in_bytes=size,
        lower_bounds=lower or None,
        upper_bounds=upper or None,
        equality_ids=equality_ids,
        sort_order_id=None,
        key_metadata=None,
    )
    data_file.spec_id = spec_id
    return data_file


# --------------------------------------------------------------------------------------------
# Iceberg v3 deletion vectors, committed by hand

DV_MAGIC = b"\xd1\xd3\x39\x64"
"""The magic bytes of a ``deletion-vector-v1`` blob."""
ROW_POSITION_ID = 2147483645
"""The spec's reserved field id of ``_pos`` (the field a deletion vector blob names)."""


class _ManifestWriterV3(ManifestWriterV2):
    """A v3 manifest of delete files, its entries bound to the v3 ``data_file`` struct."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def version(self) -> Literal[3]:  # type: ignore[override]
        return 3

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes", "format-version": "3"}

    def new_writer(self) -> Any:
        from pyiceberg.avro.file import AvroOutputFile

        return AvroOutputFile[Any](
            output_file=self._output_file,
            file_schema=self._with_partition(3),
            record_schema=self._with_partition(3),
            schema_name="manifest_entry",
            metadata=self._meta,
        )


def _dv_blob(positions: Iterable[int]) -> bytes:
    """A ``deletion-vector-v1`` blob: length (4 bytes BE) of magic + vector, the magic, the
    64-bit roaring bitmap (:func:`roaring64`), CRC-32 of magic + vector (4 bytes BE)."""
    body = DV_MAGIC + roaring64(positions)
    return len(body).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")


def _write_puffin(location: str, blobs: Sequence[tuple[str, list[int]]]) -> list[tuple[int, int]]:
    """A Puffin file of one vector per data file; each blob's (offset, length)."""
    out = bytearray(b"PFA1")
    placed, meta = [], []
    for data_path, positions in blobs:
        blob = _dv_blob(positions)
        placed.append((len(out), len(blob)))
        meta.append(
            {
                "type": "deletion-vector-v1",
                "fields": [ROW_POSITION_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": len(out),
                "length": len(blob),
                "properties": {
                    "referenced-data-file": data_path,
                    "cardinality": str(len(set(positions))),
                },
            }
        )
        out += blob
    footer = json.dumps({"blobs": meta, "properties": {"created-by": "sqlfeed tests"}}).encode()
    out += b"PFA1" + footer + len(footer).to_bytes(4, "little") + bytes(4) + b"PFA1"
    path = _local_path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return placed


def delete_vector(table: Table, deletes: Mapping[str, Sequence[int]]) -> int:
    """Deletes rows with Iceberg v3 deletion vectors; the new snapshot's id.

    pyiceberg 0.12 reads v3 tables and vectors but writes neither (its metadata writer raises
    for v3, its manifest writers stop at v2). This writes, per the spec: one Puffin file
    holding a ``deletion-vector-v1`` blob per data file; a v3 ``DELETES`` manifest whose
    entries (content position deletes, format ``puffin``) carry ``referenced_data_file``,
    ``content_offset`` and ``content_size_in_bytes``; a v3 manifest list (the parent's
    manifests and the new one); the table metadata, upgraded to format version 3 if needed
    (``next-row-id`` 0: no row ids assigned); and points the SQL catalog at it. ``table`` is
    refreshed. A data file must not already have a vector (v3 allows one per file).

    Args:
        table: A pyiceberg table in a :func:`iceberg_catalog` (no equality deletes needed).
        deletes: Data file path (as the manifests spell it) to 0-based row positions.
    """
    metadata = table.metadata
    files = {f.file_path: f for f in live_data_files(table)}
    snapshot_id = metadata.new_snapshot_id()
    sequence = metadata.next_sequence_number()
    location = f"{table.location().rstrip('/')}/data/dv-{uuid.uuid4()}.puffin"
    items = sorted((p, sorted(set(map(int, q)))) for p, q in deletes.items())
    placed = _write_puffin(location, items)
    size = _local_path(location).stat().st_size
    by_spec: dict[int, list[DataFile]] = defaultdict(list)
    for (data_path, positions), (offset, length) in zip(items, placed, strict=True):
        live = files[data_path]
        dv = DataFile.from_args(
            _table_format_version=3,
            content=DataFileContent.POSITION_DELETES,
            file_path=location,
            file_format=FileFormat.PUFFIN,
            partition=live.partition,
            record_count=len(positions),
            file_size_in_bytes=size,
            referenced_data_file=data_path,
            content_offset=offset,
            content_size_in_bytes=length,
        )
        dv.spec_id = live.spec_id
        by_spec[live.spec_id].append(dv)
    manifests = [
        _write_v3_delete_manifest(table, spec_id, dvs, snapshot_id)
        for spec_id, dvs in by_spec.items()
    ]
    _commit_v3(table, snapshot_id, sequence, manifests)
    return snapshot_id


def _write_v3_delete_manifest(
    table: Table, spec_id: int, dvs: Sequence[DataFile], snapshot_id: int
) -> Any:
    name = f"{table.location().rstrip('/')}/metadata/{uuid.uuid4()}-m0.avro"
    writer = _ManifestWriterV3(
        spec=table.specs()[spec_id],
        schema=table.schema(),
        output_file=table.io.new_output(name),
        snapshot_id=snapshot_id,
        avro_compression="null",
    )
    with writer:
        for dv in dvs:
            writer.add_entry(_added_entry(snapshot_id, dv))
    return writer.to_manifest_file()


def _commit_v3(table: Table, snapshot_id: int, sequence: int, new: Sequence[Any]) -> None:
    from pyiceberg.manifest import ManifestListWriterV2
    from pyiceberg.table.metadata import TableMetadataV3
    from pyiceberg.typedef import IcebergBaseModel

    metadata = table.metadata
    parent = table.current_snapshot()
    existing = list(parent.manifests(table.io)) if parent else []
    list_path = f"{table.location().rstrip('/')}/metadata/snap-{snapshot_id}-{uuid.uuid4()}.avro"
    parent_id = parent.snapshot_id if parent else None
    with ManifestListWriterV2(
        table.io.new_output(list_path), snapshot_id, parent_id, sequence, "null"
    ) as writer:
        writer._format_version = 3  # type: ignore[assignment]
        writer.add_manifests([*new, *existing])
    deleted = sum(m.added_rows_count or 0 for m in new)
    now = int(time.time() * 1000)
    snapshot = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent_id,
        "sequence-number": sequence,
        "timestamp-ms": now,
        "manifest-list": list_path,
        "summary": {
            "operation": "delete",
            "added-delete-files": str(len(new)),
            "added-position-deletes": str(deleted),
        },
        "schema-id": metadata.current_schema_id,
        "first-row-id": getattr(metadata, "next_row_id", None) or 0,
        "added-rows": 0,
    }
    raw = json.loads(IcebergBaseModel.model_dump_json(metadata))
    raw["format-version"] = 3
    raw.setdefault("next-row-id", 0)
    raw["last-sequence-number"] = sequence
    raw["last-updated-ms"] = now
    raw["current-snapshot-id"] = snapshot_id
    raw["snapshots"] = [*raw.get("snapshots", []), snapshot]
    raw["refs"] = {**raw.get("refs", {}), "main": {"snapshot-id": snapshot_id, "type": "branch"}}
    log = {"snapshot-id": snapshot_id, "timestamp-ms": now}
    raw["snapshot-log"] = [*raw.get("snapshot-log", []), log]
    raw["metadata-log"] = [
        *raw.get("metadata-log", []),
        {"metadata-file": table.metadata_location, "timestamp-ms": metadata.last_updated_ms},
    ]
    TableMetadataV3.model_validate(raw)  # the metadata is one pyiceberg reads
    number = int(Path(urlparse(table.metadata_location).path).name.split("-")[0]) + 1
    new_location = (
        f"{table.location().rstrip('/')}/metadata/{number:05d}-{uuid.uuid4()}.metadata.json"
    )
    _local_path(new_location).write_text(json.dumps(raw))
    _point_catalog(table, new_location)


def _point_catalog(table: Table, location: str) -> None:
    """Points the SQL catalog's row for ``table`` at ``location``; refreshes ``table``."""
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import update

    catalog = table.catalog
    if not isinstance(catalog, SqlCatalog):
        raise ValueError("delete_vector needs a table of a SqlCatalog")
    namespace, name = table.name()[:-1], table.name()[-1]
    with catalog.engine.begin() as connection:
        connection.execute(
            update(IcebergTables)
            .where(IcebergTables.catalog_name == catalog.name)
            .where(IcebergTables.table_namespace == ".".join(namespace))
            .where(IcebergTables.table_name == name)
            .values(metadata_location=location, previous_metadata_location=table.metadata_location)
        )
    table.refresh()


# --------------------------------------------------------------------------------------------
# Delta


def _delta_writer(row_group_rows: int | None) -> WriterProperties:
    return WriterProperties(max_row_group_size=row_group_rows)


def delta_table(
    path: Path,
    data: pa.Table,
    *,
    partition_by: str | Sequence[str] | None = None,
    row_group_rows: int | None = None,
    target_file_size: int | None = None,
    column_mapping: bool = False,
    deletion_vectors: bool = False,
) -> int:
    """A new Delta table at ``path`` holding ``data`` (version 0); its version.

    Args:
        path: The table's folder.
        data: The rows.
        partition_by: Partition columns.
        row_group_rows: Rows per Parquet row group (several row groups per file).
        target_file_size: Bytes per data file, delta-rs' only file-size knob.
        column_mapping: Column mapping mode ``name`` (physical names ``col-<uuid>``), which
            :func:`delta_rename_column` needs.
        deletion_vectors: The ``deletionVectors`` feature (reader 3, writer 7), which
            :func:`delta_delete_vector` needs.
    """
    columns = [partition_by] if isinstance(partition_by, str) else partition_by
    write_deltalake(
        str(path),
        data,
        partition_by=list(columns) if columns else None,
        writer_properties=_delta_writer(row_group_rows),
        target_file_size=target_file_size,
        configuration={
            **(COLUMN_MAPPING if column_mapping else {}),
            **({"delta.enableDeletionVectors": "true"} if deletion_vectors else {}),
        }
        or None,
    )
    return DeltaTable(str(path)).version()


def delta_append(
    path: Path,
    data: pa.Table,
    *,
    row_group_rows: int | None = None,
    merge_schema: bool = False,
) -> int:
    """Appends ``data`` as a new version (``merge_schema``: new columns added); the version."""
    schema_mode: Literal["merge"] | None = "merge" if merge_schema else None
    write_deltalake(
        str(path),
        data,
        mode="append",
        schema_mode=schema_mode,
        writer_properties=_delta_writer(row_group_rows),
    )
    return DeltaTable(str(path)).version()


def delta_delete(path: Path, predicate: str, *, row_group_rows: int | None = None) -> int:
    """Deletes the rows matching ``predicate`` (delta-rs rewrites the files); the version."""
    DeltaTable(str(path)).delete(predicate, writer_properties=_delta_writer(row_group_rows))
    return DeltaTable(str(path)).version()


def delta_rename_column(path: Path, old: str, new: str) -> int:
    """Renames a column of a column-mapped table; the version.

    delta-rs has no rename (and refuses ADD COLUMN and schema merges on column-mapped tables):
    this commits, by hand, a ``metaData`` action whose schema gives the column its new logical
    name (its physical name and id stay), as the protocol's column mapping allows.
    """
    table = DeltaTable(str(path))
    if table.metadata().configuration.get("delta.columnMapping.mode") != "name":
        raise ValueError(f"{path}: a rename needs delta_table(column_mapping=True)")
    version = table.version()
    metadata = _latest_metadata(path, version)
    schema = json.loads(metadata["schemaString"])
    for column in schema["fields"]:
        if column["name"] == old:
            column["name"] = new
            break
    else:
        raise ValueError(f"{path} has no column {old}")
    metadata["schemaString"] = json.dumps(schema)
    info = _commit_info("RENAME COLUMN", {"oldColumnPath": old, "newColumnPath": new})
    _commit_delta(path, version + 1, [info, {"metaData": metadata}])
    return version + 1


def delta_enable_column_mapping(path: Path) -> int:
    """Turns column mapping (name) on for an existing table, by a hand-written commit; the version.

    delta-rs refuses to set ``delta.columnMapping.mode`` on a table; the protocol lets a writer
    upgrade it (reader 2, writer 5) with each existing column's physical name its own name.
    """
    version = DeltaTable(str(path)).version()
    metadata = _latest_metadata(path, version)
    schema = json.loads(metadata["schemaString"])
    for n, column in enumerate(schema["fields"], 1):
        column.setdefault("metadata", {}).update(
            {"delta.columnMapping.id": n, "delta.columnMapping.physicalName": column["name"]}
        )
    metadata["schemaString"] = json.dumps(schema)
    metadata["configuration"] = {
        **metadata.get("configuration", {}),
        **COLUMN_MAPPING,
        "delta.columnMapping.maxColumnId": str(len(schema["fields"])),
    }
    protocol = {"minReaderVersion": 2, "minWriterVersion": 5}
    info = _commit_info("SET TBLPROPERTIES", {"properties": json.dumps(COLUMN_MAPPING)})
    _commit_delta(path, version + 1, [info, {"protocol": protocol}, {"metaData": metadata}])
    return version + 1


def delta_table_features(
    path: Path, reader: Sequence[str], writer: Sequence[str], configuration: Mapping[str, str]
) -> int:
    """Moves the table to reader 3 / writer 7 with these table features, by a hand-written
    commit; the version. delta-rs cannot turn ``columnMapping`` on as a table feature (it
    writes a column-mapped table with other features as one without mapping in force).

    Args:
        path: The table's folder.
        reader: Reader features (``columnMapping``, ``deletionVectors``, ...).
        writer: Writer features.
        configuration: Table properties added (``delta.enableDeletionVectors``: ``true``).
    """
    version = DeltaTable(str(path)).version()
    metadata = _latest_metadata(path, version)
    metadata["configuration"] = {**metadata.get("configuration", {}), **configuration}
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": list(reader),
        "writerFeatures": list(writer),
    }
    info = _commit_info("SET TBLPROPERTIES", {"properties": json.dumps(dict(configuration))})
    _commit_delta(path, version + 1, [info, {"protocol": protocol}, {"metaData": metadata}])
    return version + 1


def delta_add_file(path: Path, data: pa.Table, partition_values: Mapping[str, str]) -> int:
    """Adds ``data`` as one Parquet file (its columns as given, names as the file's), by a
    hand-written commit; the version. For files a writer wrote wrongly (a column missing)."""
    name = f"part-hand-{uuid.uuid4()}.parquet"
    pq.write_table(data, path / name)
    stats = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    add = {
        "path": name,
        "partitionValues": dict(partition_values),
        "size": (path / name).stat().st_size,
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
        "stats": json.dumps(stats),
    }
    version = DeltaTable(str(path)).version() + 1
    _commit_delta(path, version, [_commit_info("WRITE", {"mode": "Append"}), {"add": add}])
    return version


def _commit_info(operation: str, parameters: Mapping[str, str]) -> dict[str, Any]:
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": dict(parameters),
        }
    }


def _latest_metadata(path: Path, version: int) -> dict[str, Any]:
    for v in range(version, -1, -1):
        log = path / "_delta_log" / f"{v:020d}.json"
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                return dict(action["metaData"])
    raise ValueError(f"{path}: no metaData action in the log")


def _commit_delta(path: Path, version: int, actions: Sequence[Mapping[str, Any]]) -> None:
    log = path / "_delta_log" / f"{version:020d}.json"
    with log.open("x") as out:  # "x": a concurrent commit of the same version fails
        out.write("".join(json.dumps(a) + "\n" for a in actions))


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
"""The Z85 alphabet (Delta encodes a deletion vector file's UUID with it)."""
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
DELTA_DV_MAGIC = 1681511377
"""The RoaringBitmapArray magic number a Delta deletion vector starts with."""


def z85(data: bytes) -> str:
    """Z85 of ``data`` (a multiple of 4 bytes): base64.b85encode's digits, Z85's alphabet."""
    if len(data) % 4:
        raise ValueError("Z85 encodes multiples of 4 bytes")
    return base64.b85encode(data).decode().translate(str.maketrans(_B85, Z85))


def roaring64(positions: Iterable[int]) -> bytes:
    """Positions as a 64-bit roaring bitmap, "portable" layout (Iceberg and Delta vectors):
    the count of 32-bit bitmaps (8 bytes LE), then each one's high 32 bits (4 bytes LE) and
    its 32-bit roaring bitmap in the portable format."""
    buckets: dict[int, list[int]] = defaultdict(list)
    for p in positions:
        buckets[int(p) >> 32].append(int(p) & 0xFFFFFFFF)
    out = [len(buckets).to_bytes(8, "little")]
    for key in sorted(buckets):
        out += [key.to_bytes(4, "little"), BitMap(buckets[key]).serialize()]
    return b"".join(out)


def _delta_live_adds(path: Path) -> dict[str, dict[str, Any]]:
    """Replays the JSON log (no checkpoints in these small tables): path -> live add action."""
    live: dict[str, dict[str, Any]] = {}
    for log in sorted((path / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return live


def delta_data_files(path: Path) -> dict[str, int]:
    """The live data files of the latest version (paths relative to the table) -> row count."""
    return {
        p: int(json.loads(add["stats"])["numRecords"]) for p, add in _delta_live_adds(path).items()
    }


def delta_delete_vector(path: Path, deletes: Mapping[str, Sequence[int]]) -> int:
    """Deletes rows by position with deletion vectors, by a hand-written commit; the version.

    delta-rs (1.6.6) reads deletion vectors but writes none (its DELETE rewrites files even
    with the feature on). Per the protocol: one ``deletion_vector_<uuid>.bin`` file (format
    version byte 1, then per vector its size (4 bytes BE), the RoaringBitmapArray (magic
    1681511377 LE + :func:`roaring64`), its CRC-32 (4 bytes BE)), and for each data file a
    ``remove`` of its add and an ``add`` of the same path with a ``deletionVector`` descriptor
    (storage ``u``: the UUID in Z85, ``offset`` at the size field). Positions are 0-based rows
    of the file; a file that already has a vector keeps its old positions too.

    Args:
        path: A table created with deletion vectors on (``delta_table(deletion_vectors=True)``).
        deletes: Data file path (relative, see :func:`delta_data_files`) to row positions.
    """
    table = DeltaTable(str(path))
    if "deletionVectors" not in (table.protocol().reader_features or []):
        raise ValueError(f"{path}: create it with delta_table(deletion_vectors=True)")
    live = _delta_live_adds(path)
    dv_id = uuid.uuid4()
    blob = bytearray(b"\x01")
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [_commit_info("DELETE", {"predicate": "deletion vector"})]
    for file_path, positions in deletes.items():
        add = dict(live[file_path])
        old = add.get("deletionVector")
        merged = set(map(int, positions)) | (set(_read_delta_dv(path, old)) if old else set())
        data = DELTA_DV_MAGIC.to_bytes(4, "little") + roaring64(merged)
        offset = len(blob)
        blob += len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")
        actions.append(
            {
                "remove": {
                    "path": file_path,
                    "deletionTimestamp": now,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": add.get("partitionValues", {}),
                    "size": add["size"],
                    **({"deletionVector": old} if old else {}),
                }
            }
        )
        stats = json.loads(add["stats"])
        stats["tightBounds"] = False
        add.update(
            modificationTime=now,
            dataChange=True,
            stats=json.dumps(stats),
            deletionVector={
                "storageType": "u",
                "pathOrInlineDv": z85(dv_id.bytes),
                "offset": offset,
                "sizeInBytes": len(data),
                "cardinality": len(merged),
            },
        )
        actions.append({"add": add})
    (path / f"deletion_vector_{dv_id}.bin").write_bytes(bytes(blob))
    version = table.version() + 1
    _commit_delta(path, version, actions)
    return version


def _read_delta_dv(path: Path, descriptor: Mapping[str, Any]) -> list[int]:
    """The positions of a ``u`` deletion vector this module wrote (for merging)."""
    chars = str(descriptor["pathOrInlineDv"])[-20:]
    raw = base64.b85decode(chars.translate(str.maketrans(Z85, _B85)))
    data = (path / f"deletion_vector_{uuid.UUID(bytes=raw)}.bin").read_bytes()
    start = int(descriptor["offset"]) + 4
    body = data[start + 4 : start + int(descriptor["sizeInBytes"])]
    count, body = int.from_bytes(body[:8], "little"), body[8:]
    out: list[int] = []
    for _ in range(count):
        key, body = int.from_bytes(body[:4], "little"), body[4:]
        bitmap = BitMap.deserialize(body)
        out.extend((key << 32) | p for p in bitmap)
        body = body[len(bitmap.serialize()) :]
    return out


def delta_versions(path: Path) -> list[int]:
    """Every version of the table, oldest first."""
    return list(range(DeltaTable(str(path)).version() + 1))
