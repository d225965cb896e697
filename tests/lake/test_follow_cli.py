"""Followed jobs: ``sqlfeed job create --follow`` / ``--new-only`` / ``--watermark`` and
``sqlfeed worker`` reading the epochs in turn (and the same watermark jobs from Python).

Every epoch is checked against what its job recorded (the snapshot, or the key bounds),
and the epochs together against the table: every row read once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

import sqlfeed
from sqlfeed.dispatch.folder import committed_files
from sqlfeed.dispatch.follow import epoch_job_name
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.helpers.cli import run_cli
from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows
from tests.lake.tables import insert_ids, rows

ROOT = Path(__file__).resolve().parents[2]


def _iceberg(tmp_path: Path, count: int = 3000) -> tuple[object, str]:
    catalog = b.iceberg_catalog(tmp_path)
    name = f"grow_{uuid.uuid4().hex[:6]}"
    table = b.iceberg_table(catalog, name, rows(0, count), target_file_rows=500)
    properties = {k: str(v) for k, v in catalog.properties.items()}
    url = (
        f"iceberg://{catalog.name}/{b.NAMESPACE}.{name}?uri={properties['uri']}"
        f"&warehouse={properties['warehouse']}&view=t"
    )
    return table, url


def _epoch_ids(out: Path, epoch: int) -> Counter[int]:
    ids: Counter[int] = Counter()
    for path in committed_files(out, epoch):
        ids.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return ids


def _entries(queue_url: str, job: str, epochs: int) -> list[dict]:
    queue = SQLQueue(queue_url)
    specs = [queue.find_job(epoch_job_name(job, e)) for e in range(epochs)]
    assert all(s is not None and s.follow is not None for s in specs)
    return [s.follow["entry"] for s in specs]  # type: ignore[union-attr,index]


def _check_iceberg_epochs(table: object, out: Path, queue_url: str, job: str, epochs: int) -> None:
    """Each epoch = the rows its snapshot added to the previous epoch's; all read once."""
    every: Counter[int] = Counter()
    previous: set[int] = set()
    for epoch, entry in enumerate(_entries(queue_url, job, epochs)):
        now = set(iceberg_rows(table, entry["snapshot"]).column("id").to_pylist())
        got = _epoch_ids(out, epoch)
        assert got == Counter(now - previous), epoch
        assert entry["since"] == (
            None if epoch == 0 else _entries(queue_url, job, epochs)[epoch - 1]["snapshot"]
        )
        every.update(got)
        previous = now
    assert max(every.values()) == 1
    assert set(every) == previous


def test_job_create_follow_and_a_worker_read_each_epochs_new_rows(tmp_path: Path) -> None:
    table, url = _iceberg(tmp_path)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    out = tmp_path / "out"
    target = ["--queue", queue, "--job", "f"]
    create = ["job", "create", *target, "--db", url, "--new-only", "--epochs", "3"]
    made = run_cli([*create, "--partitions", "4", "SELECT id, s FROM t"])
    assert made.code == 0, made.err
    assert "job f: follows the table, 3 epoch(s) of new rows; epoch 0 = job f@0" in made.out
    again = run_cli([*create, "--partitions", "4", "SELECT id, s FROM t"])
    assert again.code == 0, again.err  # idempotent
    other = run_cli([*create, "--partitions", "4", "SELECT id FROM t"])
    assert other.code == 2
    assert "follows the table with another query" in other.err
    b.append(table, rows(10_000, 400))  # after epoch 0's snapshot: epoch 1's rows
    worker = run_cli(["worker", *target, "--db", url, "--out", str(out), "--format", "json"])
    assert worker.code == 0, worker.err
    assert json.loads(worker.out)["rows"] == 3400
    _check_iceberg_epochs(table, out, queue, "f", 3)
    assert sorted(_epoch_ids(out, 1)) == list(range(10_000, 10_400))
    assert _epoch_ids(out, 2) == Counter()  # nothing appended since epoch 1 began
    status = run_cli(["job", "status", *target, "--format", "json"])
    assert status.code == 0, status.err
    shown = json.loads(status.out)
    assert shown["complete"]
    assert [j["job"] for j in shown["jobs"]] == ["f@0", "f@1", "f@2"]
    text = run_cli(["job", "status", *target])
    assert "job f: follows the table, 3 of 3 epoch(s) begun, complete" in text.out
    reset = run_cli(["job", "reset", *target])
    assert reset.code == 2
    assert (
        "job f follows the table, a job per epoch: reset one of them (--job f@0 ... --job f@2)"
        in reset.err
    )
    deleted = run_cli(["job", "delete", *target])
    assert deleted.code == 0
    assert "deleted with its 3 epoch job(s)" in deleted.out
    assert SQLQueue(queue).find_job("f@0") is None


