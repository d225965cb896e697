"""The named lakehouse test tables (``lake_tables`` fixture) and what each snapshot holds.

Every table has the columns ``id`` bigint (unique within a snapshot), ``a`` int, ``s`` string
(nullable), ``d`` date, ``x`` double (nullable); the evolved ones add ``extra`` and rename
``s`` to ``label``. Data files have several Parquet row groups.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import LongType

from tests.lake import builders as b
from tests.lake.oracle import delta_rows, iceberg_rows

CATALOG = "sqlfeed_test"
"""The pyiceberg catalog name in each entry's ``catalog`` properties."""


class _Lazy(Mapping[int, pa.Table]):
    """Snapshot -> rows, each computed by ``read`` on first use and kept."""

    def __init__(self, keys: Sequence[int], read: Callable[[int], pa.Table]) -> None:
        self._keys = list(keys)
        self._read = read
        self._done: dict[int, pa.Table] = {}

    def __getitem__(self, key: int) -> pa.Table:
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._done:
            self._done[key] = self._read(key)
        return self._done[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@dataclass
class LakeTable:
    """One test table.

    Attributes:
        name: Its key in the ``lake_tables`` dict.
        format: ``iceberg`` or ``delta``.
        location: The metadata JSON path (Iceberg, its latest) or the table folder (Delta).
        snapshots: Snapshot ids (Iceberg) or versions (Delta), oldest first.
        expected: Snapshot id / version -> the oracle's rows for it (computed on first use).
        catalog: Iceberg: pyiceberg catalog properties (``name``, ``uri``, ``warehouse``) of the
            SQLite catalog that holds it, as ``table_name`` (``lake.<name>``).
        table_name: Iceberg: ``namespace.table`` in that catalog.
        notes: What is special about it (deletes, schema changes).
    """

    name: str
    format: str
    location: str
    snapshots: list[int]
    expected: Mapping[int, pa.Table] = field(repr=False)
    catalog: dict[str, str] = field(default_factory=dict)
    table_name: str = ""
    notes: str = ""

    @property
    def url(self) -> str:
        """The sqlfeed URL of the absolute path: ``iceberg:////abs/…metadata.json``,
        ``delta:////abs/folder``."""
        return f"{self.format}:///{self.location}"

    @property
    def catalog_url(self) -> str:
        """Iceberg: ``iceberg://CATALOG/lake.<name>?uri=…&warehouse=…`` (the SQLite catalog's
        properties as URL options); empty for Delta."""
        if not self.catalog:
            return ""
        options = urlencode({k: v for k, v in self.catalog.items() if k != "name"})
        return f"iceberg://{self.catalog['name']}/{self.table_name}?{options}"

    @property
    def latest(self) -> int:
        """The newest snapshot id / version."""
        return self.snapshots[-1]


def rows(start: int, count: int) -> pa.Table:
    """``count`` rows with ids ``start..``: deterministic, with NULLs in ``s`` and ``x``."""
    return rows_of(range(start, start + count))


def rows_of(ids: Sequence[int]) -> pa.Table:
    """The rows of :func:`rows` with these ids."""
    epoch = datetime.date(2020, 1, 1)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "a": pa.array([(i * 7) % 5 for i in ids], pa.int32()),
            "s": pa.array([None if i % 17 == 0 else f"s{i % 4}" for i in ids], pa.string()),
            "d": pa.array([epoch + datetime.timedelta(days=i % 900) for i in ids], pa.date32()),
            "x": pa.array([None if i % 23 == 0 else i * 0.5 for i in ids], pa.float64()),
        }
    )


def _iceberg_entry(name: str, table: Table, notes: str, folder: Path) -> LakeTable:
    snapshots = b.snapshot_ids(table)
    return LakeTable(
        name=name,
        format="iceberg",
        location=table.metadata_location.removeprefix("file://"),
        snapshots=snapshots,
        expected=_Lazy(snapshots, lambda s: iceberg_rows(table, s)),
        catalog={
            "name": CATALOG,
            "uri": f"sqlite:///{folder / 'catalog.db'}",
            "warehouse": folder.resolve().as_uri(),
        },
        table_name=f"{b.NAMESPACE}.{name}",
        notes=notes,
    )


def _spread_positions(table: Table, every: int, offset: int) -> dict[str, list[int]]:
    """Every ``every``-th row of each live data file, from ``offset``: spread over row groups."""
    return {
        f.file_path: list(range(offset % every, f.record_count, every))
        for f in b.live_data_files(table)
    }


