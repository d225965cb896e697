"""Iceberg data files written without field ids (a migrated table's, added with
``add_files``) are read through the table's name mapping, as the spec says: a renamed
column keeps its values in them, as pyiceberg's own scan reads them, through the
``fragments`` (direct and DuckDB) and ``hash`` paths. Without a name mapping, a column the
file has under no name is refused in one line, not read as NULLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from tests.lake import builders as b
from tests.lake.oracle import same_rows

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MAPPING = "schema.name-mapping.default"


def _migrated(folder: Path) -> Any:
    """A table whose first data file has no field ids; ``s`` renamed ``label``, then an append."""
    catalog = b.iceberg_catalog(folder)
    data = pa.table(
        {"id": pa.array(range(300), pa.int64()), "s": [f"s{i % 7}" for i in range(300)]}
    )
    table = catalog.create_table(f"{b.NAMESPACE}.migrated", data.schema)
    pq.write_table(data, folder / "migrated.parquet", row_group_size=50)
    table.add_files([str(folder / "migrated.parquet")])  # sets the name mapping
    with table.update_schema() as update:
        update.rename_column("s", "label")
    table.append(pa.table({"id": pa.array([1000], pa.int64()), "label": ["new"]}))
    return table


def _url(table: Any) -> str:
    return f"iceberg:///{table.metadata_location.removeprefix('file://')}?view=t"


def test_a_file_without_field_ids_is_read_through_the_name_mapping(tmp_path: Path) -> None:
    table = _migrated(tmp_path)
    assert table.properties.get(MAPPING)
    want = table.scan().to_arrow()
    assert want.column("label").null_count == 0
    source = sqlfeed.connect(_url(table))
    for strategy in ("fragments", "hash"):
        for query in ("SELECT * FROM t", "SELECT id, upper(label) AS label FROM t"):
            plan = sqlfeed.plan(query, source, partitions=4, strategy=strategy)
            feeder = sqlfeed.Feeder(plan, source, readers=2)
            got = pa.Table.from_batches(list(feeder), schema=feeder.schema)
            expected = (
                want
                if "upper" not in query
                else want.set_column(1, "label", pa.compute.utf8_upper(want.column("label")))
            )
            same_rows(got.select(["id", "label"]), expected.select(["id", "label"]))
    source.close()


def test_without_a_name_mapping_a_column_the_file_lacks_is_refused(tmp_path: Path) -> None:
    table = _migrated(tmp_path)
    with table.transaction() as transaction:
        transaction.remove_properties(MAPPING)
    with pytest.raises(sqlfeed.SqlfeedError, match="no name mapping") as caught:
        sqlfeed.connect(_url(table))
    assert "\n" not in str(caught.value)
    assert "'label'" in str(caught.value)
