"""The direct (pyarrow) reader of lakehouse partitions with equality deletes.

Partitions whose files have equality deletes are read by ``lakearrow`` (no DuckDB anti-join):
the same rows in the same order as DuckDB's read of their SQL, and the oracle's rows for the
whole table; NULL keys delete NULLs, several delete files obey the sequence rule, a file cut
into runs of row groups keeps its deletes. :func:`equality_mask` is checked against a
brute-force reading of the spec.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.io.readers import ReadRequest
from sqlfeed.lake import LakeSource
from sqlfeed.lake.arrow import MARK, deleted_keys, deleted_rows, equality_mask, marker
from sqlfeed.lake.model import DataFile, EqualityDeletes
from tests.lake.oracle import same_rows
from tests.lake.tables import LakeTable

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EQUALITY_TABLES = ("iceberg_eq_deletes", "iceberg_mixed")


def _url(entry: LakeTable, snapshot: int) -> str:
    return f"iceberg:///{entry.location}?view=t&snapshot={snapshot}"


@pytest.mark.parametrize("name", EQUALITY_TABLES)
@pytest.mark.parametrize("m", [3, 40])
def test_equality_deleted_partitions_are_read_directly_as_duckdb_reads_them(
    lake_tables: dict[str, LakeTable], name: str, m: int
) -> None:
    entry = lake_tables[name]
    direct = split = 0
    for snapshot in entry.snapshots:
        source = sqlfeed.connect(_url(entry, snapshot))
        assert isinstance(source, LakeSource)
        for query in ("SELECT * FROM t", "SELECT s, a, id AS key FROM t"):
            plan = sqlfeed.plan(query, source, partitions=m)
            reader = source.reader_table()["lakearrow"]
            for partition in plan.partitions:
                assert partition.sql.startswith(MARK), (name, partition.index)
                request = ReadRequest(partition.sql, plan.arrow_schema(), batch_rows=300)
                assert reader.carries(request), (name, partition.index)
                plain = partition.sql[partition.sql.index(" */ ") + 4 :]
                got = pa.Table.from_batches(list(reader.batches(request)))
                want = pa.Table.from_batches(list(source.read(plain)))
                assert got.to_pylist() == want.to_pylist(), (name, snapshot, partition.index)
                files = {f.path: f for f in source.current.files}
                for path, start, end in (marker(partition.sql) or {})["pieces"]:
                    if files[path].equality_deletes:
                        direct += 1
                        split += start > 0 or (end is not None and end < files[path].rows)
        source.close()
    assert direct
    if m == 40:
        assert split  # files with equality deletes cut into runs of row groups


@pytest.mark.parametrize("name", EQUALITY_TABLES)
def test_the_feeder_reads_the_oracle_rows_of_every_snapshot(
    lake_tables: dict[str, LakeTable], name: str
) -> None:
    entry = lake_tables[name]
    for snapshot in entry.snapshots:
        source = sqlfeed.connect(_url(entry, snapshot))
        feeder = sqlfeed.Feeder("SELECT * FROM t", source, partitions=9, readers=2)
        got = pa.Table.from_batches(list(feeder), schema=feeder.schema)
        expected = entry.expected[snapshot]
        same_rows(got.select(expected.column_names), expected)
        source.close()


# -- equality_mask against the spec, by brute force ----------------------------------------


def _group(
    tmp_path: Path, deletes: list[pa.Table], pairs: list[tuple[str, str]]
) -> EqualityDeletes:
    files = []
    for number, table in enumerate(deletes):
        path = tmp_path / f"eq-{number}.parquet"
        pq.write_table(table, path)
        files.append(str(path))
    return EqualityDeletes(tuple(files), tuple(pairs))


def _brute(data: pa.Table, deletes: list[pa.Table], pairs: list[tuple[str, str]]) -> list[bool]:
    keys = {tuple(row[d] for d, _data in pairs) for table in deletes for row in table.to_pylist()}
    out = []
    for row in data.to_pylist():
        values = tuple(row[data_name] if data_name else None for _d, data_name in pairs)
        out.append(values in keys)  # tuples compare None == None: NOT DISTINCT
    return out


def _mask(data: pa.Table, group: EqualityDeletes) -> list[bool]:
    batch = data.to_batches()[0]
    hit = equality_mask(batch, group, deleted_keys(group))
    return [False] * data.num_rows if hit is None else [bool(h) for h in hit]


CASES = {
    "one int column, NULL deletes NULL": (
        pa.table({"k": pa.array([1, None, 3, 4, None, 7], pa.int64())}),
        [pa.table({"dk": pa.array([3, None, 9], pa.int64())})],
        [("dk", "k")],
    ),
    "int32 data, int64 deletes beyond int32, two files with duplicates": (
        pa.table({"k": pa.array([1, 2, 3, 2**31 - 1, None], pa.int32())}),
        [
            pa.table({"k": pa.array([2, 2**40, 2], pa.int64())}),
            pa.table({"k": pa.array([2**31 - 1, 2], pa.int64())}),
        ],
        [("k", "k")],
    ),
    "int and string, NULL in one column only": (
        pa.table(
            {
                "a": pa.array([1, 1, 3, 3, None, 1], pa.int32()),
                "s": pa.array([None, "x", "s2", None, None, "y"], pa.string()),
            }
        ),
        [
            pa.table(
                {
                    "a": pa.array([1, 3, None], pa.int32()),
                    "s": pa.array([None, "s2", None], pa.large_string()),
                }
            )
        ],
        [("a", "a"), ("s", "s")],
    ),
    "a column the data file predates (NULL in every row)": (
        pa.table({"k": pa.array([1, 2, 3], pa.int64())}),
        [pa.table({"k": pa.array([1, 2], pa.int64()), "e": pa.array([None, 5], pa.int64())})],
        [("k", "k"), ("e", "")],
    ),
    "three columns, a prefix deleted without its last value": (
        pa.table(
            {
                "x": pa.array([1, 1, 1, 2, 2], pa.int64()),
                "y": pa.array(["a", "a", "b", "a", "a"], pa.string()),
                "z": pa.array([0.5, 1.5, 0.5, 0.5, None], pa.float64()),
            }
        ),
        [
            pa.table(
                {
                    "x": pa.array([1, 2, 2], pa.int64()),
                    "y": pa.array(["a", "a", "b"], pa.string()),
                    "z": pa.array([0.5, None, 0.5], pa.float64()),
                }
            )
        ],
        [("x", "x"), ("y", "y"), ("z", "z")],
    ),
    "no delete rows": (
        pa.table({"k": pa.array([1, None], pa.int64())}),
        [pa.table({"k": pa.array([], pa.int64())})],
        [("k", "k")],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_equality_mask_deletes_what_the_spec_deletes(tmp_path: Path, case: str) -> None:
    data, deletes, pairs = CASES[case]
    group = _group(tmp_path, deletes, pairs)
    assert _mask(data, group) == _brute(data, deletes, pairs)


def test_position_deletes_are_split_by_the_data_file_they_name(tmp_path: Path) -> None:
    """One delete file naming two data files, listed twice, beside an empty one."""
    names = pa.array(["file:///d/b", "file:///d/a", "file:///d/b", "file:///d/a", "file:///d/b"])
    first = tmp_path / "pos-1.parquet"
    pq.write_table(
        pa.table({"file_path": names, "pos": pa.array([9, 4, 1, 4, 5], pa.int64())}), first
    )
    empty = tmp_path / "pos-2.parquet"
    pq.write_table(
        pa.table({"file_path": pa.array([], pa.string()), "pos": pa.array([], pa.int64())}), empty
    )
    files = (str(first), str(empty), str(first))
    got = {
        uri: deleted_rows(DataFile("/d/x", uri, 20, 1, (), position_deletes=files)).tolist()
        for uri in ("file:///d/a", "file:///d/b", "file:///d/c")
    }
    assert got == {"file:///d/a": [4], "file:///d/b": [1, 5, 9], "file:///d/c": []}
