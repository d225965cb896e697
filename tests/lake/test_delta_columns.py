"""Delta columns found in every data file as the writer wrote them: column mapping none, name
and id, with and without table features (a ``timestamp_ntz`` column, deletion vectors,
column mapping as a table feature), compared with deltalake's own read of each version
through every read path: the direct pyarrow reader and DuckDB's piece SQL of ``fragments``
partitions, ``hash`` partitions, ``version=`` and ``as_of=``, ``since=`` and export. A
column missing from a file is NULL only where the log shows it was added later; otherwise
the table is refused in one line, never read as NULLs."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake

import sqlfeed
from sqlfeed.io.readers import ReadRequest
from sqlfeed.lake import LakeSource
from tests.helpers.cli import run_cli
from tests.lake import builders as b
from tests.lake.oracle import same_rows

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MAPPINGS = ["none", "name", "id"]
FEATURES = ["none", "timestampNtz", "deletionVectors", "timestampNtz+deletionVectors", "upgraded"]
"""``upgraded``: column mapping (if any) and deletion vectors as reader 3 / writer 7 table
features, mapping in force (delta-rs writes no such table: a hand-written protocol commit)."""


def _rows(start: int, count: int, ntz: bool) -> pa.Table:
    ids = list(range(start, start + count))
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": pa.array(["abc"[i % 3] for i in ids]),
            "v": pa.array([None if i % 7 == 0 else i / 4 for i in ids], pa.float64()),
            "s": pa.array([f"s{i % 11}" for i in ids]),
        }
    )
    if ntz:
        epoch = datetime.datetime(2020, 1, 1)
        stamps = [epoch + datetime.timedelta(seconds=i) for i in ids]
        table = table.append_column("ts", pa.array(stamps, pa.timestamp("us")))
    return table


def _build(path: Path, mapping: str, features: str, partitioned: bool) -> pa.Table:
    """Versions 0 (create), 1 (append), 2 (deletion vectors, else append); the rows of 1."""
    ntz = "timestampNtz" in features
    configuration: dict[str, str] = {}
    if mapping != "none":
        configuration["delta.columnMapping.mode"] = mapping
    if "deletionVectors" in features:
        configuration["delta.enableDeletionVectors"] = "true"
    write_deltalake(
        str(path),
        _rows(0, 300, ntz),
        partition_by=["p"] if partitioned else None,
        configuration=configuration or None,
        writer_properties=WriterProperties(max_row_group_size=40),
    )
    appended = _rows(1000, 200, ntz)
    write_deltalake(str(path), appended, mode="append")
    if features == "upgraded":
        mapped = ["columnMapping"] if mapping != "none" else []
        b.delta_table_features(
            path,
            [*mapped, "deletionVectors"],
            [*mapped, "deletionVectors"],
            {"delta.enableDeletionVectors": "true"},
        )
    if "deletionVectors" in features or features == "upgraded":
        files = sorted(b.delta_data_files(path).items())
        b.delta_delete_vector(path, {f: range(1, n, 9) for f, n in files})
    else:
        write_deltalake(str(path), _rows(2000, 100, ntz), mode="append")
    return appended


def _url(path: Path, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"view": "t", **options}.items())
    return f"delta:///{path}?{query}"


def _own(path: Path, version: int | None = None) -> pa.Table:
    """deltalake's own DataFusion read of the version (its QueryBuilder: ``to_pyarrow_table``
    reads a column-mapped table's columns as NULLs and refuses deletion vectors, 1.6.6)."""
    table = DeltaTable(str(path), version=version)
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def _feed(source: sqlfeed.Source, plan: sqlfeed.Plan) -> pa.Table:
    feeder = sqlfeed.Feeder(plan, source, readers=2)
    return pa.Table.from_batches(list(feeder), schema=feeder.schema)


def _same(got: pa.Table, want: pa.Table, what: str) -> None:
    try:
        same_rows(got.select(want.column_names), want)
    except AssertionError as err:
        raise AssertionError(f"{what}: {err}") from None
    for name in ("id", "s"):  # never read as NULLs
        assert got.column(name).null_count == 0, (what, name)


