"""Elastic epochs over a growing Iceberg table: ``Feeder(job=..., follow=True, new_only=True)``
in several workers reads each epoch as a job pinned to its snapshot, and the epochs together
read every appended row exactly once, also when a worker stops and another resumes."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path

import sqlfeed
from sqlfeed.dispatch.follow import epoch_job_name, snapshot_of
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows
from tests.lake.tables import rows


def _table(tmp_path: Path) -> tuple[object, str]:
    catalog = b.iceberg_catalog(tmp_path)
    name = f"grow_{uuid.uuid4().hex[:6]}"
    table = b.iceberg_table(catalog, name, rows(0, 3000), target_file_rows=500)
    properties = {k: str(v) for k, v in catalog.properties.items()}
    url = (
        f"iceberg://{catalog.name}/{b.NAMESPACE}.{name}?uri={properties['uri']}"
        f"&warehouse={properties['warehouse']}&view=t"
    )
    return table, url


def test_workers_following_a_growing_table_read_every_row_once(tmp_path: Path) -> None:
    table, url = _table(tmp_path)
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    seen: dict[int, Counter[int]] = {}
    lock = threading.Lock()
    epochs = 3

    def work(name: str) -> None:
        options = {"job": "follow", "queue": queue_url, "follow": True, "new_only": True}
        feeder = sqlfeed.Feeder(
            "SELECT id FROM t", url, epochs=epochs, partitions=4, worker_id=name, **options
        )
        for epoch in range(epochs):
            for batch in feeder.epoch(epoch):
                with lock:
                    seen.setdefault(epoch, Counter()).update(batch.column("id").to_pylist())
            if name == "a":
                b.append(table, rows(10_000 * (epoch + 1), 400))  # lands while b still reads

    workers = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    queue = SQLQueue(queue_url)
    specs = [queue.find_job(epoch_job_name("follow", e)) for e in range(epochs)]
    assert all(s is not None for s in specs)
    snapshots = [snapshot_of(s.plan) for s in specs if s is not None]
    # each epoch pinned the snapshot current when its job was made (an append that lands
    # after that is the next epoch's)
    every: Counter[int] = Counter()
    for epoch, snapshot in enumerate(snapshots):
        assert snapshot is not None
        now = set(iceberg_rows(table, snapshot).column("id").to_pylist())
        before = (
            set()
            if epoch == 0
            else set(iceberg_rows(table, snapshots[epoch - 1]).column("id").to_pylist())
        )
        assert seen.get(epoch, Counter()) == Counter(now - before), epoch
        every.update(seen.get(epoch, Counter()))
    assert max(every.values()) == 1
    final = set(iceberg_rows(table, snapshots[-1]).column("id").to_pylist())
    assert set(every) == final


def test_a_worker_joining_later_takes_the_first_epoch_not_complete(tmp_path: Path) -> None:
    table, url = _table(tmp_path)
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    options = {"job": "later", "queue": queue_url, "follow": True, "new_only": True}
    first = sqlfeed.Feeder("SELECT id FROM t", url, epochs=2, partitions=3, **options)
    epoch0 = [i for batch in first.epoch(0) for i in batch.column("id").to_pylist()]
    assert sorted(epoch0) == list(range(3000))
    b.append(table, rows(50_000, 300))
    # a new process (a resume): epoch 0 is complete, so it reads epoch 1: the appended rows
    later = sqlfeed.Feeder("SELECT id FROM t", url, epochs=2, partitions=3, **options)
    again0 = [i for batch in later.epoch(0) for i in batch.column("id").to_pylist()]
    assert again0 == []  # every partition of epoch 0 is done: nothing is read twice
    epoch1 = [i for batch in later.epoch(1) for i in batch.column("id").to_pylist()]
    assert sorted(epoch1) == list(range(50_000, 50_300))
