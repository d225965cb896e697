"""Merged reads and the CSV sniff cache (local files on DuckDB).

A static Feeder reads adjacent partitions that cut one file (Parquet row groups, CSV byte
ranges) by one query per reader share: these tests check that the rows, their order and
the feed state are those of one query per partition, and count the queries through the
feeder's own progress reports. A CSV file is sniffed once per plan and its partitions
read it with the sniffed dialect and types, also when they are not DuckDB's defaults.
"""

from __future__ import annotations

import datetime as dt
import doctest
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed import Feeder
from sqlfeed.feed.feeder import Progress
from sqlfeed.plans import Plan, fileplan, spans
from tests.conftest import get_engine
from tests.plans.test_file_fragments import as_rows, partition_rows, rows_table

N = 6_400


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One Parquet file of 64 row groups, the same rows as CSV, and a glob of 4 files."""
    folder = tmp_path_factory.mktemp("merged")
    table = rows_table(N)
    pq.write_table(table, folder / "rows.parquet", row_group_size=N // 64)
    pa.csv.write_csv(table, folder / "rows.csv")
    orc.write_table(table, folder / "rows.orc", batch_size=100, stripe_size=1024)
    for part in range(4):
        pq.write_table(table.slice(part * N // 4, N // 4), folder / f"part{part}.parquet")
    return {
        "parquet": f"read_parquet('{folder / 'rows.parquet'}')",
        "csv": f"read_csv('{folder / 'rows.csv'}')",
        "glob": f"read_parquet('{folder}/part*.parquet')",
        "orc": f"read_orc('{folder / 'rows.orc'}')",
    }


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut the small test CSV into byte ranges as if it were big."""
    monkeypatch.setattr(fileplan, "MIN_RANGE_BYTES", 1)


def feed(plan: Any, source: Any, **options: Any) -> tuple[list[tuple[Any, ...]], list[Progress]]:
    """The rows a static Feeder delivers, in order, and its progress reports."""
    reports: list[Progress] = []
    feeder = Feeder(plan, source, progress=reports.append, **options)
    table = pa.Table.from_batches(list(feeder), schema=feeder.schema)
    rows = list(zip(*(c.to_pylist() for c in table.columns), strict=True))
    assert feeder.queries == (reports[-1].queries if reports else 0)
    return rows, reports


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_one_query_reads_64_partitions_of_one_file(
    files: dict[str, str], source: Any, fmt: str
) -> None:
    """DuckDB runs one query on every core: the two readers' shares are one query."""
    sql = f"SELECT id, x, s, d FROM {files[fmt]} WHERE k <> 3"
    plan = sqlfeed.plan(sql, source, partitions=64)
    assert plan.strategy == "fragments", plan.reason
    assert plan.num_partitions == 64, plan.reason
    merged, reports = feed(plan, source, readers=2, batch_size=100)
    one_each, single = feed(plan, source, readers=2, batch_size=100, merge_reads=False)
    assert merged == one_each  # same rows, same order
    expected = as_rows(source.read_table(sql, schema=plan.arrow_schema()))
    assert Counter(merged) == expected
    assert [r.queries for r in reports] == [1]
    assert [r.partitions_done for r in reports] == [64]
    assert single[-1].queries == 64
    assert single[-1].partitions_done == 64


def test_orc_stripes_merge_too(files: dict[str, str], source: Any) -> None:
    plan = sqlfeed.plan(f"SELECT id, s FROM {files['orc']} WHERE k > 2", source, partitions=64)
    assert plan.num_partitions > 8, plan.reason
    assert all(p.span is not None for p in plan.partitions)
    merged, reports = feed(plan, source, readers=2)
    plain, _ = feed(plan, source, readers=2, merge_reads=False)
    assert merged == plain
    assert reports[-1].queries == 1
    assert Counter(merged) == as_rows(source.read_table(plan.sql, schema=plan.arrow_schema()))


def test_whole_files_are_not_merged_but_read_exactly(files: dict[str, str], source: Any) -> None:
    plan = sqlfeed.plan(f"SELECT id, s FROM {files['glob']}", source, partitions=4)
    assert plan.num_partitions == 4
    assert all(p.span is None for p in plan.partitions)
    rows, reports = feed(plan, source, readers=2)
    assert reports[-1].queries == 4
    assert sorted(r[0] for r in rows) == list(range(N))


