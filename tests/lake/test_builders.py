"""The test tables are what they claim, and the oracle agrees with the engines' own readers."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    FileFormat,
    ManifestContent,
    ManifestEntry,
)
from pyiceberg.table import StaticTable
from pyiceberg.types import DoubleType, LongType

from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows, same_rows
from tests.lake.tables import LakeTable, rows, rows_of

READABLE_BY_PYICEBERG = (
    "iceberg_plain",
    "iceberg_partitioned",
    "iceberg_evolved",
    "iceberg_pos_deletes",
    "iceberg_dv",
)


def _table(entry: LakeTable) -> StaticTable:
    return StaticTable.from_metadata(entry.location)


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def _keep(table: pa.Table, mask: list[bool]) -> pa.Table:
    return table.filter(pa.array(mask, pa.bool_()))


@pytest.mark.parametrize("name", READABLE_BY_PYICEBERG)
def test_oracle_equals_pyiceberg_scan(lake_tables: dict[str, LakeTable], name: str) -> None:
    entry = lake_tables[name]
    table = _table(entry)
    for snapshot in entry.snapshots:
        same_rows(entry.expected[snapshot], table.scan(snapshot_id=snapshot).to_arrow())


def test_files_have_several_row_groups(lake_tables: dict[str, LakeTable]) -> None:
    for name in ("iceberg_plain", "iceberg_pos_deletes", "iceberg_eq_deletes"):
        files = [f for f in b.live_data_files(_table(lake_tables[name])) if f.record_count == 2000]
        assert len(files) >= 9
        assert {pq.ParquetFile(_local(f.file_path)).num_row_groups for f in files} == {4}
    partitioned = b.live_data_files(_table(lake_tables["iceberg_partitioned"]))
    assert {f.partition[0] for f in partitioned} == {0, 1, 2, 3, 4}
    assert min(pq.ParquetFile(_local(f.file_path)).num_row_groups for f in partitioned) >= 4
    for name in ("delta_plain", "delta_deleted"):
        uris = DeltaTable(lake_tables[name].location).file_uris()
        assert min(pq.ParquetFile(_local(u)).num_row_groups for u in uris) >= 4


def test_position_deletes_are_committed_per_spec(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_pos_deletes"]
    table = _table(entry)
    for snapshot_id in entry.snapshots[3:]:
        snapshot = table.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        assert snapshot.summary is not None
        assert snapshot.summary.operation.value == "delete"
        new = [m for m in snapshot.manifests(table.io) if m.added_snapshot_id == snapshot_id]
        assert [m.content for m in new] == [ManifestContent.DELETES]
        assert new[0].sequence_number == snapshot.sequence_number
        for item in new[0].fetch_manifest_entry(table.io):
            assert item.sequence_number == snapshot.sequence_number
            deletes = pq.read_table(_local(item.data_file.file_path))
            ids = [f.metadata[b"PARQUET:field_id"] for f in deletes.schema]
            assert ids == [b"2147483546", b"2147483545"]
            assert deletes.sort_by([("file_path", "ascending"), ("pos", "ascending")]) == deletes
    counts = [entry.expected[s].num_rows for s in entry.snapshots]
    assert counts == [8000, 14000, 20000, 19200, 19000]
    # The rows gone are the positions written: every 25th row of each 2,000-row file from 3.
    assert 3 not in entry.expected[entry.snapshots[3]]["id"].to_pylist()


def _eq_expected(snapshot_index: int) -> pa.Table:
    """iceberg_eq_deletes by hand (see tables._eq_deletes)."""
    first = rows(0, 14000)
    ids = first["id"].to_pylist()
    a, s = first["a"].to_pylist(), first["s"].to_pylist()
    gone = set(range(0, 14000, 37))
    if snapshot_index == 1:
        return rows(0, 14000)
    if snapshot_index >= 2:
        first = _keep(first, [i not in gone for i in ids])
        a, s = first["a"].to_pylist(), first["s"].to_pylist()
    if snapshot_index >= 3:
        first = _keep(
            first, [(x, y) not in ((1, None), (3, "s2")) for x, y in zip(a, s, strict=True)]
        )
    if snapshot_index < 4:
        return first
    out = pa.concat_tables([first, rows(14000, 6000), rows_of(range(0, 2000, 37))])
    if snapshot_index >= 5:
        out = _keep(out, [i not in (37, 14001, 19999, 5) for i in out["id"].to_pylist()])
    return out


def test_equality_deletes_by_hand(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_eq_deletes"]
    assert len(entry.snapshots) == 6
    for n, snapshot in enumerate(entry.snapshots):
        same_rows(entry.expected[snapshot], rows(0, 8000) if n == 0 else _eq_expected(n))
    latest = entry.expected[entry.latest]
    # Rows appended after a delete that they equal stay: NULL = NULL matched only older rows.
    kept = latest.filter(pc.and_(pc.equal(latest["a"], 1), pc.is_null(latest["s"])))
    assert kept.num_rows > 0
    assert {i for i in kept["id"].to_pylist() if i < 14000} <= set(range(0, 2000, 37))
    with pytest.raises(ValueError, match="equality deletes"):
        _table(entry).scan().to_arrow()


def test_mixed_specs_scope_equality_deletes(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_mixed"]
    table = _table(entry)
    assert sorted(table.specs()) == [0, 1]
    for snapshot in entry.snapshots[:3]:  # before any equality delete pyiceberg reads it
        same_rows(entry.expected[snapshot], table.scan(snapshot_id=snapshot).to_arrow())
    latest = entry.expected[entry.latest]
    pair = pc.and_(pc.equal(latest["a"], 2), pc.equal(latest["s"], "s3"))
    ids = latest.filter(pair)["id"].to_pylist()
    # Scoped to spec 1, partition a=2: the spec-0 files (ids < 8000) and the files appended
    # after the delete (ids >= 14000) keep their (2, s3) rows.
    assert ids
    assert not [i for i in ids if 8000 <= i < 14000]
    assert [i for i in ids if i < 8000]
    assert [i for i in ids if i >= 14000]
    # The global delete on id reaches both specs.
    assert not set(latest["id"].to_pylist()) & set(range(1, 14000, 53))


def test_evolved_schema_is_each_snapshots(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_evolved"]
    first, second, third = (entry.expected[s] for s in entry.snapshots)
    assert first.column_names == ["id", "a", "s", "d", "x"]
    assert second.column_names == ["id", "a", "s", "d", "x", "extra"]
    assert third.column_names == ["id", "a", "label", "d", "x", "extra"]
    old = third.filter(pc.less(third["id"], 8000))
    assert old["extra"].null_count == 8000
    assert old["label"].to_pylist() == rows(0, 8000)["s"].to_pylist()


def test_type_promotion_and_metadata_path(tmp_path: Path) -> None:
    catalog = b.iceberg_catalog(tmp_path)
    data = pa.table(
        {"id": pa.array([1, 2, 3], pa.int32()), "x": pa.array([1.5, None, 3.0], pa.float32())}
    )
    table = b.iceberg_table(catalog, "promoted", data)
    b.promote_column(table, "id", LongType())
    b.promote_column(table, "x", DoubleType())
    b.append(table, pa.table({"id": pa.array([2**40], pa.int64()), "x": pa.array([0.25])}))
    result = iceberg_rows(table.metadata_location, table.metadata.snapshots[-1].snapshot_id)
    assert result.schema.field("id").type == pa.int64()
    assert result.schema.field("x").type == pa.float64()
    same_rows(result, pa.table({"id": [1, 2, 3, 2**40], "x": [1.5, None, 3.0, 0.25]}))
    same_rows(result, table.scan().to_arrow())


def test_delta_tables_by_hand(lake_tables: dict[str, LakeTable]) -> None:
    deleted = lake_tables["delta_deleted"]
    assert deleted.snapshots == [0, 1, 2, 3, 4]
    full = rows(0, 20000)
    ids, a, s = full["id"].to_pylist(), full["a"].to_pylist(), full["s"].to_pylist()
    expected = _keep(
        full,
        [i % 25 != 3 and not (x is None and y == 1) for i, x, y in zip(ids, s, a, strict=True)],
    )
    same_rows(deleted.expected[4], expected)
    same_rows(lake_tables["delta_partitioned"].expected[2], full)
    evolved = lake_tables["delta_evolved"]
    assert evolved.snapshots == [0, 1, 2, 3, 4]
    assert evolved.expected[1].column_names == ["id", "a", "s", "d", "x", "extra"]
    extra = pa.array([None] * 8000 + [i * 10 for i in range(8000, 20000)], pa.int64())
    renamed = full.rename_columns(["id", "a", "label", "d", "x"]).append_column("extra", extra)
    same_rows(evolved.expected[4], renamed)


@pytest.mark.parametrize(
    "name", ["delta_plain", "delta_partitioned", "delta_deleted", "delta_evolved"]
)
def test_delta_scan_equals_pyarrow_reader(lake_tables: dict[str, LakeTable], name: str) -> None:
    entry = lake_tables[name]
    # delta-rs 1.6.6's pyarrow reader ignores column mapping on a reader-2 table: after the
    # rename (version 3) it reads ``label`` as all NULL; its scan() (the oracle) reads it right.
    versions = entry.snapshots[:3] if name == "delta_evolved" else entry.snapshots
    for version in versions:
        table = DeltaTable(entry.location, version=version).to_pyarrow_table()
        same_rows(entry.expected[version], table)


def test_iceberg_deletion_vectors_per_spec(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_dv"]
    table = _table(entry)
    assert table.metadata.format_version == 3
    snapshot = table.current_snapshot()
    assert snapshot is not None
    new = [m for m in snapshot.manifests(table.io) if m.added_snapshot_id == entry.latest]
    assert [m.content for m in new] == [ManifestContent.DELETES]
    with AvroFile[ManifestEntry](
        table.io.new_input(new[0].manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
    ) as avro:
        entries = list(avro)
    assert len(entries) == 3
    for item in entries:
        dv = item.data_file
        assert dv.file_format == FileFormat.PUFFIN
        v3 = {f.name: dv[i] for i, f in enumerate(DATA_FILE_TYPE[3].fields)}
        assert v3["referenced_data_file"].endswith(".parquet")
        assert v3["content_offset"] >= 4
        assert v3["content_size_in_bytes"] > 0
        assert dv.record_count == 4
    counts = [entry.expected[s].num_rows for s in entry.snapshots]
    assert counts == [8000, 14000, 20000, 19700, 19300, 19288]


def test_delta_deletion_vectors_by_hand(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["delta_dv"]
    path = Path(entry.location)
    table = DeltaTable(entry.location)
    assert "deletionVectors" in (table.protocol().reader_features or [])
    assert all(uri.endswith(".parquet") for uri in table.file_uris())
    vectors = pa.RecordBatchReader.from_stream(table.deletion_vectors()).read_all()
    assert vectors.num_rows == 3
    merged = sorted(b.delta_data_files(path))[:2]
    parts = []
    for name, count in sorted(b.delta_data_files(path).items()):
        gone = set(range(3, count, 25)) | (set(range(50, count, 100)) if name in merged else set())
        data = pq.read_table(path / name)
        parts.append(_keep(data, [i not in gone for i in range(count)]))
    same_rows(entry.expected[entry.latest], pa.concat_tables(parts))


def test_same_rows_is_a_multiset_comparison() -> None:
    a = pa.table({"k": [1, 2, None, 2], "f": [float("nan"), 0.5, None, 0.5]})
    b_ = pa.table({"f": [0.5, None, 0.5, math.nan], "k": [2, None, 2, 1]})
    same_rows(a, b_)
    with pytest.raises(AssertionError, match="1 only in the first"):
        same_rows(a, b_.slice(1))
    with pytest.raises(AssertionError, match="columns differ"):
        same_rows(a, a.select(["k"]))
    dates = pa.table({"d": [datetime.date(2020, 1, 1)]})
    same_rows(dates, dates)


def test_entries_name_their_catalog_and_urls(lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_mixed"]
    properties = {k: v for k, v in entry.catalog.items() if k != "name"}
    table = SqlCatalog(entry.catalog["name"], **properties).load_table(entry.table_name)
    assert table.metadata_location.removeprefix("file://") == entry.location
    assert entry.url == f"iceberg:///{entry.location}"
    assert entry.url.startswith("iceberg:////")
    assert entry.catalog_url.startswith(f"iceberg://{entry.catalog['name']}/lake.iceberg_mixed?")
    assert lake_tables["delta_plain"].url.startswith("delta:////")
    assert lake_tables["delta_plain"].catalog_url == ""
