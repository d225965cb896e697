"""Iceberg and Delta tables as sources: partitions add up to the table's own read of the
same snapshot (deletes of every kind applied, files with deletes still split), plans are
pinned to their snapshot, and epochs follow a growing table exactly once."""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.cli.main import main
from sqlfeed.io.readers import ReadRequest
from sqlfeed.lake import LakeSource
from sqlfeed.lake.arrow import MARK
from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows, same_rows
from tests.lake.tables import LakeTable, rows

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def url_of(entry: LakeTable, snapshot: int | None = None, **options: object) -> str:
    """The sqlfeed URL of a test table (four slashes: an absolute path)."""
    pin = "snapshot" if entry.format == "iceberg" else "version"
    query = {"view": "t", **({pin: snapshot} if snapshot is not None else {}), **options}
    text = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{entry.format}:///{entry.location}?{text}"


def read_all(source: sqlfeed.Source, plan: sqlfeed.Plan) -> pa.Table:
    feeder = sqlfeed.Feeder(plan, source, readers=2)
    batches = list(feeder)
    return pa.Table.from_batches(batches, schema=feeder.schema)


@pytest.mark.parametrize("m", [1, 7, 64])
def test_partitions_add_up_to_the_tables_own_read_of_every_snapshot(
    lake_tables: dict[str, LakeTable], m: int
) -> None:
    for name, entry in lake_tables.items():
        for snapshot in entry.snapshots:
            source = sqlfeed.connect(url_of(entry, snapshot))
            plan = sqlfeed.plan("SELECT * FROM t", source, partitions=m)
            assert plan.strategy == "fragments", (name, plan.reason)
            expected = entry.expected[snapshot]
            got = read_all(source, plan).select(expected.column_names)
            try:
                same_rows(got, expected)
            except AssertionError as err:
                raise AssertionError(f"{name} at {snapshot}, M={m}: {err}") from None
            source.close()


def test_a_file_with_deletes_is_still_split(lake_tables: dict[str, LakeTable]) -> None:
    for name in ("iceberg_pos_deletes", "iceberg_eq_deletes", "iceberg_mixed", "iceberg_dv"):
        entry = lake_tables[name]
        source = sqlfeed.connect(url_of(entry))
        assert isinstance(source, LakeSource)
        deleted = {f.path for f in source.current.files if f.has_deletes}
        assert deleted, name
        plan = sqlfeed.plan("SELECT * FROM t", source, partitions=64)
        per_file: dict[str, int] = {}
        for partition in plan.partitions:
            if partition.file in deleted:
                per_file[partition.file] = per_file.get(partition.file, 0) + 1
        assert max(per_file.values()) >= 2, (name, per_file)
        assert "deletes applied" in plan.reason
        assert "snapshot" in plan.reason


def test_filters_joins_and_aggregates_over_a_table_with_deletes(
    lake_tables: dict[str, LakeTable],
) -> None:
    entry = lake_tables["iceberg_mixed"]
    expected = entry.expected[entry.latest]
    source = sqlfeed.connect(url_of(entry))
    rows_plan = sqlfeed.plan(
        "SELECT id, s FROM t WHERE a > 1 AND x IS NOT NULL", source, partitions=7
    )
    want = expected.filter((pa.compute.field("a") > 1) & pa.compute.field("x").is_valid())
    same_rows(read_all(source, rows_plan), want.select(["id", "s"]))
    grouped = sqlfeed.plan("SELECT a, COUNT(*) AS n FROM t GROUP BY a", source, partitions=5)
    assert grouped.strategy != "fragments"
    counts = expected.group_by("a").aggregate([("id", "count")]).rename_columns(["a", "n"])
    same_rows(read_all(source, grouped), counts)
    joined = sqlfeed.plan(
        "SELECT t.id, u.id AS other FROM t JOIN (SELECT id FROM t WHERE a = 0) AS u ON t.id = u.id",
        source,
        partitions=4,
    )
    got = read_all(source, joined)
    assert sorted(got.column("id").to_pylist()) == sorted(
        expected.filter(pa.compute.field("a") == 0).column("id").to_pylist()
    )


def _catalog_table(tmp_path: Path) -> tuple[object, str, dict[str, str]]:
    catalog = b.iceberg_catalog(tmp_path)
    name = f"growing_{uuid.uuid4().hex[:6]}"
    table = b.iceberg_table(catalog, name, rows(0, 4000), target_file_rows=500)
    properties = {k: str(v) for k, v in catalog.properties.items()}
    return table, f"{b.NAMESPACE}.{name}", {"name": catalog.name, **properties}


def _catalog_url(table_name: str, catalog: dict[str, str], **options: object) -> str:
    extra = "&".join(f"{k}={v}" for k, v in options.items())
    return (
        f"iceberg://{catalog['name']}/{table_name}?uri={catalog['uri']}"
        f"&warehouse={catalog['warehouse']}&view=t" + (f"&{extra}" if extra else "")
    )


