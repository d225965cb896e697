"""The job ledger: checkpoints recorded by workers, and rewinding a job to one."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError, NotImplementedYetError
from sqlfeed.dispatch import JobSpec, Worker, open_queue
from sqlfeed.dispatch.ledger import DeliveryLog, LedgerEntry, states_at

pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(900)"})


@pytest.fixture(params=["memory", "sqlite"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path / 'queue.db'}"


def ids(deliveries: list[Any]) -> list[int]:
    return [i for d in deliveries for i in d.batch.column("id").to_pylist()]


def test_a_rewound_job_hands_out_exactly_what_came_after_the_checkpoint(
    source: sqlfeed.Source, queue_url: str
) -> None:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=5)
    open_queue(queue_url).create_job(JobSpec("j", plan, epochs=1, seed=2))
    worker = Worker(queue_url, "j", source, worker_id="w", batch_size=40, ack_interval=0)
    stream = worker.deliveries()
    before = [next(stream) for _ in range(8)]
    worker.checkpoint(8)
    after_checkpoint = [next(stream) for _ in range(6)]  # trained on, then rolled back
    worker.close()
    queue = open_queue(queue_url)
    assert queue.checkpoints("j") == [8]
    summary = queue.rewind("j", 8)
    assert summary["done"] + summary["resumed"] >= 1
    with Worker(queue_url, "j", source, worker_id="w2", batch_size=40) as again:
        rest = list(again.deliveries())
    assert after_checkpoint  # they are delivered again, not lost
    assert Counter(ids(before) + ids(rest)) == Counter(range(900))
    assert queue.status("j").complete


def test_rewinding_to_an_unknown_checkpoint_or_an_even_job_is_refused(
    source: sqlfeed.Source, queue_url: str
) -> None:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=3)
    queue = open_queue(queue_url)
    queue.create_job(JobSpec("j", plan))
    with pytest.raises(InvalidArgumentError, match="no checkpoint 5 in its ledger"):
        queue.rewind("j", 5)
    queue.create_job(JobSpec("even", plan, even_batches=True, replicas=2, batch_size=10, rows=900))
    queue.record("even", 1, "w", [])
    with pytest.raises(NotImplementedYetError, match="even batches"):
        queue.rewind("even", 1)


def test_the_state_at_a_checkpoint_is_the_furthest_delivery_up_to_it() -> None:
    log = DeliveryLog()
    for offset in range(3):
        log.handed(0, 1, offset, 10)
    log.ended(0, 1, 3)
    log.handed(0, 2, 0, 10)
    log.handed(0, 2, 1, 10)
    first = log.drain(untaken=[(0, 2, 1, 10)])  # read ahead, not trained on
    assert first == [LedgerEntry(0, 1, 0, 3, 30, True), LedgerEntry(0, 2, 0, 1, 10, False)]
    log.handed(0, 2, 2, 10)
    second = log.drain()
    assert second == [LedgerEntry(0, 2, 1, 3, 20, False)]
    states = states_at([(4, e) for e in first] + [(9, e) for e in second], 4)
    assert {k: (s.acked, s.done) for k, s in states.items()} == {
        (0, 1): (3, True),
        (0, 2): (1, False),
    }


def test_the_rewind_command_names_an_unknown_checkpoint(
    source: sqlfeed.Source, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    open_queue(url).create_job(JobSpec("j", sqlfeed.plan("SELECT id FROM t", source, partitions=2)))
    command = ["job", "rewind", "--queue", url, "--job", "j", "--to", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "sqlfeed", *command], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "no checkpoint 3" in done.stderr


def test_a_checkpoint_recorded_while_another_worker_holds_the_queue_lock_waits_its_turn(
    source: sqlfeed.Source, tmp_path: Path
) -> None:
    """A SQLite queue's write lock held by another process's transaction longer than one
    busy timeout (0.2 s), shorter than a queue call's retry budget: the ledger's record is
    tried again like every queue call, not failed on 'database is locked' (a Keras
    checkpoint callback failed so under load in CI)."""
    import sqlite3
    import threading

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=3)
    queue = open_queue(url)
    queue.create_job(JobSpec("j", plan))
    holder = sqlite3.connect(tmp_path / "queue.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another worker's write transaction
    threading.Timer(1.0, holder.rollback).start()
    entries = [LedgerEntry(0, 0, 0, 2, 20, False)]
    queue.record("j", 7, "w", entries)  # waits for the lock, then records
    assert queue.checkpoints("j") == [7]
    holder.close()


def test_a_record_tried_again_after_its_commit_went_through_counts_its_rows_once(
    tmp_path: Path, source: sqlfeed.Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection is lost after the ledger's write committed, before the answer came
    back: the queue tries the write again. The rows of the checkpoint are counted once, not
    added to themselves (a rewind would then skip rows the model never took)."""
    from sqlfeed.dialects import EngineError
    from sqlfeed.dispatch.ledger import SQLLedger

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=3)
    queue = open_queue(url)
    queue.create_job(JobSpec("j", plan))
    queue.record("j", 7, "w", [LedgerEntry(0, 0, 0, 2, 20, False)])
    once = SQLLedger._once
    lost: list[bool] = []

    def committed_then_lost(self: SQLLedger, action: Any) -> Any:
        answer = once(self, action)
        if not lost and answer is None:  # a write (a read answers rows)
            lost.append(True)
            error = EngineError("queue: Lost connection to server during query")
            error.transient = True  # type: ignore[attr-defined]
            raise error
        return answer

    monkeypatch.setattr(SQLLedger, "_once", committed_then_lost)
    queue.record("j", 7, "w", [LedgerEntry(0, 0, 2, 5, 30, False)])
    assert lost, "the write was not tried again"
    [(checkpoint, entry)] = queue.ledger.entries("j")  # type: ignore[attr-defined]
    assert checkpoint == 7
    assert (entry.start, entry.stop, entry.rows) == (0, 5, 50)  # 20 + 30, not 20 + 30 + 30
