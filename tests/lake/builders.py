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

import datetime
import itertools
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
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
    """
    columns = [partition_by] if isinstance(partition_by, str) else partition_by
    write_deltalake(
        str(path),
        data,
        partition_by=list(columns) if columns else None,
        writer_properties=_delta_writer(row_group_rows),
        target_file_size=target_file_size,
        configuration=COLUMN_MAPPING if column_mapping else None,
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


def delta_versions(path: Path) -> list[int]:
    """Every version of the table, oldest first."""
    return list(range(DeltaTable(str(path)).version() + 1))