def test_a_plan_reads_its_snapshot_while_the_table_grows(tmp_path: Path) -> None:
    """Every strategy's SQL names its snapshot: a process opening the table later (a worker,
    a resume) reads the plan's rows, not the new ones."""
    table, table_name, catalog = _catalog_table(tmp_path)
    source = sqlfeed.connect(_catalog_url(table_name, catalog))
    pinned = table.current_snapshot().snapshot_id
    fragments = sqlfeed.plan("SELECT id, a FROM t", source, partitions=4)
    hashed = sqlfeed.plan("SELECT a, COUNT(*) AS n FROM t GROUP BY a", source, partitions=3)
    assert f"t__at_{pinned}" in fragments.sql
    assert f"t__at_{pinned}" in hashed.sql
    b.append(table, rows(4000, 1000))
    b.delete_positions(table, {b.live_data_files(table)[0].file_path: [0, 1, 2]})
    later = sqlfeed.connect(_catalog_url(table_name, catalog))  # at the newest snapshot
    expected = iceberg_rows(table, pinned)
    same_rows(read_all(later, fragments), expected.select(["id", "a"]))
    counts = expected.group_by("a").aggregate([("id", "count")]).rename_columns(["a", "n"])
    same_rows(read_all(later, hashed), counts)
    assert later.scalar("SELECT COUNT(*) FROM t") == 5000 - 3


def test_follow_new_only_reads_every_appended_row_once_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    table, table_name, catalog = _catalog_table(tmp_path)
    url = _catalog_url(table_name, catalog)
    options = {"follow": True, "new_only": True, "epochs": 4, "batch_size": 300}
    feeder = sqlfeed.Feeder("SELECT id FROM t", url, **options)
    seen: list[int] = []
    state = None
    for epoch in range(4):
        for number, batch in enumerate(feeder.epoch(epoch)):
            seen.extend(batch.column("id").to_pylist())
            if epoch == 2 and number == 1:
                state = feeder.state_dict()
                at_state = len(seen)
        if epoch == 2:
            end_of_2 = len(seen)
        b.append(table, rows(10_000 * (epoch + 1), 700))
    assert sorted(seen) == sorted(
        [*range(4000), *range(10_000, 10_700), *range(20_000, 20_700), *range(30_000, 30_700)]
    )
    assert [e["since"] for e in feeder.ledger][1:] == [e["snapshot"] for e in feeder.ledger][:-1]
    # resumed in epoch 2 after the table grew again: the rest of epoch 2 as it was, then on
    assert state is not None
    resumed = sqlfeed.Feeder("SELECT id FROM t", url, state=state, **options)
    rest = [i for batch in resumed for i in batch.column("id").to_pylist()]
    assert rest[: end_of_2 - at_state] == seen[at_state:end_of_2]
    # epoch 3 reads what was appended after epoch 2's snapshot: then and since
    after = sorted(rest[end_of_2 - at_state :])
    assert after == [*range(30_000, 30_700), *range(40_000, 40_700)]


def test_bad_lakehouse_input_is_one_line(tmp_path: Path, lake_tables: dict[str, LakeTable]) -> None:
    entry = lake_tables["iceberg_plain"]
    cases = [
        (url_of(entry, 12345), "no snapshot 12345"),
        (f"iceberg:///{tmp_path}/missing.metadata.json", "no Iceberg metadata file"),
        (f"delta:///{tmp_path}/nothing", "no Delta table"),
        (url_of(entry, None, as_of="yesterday"), "as_of="),
        (url_of(lake_tables["delta_plain"], 99), "Delta table"),
    ]
    for url, message in cases:
        with pytest.raises(sqlfeed.SqlfeedError, match=message) as caught:
            sqlfeed.connect(url)
        assert "\n" not in str(caught.value)


def test_the_direct_reader_reads_what_duckdb_reads_in_the_same_order(
    lake_tables: dict[str, LakeTable],
) -> None:
    """Partitions that only pick columns are read by pyarrow (``lakearrow``): the same rows
    in the same order as DuckDB's read of their SQL (a resume skips rows by their place)."""
    direct = 0
    for name, entry in lake_tables.items():
        source = sqlfeed.connect(url_of(entry))
        plan = sqlfeed.plan("SELECT x, id AS key FROM t", source, partitions=7)
        for partition in plan.partitions:
            assert partition.sql.startswith(MARK), name
            plain = partition.sql[partition.sql.index(" */ ") + 4 :]
            request = ReadRequest(partition.sql, plan.arrow_schema(), batch_rows=1000)
            if source.reader_table()["lakearrow"].carries(request):
                direct += 1
            got = pa.Table.from_batches(list(source.read(partition.sql)))
            want = pa.Table.from_batches(list(source.read(plain)))
            assert got.to_pylist() == want.to_pylist(), (name, partition.label)
        filtered = sqlfeed.plan("SELECT x FROM t WHERE id > 5", source, partitions=3)
        schema = filtered.arrow_schema()
        lakearrow = source.reader_table()["lakearrow"]
        assert not any(lakearrow.carries(ReadRequest(p.sql, schema)) for p in filtered.partitions)
    assert direct > 20


