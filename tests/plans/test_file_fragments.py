"""Queries over plain files (Parquet, CSV, JSON lines, ORC) on DuckDB: fragment partitions.

Every test checks what a user relies on: the partitions of a row-by-row query over files
add up to exactly the query's rows (as a multiset), whatever the format, the layout
(one file, a glob, hive folders) and the number of partitions; and a plan that re-reads
the query many times says so.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sqlfeed
from sqlfeed import Feeder, InvalidArgumentError, reshard
from sqlfeed.plans import Plan, filemeta, fileplan
from sqlfeed.shards import create_dataset, validate
from sqlfeed.shards.reader import read_shard
from tests.helpers.cli import run_cli

N = 3_000
GROUP_ROWS = 100


def rows_table(n: int = N, first: int = 0) -> pa.Table:
    """Ids, a key 0..16, floats with NULLs, text with commas and quotes, dates."""
    ids = np.arange(first, first + n, dtype=np.int64)
    text = [None if i % 11 == 0 else f'v{i}, "q{i % 5}"' for i in ids]
    return pa.table(
        {
            "id": ids,
            "k": ids % 17,
            "x": pa.array([None if i % 7 == 0 else i * 0.25 for i in ids], pa.float64()),
            "s": pa.array(text, pa.string()),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(i % 400)) for i in ids]),
        }
    )


def write_dimension(folder: Path) -> str:
    """A small dimension table: a name for every key but 5."""
    path = folder / "dim.parquet"
    keys = [k for k in range(17) if k != 5]
    pq.write_table(pa.table({"k": keys, "name": [f"key {k}" for k in keys]}), path)
    return str(path)


def write_format(folder: Path, layout: str) -> str:
    """Write the rows in ``layout``; the table expression a query reads them by."""
    table = rows_table()
    if layout == "parquet":
        path = folder / "rows.parquet"
        pq.write_table(table, path, row_group_size=GROUP_ROWS)
        return f"read_parquet('{path}')"
    if layout == "parquet-glob":
        for part in range(3):
            chunk = table.slice(part * N // 3, N // 3)
            pq.write_table(chunk, folder / f"part{part}.parquet", row_group_size=GROUP_ROWS)
        return f"read_parquet('{folder}/part*.parquet')"
    if layout == "hive":
        for year in (2023, 2024):
            chunk = table.filter(pc.equal(pc.bit_wise_and(table["id"], 1), year - 2023))
            (folder / f"year={year}").mkdir()
            pq.write_table(chunk, folder / f"year={year}" / "data.parquet", row_group_size=70)
        return f"read_parquet('{folder}/*/*.parquet', hive_partitioning = true)"
    if layout == "csv":
        path = folder / "rows.csv"
        pacsv.write_csv(table, path)
        return f"read_csv('{path}')"
    if layout == "jsonl":
        path = folder / "rows.jsonl"
        pq.write_table(table, folder / "source.parquet")
        duckdb.sql(f"COPY (FROM '{folder}/source.parquet') TO '{path}' (FORMAT json)")
        return f"read_json_auto('{path}')"
    if layout == "orc":
        path = folder / "rows.orc"
        orc.write_table(table, path, batch_size=GROUP_ROWS, stripe_size=1024)
        return f"read_orc('{path}')"
    raise AssertionError(layout)


LAYOUTS = ["parquet", "parquet-glob", "hive", "csv", "jsonl", "orc"]


def as_rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    columns = [column.to_pylist() for column in table.columns]
    return Counter(zip(*columns, strict=True))


def partition_rows(plan: Plan, source: Any) -> Counter[tuple[Any, ...]]:
    together: Counter[tuple[Any, ...]] = Counter()
    for partition in plan.partitions:
        together += as_rows(source.read_table(partition.sql, schema=plan.arrow_schema()))
    return together


@pytest.fixture(scope="module")
def formats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for layout in LAYOUTS:
        folder = tmp_path_factory.mktemp(layout)
        out[layout] = write_format(folder, layout)
    out["dim"] = write_dimension(tmp_path_factory.mktemp("dim"))
    return out


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut the small test files into byte ranges as if they were big ones."""
    monkeypatch.setattr(fileplan, "MIN_RANGE_BYTES", 1)


def queries(table: str, dim: str) -> dict[str, str]:
    return {
        "filter": f"SELECT id, s, x FROM {table} AS t WHERE k <> 3 AND (x IS NULL OR x > 10)",
        "star": f"SELECT * FROM {table}",
        "join": f"SELECT t.id, t.d, m.name FROM {table} AS t JOIN read_parquet('{dim}') AS m "
        "ON t.k = m.k WHERE t.id % 3 <> 0",
    }