def _plain(catalog: Catalog, name: str) -> Table:
    table = b.iceberg_table(catalog, name, rows(0, 8000), target_file_rows=2000)
    b.append(table, rows(8000, 6000))
    b.append(table, rows(14000, 6000))
    return table


def _partitioned(catalog: Catalog) -> Table:
    table = b.iceberg_table(
        catalog, "iceberg_partitioned", rows(0, 8000), partition_by="a", row_group_rows=300
    )
    b.append(table, rows(8000, 6000))
    b.append(table, rows(14000, 6000))
    return table


def _evolved(catalog: Catalog) -> Table:
    table = b.iceberg_table(catalog, "iceberg_evolved", rows(0, 8000), target_file_rows=2000)
    b.add_column(table, "extra", LongType())
    more = rows(8000, 6000)
    b.append(table, more.append_column("extra", pc.multiply(more["id"], 10)))
    b.rename_column(table, "s", "label")
    last = rows(14000, 6000)
    last = last.append_column("extra", pc.multiply(last["id"], 10))
    b.append(table, last.rename_columns(["id", "a", "label", "d", "x", "extra"]))
    return table


def _pos_deletes(catalog: Catalog) -> Table:
    table = _plain(catalog, "iceberg_pos_deletes")
    b.delete_positions(table, _spread_positions(table, 25, 3))  # 4 %
    b.delete_positions(table, _spread_positions(table, 100, 50))  # 1 % more
    return table


def _eq_deletes(catalog: Catalog) -> Table:
    table = b.iceberg_table(catalog, "iceberg_eq_deletes", rows(0, 8000), target_file_rows=2000)
    b.append(table, rows(8000, 6000))
    b.delete_equal(table, pa.table({"id": pa.array(range(0, 14000, 37), pa.int64())}))
    b.delete_equal(
        table,
        pa.table({"a": pa.array([1, 3], pa.int32()), "s": pa.array([None, "s2"], pa.string())}),
    )
    # Rows equal to the deletes above, appended after them: they stay (sequence rule);
    # ids 0, 37, ... come back (an upsert).
    again = rows(14000, 6000)
    upserts = rows_of(range(0, 2000, 37))
    b.append(table, pa.concat_tables([again, upserts]))
    b.delete_equal(table, pa.table({"id": pa.array([37, 14001, 19999, 5], pa.int64())}))
    return table


def _mixed(catalog: Catalog) -> Table:
    """Unpartitioned first (spec 0), then partitioned on ``a`` (spec 1): both delete kinds."""
    table = b.iceberg_table(catalog, "iceberg_mixed", rows(0, 8000), target_file_rows=2000)
    b.add_partition(table, "a")
    b.append(table, rows(8000, 6000))
    b.delete_positions(table, _spread_positions(table, 40, 7))
    # Scoped to spec 1, partition a=2: spec-0 files keep their (a=2, s3) rows.
    b.delete_equal(
        table,
        pa.table({"a": pa.array([2], pa.int32()), "s": pa.array(["s3"], pa.string())}),
        partition={"a": 2},
    )
    b.delete_equal(table, pa.table({"id": pa.array(range(1, 14000, 53), pa.int64())}))  # global
    b.append(table, rows(14000, 6000))
    b.delete_positions(table, _spread_positions(table, 97, 11))
    return table


def _vectors(catalog: Catalog) -> Table:
    """v2 appends and position deletes, then two v3 deletion-vector snapshots (other files)."""
    table = _plain(catalog, "iceberg_dv")
    files = sorted(f.file_path for f in b.live_data_files(table))
    positions = _spread_positions(table, 20, 1)
    b.delete_positions(table, {f: positions[f] for f in files[:3]})
    b.delete_vector(table, {f: positions[f] for f in files[3:7]})
    b.delete_vector(table, {f: [0, 1, 2, 1999] for f in files[7:]})
    return table


def _delta(
    folder: Path, name: str, partition_by: str | None = None, *, deletion_vectors: bool = False
) -> Path:
    path = folder / name
    b.delta_table(
        path,
        rows(0, 8000),
        partition_by=partition_by,
        row_group_rows=500,
        deletion_vectors=deletion_vectors,
    )
    b.delta_append(path, rows(8000, 6000), row_group_rows=500)
    b.delta_append(path, rows(14000, 6000), row_group_rows=500)
    return path


