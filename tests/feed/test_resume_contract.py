"""The resume contract (tests/helpers/resume_contract.py) on every resumable facade.

Static Feeder, torch ``StatefulDataLoader`` with 0-3 workers, Keras ``fit(epochs=N)`` with
``FeedCheckpoint`` + ``BackupAndRestore``, and an elastic job rewound to its checkpoint:
killed across the whole epoch, restored, and compared with the uninterrupted run, the
next epoch included. A restore into another ``num_workers`` or world size is refused in
one line. The fast tests run a few kills each; the ``slow`` ones sweep.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError
from tests.helpers import sweep
from tests.helpers.resume_contract import END, Batches, Kill, check, kill_points, make_table

ROWS = 1200
QUERY = "SELECT id, x FROM t"


def empty(epochs: int) -> list[Batches]:
    return [[] for _ in range(epochs)]


def boundaries(window: int, partition_rows: int, rows: int = ROWS) -> list[int]:
    """Rows where a shuffle window or an (equal, range) partition ends."""
    return sorted({*range(window, rows, window), *range(partition_rows, rows, partition_rows)})


# -- static Feeder -----------------------------------------------------------------------


class FeederAdapter:
    ordered = True

    def __init__(self, url: str, epochs: int = 2, **options: Any) -> None:
        self.url, self.epochs, self.options = url, epochs, options
        self.name = f"Feeder{options}"

    def _feeder(self, state: Any = None) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sqlfeed.Feeder(QUERY, self.url, epochs=self.epochs, state=state, **self.options)

    def full(self) -> list[Batches]:
        feeder = self._feeder()
        return [[b.column("id").to_pylist() for b in feeder.epoch(e)] for e in range(self.epochs)]

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        before, after = empty(self.epochs), empty(self.epochs)
        feeder = self._feeder()
        state = None
        for epoch in range(kill.epoch + 1):
            if epoch == kill.epoch and kill.step == 0:
                state = feeder.state_dict()
                break
            for batch in feeder.epoch(epoch):
                before[epoch].append(batch.column("id").to_pylist())
                if epoch == kill.epoch and len(before[epoch]) == kill.step:
                    state = feeder.state_dict()
                    break
        if state is None:  # END: after the epoch's loop ended
            state = feeder.state_dict()
        del feeder
        state = json.loads(json.dumps(state))
        restored = self._feeder(state)
        for epoch in range(int(state["epoch"]), self.epochs):
            after[epoch] = [b.column("id").to_pylist() for b in restored.epoch(epoch)]
        return before, after


FEEDER_CASES: list[dict[str, Any]] = [
    {
        "batch_size": 50,
        "shuffle_buffer": 300,
        "seed": 3,
        "partitions": 6,
        "strategy": "range",
        "key": "id",
    },
    {"batch_size": 70, "shuffle_buffer": 250, "seed": 4, "partitions": 5, "strategy": "hash"},
    {"batch_size": 64, "partitions": 4, "strategy": "range", "key": "id"},
]


@pytest.mark.parametrize("options", FEEDER_CASES[:1])
def test_a_restored_feeder_is_the_uninterrupted_run(tmp_path: Path, options: Any) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    kills = kill_points(24, 50, boundaries=boundaries(300, 200), drawn=0)
    assert check(FeederAdapter(url, **options), kills, ROWS) == len(kills)


def test_a_feeder_state_restored_into_another_world_size_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    options = FEEDER_CASES[0]
    feeder = sqlfeed.Feeder(QUERY, url, **options)
    batches = feeder.epoch(0)
    next(batches)
    state = feeder.state_dict()
    for rank, world_size in ((0, 2), (1, 2)):
        with pytest.raises(InvalidArgumentError, match="world_size: saved 1, here 2") as err:
            sqlfeed.Feeder(QUERY, url, rank=rank, world_size=world_size, state=state, **options)
        assert "\n" not in str(err.value)


# -- torch -------------------------------------------------------------------------------


class TorchAdapter:
    ordered = True

    def __init__(self, url: str, workers: int, epochs: int = 2, **options: Any) -> None:
        self.url, self.workers, self.epochs, self.options = url, workers, epochs, options
        self.name = f"torch(num_workers={workers}, {options})"

    def _loader(self) -> tuple[Any, Any]:
        import sqlfeed.torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = sqlfeed.torch.SQLDataset(QUERY, self.url, **self.options)
        return dataset, sqlfeed.torch.dataloader(dataset, num_workers=self.workers)

    def full(self) -> list[Batches]:
        dataset, loader = self._loader()
        epochs: list[Batches] = []
        for epoch in range(self.epochs):
            dataset.set_epoch(epoch)  # as the README's loop does
            epochs.append([b["id"].tolist() for b in loader])
        return epochs

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        before, after = empty(self.epochs), empty(self.epochs)
        dataset, loader = self._loader()
        state = None
        for epoch in range(kill.epoch + 1):
            dataset.set_epoch(epoch)
            iterator = iter(loader)
            if epoch == kill.epoch and kill.step == 0:
                state = loader.state_dict()
                break
            for batch in iterator:
                before[epoch].append(batch["id"].tolist())
                if epoch == kill.epoch and len(before[epoch]) == kill.step:
                    state = loader.state_dict()
                    break
        if state is None:  # END: after the loop over the epoch ended
            state = loader.state_dict()
        del iterator, loader, dataset
        gc.collect()  # the worker processes go with the iterator
        dataset, loader = self._loader()
        loader.load_state_dict(json.loads(json.dumps(state)))
        first = kill.epoch + 1 if kill.step == END else kill.epoch
        for epoch in range(first, self.epochs):
            dataset.set_epoch(epoch)
            after[epoch] = [b["id"].tolist() for b in loader]
        return before, after


def torch_options(batch_size: int, partitions: int = 5) -> dict[str, Any]:
    """Range partitions of 1200 / ``partitions`` rows: 5 over 2 or 3 workers are uneven
    shares (in partitions and batches)."""
    return {
        "batch_size": batch_size,
        "shuffle_buffer": 300,
        "seed": 5,
        "partitions": partitions,
        "strategy": "range",
        "key": "id",
    }


@pytest.mark.slow  # two DataLoader worker processes per run, five runs (11 s in the file's run)
def test_a_restored_torch_loader_with_uneven_worker_shares_is_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torchdata")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = TorchAdapter(url, 2, **torch_options(70))
    batches = len(adapter.full()[0])
    # the share of worker 1 (2 partitions) ends before worker 0's (3): kill after it did
    kills = [Kill(0, 0), Kill(0, batches - 3), Kill(0, batches), Kill(0, END)]
    assert check(adapter, kills, ROWS) == 4


def test_a_restore_into_another_num_workers_or_world_size_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torchdata")
    import sqlfeed.torch

    url = make_table(tmp_path / "d.duckdb", ROWS)
    dataset = sqlfeed.torch.SQLDataset(QUERY, url, **torch_options(50, 4))
    loader = sqlfeed.torch.dataloader(dataset, num_workers=2)
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    state = loader.state_dict()
    del iterator
    for workers in (0, 1, 3):
        other = sqlfeed.torch.dataloader(dataset, num_workers=workers)
        with pytest.raises(InvalidArgumentError) as err:
            other.load_state_dict(state)
        assert "\n" not in str(err.value)
        assert "num_workers=2, this loader has num_workers=" in str(err.value)
    ranked = sqlfeed.torch.SQLDataset(QUERY, url, rank=1, world_size=2, **torch_options(50, 4))
    with pytest.raises(InvalidArgumentError, match="rank 1 of world size 2") as err:
        sqlfeed.torch.dataloader(ranked, num_workers=2).load_state_dict(state)
    assert "\n" not in str(err.value)


# -- Keras fit + FeedCheckpoint ----------------------------------------------------------


class Crash(Exception):
    """The training process dies here (after the callbacks before it saved)."""


class KerasAdapter:
    ordered = True

    def __init__(self, url: str, workdir: Path, epochs: int = 3, **options: Any) -> None:
        self.url, self.workdir, self.epochs, self.options = url, workdir, epochs, options
        self.name = f"keras fit(epochs={epochs}, {options})"
        self.runs = 0

    def _feed_options(self, backup: Path) -> dict[str, Any]:
        return self.options

    def _fit(self, backup: Path, log: list[Batches], crash: Kill | None) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import keras
        import tensorflow as tf

        import sqlfeed.tf

        feed = sqlfeed.tf.Feed(QUERY, self.url, label="x", **self._feed_options(backup))

        class Logged(keras.Model):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.dense = keras.layers.Dense(1)
                self.epoch = 0

            def call(self, features: Any) -> Any:
                return self.dense(tf.cast(features["id"], "float32")[:, None] / ROWS)

            def train_step(self, data: Any) -> Any:
                log[self.epoch].append(data[0]["id"].numpy().tolist())
                return super().train_step(data)

        class Killer(keras.callbacks.Callback):  # type: ignore[misc]
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                model.epoch = epoch
                if crash is not None and (epoch, 0) == (crash.epoch, crash.step):
                    raise Crash

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                if crash is not None and (model.epoch, batch + 1) == (crash.epoch, crash.step):
                    raise Crash

        model = Logged()
        model({"id": tf.zeros([1], tf.int64)})
        model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=True)
        callbacks = [
            sqlfeed.tf.FeedCheckpoint(feed, backup, save_freq=1),
            keras.callbacks.BackupAndRestore(str(backup), save_freq=1),
            Killer(),
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(Crash):
                model.fit(feed.dataset, epochs=self.epochs, verbose=0, callbacks=callbacks)
        feed.close()  # a job's worker gives its lease back (the process died)

    def full(self) -> list[Batches]:
        log = empty(self.epochs)
        self.runs += 1
        self._fit(self.workdir / f"full{self.runs}", log, None)
        return log

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        self.runs += 1
        backup = self.workdir / f"run{self.runs}"
        before, after = empty(self.epochs), empty(self.epochs)
        self._fit(backup, before, kill)
        self._fit(backup, after, None)
        return before, after


@pytest.mark.filterwarnings("ignore")
def test_a_restored_keras_fit_of_several_epochs_is_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = KerasAdapter(
        url, tmp_path, batch_size=100, shuffle_buffer=300, seed=11, partitions=6, strategy="hash"
    )
    # mid-epoch (the later epochs were cut to its rest), right after its last batch
    assert check(adapter, [Kill(0, 5), Kill(0, 12)], ROWS) == 2


class KerasJobAdapter(KerasAdapter):
    """Keras on a job's feed: FeedCheckpoint records checkpoints in the job's ledger and
    the restore rewinds the job (each run its own job, one queue per backup folder)."""

    ordered = False

    def _feed_options(self, backup: Path) -> dict[str, Any]:
        queue = f"sqlite:///{backup.parent / (backup.name + '-queue.db')}"
        return {**self.options, "job": "j", "queue": queue, "epochs": self.epochs}


@pytest.mark.filterwarnings("ignore")
def test_a_restored_keras_fit_on_a_rewound_job_is_each_epoch_exactly_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = KerasJobAdapter(url, tmp_path, batch_size=100, partitions=6, seed=3)
    assert check(adapter, [Kill(0, 4), Kill(1, 2)], ROWS) == 2


# -- elastic job with rewind -------------------------------------------------------------


class JobAdapter:
    ordered = False  # partitions are handed out as workers ask: the multiset is exact

    def __init__(self, url: str, workdir: Path, epochs: int = 2, **options: Any) -> None:
        self.url, self.workdir, self.epochs, self.options = url, workdir, epochs, options
        self.name = f"job(epochs={epochs}, {options})"
        self.runs = 0

    def _job(self) -> str:
        from sqlfeed.dispatch import JobSpec, open_queue

        self.runs += 1
        queue_url = f"sqlite:///{self.workdir / f'queue{self.runs}.db'}"
        queue = open_queue(queue_url)
        plan = sqlfeed.plan(QUERY, self.url, partitions=self.options["partitions"])
        queue.create_job(JobSpec("j", plan, epochs=self.epochs, seed=self.options["seed"]))
        queue.close()
        return queue_url

    def _worker(self, queue: str, name: str) -> Any:
        from sqlfeed.dispatch import Worker

        return Worker(
            queue, "j", self.url, worker_id=name, batch_size=self.options["batch_size"], poll=0.02
        )

    def full(self) -> list[Batches]:
        log = empty(self.epochs)
        with self._worker(self._job(), "w") as worker:
            for delivery in worker.deliveries():
                log[delivery.epoch].append(delivery.batch.column("id").to_pylist())
        return log

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        before, after = empty(self.epochs), empty(self.epochs)
        queue = self._job()
        worker = self._worker(queue, "w")
        deliveries = worker.deliveries()
        taken = 0
        if kill.step != 0:
            for delivery in deliveries:
                before[delivery.epoch].append(delivery.batch.column("id").to_pylist())
                taken += 1
                if delivery.epoch == kill.epoch and len(before[kill.epoch]) == kill.step:
                    break
        checkpoint = taken
        worker.checkpoint(checkpoint)
        for lost, _ in enumerate(deliveries, 1):  # after the checkpoint: lost with the process
            if lost == 3:
                break
        deliveries.close()
        worker.close()
        worker.queue.rewind("j", checkpoint)
        with self._worker(queue, "w2") as restored:
            for delivery in restored.deliveries():
                after[delivery.epoch].append(delivery.batch.column("id").to_pylist())
        return before, after


def test_an_elastic_job_rewound_to_its_checkpoint_is_each_epoch_exactly_once(
    tmp_path: Path,
) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = JobAdapter(url, tmp_path, batch_size=70, partitions=5, seed=3)
    assert check(adapter, [Kill(0, 1), Kill(0, 9), Kill(1, 2)], ROWS) == 3


# -- the sweep (slow; each run checks a rotating share of its kill points: tests/helpers/sweep.py)


@pytest.mark.slow
@pytest.mark.parametrize("options", FEEDER_CASES)
def test_sweep_feeder(tmp_path: Path, options: Any) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = FeederAdapter(url, **options)
    batches = len(adapter.full()[0])
    window = options.get("shuffle_buffer") or options["batch_size"]
    kills = kill_points(
        batches, options["batch_size"], boundaries=boundaries(window, 200), seed=batches
    )
    kills = sweep.sample(kills, f"feeder {options}", always=kills[:2])
    assert check(adapter, kills, ROWS) == len(kills)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("batch_size", [60, 70])  # divides the 240-row partitions, or not
def test_sweep_torch(tmp_path: Path, workers: int, batch_size: int) -> None:
    pytest.importorskip("torchdata")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = TorchAdapter(url, workers, **torch_options(batch_size))
    batches = len(adapter.full()[0])
    kills = kill_points(batches, batch_size, boundaries=boundaries(300, 240), drawn=1, seed=workers)
    kills = sweep.sample(kills, f"torch {workers} {batch_size}", always=kills[:1])
    assert check(adapter, kills, ROWS) == len(kills)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_sweep_keras(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = KerasAdapter(
        url, tmp_path, batch_size=100, shuffle_buffer=300, seed=11, partitions=6, strategy="hash"
    )
    kills = [Kill(0, 1), Kill(0, 3), Kill(0, 6), Kill(0, 11), Kill(1, 0), Kill(1, 4), Kill(2, 12)]
    kills = sweep.sample(kills, "keras", always=kills[:1])
    assert check(adapter, kills, ROWS) == len(kills)


@pytest.mark.slow
def test_sweep_job(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    adapter = JobAdapter(url, tmp_path, batch_size=70, partitions=5, seed=3)
    kills = [Kill(0, 0), Kill(0, 5), Kill(0, 12), Kill(0, 19), Kill(1, 1), Kill(1, 10)]
    kills = sweep.sample(kills, "job", always=kills[:1])
    assert check(adapter, kills, ROWS) == len(kills)