CASES = [
    *[(layout, "filter", m) for layout in LAYOUTS for m in (1, 7, 64, 256)],
    *[(layout, "join", m) for layout in LAYOUTS for m in (7, 256)],
    *[(layout, "star", 64) for layout in LAYOUTS],
]


@pytest.mark.parametrize(("layout", "query", "m"), CASES)
def test_file_partitions_add_up_to_the_query(
    formats: dict[str, str], source: Any, layout: str, query: str, m: int
) -> None:
    sql = queries(formats[layout], formats["dim"])[query]
    plan = sqlfeed.plan(sql, source, partitions=m)
    assert plan.strategy == "fragments", plan.reason
    if query == "join":  # every partition reads the dimension file whole (#24)
        assert plan.cost > 1.0
        assert f"every partition also reads {formats['dim']}" in plan.reason
    else:
        assert plan.cost == 1.0
    assert plan.rows is None  # sized from the files' metadata: no COUNT(*) scan
    if m == 1:
        assert plan.num_partitions == 1
    else:
        # about m partitions: never more than the files can be cut into, never one
        assert 1 < plan.num_partitions <= max(m, N // GROUP_ROWS + 2)
    expected = as_rows(source.read_table(sql, schema=plan.arrow_schema()))
    assert sum(expected.values()) > N // 3
    assert partition_rows(plan, source) == expected


def test_a_csv_with_quoted_newlines_is_read_whole_and_the_reason_says_so(
    tmp_path: Path, source: Any
) -> None:
    table = rows_table().set_column(
        3, "s", pa.array([f"line one\nline {i}" if i % 9 == 0 else "plain" for i in range(N)])
    )
    pacsv.write_csv(table, tmp_path / "newlines.csv")
    pacsv.write_csv(rows_table(1_000, first=N), tmp_path / "plain.csv")
    sql = f"SELECT id, s FROM read_csv('{tmp_path}/*.csv') WHERE k <> 2"
    plan = sqlfeed.plan(sql, source, partitions=16)
    assert plan.strategy == "fragments"
    assert "newlines.csv is read whole: it has quoted newlines" in plan.reason
    assert any(p.description.endswith("newlines.csv") for p in plan.partitions)
    expected = as_rows(source.read_table(sql, schema=plan.arrow_schema()))
    assert partition_rows(plan, source) == expected


def test_union_by_name_keeps_every_column_in_every_partition(tmp_path: Path, source: Any) -> None:
    pq.write_table(rows_table(1_500).drop_columns(["x"]), tmp_path / "a.parquet", row_group_size=50)
    pq.write_table(rows_table(1_500, first=1_500), tmp_path / "b.parquet", row_group_size=50)
    sql = f"SELECT * FROM read_parquet('{tmp_path}/*.parquet', union_by_name = true)"
    plan = sqlfeed.plan(sql, source, partitions=8)
    assert plan.strategy == "fragments"
    assert plan.arrow_schema().names == ["id", "k", "s", "d", "x"]
    expected = as_rows(source.read_table(sql, schema=plan.arrow_schema()))
    assert partition_rows(plan, source) == expected
    assert sum(expected.values()) == 3_000


def test_a_query_that_is_not_row_by_row_falls_back_and_says_what_it_costs(
    formats: dict[str, str], source: Any
) -> None:
    table = formats["parquet"]
    grouped = f"SELECT k, COUNT(*) AS n FROM {table} GROUP BY k"
    plan = sqlfeed.plan(grouped, source, partitions=8)
    assert plan.strategy == "hash"
    assert plan.cost == 8.0
    assert "reads the whole query about 8 times" in plan.reason
    assert "key column" in plan.reason
    assert "scratch" in plan.reason
    assert "shardset dataset" in plan.reason
    with pytest.raises(InvalidArgumentError, match="GROUP"):
        sqlfeed.plan(grouped, source, strategy="fragments")
    one = sqlfeed.plan(grouped, source, partitions=1)
    assert one.cost == 1.0
    assert "WARNING" not in one.reason
    keyed = sqlfeed.plan(f"SELECT * FROM {table}", source, partitions=8, key="id")
    assert keyed.strategy == "range"
    assert keyed.cost == 1.0


def test_the_cli_warns_once_when_an_auto_plan_rereads_the_query(
    formats: dict[str, str],
) -> None:
    grouped = f"SELECT k, COUNT(*) AS n FROM {formats['parquet']} GROUP BY k"
    run = run_cli(["plan", "--db", "duckdb://", "--partitions", "6", grouped])
    assert run.code == 0, run
    warnings = [line for line in run.err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "about 6 times" in warnings[0]
    assert "--key" in warnings[0]
    assert "--scratch" in warnings[0]
    assert json.loads(run.out)["cost"] == 6.0
    rows = run_cli(
        ["plan", "--db", "duckdb://", "--partitions", "6", f"SELECT * FROM {formats['parquet']}"]
    )
    assert rows.code == 0
    assert "warning" not in rows.err
    assert json.loads(rows.out)["strategy"] == "fragments"


def test_the_cost_round_trips_through_json_and_leaves_the_fingerprint_alone(
    formats: dict[str, str], source: Any
) -> None:
    plan = sqlfeed.plan(f"SELECT id FROM {formats['csv']}", source, partitions=4)
    again = Plan.from_json(plan.to_json())
    assert again.cost == plan.cost == 1.0
    assert again.fingerprint == plan.fingerprint
    assert Plan(**{**plan.__dict__, "cost": 3.0}).fingerprint == plan.fingerprint


def test_the_feeder_reads_file_fragments_with_two_readers(
    formats: dict[str, str], source: Any
) -> None:
    sql = f"SELECT id, s FROM {formats['parquet-glob']} WHERE k < 9"
    plan = sqlfeed.plan(sql, source, partitions=12)
    batches = list(Feeder(plan, source, readers=2, batch_size=256))
    expected = as_rows(source.read_table(sql, schema=plan.arrow_schema()))
    assert as_rows(pa.Table.from_batches(batches)) == expected


def _read_partitions(job: tuple[str, list[str]]) -> list[tuple[Any, ...]]:
    """In a fresh process: read partition queries on a new in-memory DuckDB."""
    schema_bytes, sqls = job
    schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(schema_bytes)))
    out: list[tuple[Any, ...]] = []
    with sqlfeed.connect("duckdb://") as fresh:
        for sql in sqls:
            out.extend(as_rows(fresh.read_table(sql, schema=schema)).elements())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["parquet-glob", "csv", "jsonl", "orc"])