def _pieces_as_duckdb_reads_them(source: LakeSource, partitioned: bool) -> pa.Table:
    """Every ``fragments`` partition read by the source's reader (the direct pyarrow reader
    where it carries the partition) and by DuckDB's read of its piece SQL: the same rows in
    the same order."""
    plan = sqlfeed.plan("SELECT * FROM t", source, partitions=5)
    assert plan.strategy == "fragments", plan.reason
    direct = source.reader_table()["lakearrow"]
    parts = []
    for partition in plan.partitions:
        sql = partition.sql
        plain = sql[sql.index(" */ ") + 4 :] if " */ " in sql else sql
        request = ReadRequest(sql, plan.arrow_schema(), batch_rows=64)
        assert direct.carries(request) is (not partitioned), partition.index
        got = pa.Table.from_batches(list(source.read(sql)), schema=plan.arrow_schema())
        want = pa.Table.from_batches(list(source.read(plain)), schema=plan.arrow_schema())
        assert got.to_pylist() == want.to_pylist(), partition.index
        parts.append(got)
    return pa.concat_tables(parts)


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_every_read_path_reads_what_deltalake_reads(
    tmp_path: Path, mapping: str, features: str, partitioned: bool
) -> None:
    path = tmp_path / "t"
    appended = _build(path, mapping, features, partitioned)
    latest = DeltaTable(str(path)).version()
    for version in range(latest + 1):
        source = sqlfeed.connect(_url(path, version=version))
        assert isinstance(source, LakeSource)
        want = _own(path, version)
        plan = sqlfeed.plan("SELECT * FROM t", source, partitions=4)
        _same(_feed(source, plan), want, f"fragments at version {version}")
        hashed = sqlfeed.plan("SELECT * FROM t", source, partitions=3, strategy="hash")
        _same(_feed(source, hashed), want, f"hash at version {version}")
        if version == latest:
            _same(_pieces_as_duckdb_reads_them(source, partitioned), want, "pieces")
        source.close()
    # as_of: the time travel delta-rs does (the commit file's time) lands on version 1
    committed = os.stat(path / "_delta_log" / f"{1:020d}.json").st_mtime_ns // 1_000_000
    source = sqlfeed.connect(_url(path, as_of=committed))
    assert isinstance(source, LakeSource)
    assert source.snapshot_id == 1
    plan = sqlfeed.plan("SELECT * FROM t", source, partitions=3)
    _same(_feed(source, plan), _own(path, 1), "as_of")
    source.close()
    # since: the rows version 1 appended
    source = sqlfeed.connect(_url(path, version=1, since=0))
    got = _feed(source, sqlfeed.plan("SELECT * FROM t", source, partitions=3))
    _same(got, appended.select(got.column_names), "since=0")
    source.close()
    out = tmp_path / "export.parquet"
    run = run_cli(["export", "--db", _url(path), "--out", str(out), "-m", "3", "SELECT * FROM t"])
    assert run.code == 0, run.err
    _same(pq.read_table(out), _own(path), "export")


@pytest.mark.parametrize("features", ["none", "upgraded"])
def test_a_renamed_column_of_a_mapped_table_keeps_its_values(tmp_path: Path, features: str) -> None:
    path = tmp_path / "t"
    _build(path, "name", features, partitioned=False)
    version = b.delta_rename_column(path, "s", "label")
    want = _own(path)
    assert want.column("label").null_count == 0
    source = sqlfeed.connect(_url(path))
    got = _feed(source, sqlfeed.plan("SELECT * FROM t", source, partitions=4))
    same_rows(got.select(want.column_names), want)
    source.close()
    assert version == DeltaTable(str(path)).version()