def test_a_shuffled_feed_with_merged_reads_delivers_the_same_rows_in_the_same_order(
    files: dict[str, str], source: Any
) -> None:
    plan = sqlfeed.plan(f"SELECT id FROM {files['parquet']}", source, partitions=64)
    options = {"readers": 3, "shuffle_buffer": 500, "seed": 7, "batch_size": 64}
    merged, reports = feed(plan, source, **options)
    plain, _ = feed(plan, source, merge_reads=False, **options)
    assert merged == plain
    assert sorted(r[0] for r in merged) == list(range(N))
    assert reports[-1].queries <= 64  # merged only where the shuffled order is adjacent


@pytest.mark.parametrize("merge_after", [True, False])
def test_a_state_taken_inside_a_merged_read_resumes_exactly(
    files: dict[str, str], source: Any, merge_after: bool
) -> None:
    plan = sqlfeed.plan(f"SELECT id, s FROM {files['csv']}", source, partitions=64)
    options = {"readers": 2, "batch_size": 128, "shuffle_buffer": 300, "seed": 3}
    feeder = Feeder(plan, source, **options)
    batches = iter(feeder)
    first = [next(batches) for _ in range(17)]
    state = feeder.state_dict()
    rest = [batch for batch in batches]
    assert state["partitions_done"] < 32  # inside the first half of the epoch
    resumed = Feeder(plan, source, state=state, merge_reads=merge_after, **options)
    again = list(resumed)
    assert [b.to_pylist() for b in again] == [b.to_pylist() for b in rest]
    ids = [r["id"] for b in [*first, *rest] for r in b.to_pylist()]
    assert sorted(ids) == list(range(N))


def test_merge_refuses_partitions_that_are_not_adjacent(files: dict[str, str], source: Any) -> None:
    plan = sqlfeed.plan(f"SELECT id FROM {files['parquet']}", source, partitions=8)
    parts = plan.partitions
    assert Plan.from_json(plan.to_json()).partitions == parts  # spans round-trip
    assert spans.merge(parts[2:5]).span == (parts[2].span[0], parts[2].span[1], parts[4].span[2])
    with pytest.raises(ValueError, match="adjacent"):
        spans.merge([parts[1], parts[3]])
    units = spans.read_units([parts[0], parts[1], parts[5], parts[6], parts[7]], 1)
    assert [u.count for u in units] == [2, 3]


