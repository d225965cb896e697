"""Shardset datasets: layout, rules, the main shardset, joins, SQL and fragment partitions."""

from __future__ import annotations

import gc
import json
import os
import threading
import weakref
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed import Feeder, InvalidArgumentError, ShardsetError
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.worker import Worker
from sqlfeed.shards import Dataset, Shardset, create_dataset, open_dataset, validate
from sqlfeed.shards.manifest import FORMATS, Manifest
from sqlfeed.shards.reader import read_shard
from sqlfeed.shards.source import TRACE_COLUMNS
from sqlfeed.shards.writer import ShardWriter

N = 2_000


def features(n: int = N) -> pa.Table:
    uid = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "uid": uid,
            "x": uid * 0.5,
            "k": pa.array([f"k{i % 13}" for i in range(n)]),
        }
    )


def labels(uids: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "uid": pa.array(uids, pa.int64()),
            "label": pa.array((uids % 3).astype(np.int64)),
            "note": pa.array([f"n{u}é" for u in uids]),
        }
    )


def make(tmp_path: Path, fmt: str = "parquet", second: str = "parquet", keep: int = 3) -> Dataset:
    """Two shardsets: ``features`` (all samples, 4 shards) and ``labels`` (every
    ``keep``-th sample missing, so it is the main shardset; row groups of 64 rows)."""
    ds = create_dataset(tmp_path / "ds")
    ds.add_shardset("features", features(), shard_rows=500, format=fmt)
    uids = np.array([u for u in range(N) if u % keep], dtype=np.int64)[::-1]
    ds.add_shardset("labels", labels(uids), format=second, row_group_rows=64)
    return ds


def expected_rows(keep: int = 3) -> set[tuple[int, float, str, int, str]]:
    return {(u, u * 0.5, f"k{u % 13}", u % 3, f"n{u}é") for u in range(N) if u % keep}


def as_rows(table: pa.Table) -> list[tuple[object, ...]]:
    names = ["uid", "x", "k", "label", "note"]
    columns = [table.column(n).to_pylist() for n in names]
    return list(zip(*columns, strict=True))


# -- layout, adding, the main shardset ----------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_through_iteration_and_sql(tmp_path: Path, fmt: str) -> None:
    second = "parquet" if fmt == "tar" else fmt  # tar holds bytes: keep typed labels beside it
    ds = make(tmp_path, fmt if fmt != "tar" else "parquet", second)
    if fmt == "tar":
        ds.add_shardset(
            "blobs",
            pa.table(
                {
                    "uid": pa.array(range(N), pa.int64()),
                    "bin": [bytes([i % 256]) * 3 for i in range(N)],
                }
            ),
            format="parquet",
        )
    opened = open_dataset(tmp_path / "ds", deep=True)
    rows = as_rows(opened.read())
    assert len(rows) == len(set(rows)) == len(expected_rows())
    assert set(rows) == expected_rows()
    assert opened.skipped == N - len(expected_rows())
    source = opened.source()
    got = source.arrow("SELECT * FROM dataset")
    assert set(as_rows(got)) == expected_rows()


def test_tar_shardsets_hold_bytes_and_keep_records_whole(tmp_path: Path) -> None:
    ds = create_dataset(tmp_path / "ds", uid="key")
    payload = [os.urandom(i % 50) for i in range(300)]
    table = pa.table(
        {
            "key": [f"{i:05d}" for i in range(300)],
            "jpg": pa.array(payload, pa.binary()),
            "txt": [None if i % 7 == 0 else f"caption {i} ✓" for i in range(300)],
        }
    )
    ds.add_shardset("media", table, shard_rows=100, format="tar")
    opened = open_dataset(tmp_path / "ds", deep=True)
    back = opened.read()
    assert back.column("jpg").to_pylist() == payload
    assert back.column("txt").to_pylist() == [
        None if i % 7 == 0 else f"caption {i} ✓".encode() for i in range(300)
    ]
    assert opened.source().scalar("SELECT count(*) FROM dataset WHERE txt IS NULL") == 43