def test_file_partitions_run_in_other_processes(formats: dict[str, str], layout: str) -> None:
    with sqlfeed.connect("duckdb://") as planner:
        sql = queries(formats[layout], formats["dim"])["join"]
        plan = sqlfeed.plan(sql, planner, partitions=9)
        expected = as_rows(planner.read_table(sql, schema=plan.arrow_schema()))
    schema = plan.arrow_schema().serialize().to_pybytes().hex()
    shares = [(schema, [p.sql for p in plan.share(rank, 3)]) for rank in range(3)]
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.map(_read_partitions, shares)
    assert Counter(row for rows in results for row in rows) == expected


# -- DuckDB tables and views --------------------------------------------------------------------


@pytest.fixture(scope="module")
def duckdb_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("db") / "rows.duckdb")
    with duckdb.connect(path) as con:
        con.execute(
            "CREATE TABLE t AS SELECT i AS id, i % 17 AS k, 'v' || i AS s FROM range(50000) r(i)"
        )
        con.execute("DELETE FROM t WHERE id % 100 = 7")  # rowid gaps
        con.execute("CREATE VIEW v AS SELECT id, s FROM t WHERE k <> 4")
    return path


@pytest.mark.parametrize(
    "query",
    ["SELECT * FROM t WHERE k <> 3", pytest.param("SELECT id, s FROM v", marks=pytest.mark.slow)],
)
def test_duckdb_table_and_view_partitions_add_up_at_256(duckdb_file: str, query: str) -> None:
    with sqlfeed.connect(f"duckdb:///{duckdb_file}") as db:
        plan = sqlfeed.plan(query, db, partitions=256)
        assert plan.strategy == ("ctid" if "FROM t" in query else "hash")
        assert plan.cost == (1.0 if plan.strategy == "ctid" else 256.0)
        assert plan.num_partitions > 200
        expected = as_rows(db.read_table(query, schema=plan.arrow_schema()))
        assert partition_rows(plan, db) == expected


# -- datasets: aligned shards pair up by position ---------------------------------------------


def _two_shardsets(folder: Path, order: str) -> Any:
    """A dataset of shardsets ``a`` and ``b`` over the same 2,000 uids: ``b`` in the same
    order as ``a`` (aligned) or reversed within each shard."""
    uid = np.arange(2_000, dtype=np.int64)
    ds = create_dataset(folder / "ds")
    ds.add_shardset("a", pa.table({"uid": uid, "x": uid * 2}), shard_rows=500, row_group_rows=64)
    b = pa.table({"uid": uid, "y": [f"y{u}" for u in uid]})
    if order == "reversed":
        b = pa.concat_tables(
            [b.slice(i, 500).take(np.arange(499, -1, -1)) for i in range(0, 2_000, 500)]
        )
    ds.add_shardset("b", b, row_group_rows=100)
    return ds