def test_the_spans_examples_hold() -> None:
    result = doctest.testmod(spans, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# -- the CSV sniff ------------------------------------------------------------------------


def _write_pipes(path: Path, scale: float) -> None:
    """A CSV with ``|`` delimiters and ``'`` quotes; values holding both."""
    lines = ["id|price|day|note"]
    for i in range(3_000):
        note = f"'a|b ''{i}'''" if i % 4 == 0 else f"n{i}"
        day = dt.date(2024, 1, 1) + dt.timedelta(days=i % 300)
        lines.append(f"{i}|{i * scale}|{day.isoformat()}|{note}")
    path.write_text("\n".join(lines) + "\n")


def test_a_csv_with_its_own_dialect_reads_identical_typed_values_through_partitions(
    tmp_path: Path, source: Any
) -> None:
    path = tmp_path / "pipes.csv"
    _write_pipes(path, 0.5)
    sql = f"SELECT * FROM read_csv('{path}', delim = '|', quote = '''', escape = '''')"
    direct = source.read_table(sql)
    assert direct.schema.types == [pa.int64(), pa.float64(), pa.date32(), pa.string()]
    plan = sqlfeed.plan(sql, source, partitions=7)
    assert plan.strategy == "fragments", plan.reason
    assert plan.num_partitions == 7, plan.reason
    assert plan.arrow_schema() == direct.schema
    assert "auto_detect = FALSE" in plan.partitions[3].sql  # no sniff per partition
    assert partition_rows(plan, source) == as_rows(direct)
    assert "a|b '0'" in direct.column("note").to_pylist()


def test_a_rewritten_csv_is_sniffed_again(tmp_path: Path, source: Any) -> None:
    path = tmp_path / "pipes.csv"
    _write_pipes(path, 0.5)
    sql = f"SELECT * FROM read_csv('{path}', delim = '|', quote = '''', escape = '''')"
    assert sqlfeed.plan(sql, source, partitions=3).arrow_schema().field("price").type == (
        pa.float64()
    )
    _write_pipes(path, 2)  # whole numbers now: BIGINT
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    plan = sqlfeed.plan(sql, source, partitions=3)
    assert plan.arrow_schema().field("price").type == pa.int64()
    assert partition_rows(plan, source) == as_rows(source.read_table(sql))


@pytest.mark.engine
@pytest.mark.parametrize("name", ["duckdb", "sqlite", "postgres"])
def test_physical_row_ranges_merge_between_their_open_ends(name: str) -> None:
    """ctid pages / rowid ranges: the closed middle ranges of a reader's share (DuckDB: of
    the whole order) run as one query; the open first and last ranges (rows added after
    planning) stay apart."""
    engine = get_engine(name)
    table = engine.qualify(f"mr_{uuid.uuid4().hex[:8]}")
    engine.execute(f"CREATE TABLE {table} (i INTEGER, s VARCHAR(40))")
    values = ", ".join(
        f"({i}, {'NULL' if i % 7 == 0 else repr('v' * (i % 30))})" for i in range(3000)
    )
    engine.execute(f"INSERT INTO {table} VALUES {values}")
    engine.commit()
    if name == "postgres":
        engine.execute(f"ANALYZE {table}")  # the row estimates merged queries are sized by
        engine.commit()
    try:
        sql = f"SELECT i, s FROM {table} WHERE i % 5 <> 1"
        with engine.source() as source:
            plan = sqlfeed.plan(sql, source, partitions=16, strategy="ctid")
            assert plan.num_partitions >= 8, plan.reason
            merged, reports = feed(plan, source, readers=2, batch_size=64)
            one_each, single = feed(plan, source, readers=2, batch_size=64, merge_reads=False)
            # a server engine's merged query holds at most 2 read batches (here 2 x 200
            # rows, about two partitions): its readers still read at once
            capped, small = feed(plan, source, readers=2, batch_size=64, read_batch_rows=200)
        assert merged == one_each == capped  # same rows, same order
        assert Counter(merged) == Counter(engine.rows(sql))
        assert single[-1].queries == plan.num_partitions
        if name == "duckdb":  # one DuckDB query runs on every core: merged whatever its size
            assert reports[-1].queries == small[-1].queries == 3  # [first] [middles] [last]
        else:
            # SQLite reads a plan's epoch on one connection (one snapshot, one reader):
            # [first] [middles] [last]; a server engine's 2 readers share the snapshot
            assert reports[-1].queries == (3 if name == "sqlite" else 4)
            sizes = [p.estimated_rows for p in plan.partitions]
            assert all(size is not None and 0 < size <= 400 for size in sizes), sizes
            assert plan.num_partitions // 2 <= small[-1].queries < plan.num_partitions
    finally:
        engine.execute(f"DROP TABLE {table}")
        engine.commit()


def test_a_whole_file_byte_range_is_read_as_the_file_itself(
    files: dict[str, str], source: Any, tmp_path: Path
) -> None:
    """A merged byte range that is the whole CSV file as it is now runs on the file's own
    path (DuckDB's own reader, no Python file system in between); a part of it, or a file
    that changed size since, keeps its byte range."""
    path = tmp_path / "whole.csv"
    path.write_text("a,b\n1,x\n2,y\n")
    size, header = path.stat().st_size, len("a,b\n")
    call = "SELECT * FROM read_csv('{}', header = TRUE)"
    whole = call.format(f"sqlfeedrange://{header}-{header}-{size}/{path}")
    part = call.format(f"sqlfeedrange://{header}-{header}-{size - 4}/{path}")
    local = source._local_sql(source.connection, whole)
    assert local == call.format(path)
    assert source._local_sql(source.connection, part) == part
    assert source.read_table(whole).num_rows == 2
    with path.open("a") as grown:
        grown.write("3,z\n")
    assert source._local_sql(source.connection, whole) == whole
    assert source.read_table(whole).num_rows == 2  # the range planned: not the new line