def test_a_new_shardset_goes_where_its_samples_are_and_leaves_the_others_alone(
    tmp_path: Path,
) -> None:
    ds = create_dataset(tmp_path / "ds")
    ds.add_shardset("features", features(), shard_rows=500)
    before = {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in (tmp_path / "ds" / "features").iterdir()
    }
    extra = labels(np.array([1999, 3, 1200, 5000, 5001], dtype=np.int64))
    ds.add_shardset("labels", extra)
    after = {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in (tmp_path / "ds" / "features").iterdir()
    }
    assert after == before
    labels_set = ds.shardset("labels")
    placed = {
        index: labels_set.read_shard(index, ["uid"]).column("uid").to_pylist()
        for index in labels_set.shard_indices
    }
    # Known samples sit in their features shard; new ones start a new shard after the last.
    assert placed == {0: [3], 2: [1200], 3: [1999], 4: [5000, 5001]}
    assert validate(tmp_path / "ds").ok


def test_main_shardset_is_the_one_with_fewest_samples_ties_to_the_oldest(tmp_path: Path) -> None:
    ds = create_dataset(tmp_path / "ds")
    ds.add_shardset("big", features(), shard_rows=500)
    ds.add_shardset("first_small", labels(np.arange(0, 1000, dtype=np.int64)))
    small = pa.table({"uid": pa.array(range(1000, 2000), pa.int64()), "z": pa.array(range(1000))})
    ds.add_shardset("second_small", small)
    opened = open_dataset(tmp_path / "ds")
    assert opened.main.name == "first_small"
    assert "oldest" in opened.main_reason
    # No sample is in all three shardsets: all are skipped, and counted once each.
    assert opened.read().num_rows == 0
    assert opened.skipped == N
    smaller = pa.table({"uid": pa.array([5, 6], pa.int64()), "w": pa.array([1, 2])})
    opened.add_shardset("newest_smallest", smaller)
    assert open_dataset(tmp_path / "ds").main.name == "newest_smallest"


def test_adding_a_shardset_that_breaks_a_rule_leaves_nothing_behind(tmp_path: Path) -> None:
    ds = make(tmp_path)
    with pytest.raises(InvalidArgumentError, match="already live in another shardset"):
        ds.add_shardset("again", labels(np.arange(5, dtype=np.int64)))
    with pytest.raises(ShardsetError, match="appear more than once"):
        ds.add_shardset("dupes", pa.table({"uid": pa.array([1, 1, 2], pa.int64()), "q": [1, 2, 3]}))
    with pytest.raises(ShardsetError, match="different shard indices"):
        ds.add_shardset(
            "moved",
            {0: pa.table({"uid": pa.array([1999], pa.int64()), "q": [1]})},  # 1999 is in shard 3
        )
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "dataset.json",
        "features",
        "labels",
    ]
    assert validate(tmp_path / "ds").ok


def test_iteration_reads_at_most_one_shard_per_shardset_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(tmp_path)
    live: dict[str, list[weakref.ref[pa.Table]]] = {}
    original = Shardset.read_shard

    def tracked(self: Shardset, index: int, columns: list[str] | None = None) -> pa.Table:
        table = original(self, index, columns)
        live.setdefault(self.name, []).append(weakref.ref(table))
        return table

    monkeypatch.setattr(Shardset, "read_shard", tracked)
    most = 0
    shards = 0
    for table in open_dataset(tmp_path / "ds", validate=False).iter_shards():
        shards += 1
        del table
        gc.collect()
        for refs in live.values():
            most = max(most, sum(ref() is not None for ref in refs))
    assert shards == 4
    assert most <= 1  # after each shard is handed over, no older shard is still held


# -- validation: every rule -------------------------------------------------------------------


def problems(path: Path) -> str:
    report = validate(path)
    assert not report.ok
    return "\n".join(map(str, report.problems))


def test_a_valid_dataset_validates(tmp_path: Path) -> None:
    make(tmp_path)
    report = validate(tmp_path / "ds")
    assert report.ok
    assert report.shardsets == 2
    assert report.shards == 8


def test_duplicate_uids_within_a_shardset_are_named(tmp_path: Path) -> None:
    ds = make(tmp_path)
    shardset = ds.shardset("features")
    file = shardset.path / shardset.manifest.shards[1].file
    table = pq.read_table(file)
    uid = table.column("uid").to_numpy().copy()
    uid[:3] = [7, 8, 9]  # 7, 8, 9 also live in shard 0
    pq.write_table(table.set_column(0, "uid", pa.array(uid)), file)
    text = problems(tmp_path / "ds")
    assert "features" in text
    assert "3 uid(s) appear more than once" in text
    assert "7 (shards 0, 1)" in text