def test_follow_without_new_only_reads_the_whole_table_each_epoch(tmp_path: Path) -> None:
    table, url = _iceberg(tmp_path, 800)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    target = ["--queue", queue, "--job", "w"]
    made = run_cli(
        ["job", "create", *target, "--db", url, "--follow", "--epochs", "2", "SELECT id FROM t"]
    )
    assert made.code == 0, made.err
    assert "2 epoch(s) of the whole table" in made.out
    b.append(table, rows(5000, 100))
    out = tmp_path / "out"
    worker = run_cli(["worker", *target, "--db", url, "--out", str(out)])
    assert worker.code == 0, worker.err
    assert sorted(_epoch_ids(out, 0)) == list(range(800))
    assert sorted(_epoch_ids(out, 1)) == [*range(800), *range(5000, 5100)]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--follow", "--snapshot"],
            "--follow plans every epoch when it begins: it cannot take --snapshot",
        ),
        (["--new-only", "--watermark", "id"], "--watermark already reads only the new rows"),
        (
            ["--follow", "--strategy", "materialize"],
            "--strategy materialize would leave a table per epoch",
        ),
    ],
)
def test_follow_refusals(tmp_path: Path, flags: list[str], message: str) -> None:
    _table, url = _iceberg(tmp_path, 100)
    queue = tmp_path / "queue.db"
    run = run_cli(
        [
            "job",
            "create",
            "--queue",
            f"sqlite:///{queue}",
            "--job",
            "x",
            "--db",
            url,
            *flags,
            "SELECT id FROM t",
        ]
    )
    assert run.code == 2, run.err
    assert message in run.err
    assert run.err.count("\n") == 1