@pytest.mark.parametrize("order", ["aligned", "reversed"])
def test_aligned_shards_are_read_with_a_positional_join(tmp_path: Path, order: str) -> None:
    ds = _two_shardsets(tmp_path, order)
    digests = {s.name: [e.uid_digest for e in s.manifest.shards] for s in ds.shardsets}
    assert all(digests["a"])
    assert all(digests["b"])
    assert (digests["a"] == digests["b"]) == (order == "aligned")
    with ds.source() as source:
        query = "SELECT uid, x, y FROM dataset WHERE uid % 7 <> 0"
        plan = sqlfeed.plan(query, source, target_rows=150)
        assert plan.strategy == "fragments"
        assert plan.num_partitions > 4
        for partition in plan.partitions:
            assert ("POSITIONAL JOIN" in partition.sql) == (order == "aligned")
            assert ("ORDER BY" in partition.sql) == (order != "aligned")
        expected = Counter((u, u * 2, f"y{u}") for u in range(2_000) if u % 7)
        assert partition_rows(plan, source) == expected
        assert as_rows(source.read_table(query)) == expected
        first = source.read_table(plan.partitions[0].sql)  # a fragment keeps the file order
        assert first.column("uid").to_pylist() == sorted(first.column("uid").to_pylist())


def test_a_manifest_without_uid_digests_keeps_the_sorted_join(tmp_path: Path) -> None:
    _two_shardsets(tmp_path, "aligned")
    for shardset in ("a", "b"):
        path = tmp_path / "ds" / shardset / "manifest.json"
        manifest = json.loads(path.read_text())
        for entry in manifest["shards"]:
            entry.pop("uid_digest")
        path.write_text(json.dumps(manifest))
    with sqlfeed.connect(f"dataset:///{tmp_path / 'ds'}") as source:
        plan = sqlfeed.plan("SELECT * FROM dataset", source, target_rows=150)
        assert all("POSITIONAL" not in p.sql for p in plan.partitions)
        expected = Counter((u, u * 2, f"y{u}") for u in range(2_000))
        assert partition_rows(plan, source) == expected


# -- reshard reads Parquet files directly -----------------------------------------------------


@pytest.mark.parametrize("uid", [None, "id"])
def test_reshard_of_parquet_files_needs_no_extract_and_orders_as_before(
    tmp_path: Path, uid: str | None
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for part in range(3):
        pq.write_table(
            rows_table(700, first=part * 700), folder / f"p{part}.parquet", row_group_size=128
        )
    files = f"read_parquet('{folder}/*.parquet')"
    direct = reshard(
        f"SELECT * FROM {files}", out=tmp_path / "direct", shuffle=5, shard_rows=400, uid=uid
    )
    assert direct.bytes_extracted == 0
    assert direct.bytes_in_from == "files"
    with duckdb.connect() as con:  # the same rows in a table: the extract path
        con.execute(f"CREATE TABLE t AS SELECT * FROM {files}")
        copied = reshard(
            "SELECT * FROM t", con, out=tmp_path / "copied", shuffle=5, shard_rows=400, uid=uid
        )
    assert copied.bytes_extracted > 0
    assert direct.files == copied.files
    for name in direct.files:
        ours = read_shard(tmp_path / "direct" / name, "parquet")
        theirs = read_shard(tmp_path / "copied" / name, "parquet")
        assert ours.equals(theirs)
    # A filter and a projection: the same rows (in another seeded order).
    query = f"SELECT id, s FROM {files} AS t WHERE k <> 4"
    filtered = reshard(query, out=tmp_path / "filtered", shuffle=5, shard_rows=900, uid=uid)
    assert filtered.bytes_extracted == 0
    got = pa.concat_tables(read_shard(tmp_path / "filtered" / n, "parquet") for n in filtered.files)
    with sqlfeed.connect("duckdb://") as db:
        expected = as_rows(db.read_table(query))
    assert as_rows(got.select(["id", "s"])) == expected


def _read_db_partitions(job: tuple[str, str, list[str]]) -> list[tuple[Any, ...]]:
    """In a fresh process: open the DuckDB file (read-only) and read partition queries."""
    url, schema_hex, sqls = job
    schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(schema_hex)))
    out: list[tuple[Any, ...]] = []
    with sqlfeed.connect(url) as db:
        for sql in sqls:
            out.extend(as_rows(db.read_table(sql, schema=schema)).elements())
    return out