def test_a_sample_in_another_shard_index_is_named_with_both_shards(tmp_path: Path) -> None:
    ds = make(tmp_path)
    labels_set = ds.shardset("labels")
    first = labels_set.manifest.shards[0]
    last = labels_set.manifest.shards[-1]
    moved = read_shard(labels_set.path / first.file, "parquet").slice(0, 2)
    rest = read_shard(labels_set.path / first.file, "parquet").slice(2)
    tail = read_shard(labels_set.path / last.file, "parquet")
    pq.write_table(rest, labels_set.path / first.file)
    pq.write_table(pa.concat_tables([tail, moved]), labels_set.path / last.file)
    manifest = labels_set.manifest
    shards = [
        s.__class__(
            s.index,
            s.file,
            rest.num_rows if s is first else tail.num_rows + 2 if s is last else s.rows,
            s.bytes,
        )
        for s in manifest.shards
    ]
    manifest.with_shards(shards).write(labels_set.path)
    text = problems(tmp_path / "ds")
    assert "2 sample(s) sit in different shard indices" in text
    uid = moved.column("uid")[0].as_py()
    assert f"{uid} (shard 0 in features, shard 3 in labels)" in text


def test_missing_uid_column_and_mismatched_uid_names(tmp_path: Path) -> None:
    ds = make(tmp_path)
    shardset = ds.shardset("labels")
    file = shardset.path / shardset.manifest.shards[0].file
    pq.write_table(pq.read_table(file).drop_columns(["uid"]), file)
    assert "has no uid column 'uid'" in problems(tmp_path / "ds")

    other = create_dataset(tmp_path / "other", uid="id")
    other.add_shardset("a", pa.table({"id": pa.array([1, 2], pa.int64()), "x": [1, 2]}))
    lone = tmp_path / "lone"
    lone.mkdir()
    with ShardWriter(lone / "shard.00000.parquet", "parquet", labels(np.arange(2)).schema) as w:
        w.write(labels(np.arange(2)))
    Manifest("b", "uid", "parquet", labels(np.arange(2)).schema, ()).with_shards(
        [sqlfeed.shards.manifest.ShardEntry(0, "shard.00000.parquet", 2, w.close())]
    ).write(lone)
    os.replace(lone, tmp_path / "other" / "b")
    assert "its uid column is 'uid', the dataset's is 'id'" in problems(tmp_path / "other")


def test_missing_stray_and_miscounted_shard_files(tmp_path: Path) -> None:
    ds = make(tmp_path)
    shardset = ds.shardset("features")
    (shardset.path / shardset.manifest.shards[2].file).unlink()
    (shardset.path / "shard.00009.parquet").write_bytes(b"")
    data = json.loads((shardset.path / "manifest.json").read_text())
    data["shards"][0]["rows"] += 1
    (shardset.path / "manifest.json").write_text(json.dumps(data))
    text = problems(tmp_path / "ds")
    assert "features shard 2: shard.00002.parquet is missing" in text
    assert "shard.00009.parquet is not in the manifest" in text
    assert "features shard 0: shard.00000.parquet has 500 rows, the manifest says 501" in text


@pytest.mark.parametrize("fmt", ["parquet", "orc", "csv", "jsonl", "tar"])
def test_a_truncated_or_corrupt_shard_is_a_clear_error(tmp_path: Path, fmt: str) -> None:
    ds = make(tmp_path, fmt="parquet", second=fmt if fmt != "tar" else "parquet")
    if fmt == "tar":
        ds.add_shardset(
            "media",
            pa.table({"uid": pa.array(range(N), pa.int64()), "png": [b"x" * 600] * N}),
            format="tar",
        )
    name = "media" if fmt == "tar" else "labels"
    shardset = ds.shardset(name)
    file = shardset.path / shardset.manifest.shards[0].file
    data = file.read_bytes()
    file.write_bytes(
        data[: len(data) // 3] + (b"\x00garbage{{" if fmt in ("csv", "jsonl") else b"")
    )
    text = problems(tmp_path / "ds")
    assert f"{name} shard 0" in text
    with pytest.raises(ShardsetError, match=f"invalid dataset .*{name} shard 0"):
        open_dataset(tmp_path / "ds", deep=True)


def test_not_a_dataset_and_a_broken_manifest(tmp_path: Path) -> None:
    with pytest.raises(ShardsetError, match="is not a folder"):
        open_dataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardsetError, match="holds no shardsets"):
        open_dataset(tmp_path / "empty")
    make(tmp_path)
    (tmp_path / "ds" / "labels" / "manifest.json").write_text("{not json")
    with pytest.raises(ShardsetError, match=r"labels/manifest\.json is not valid JSON"):
        open_dataset(tmp_path / "ds")
    (tmp_path / "ds" / "labels" / "manifest.json").unlink()
    with pytest.raises(ShardsetError, match=r"labels has no manifest\.json"):
        open_dataset(tmp_path / "ds")