def test_follow_needs_a_lakehouse_table_or_a_watermark(tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    with duckdb.connect(str(db)) as c:
        c.execute("CREATE TABLE t AS SELECT range AS id FROM range(10)")
    create = ["job", "create", "--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "x"]
    create += ["--db", f"duckdb:///{db}"]
    run = run_cli([*create, "--follow", "SELECT id FROM t"])
    assert run.code == 2
    assert (
        "--follow needs a lakehouse table (iceberg:/delta: URL) or a --watermark COLUMN" in run.err
    )
    missing = run_cli([*create, "--watermark", "nope", "SELECT id FROM t"])
    assert missing.code == 2
    assert "--watermark nope is not an output column of the query (id)" in missing.err


# -- watermark jobs on database servers ------------------------------------------------------


@pytest.mark.engine
def test_watermark_job_workers_read_rows_inserted_between_epochs_once(
    growing: tuple[str, str, sa.Engine], tmp_path: Path
) -> None:
    url, table, engine = growing
    sql = f"SELECT id, v FROM {table} WHERE v <> 3"
    options = {"watermark": "id", "epochs": 4, "partitions": 3, "batch_size": 64}
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    feeders = [
        sqlfeed.Feeder(sql, url, job="wm", queue=queue, worker_id=name, **options)
        for name in ("a", "b")
    ]
    epochs: list[list[int]] = []
    for epoch in range(4):
        got: list[int] = []
        lock = threading.Lock()
        began = threading.Event()

        def read(
            feeder: object, epoch: int, got: list[int], lock: threading.Lock, began: threading.Event
        ) -> None:
            for batch in feeder.epoch(epoch):  # type: ignore[attr-defined]
                began.set()
                with lock:
                    got.extend(batch.column("id").to_pylist())
            began.set()

        threads = [
            threading.Thread(target=read, args=(f, epoch, got, lock, began)) for f in feeders
        ]
        for thread in threads:
            thread.start()
        began.wait(timeout=60)
        # mid-epoch: above the epoch's maximum (keys in order), so the next epoch's
        base = 1000 * (epoch + 1)
        insert_ids(engine, table, range(base, base + 20))
        for thread in threads:
            thread.join(timeout=120)
        epochs.append(got)
        insert_ids(engine, table, range(base + 20, base + 170))  # between epochs
    wanted = [
        range(0, 500),
        range(1000, 1170),
        range(2000, 2170),
        range(3000, 3170),
    ]
    for ids, keys in zip(epochs, wanted, strict=True):
        assert sorted(ids) == sorted(i for i in keys if i % 7 != 3)


@pytest.mark.engine
def test_job_create_watermark_on_a_server(
    growing: tuple[str, str, sa.Engine], tmp_path: Path
) -> None:
    url, table, engine = growing
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    target = ["--queue", queue, "--job", "wm"]
    made = run_cli(
        [
            "job",
            "create",
            *target,
            "--db",
            url,
            "--watermark",
            "id",
            "--epochs",
            "3",
            "--partitions",
            "2",
            f"SELECT id, v FROM {table}",
        ]
    )
    assert made.code == 0, made.err
    assert "epoch 0 = job wm@0: 2 hash partitions of id <= 499" in made.out
    insert_ids(engine, table, range(600, 700))
    out = tmp_path / "out"
    worker = run_cli(["worker", *target, "--db", url, "--out", str(out)])
    assert worker.code == 0, worker.err
    assert sorted(_epoch_ids(out, 0)) == list(range(500))
    assert sorted(_epoch_ids(out, 1)) == list(range(600, 700))
    assert _epoch_ids(out, 2) == Counter()
    entries = _entries(queue, "wm", 3)
    assert [(e["low"], e["high"]) for e in entries] == [(None, 499), (499, 699), (699, 699)]


# -- several worker processes, a table growing, a worker killed ------------------------------


def _worker(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "sqlfeed", "worker", *args],
            stdout=sink,
            stderr=sink,
            env=env,
            cwd=ROOT,
        )


@pytest.mark.slow
def test_worker_processes_follow_a_growing_table_through_a_kill(tmp_path: Path) -> None:
    table, url = _iceberg(tmp_path)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    out = tmp_path / "out"
    target = ["--queue", queue, "--job", "k"]
    epochs = 4
    made = run_cli(
        [
            "job",
            "create",
            *target,
            "--db",
            url,
            "--new-only",
            "--epochs",
            str(epochs),
            "--partitions",
            "6",
            "--lease-ttl",
            "3",
            "SELECT id, s, x FROM t",
        ]
    )
    assert made.code == 0, made.err
    stop = threading.Event()

    def grow() -> None:
        start = 100_000
        while not stop.is_set():
            b.append(table, rows(start, 150))
            start += 1000
            time.sleep(0.7)

    appender = threading.Thread(target=grow)
    appender.start()
    args = [*target, "--db", url, "--out", str(out), "--batch-size", "100"]
    log = tmp_path / "workers.log"
    try:
        workers = [_worker(args, log) for _ in range(2)]
        deadline = time.monotonic() + 120
        while not list(out.glob("epoch=1/_manifest-*.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        workers[0].send_signal(signal.SIGKILL)  # in epoch 1, holding a lease
        workers[0].wait()
        workers.append(_worker(args, log))
        for worker in workers[1:]:
            assert worker.wait(timeout=300) == 0, log.read_text()
    finally:
        stop.set()
        appender.join()
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    _check_iceberg_epochs(table, out, queue, "k", epochs)


def test_a_followed_jobs_epochs_keep_the_job_options(tmp_path: Path) -> None:
    """order, lease_ttl and seed reach every epoch's job (the Feeders join, not clash)."""
    table, url = _iceberg(tmp_path, 600)
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    options = {"job": "o", "queue": queue, "follow": True, "new_only": True}
    feeder = sqlfeed.Feeder(
        "SELECT id FROM t",
        url,
        epochs=2,
        partitions=3,
        order="index",
        lease_ttl=5.0,
        seed=3,
        **options,
    )
    first = [i for batch in feeder.epoch(0) for i in batch.column("id").to_pylist()]
    b.append(table, rows(9000, 50))
    second = [i for batch in feeder.epoch(1) for i in batch.column("id").to_pylist()]
    assert sorted(first) == list(range(600))
    assert sorted(second) == list(range(9000, 9050))
    specs = [SQLQueue(queue).find_job(epoch_job_name("o", e)) for e in range(2)]
    assert [(s.order, s.lease_ttl) for s in specs if s] == [("index", 5.0), ("index", 5.0)]
    assert [s.seed for s in specs if s] == [3, 3 + 1_000_003]