WHERES = [
    "id < 300",
    "id >= 15000 AND a = 2",
    "300 > id OR a = 1",
    "id BETWEEN 100 AND 2500",
    "id IN (5, 17000, 99999999)",
    "a IN (0, 3) AND id > 2000",
    "d >= DATE '2020-03-01' AND d < '2020-06-01'",
    "s = 's1'",
    "s IS NULL AND id < 5000",
    "x > 100.0",
    "t.id <= 10",
]


@pytest.mark.parametrize("where", WHERES)
def test_files_skipped_by_their_bounds_leave_the_result_exact(
    lake_tables: dict[str, LakeTable], where: str
) -> None:
    """A WHERE prunes data files by their metadata's bounds: the partitions of what is left
    still add up to the query over the table's own read."""
    skipped = 0
    for name, entry in lake_tables.items():
        expected = entry.expected[entry.latest]
        columns = set(expected.column_names)
        if not {"id", "a", "s", "d", "x"} <= columns:
            continue  # the evolved tables renamed s
        source = sqlfeed.connect(url_of(entry))
        assert isinstance(source, LakeSource)
        plan = sqlfeed.plan(f"SELECT id, a FROM t WHERE {where}", source, partitions=7)
        want = duckdb.sql(f"SELECT id, a FROM expected AS t WHERE {where}").to_arrow_table()
        try:
            same_rows(read_all(source, plan), want)
        except AssertionError as err:
            raise AssertionError(f"{name}, WHERE {where}: {err}") from None
        skipped += source.skipped_files
        if source.skipped_files:
            assert "skipped: the WHERE is false" in plan.reason
    if where.startswith(("id < 300", "id BETWEEN", "t.id", "id >= 15000")):
        assert skipped > 0, where


def test_the_command_line_reads_a_snapshot_with_as_of(
    lake_tables: dict[str, LakeTable], capsys: pytest.CaptureFixture[str]
) -> None:
    entry = lake_tables["iceberg_pos_deletes"]
    url = url_of(entry)
    for snapshot in entry.snapshots:
        assert main(["count", "--db", url, "--as-of", str(snapshot), "SELECT * FROM t"]) == 0
        assert capsys.readouterr().out.strip() == str(entry.expected[snapshot].num_rows)
    assert main(["count", "--db", "duckdb://", "--as-of", "3", "SELECT 1"]) == 2
    assert "--as-of reads an iceberg: or delta: table" in capsys.readouterr().err
    pinned = url_of(entry, entry.snapshots[0])
    assert main(["count", "--db", pinned, "--as-of", "3", "SELECT * FROM t"]) == 2
    assert "both pin a snapshot" in capsys.readouterr().err


def test_a_plan_of_a_snapshot_the_table_no_longer_has_says_so(
    lake_tables: dict[str, LakeTable],
) -> None:
    source = sqlfeed.connect(url_of(lake_tables["iceberg_plain"]))
    with pytest.raises(sqlfeed.SqlfeedError, match=r"no longer has \(expired\): plan the query"):
        source.scalar("SELECT COUNT(*) FROM t__at_123456789")


@pytest.mark.parametrize("name", ["iceberg_dv", "delta_dv"])
def test_deletion_vectors_are_read_on_a_machine_that_did_not_plan(
    lake_tables: dict[str, LakeTable], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan names the deletion-vector positions in the planner's cache; a worker with
    another (empty) cache makes its own from the snapshot the partition names."""
    entry = lake_tables[name]
    monkeypatch.setenv("SQLFEED_CACHE", str(tmp_path / "planner"))
    planner = sqlfeed.connect(url_of(entry))
    plans = [
        sqlfeed.plan("SELECT id, a FROM t WHERE a <> 3", planner, partitions=5),
        sqlfeed.plan("SELECT id, a FROM t", planner, partitions=5),
    ]
    monkeypatch.setenv("SQLFEED_CACHE", str(tmp_path / "worker"))
    worker = sqlfeed.connect(url_of(entry))
    expected = entry.expected[entry.latest].select(["id", "a"])
    want = [expected.filter(pa.compute.field("a") != 3), expected]
    for plan, rows_wanted in zip(plans, want, strict=True):
        same_rows(read_all(worker, plan), rows_wanted)
    assert list((tmp_path / "worker").rglob("*.parquet"))