# -- SQL, fragments, the Feeder and the dispatcher ----------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "orc", "csv", "jsonl"])
def test_fragment_partitions_add_up_to_the_query(tmp_path: Path, fmt: str) -> None:
    make(tmp_path, fmt="parquet", second=fmt)  # the main shardset (labels) in fmt
    source = sqlfeed.connect(f"dataset:///{tmp_path / 'ds'}")
    query = "SELECT uid, x, k, label, note FROM dataset WHERE label <> 1 OR k = 'k3'"
    plan = sqlfeed.plan(query, source, target_rows=200)
    assert plan.strategy == "fragments"
    assert plan.num_partitions > 4  # the main shardset's shards were cut further
    parts = [source.arrow(p.sql) for p in plan.partitions]
    together = [r for t in parts for r in as_rows(t)]
    expected = [r for r in expected_rows() if r[3] != 1 or r[2] == "k3"]
    assert Counter(together) == Counter(expected)
    assert Counter(
        as_rows(pa.Table.from_batches(list(Feeder(plan, source, readers=3))))
    ) == Counter(expected)


def test_fragments_need_a_row_by_row_query(tmp_path: Path) -> None:
    make(tmp_path)
    source = open_dataset(tmp_path / "ds").source()
    for query, why in [
        ("SELECT k, count(*) AS n FROM dataset GROUP BY k", "GROUP"),
        ("SELECT DISTINCT k FROM dataset", "DISTINCT"),
        ("SELECT uid FROM dataset ORDER BY uid LIMIT 5", "LIMIT"),
        ("SELECT a.uid FROM dataset a JOIN dataset b ON a.uid = b.uid", "exactly once"),
        ("SELECT uid, sum(x) OVER (ORDER BY uid) AS s FROM dataset", "window"),
        ("SELECT t.v FROM (VALUES (1)) t(v) LEFT JOIN dataset d ON d.uid = t.v", "outer"),
    ]:
        with pytest.raises(InvalidArgumentError, match=why):
            sqlfeed.plan(query, source, strategy="fragments")
        auto = sqlfeed.plan(query, source, partitions=3)
        assert auto.strategy != "fragments"
        got = Counter(r for p in auto.partitions for r in source.rows(p.sql))
        assert got == Counter(source.rows(query))


def test_shuffle_window_orders_fragments_deterministically(tmp_path: Path) -> None:
    make(tmp_path)
    source = open_dataset(tmp_path / "ds").source()
    plan = sqlfeed.plan("SELECT uid FROM dataset", source, target_rows=100)
    assert plan.num_partitions >= 8

    def order(window: int, seed: int, epoch: int) -> list[int]:
        return Feeder(plan, source, shuffle_window=window, seed=seed).partition_order(epoch)

    assert order(0, 1, 0) == list(range(plan.num_partitions))
    assert order(-1, 1, 0) == order(-1, 1, 0) != order(-1, 2, 0)
    assert order(-1, 1, 0) != order(-1, 1, 1)
    windowed = order(2, 1, 0)
    assert sorted(windowed) == list(range(plan.num_partitions))
    assert windowed != order(2, 1, 1)
    with pytest.raises(InvalidArgumentError, match="shuffle_window"):
        Feeder(plan, source, shuffle_window=-3)
    rows = [
        u
        for b in Feeder(plan, source, shuffle_window=3, seed=9)
        for u in b.column("uid").to_pylist()
    ]
    assert sorted(rows) == sorted(u for u in range(N) if u % 3)


