"""A training process for the kill-and-resume tests: it consumes a feed, checkpoints, is killed.

Usage: python -m tests.scripts.resume_child MODE PHASE WORKDIR [STEPS [WORKER]]

MODE is ``static`` (a shuffled Feeder), ``keras`` (tf.data + Keras with
``sqlfeed.tf.FeedCheckpoint``), ``torch`` (a StatefulDataLoader with 2 workers),
``torch-job`` (the same in job mode: job ``j`` of ``WORKDIR/queue.db``, checkpointed in
its ledger) or ``elastic`` (a job worker named WORKER, pulling from ``WORKDIR/queue.db``;
the test runs two). PHASE is ``full`` (the uninterrupted run), ``first`` (consume STEPS
batches, checkpoint, print ``CHECKPOINT`` and go on slowly until the test SIGKILLs the
process) or ``resume`` (restore the checkpoint and finish the epoch).

Every batch the consumer (the model) takes is logged to ``WORKDIR/<PHASE>.log`` as one
line of ids, flushed at once (``<PHASE>-<WORKER>.log`` for a job worker); a ``C`` line
marks the checkpoint. The data is
``WORKDIR/data.duckdb`` (table ``t``, column ``id``), made by the test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

QUERY = "SELECT id, id * 0.5 AS x FROM t"


class Log:
    """The consumer's log: one line of ids per batch taken, ``C`` at the checkpoint."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def batch(self, ids: Any) -> None:
        self.file.write(" ".join(str(int(i)) for i in ids) + "\n")
        self.file.flush()

    def checkpoint(self) -> None:
        self.file.write("C\n")
        self.file.flush()
        os.fsync(self.file.fileno())
        print("CHECKPOINT", flush=True)


def save_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON aside, then rename it into place (atomic)."""
    aside = path.with_suffix(".tmp")
    aside.write_text(json.dumps(data))
    os.replace(aside, path)


def consume(
    batches: Iterator[Any],
    ids_of: Callable[[Any], Any],
    log: Log,
    phase: str,
    steps: int,
    checkpoint: Callable[[], None],
) -> None:
    """Log every batch; in the first phase checkpoint after ``steps``, then go on slowly."""
    for taken, batch in enumerate(batches, 1):
        log.batch(ids_of(batch))
        if phase == "first" and taken == steps:
            checkpoint()
            log.checkpoint()
        if phase == "first" and taken > steps:
            time.sleep(0.05)  # the test kills us in here
    if phase == "first":
        time.sleep(600)  # never reached in the test: the epoch is longer


def run_static(workdir: Path, phase: str, steps: int, log: Log) -> None:
    import sqlfeed

    source = sqlfeed.connect(f"duckdb:///{workdir / 'data.duckdb'}")
    state_path = workdir / "state.json"
    state = json.loads(state_path.read_text()) if phase == "resume" else None
    feeder = sqlfeed.Feeder(
        QUERY,
        source,
        batch_size=64,
        shuffle_buffer=500,
        seed=11,
        partitions=6,
        strategy="hash",
        state=state,
    )

    def checkpoint() -> None:
        save_json(state_path, feeder.state_dict())

    consume(iter(feeder), lambda b: b.column("id").to_pylist(), log, phase, steps, checkpoint)


def run_torch(workdir: Path, phase: str, steps: int, log: Log) -> None:
    import sqlfeed.torch

    dataset = sqlfeed.torch.SQLDataset(
        QUERY,
        f"duckdb:///{workdir / 'data.duckdb'}",
        batch_size=50,
        shuffle_buffer=300,
        seed=5,
        partitions=6,
        strategy="hash",
    )
    loader = sqlfeed.torch.dataloader(dataset, num_workers=2)
    state_path = workdir / "state.json"
    if phase == "resume":
        loader.load_state_dict(json.loads(state_path.read_text()))

    def checkpoint() -> None:
        save_json(state_path, loader.state_dict())

    consume(iter(loader), lambda b: b["id"].tolist(), log, phase, steps, checkpoint)


def run_torch_job(workdir: Path, phase: str, steps: int, log: Log) -> None:
    import sqlfeed.torch

    dataset = sqlfeed.torch.SQLDataset(
        QUERY,
        f"duckdb:///{workdir / 'data.duckdb'}",
        batch_size=50,
        partitions=6,
        seed=3,
        job="j",
        queue=f"sqlite:///{workdir / 'queue.db'}",
        worker_id="t",
    )
    loader = sqlfeed.torch.dataloader(dataset, num_workers=2)

    def checkpoint() -> None:
        dataset.checkpoint(steps)

    consume(iter(loader), lambda b: b["id"].tolist(), log, phase, steps, checkpoint)


def run_keras(workdir: Path, phase: str, steps: int, log: Log) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    import sqlfeed
    import sqlfeed.tf

    source = sqlfeed.connect(f"duckdb:///{workdir / 'data.duckdb'}")
    feed = sqlfeed.tf.Feed(
        QUERY,
        source,
        batch_size=64,
        label="x",
        shuffle_buffer=500,
        seed=11,
        partitions=6,
        strategy="hash",
    )

    class Logged(keras.Model):  # type: ignore[misc]
        """Logs the ids of every batch it trains on."""

        def __init__(self) -> None:
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, features: Any) -> Any:
            return self.dense(tf.cast(features["id"], "float32")[:, None] / 3000.0)

        def train_step(self, data: Any) -> Any:
            log.batch(data[0]["id"].numpy())
            return super().train_step(data)

    class Marker(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if phase == "first" and batch + 1 == steps:
                log.checkpoint()  # the callbacks before this one have saved
            elif phase == "first" and batch + 1 > steps:
                time.sleep(0.05)  # the test kills us in here

    backup = workdir / "backup"
    model = Logged()
    model({"id": tf.zeros([1], tf.int64)})  # built: BackupAndRestore needs it
    model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=True)
    callbacks = [
        sqlfeed.tf.FeedCheckpoint(feed, backup, save_freq=steps or 10**9),
        keras.callbacks.BackupAndRestore(backup, save_freq=steps or 10**9),
        Marker(),
    ]
    model.fit(feed.dataset, epochs=1, verbose=0, callbacks=callbacks if phase != "full" else [])
    if phase == "first":
        time.sleep(600)


def run_elastic(workdir: Path, phase: str, steps: int, log: Log) -> None:
    from sqlfeed.dispatch import Worker

    name = sys.argv[5]
    queue, data = f"sqlite:///{workdir / 'queue.db'}", f"duckdb:///{workdir / 'data.duckdb'}"
    worker = Worker(queue, "j", data, worker_id=name, batch_size=40, poll=0.05)

    def checkpoint() -> None:
        worker.checkpoint(steps)

    with worker:
        consume(
            worker.batches(), lambda b: b.column("id").to_pylist(), log, phase, steps, checkpoint
        )
    worker.source.close()


MODES: dict[str, Callable[[Path, str, int, Log], None]] = {
    "elastic": run_elastic,
    "keras": run_keras,
    "static": run_static,
    "torch": run_torch,
    "torch-job": run_torch_job,
}


def main() -> None:
    mode, phase, workdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    log = Log(workdir / ("-".join([phase, *sys.argv[5:6]]) + ".log"))
    MODES[mode](workdir, phase, steps, log)


if __name__ == "__main__":
    main()