@pytest.mark.slow
def test_duckdb_file_partitions_run_in_several_processes_at_once(duckdb_file: str) -> None:
    url = f"duckdb:///{duckdb_file}"
    with sqlfeed.connect(url) as db:
        plan = sqlfeed.plan("SELECT * FROM t WHERE k <> 3", db, partitions=12)
        expected = as_rows(db.read_table(plan.sql, schema=plan.arrow_schema()))
        schema = plan.arrow_schema().serialize().to_pybytes().hex()
        shares = [(url, schema, [p.sql for p in plan.share(rank, 3)]) for rank in range(3)]
        with multiprocessing.get_context("spawn").Pool(3) as pool:  # while this one reads too
            results = pool.map(_read_db_partitions, shares)
    assert plan.strategy == "ctid"
    assert Counter(row for rows in results for row in rows) == expected


def test_deep_validation_finds_a_shard_reordered_behind_the_manifest(tmp_path: Path) -> None:
    _two_shardsets(tmp_path, "aligned")
    path = tmp_path / "ds" / "b" / "shard.00001.parquet"
    table = pq.read_table(path)
    pq.write_table(table.take(np.arange(table.num_rows - 1, -1, -1)), path)  # same rows
    report = validate(tmp_path / "ds")
    assert any("shard.00001.parquet does not hold the uids" in p.message for p in report.problems)


def test_text_files_are_not_cut_below_the_smallest_range(
    formats: dict[str, str], source: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = formats["csv"].split("'")[1]
    monkeypatch.setattr(fileplan, "MIN_RANGE_BYTES", Path(path).stat().st_size // 3)
    plan = sqlfeed.plan(f"SELECT * FROM {formats['csv']}", source, partitions=64)
    assert plan.strategy == "fragments"
    assert 1 < plan.num_partitions <= 3
    expected = as_rows(source.read_table(plan.sql, schema=plan.arrow_schema()))
    assert partition_rows(plan, source) == expected


_LINE = st.lists(st.sampled_from(["a", ",", '""', '"a,b"']), max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=80), st.integers(0, 10**6), st.integers(0, 10**6))
def test_the_quote_scan_finds_a_newline_after_odd_quotes_across_blocks(
    lines: list[str], first: int, second: int
) -> None:
    """The quote-parity scan (blocks of 64 bytes here, scanned in parallel for both
    parities they may start with) agrees with reading the bytes one by one: on lines of
    whole quoted values, with or without two quotes added anywhere (a value holding a
    newline, when one lies between them)."""
    text = "\n".join(lines)
    if first % 3:  # two more quotes, at two places
        i, j = sorted((first % (len(text) + 1), second % (len(text) + 1)))
        text = text[:i] + '"' + text[i:j] + '"' + text[j:]
    odd, expected = False, False
    for char in text:
        if char == '"':
            odd = not odd
        elif char == "\n" and odd:
            expected = True
            break
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "q.csv"
        path.write_bytes(text.encode())
        with mock.patch.object(filemeta, "_BLOCK", 64):
            assert filemeta._scan_quotes(path, b'"', b"") == expected


def test_a_parquet_file_rewritten_between_reads_is_read_as_it_is_now(tmp_path: Path) -> None:
    """Sources sqlfeed opens keep Parquet footers between queries; a file written again
    (same name, other rows and row groups) is read afresh, by a plan made before and
    after; a connection the user passes keeps its own settings."""
    path = tmp_path / "t.parquet"
    sql = f"SELECT a FROM read_parquet('{path}')"

    def write(rows: int, offset: int) -> None:
        table = pa.table({"a": pa.array(range(offset, offset + rows), pa.int64())})
        pq.write_table(table, path, row_group_size=max(1, rows // 4))

    setting = "SELECT current_setting('parquet_metadata_cache')"
    with sqlfeed.connect("duckdb://") as source:
        assert source.rows(setting) == [(True,)]  # on the cursors that read partitions
        write(1000, 0)
        first = sqlfeed.plan(sql, source, partitions=4)
        assert sum(source.read_table(p.sql).num_rows for p in first.partitions) == 1000
        write(40, 5000)
        now = sqlfeed.plan(sql, source, partitions=4)
        read = pa.concat_tables(source.read_table(p.sql) for p in now.partitions)
        assert sorted(read.column("a").to_pylist()) == list(range(5000, 5040))
        assert source.read_table(sql).column("a").to_pylist() == list(range(5000, 5040))
    own = duckdb.connect()
    with sqlfeed.connect(own):
        assert own.execute(setting).fetchall() == [(False,)]
    own.close()