@pytest.mark.parametrize("fmt", ["parquet", "orc", "jsonl"])
def test_trace_columns_lead_back_to_the_source_row(tmp_path: Path, fmt: str) -> None:
    make(tmp_path, fmt="parquet", second=fmt)
    source = open_dataset(tmp_path / "ds").source(trace=True)
    plan = sqlfeed.plan("SELECT * FROM dataset WHERE x > 100", source, target_rows=150)
    table = pa.Table.from_batches(list(Feeder(plan, source)))
    schema = source.dataset.shardset("labels").manifest.schema
    assert plan.num_partitions > 4
    assert table.column_names[-3:] == list(TRACE_COLUMNS)
    viewed = source.arrow("SELECT * FROM dataset WHERE x > 100")
    assert sorted(as_rows(viewed)) == sorted(as_rows(table))
    for row in table.slice(0, 50).to_pylist() + viewed.slice(0, 20).to_pylist():
        file = Path(row["sqlfeed_file"])
        assert file.parent.name == "labels"  # the main shardset (fewest samples)
        original = read_shard(file, fmt, schema=schema).slice(row["sqlfeed_row"], 1).to_pylist()[0]
        assert original["uid"] == row["uid"]
        if fmt == "parquet":
            groups = pq.ParquetFile(file).metadata
            first = sum(groups.row_group(g).num_rows for g in range(row["sqlfeed_row_group"]))
            assert (
                first
                <= row["sqlfeed_row"]
                < first + groups.row_group(row["sqlfeed_row_group"]).num_rows
            )


def test_the_dispatcher_covers_every_fragment_once_with_two_workers(tmp_path: Path) -> None:
    make(tmp_path)
    url = f"dataset:///{tmp_path / 'ds'}"
    source = sqlfeed.connect(url)
    plan = sqlfeed.plan("SELECT uid, label FROM dataset", source, target_rows=250)
    queue = MemoryQueue()
    queue.create_job(JobSpec("frag", plan, epochs=2, seed=3))
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        worker = Worker(queue, "frag", sqlfeed.connect(url), worker_id=name, poll=0.01)
        for delivery in worker.deliveries():
            with lock:
                seen.extend((delivery.epoch, u) for u in delivery.batch.column("uid").to_pylist())

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = Counter((e, u) for e in range(2) for u in range(N) if u % 3)
    assert Counter(seen) == expected


def test_csv_with_quoted_newlines_stays_one_partition_per_file(tmp_path: Path) -> None:
    ds = create_dataset(tmp_path / "ds")
    text = [f"line {i}\nsecond line" if i % 10 == 0 else f"plain {i}" for i in range(1000)]
    ds.add_shardset(
        "notes", pa.table({"uid": pa.array(range(1000), pa.int64()), "t": text}), format="csv"
    )
    source = open_dataset(tmp_path / "ds").source()
    plan = sqlfeed.plan("SELECT * FROM dataset", source, target_rows=100)
    assert [p.description for p in plan.partitions] == [
        "shard 0 (one partition: the CSV has quoted newlines, so it cannot be cut at lines)"
    ]
    assert sorted(source.arrow(plan.partitions[0].sql).column("t").to_pylist()) == sorted(text)


def test_the_dataset_url_and_its_errors(tmp_path: Path) -> None:
    make(tmp_path)
    source = sqlfeed.connect(f"dataset:///{tmp_path / 'ds'}?view=samples")
    assert source.scalar("SELECT count(*) FROM samples") == len(expected_rows())
    with pytest.raises(InvalidArgumentError, match=r"expected dataset:///relative/folder"):
        sqlfeed.connect(f"dataset:///{tmp_path / 'ds'}?colour=red")
    with pytest.raises(InvalidArgumentError, match=f"no dataset folder at {tmp_path}/missing"):
        sqlfeed.connect(f"dataset:///{tmp_path / 'missing'}")


def test_projection_and_filters_reach_the_parquet_files(tmp_path: Path) -> None:
    make(tmp_path)
    source = open_dataset(tmp_path / "ds").source()
    plan = sqlfeed.plan("SELECT uid, label FROM dataset WHERE x > 10", source, strategy="fragments")
    explained = "\n".join(str(row[1]) for row in source.rows("EXPLAIN " + plan.partitions[0].sql))
    scans = explained.split("READ_PARQUET")[1:]
    assert len(scans) == 2
    assert "Filters: x > 10" in explained  # pushed into the features file scan
    assert " k," not in explained
    assert "note" not in explained


def test_a_tar_key_with_a_dot_is_refused_not_silently_split(tmp_path: Path) -> None:
    ds = create_dataset(tmp_path / "ds", uid="key")
    table = pa.table({"key": ["a", "1.5"], "txt": ["x", "y"]})
    with pytest.raises(InvalidArgumentError, match=r"tar record key '1\.5'"):
        ds.add_shardset("media", table, format="tar")
    assert not any(p.name.startswith(".media") for p in (tmp_path / "ds").iterdir())