@pytest.mark.parametrize("features", ["none", "timestampNtz", "deletionVectors"])
def test_a_column_added_later_is_null_in_older_files_only(tmp_path: Path, features: str) -> None:
    """The log shows the older files were added before the column: NULL there, the column's
    values in the newer files."""
    path = tmp_path / "t"
    ntz = "timestampNtz" in features
    configuration = {"delta.enableDeletionVectors": "true"} if features == "deletionVectors" else {}
    write_deltalake(str(path), _rows(0, 300, ntz), configuration=configuration or None)
    more = _rows(1000, 100, ntz).append_column("extra", pa.array(range(100), pa.int64()))
    write_deltalake(str(path), more, mode="append", schema_mode="merge")
    want = _own(path)
    assert want.column("extra").null_count == 300
    source = sqlfeed.connect(_url(path))
    for strategy in ("fragments", "hash"):
        plan = sqlfeed.plan("SELECT * FROM t", source, partitions=3, strategy=strategy)
        _same(_feed(source, plan), want, strategy)
    source.close()


def test_a_checkpoint_still_proves_a_column_came_later(tmp_path: Path) -> None:
    """With the commits before a checkpoint cleaned up, the files the checkpoint holds were
    added by then: a column the later log adds is NULL in them."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 300, False))
    write_deltalake(str(path), _rows(300, 100, False), mode="append")
    DeltaTable(str(path)).create_checkpoint()
    (path / "_delta_log" / f"{0:020d}.json").unlink()  # the log begins at the checkpoint
    more = _rows(1000, 100, False).append_column("extra", pa.array(range(100), pa.int64()))
    write_deltalake(str(path), more, mode="append", schema_mode="merge")
    want = _own(path)
    source = sqlfeed.connect(_url(path))
    _same(_feed(source, sqlfeed.plan("SELECT * FROM t", source, partitions=3)), want, "read")
    source.close()


def test_a_file_missing_a_column_it_should_have_is_refused(tmp_path: Path) -> None:
    """A file added after the column was, without it (a broken writer): one line, not NULLs."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 300, False))
    b.delta_add_file(path, _rows(500, 10, False).drop_columns(["s"]), {})
    with pytest.raises(
        sqlfeed.SqlfeedError, match=r"has no column 's'.* will not read it as NULLs"
    ) as caught:
        sqlfeed.connect(_url(path))
    assert "\n" not in str(caught.value)


def test_files_written_by_display_names_under_mapping_in_force_are_refused(tmp_path: Path) -> None:
    """Column mapping put in force (a protocol upgrade) over files written by display names:
    their columns are not under the physical names, and the log shows they were there."""
    path = tmp_path / "t"
    _build(path, "name", "timestampNtz", partitioned=False)  # mapping configured, not in force
    b.delta_table_features(
        path, ["columnMapping", "timestampNtz"], ["columnMapping", "timestampNtz"], {}
    )
    with pytest.raises(sqlfeed.SqlfeedError, match="will not read it as NULLs") as caught:
        sqlfeed.connect(_url(path))
    assert "\n" not in str(caught.value)


def test_nested_fields_under_physical_names_are_refused(tmp_path: Path) -> None:
    """A struct's fields stored under column mapping's physical names would be cast to the
    schema's by name, as NULLs (deltalake 1.6's own read gives NULLs): refused in one line."""
    path = tmp_path / "t"
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "st": pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]),
        }
    )
    write_deltalake(str(path), data, configuration={"delta.columnMapping.mode": "name"})
    with pytest.raises(sqlfeed.SqlfeedError, match="column 'st' under names") as caught:
        sqlfeed.connect(_url(path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("mapping", ["name", "id"])
def test_statistics_of_mapped_columns_prune_files(tmp_path: Path, mapping: str) -> None:
    """A mapped column's statistics are keyed by its physical name: a WHERE skips files."""
    path = tmp_path / "t"
    write_deltalake(
        str(path), _rows(0, 300, False), configuration={"delta.columnMapping.mode": mapping}
    )
    write_deltalake(str(path), _rows(1000, 100, False), mode="append")
    source = sqlfeed.connect(_url(path))
    assert isinstance(source, LakeSource)
    plan = sqlfeed.plan("SELECT id, s FROM t WHERE id >= 1000", source, partitions=3)
    assert source.skipped_files == 1, plan.reason
    got = _feed(source, plan)
    assert sorted(got.column("id").to_pylist()) == list(range(1000, 1100))
    source.close()