def _delta_deleted(folder: Path) -> Path:
    path = _delta(folder, "delta_deleted")
    b.delta_delete(path, "id % 25 = 3", row_group_rows=500)
    b.delta_delete(path, "s IS NULL AND a = 1", row_group_rows=500)
    return path


def _delta_dv(folder: Path) -> Path:
    path = _delta(folder, "delta_dv", deletion_vectors=True)
    files = sorted(b.delta_data_files(path).items())
    b.delta_delete_vector(path, {f: range(3, n, 25) for f, n in files})  # 4 %
    b.delta_delete_vector(path, {f: range(50, n, 100) for f, n in files[:2]})  # merged
    return path


def _delta_evolved(folder: Path) -> Path:
    path = folder / "delta_evolved"
    b.delta_table(path, rows(0, 8000), row_group_rows=500)
    more = rows(8000, 6000)
    more = more.append_column("extra", pc.multiply(more["id"], 10))
    b.delta_append(path, more, row_group_rows=500, merge_schema=True)
    b.delta_enable_column_mapping(path)
    b.delta_rename_column(path, "s", "label")
    last = rows(14000, 6000)
    last = last.append_column("extra", pc.multiply(last["id"], 10))
    b.delta_append(
        path, last.rename_columns(["id", "a", "label", "d", "x", "extra"]), row_group_rows=500
    )
    return path


def _delta_entry(name: str, path: Path, notes: str) -> LakeTable:
    versions = b.delta_versions(path)
    return LakeTable(
        name=name,
        format="delta",
        location=str(path.resolve()),
        snapshots=versions,
        expected=_Lazy(versions, lambda v: delta_rows(path, v)),
        notes=notes,
    )


ICEBERG: dict[str, tuple[Callable[[Catalog], Table], str]] = {
    "iceberg_plain": (
        lambda c: _plain(c, "iceberg_plain"),
        "unpartitioned, 3 append snapshots, 2,000-row files of 4 row groups",
    ),
    "iceberg_partitioned": (_partitioned, "identity partition on a (5 values), 3 appends"),
    "iceberg_evolved": (_evolved, "extra added before snapshot 2, s renamed label before 3"),
    "iceberg_pos_deletes": (_pos_deletes, "3 appends, then 2 position-delete snapshots (5 %)"),
    "iceberg_eq_deletes": (
        _eq_deletes,
        "equality deletes on id and on (a, s) with NULL; rows appended after them stay",
    ),
    "iceberg_mixed": (
        _mixed,
        "spec 0 then spec 1 (a); position, scoped and global equality deletes",
    ),
    "iceberg_dv": (
        _vectors,
        "v2: 3 appends, position deletes; then v3: 2 deletion-vector snapshots (Puffin)",
    ),
}


def build_lake_tables(folder: Path) -> dict[str, LakeTable]:
    """Writes every test table under ``folder``; name -> :class:`LakeTable`."""
    out: dict[str, LakeTable] = {}
    iceberg = folder / "iceberg"
    catalog = b.iceberg_catalog(iceberg, CATALOG)
    for name, (build, notes) in ICEBERG.items():
        out[name] = _iceberg_entry(name, build(catalog), notes, iceberg)
    delta = folder / "delta"
    delta.mkdir(parents=True, exist_ok=True)
    out["delta_plain"] = _delta_entry(
        "delta_plain", _delta(delta, "delta_plain"), "3 append versions"
    )
    out["delta_partitioned"] = _delta_entry(
        "delta_partitioned", _delta(delta, "delta_partitioned", "a"), "partitioned on a"
    )
    out["delta_deleted"] = _delta_entry(
        "delta_deleted", _delta_deleted(delta), "2 DELETE versions (files rewritten)"
    )
    out["delta_dv"] = _delta_entry(
        "delta_dv", _delta_dv(delta), "deletion vectors (hand-committed), the second merged"
    )
    out["delta_evolved"] = _delta_entry(
        "delta_evolved",
        _delta_evolved(delta),
        "extra added (v1, merge); column mapping on (v2), s renamed label (v3), hand-written",
    )
    return out


def insert_ids(engine: sa.Engine, table: str, ids: range) -> None:
    """Insert rows ``(id, id % 7)`` into a watermark test table (see ``growing``)."""
    with engine.begin() as c:
        c.execute(
            sa.text(f"INSERT INTO {table} (id, v) VALUES (:id, :v)"),
            [{"id": i, "v": i % 7} for i in ids],
        )
