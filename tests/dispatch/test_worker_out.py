"""``sqlfeed worker --out DIR``: committed batches are exactly the query's rows, a late
writer never replaces a committed batch, leftovers are cleaned, bad targets take no lease."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.dispatch.folder import BatchFolder, committed_files
from sqlfeed.dispatch.queue import JobSpec, Lease
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery, Worker
from tests.helpers.cli import run_cli


@pytest.fixture
def data(tmp_path: Path) -> str:
    path = tmp_path / "data.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER, g TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"g{i % 7}") for i in range(600)])
    return f"sqlite:///{path}"


def _create(queue: str, data: str, job: str = "j", *options: str) -> None:
    made = run_cli(
        [
            "job",
            "create",
            "--queue",
            queue,
            "--job",
            job,
            "--db",
            data,
            "-m",
            "6",
            *options,
            "SELECT id, g FROM t",
        ]
    )
    assert made.code == 0, made.err


def _ids(files: list[Path]) -> list[int]:
    return sorted(i for f in files for i in pq.read_table(f).column("id").to_pylist())


def _pending(queue: str, job: str = "j") -> list[int]:
    status = json.loads(
        run_cli(["job", "status", "--queue", queue, "--job", job, "--format", "json"]).out
    )
    assert all(e["leased"] == 0 for e in status["per_epoch"])
    return [e["pending"] for e in status["per_epoch"]]


def test_the_committed_batches_are_the_rows_once_per_epoch(data: str, tmp_path: Path) -> None:
    queue, out = f"sqlite:///{tmp_path / 'queue.db'}", tmp_path / "out"
    _create(queue, data, "j", "--epochs", "2")
    ran = run_cli(
        [
            "worker",
            "--queue",
            queue,
            "--job",
            "j",
            "--db",
            data,
            "--out",
            str(out),
            "--batch-size",
            "40",
            "--format",
            "json",
        ]
    )
    assert ran.code == 0, ran.err
    summary = json.loads(ran.out)
    assert (summary["rows"], summary["batches"]) == (
        1200,
        sum(json.loads(m.read_text())["batches"] for m in out.glob("epoch=*/_manifest-*.json")),
    )
    for epoch in (0, 1):
        manifests = sorted((out / f"epoch={epoch}").glob("_manifest-*.json"))
        assert len(manifests) == 6
        assert _ids(committed_files(out, epoch)) == list(range(600))
        assert sum(json.loads(m.read_text())["rows"] for m in manifests) == 600
    assert not list(out.rglob(".*"))  # no temporary left
    assert json.loads((out / "_job.json").read_text())["job"] == "j"


def _folder_and_lease(
    tmp_path: Path, attempt: int = 2, offset: int = 0
) -> tuple[BatchFolder, Lease, JobSpec]:
    plan = sqlfeed.plan(
        "SELECT range AS id FROM range(100)", "duckdb://", partitions=4, strategy="hash"
    )
    spec = JobSpec("j", plan)
    lease = Lease("j", 0, 3, uuid.uuid4().hex, "w", offset, attempt)
    return BatchFolder(tmp_path / "out", spec), lease, spec


def _batch(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())})


def test_a_late_writer_never_replaces_a_batch(tmp_path: Path) -> None:
    folder, _, _ = _folder_and_lease(tmp_path)
    first = Delivery(0, 3, 0, _batch([1, 2, 3]))
    assert folder.write(first, lambda: True)
    late = Delivery(0, 3, 0, _batch([9, 9, 9]))
    assert not folder.write(late, lambda: False)  # its lease is gone: not put in place
    assert folder.write(late, lambda: True)  # even trusted, an existing file stays
    [written] = (tmp_path / "out" / "epoch=0").glob("part-*.parquet")
    assert written.name == "part-00003-000000.parquet"
    assert pq.read_table(written).column("id").to_pylist() == [1, 2, 3]
    assert not list((tmp_path / "out").rglob(".part-*"))


def test_leftovers_are_removed_by_the_next_holder_and_at_the_end(tmp_path: Path) -> None:
    folder, lease, _ = _folder_and_lease(tmp_path, attempt=2)
    epoch = tmp_path / "out" / "epoch=0"
    epoch.mkdir(parents=True)
    ours = epoch / ".part-00003-000001.parquet.0a1b2c3d"
    theirs = epoch / ".part-00002-000000.parquet.0a1b2c3d"
    kept = epoch / "part-00003-000000.parquet"  # an earlier holder's, of this run
    for path in (ours, theirs, kept):
        path.write_bytes(b"x")
    folder.on_lease(lease, lambda: True)
    assert (ours.exists(), theirs.exists(), kept.exists()) == (False, True, True)
    folder.finish()
    assert not theirs.exists()
    assert kept.exists()


def test_the_first_holder_of_a_run_removes_an_earlier_runs_files(tmp_path: Path) -> None:
    folder, lease, _ = _folder_and_lease(tmp_path, attempt=1, offset=0)
    assert folder.write(Delivery(0, 3, 0, _batch([1])), lambda: True)
    folder.on_partition(lease, 1)
    assert committed_files(tmp_path / "out")
    folder.on_lease(lease, lambda: True)  # the job was reset: a new run of partition 3
    assert committed_files(tmp_path / "out") == []
    assert not list((tmp_path / "out" / "epoch=0").iterdir())


def test_a_stalled_worker_does_not_write_over_its_successor(tmp_path: Path) -> None:
    """Worker A stalls with a batch in hand past its TTL; B takes the partition over,
    writes and commits it; A's write then neither lands nor replaces B's file."""
    source = sqlfeed.connect("duckdb://")
    plan = sqlfeed.plan("SELECT range AS id FROM range(300)", source, partitions=1, strategy="hash")
    queue = SQLQueue(f"sqlite:///{tmp_path / 'queue.db'}")
    spec = queue.create_job(JobSpec("j", plan, lease_ttl=0.4))
    folder = BatchFolder(tmp_path / "out", spec)
    slow = Worker(queue, "j", source, batch_size=100)
    stream = slow.deliveries()
    in_hand = next(stream)
    slow._finished.set()  # stalls: no heartbeats
    time.sleep(0.6)
    fast = Worker(queue, "j", source, batch_size=100, on_partition=folder.on_partition)
    for delivery in fast.deliveries():
        assert folder.write(delivery, lambda d=delivery: fast.still_holds(d.epoch, d.partition))
    before = {p.name: p.read_bytes() for p in (tmp_path / "out" / "epoch=0").iterdir()}
    where = (in_hand.epoch, in_hand.partition)
    assert not folder.write(in_hand, lambda: slow.still_holds(*where))
    after = {p.name: p.read_bytes() for p in (tmp_path / "out" / "epoch=0").iterdir()}
    assert after == before
    assert _ids(committed_files(tmp_path / "out")) == list(range(300))
    slow.refuse(in_hand)
    assert list(stream) == []  # A gives the partition up: it is not its own any more
    queue.close()


def test_a_folder_of_another_job_is_refused_before_any_lease(data: str, tmp_path: Path) -> None:
    queue, out = f"sqlite:///{tmp_path / 'queue.db'}", tmp_path / "out"
    _create(queue, data, "a")
    _create(queue, data, "b")
    assert (
        run_cli(["worker", "--queue", queue, "--job", "a", "--db", data, "--out", str(out)]).code
        == 0
    )
    other = run_cli(["worker", "--queue", queue, "--job", "b", "--db", data, "--out", str(out)])
    assert other.code == 2
    assert "holds the batches of job 'a'" in other.err
    assert len(other.err.strip().splitlines()) == 1
    assert _pending(queue, "b") == [6]


@pytest.mark.parametrize("target", ["file", "unwritable"])
def test_an_out_path_that_cannot_be_written_takes_no_lease(
    data: str, tmp_path: Path, target: str
) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    _create(queue, data)
    bad = tmp_path / "bad"
    if target == "file":
        bad.write_text("x")
    else:
        bad.mkdir()
        bad.chmod(0o500)
    try:
        ran = run_cli(
            [
                "worker",
                "--queue",
                queue,
                "--job",
                "j",
                "--db",
                data,
                "--out",
                str(bad / "sub" if target == "unwritable" else bad),
            ]
        )
    finally:
        bad.chmod(0o700)
    if target == "unwritable" and ran.code == 0:
        pytest.skip("running as a user who may write anywhere")
    assert ran.code == 2, ran.err
    assert len(ran.err.strip().splitlines()) == 1
    assert _pending(queue) == [6]


def test_a_worker_for_another_engine_takes_no_lease(data: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    _create(queue, data)
    ran = run_cli(["worker", "--queue", queue, "--job", "j", "--db", "duckdb://"])
    assert ran.code == 2
    assert "reads sqlite" in ran.err
    assert len(ran.err.strip().splitlines()) == 1
    assert _pending(queue) == [6]


def test_job_create_says_what_a_sqlite_queue_cannot_do(data: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    made = run_cli(
        ["job", "create", "--queue", queue, "--job", "j", "--db", data, "SELECT id FROM t"]
    )
    assert "note: a SQLite queue" in made.out
    assert "frozen" in made.out
    made = run_cli(
        [
            "job",
            "create",
            "--queue",
            queue,
            "--job",
            "j",
            "--db",
            data,
            "--format",
            "json",
            "SELECT id FROM t",
        ]
    )
    assert "frozen" in json.loads(made.out)["caveat"]


def test_a_partition_taken_over_from_another_hosts_folder_is_committed_across_folders(
    tmp_path: Path,
) -> None:
    first, _, spec = _folder_and_lease(tmp_path / "host1")
    second = BatchFolder(tmp_path / "host2" / "out", spec)
    assert first.write(Delivery(0, 3, 0, _batch([1, 2])), lambda: True)  # acknowledged, then
    # host1 left; host2 resumes partition 3 after its one acknowledged batch
    assert second.write(Delivery(0, 3, 1, _batch([3, 4])), lambda: True)
    second.on_partition(Lease("j", 0, 3, uuid.uuid4().hex, "w2", 1, 2), batches=2)
    manifest = json.loads((tmp_path / "host2/out/epoch=0/_manifest-00003.json").read_text())
    assert [f.get("elsewhere", False) for f in manifest["files"]] == [True, False]
    files = committed_files(tmp_path / "host2" / "out", 0, others=[tmp_path / "host1" / "out"])
    assert _ids(files) == [1, 2, 3, 4]
    with pytest.raises(FileNotFoundError, match=r"part-00003-000000\.parquet"):
        committed_files(tmp_path / "host2" / "out", 0)  # without the other host's folder
