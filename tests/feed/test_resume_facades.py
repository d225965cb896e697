"""The resume contract (tests/helpers/resume_contract.py) on the facades' own state_dict.

tests/feed/test_resume_contract.py drives sqlfeed.Feeder, a torch StatefulDataLoader, Keras
``fit`` and a rewound job. Here the same contract runs on each facade's ``state_dict`` taken
directly and handed back through the one keyword they share, ``state=``: the internal
:class:`PartitionFeeder` (read options as one object), ``sqlfeed.tf.Feed`` (its state after
``steps`` batches, behind tf.data's prefetch) and ``sqlfeed.torch.SQLDataset`` iterated
in-process. The same semantics: a restored facade delivers the uninterrupted run's batches.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.feed.options import ReadOptions
from tests.helpers.resume_contract import Batches, Kill, check, make_table

ROWS = 600
QUERY = "SELECT id, x FROM t"
PLAN = {"partitions": 4, "strategy": "range", "key": "id"}
KILLS = [Kill(0, 1), Kill(0, 4), Kill(1, 2)]


def empty(epochs: int) -> list[Batches]:
    return [[] for _ in range(epochs)]


class Adapter:
    """Run ``epochs`` iterations of a facade; kill after ``kill.step`` batches of epoch
    ``kill.epoch`` (step >= 1), saving ``state_dict``; restore with ``state=``."""

    ordered = True
    epochs = 2

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name

    def make(self, state: Any = None) -> Any:
        raise NotImplementedError

    def epoch(self, facade: Any, epoch: int) -> Any:
        """An iterator of epoch ``epoch``'s batches, each as its list of ids."""
        raise NotImplementedError

    def state(self, facade: Any, steps: int) -> Any:
        return facade.state_dict()

    def full(self) -> list[Batches]:
        facade = self.make()
        return [list(self.epoch(facade, e)) for e in range(self.epochs)]

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        before, after = empty(self.epochs), empty(self.epochs)
        facade = self.make()
        for epoch in range(kill.epoch + 1):
            for ids in self.epoch(facade, epoch):
                before[epoch].append(ids)
                if epoch == kill.epoch and len(before[epoch]) == kill.step:
                    break
        state = json.loads(json.dumps(self.state(facade, kill.step)))
        del facade
        restored = self.make(state)
        for epoch in range(kill.epoch, self.epochs):
            after[epoch] = list(self.epoch(restored, epoch))
        return before, after


class PartitionFeederAdapter(Adapter):
    def make(self, state: Any = None) -> Any:
        read = ReadOptions(batch_size=40, shuffle_buffer=150, seed=7, epochs=self.epochs)
        return PartitionFeeder(QUERY, self.url, read=read, state=state, **PLAN)

    def epoch(self, facade: Any, epoch: int) -> Any:
        return (b.column("id").to_pylist() for b in facade.epoch(epoch))


class TfFeedAdapter(Adapter):
    def make(self, state: Any = None) -> Any:
        import sqlfeed.tf

        return sqlfeed.tf.Feed(
            QUERY, self.url, batch_size=40, shuffle_buffer=150, seed=7, state=state, **PLAN
        )

    def epoch(self, facade: Any, epoch: int) -> Any:
        return (features["id"].numpy().tolist() for features in facade.dataset)

    def state(self, facade: Any, steps: int) -> Any:
        return facade.state_dict(steps)  # the model is behind tf.data's prefetch


class TorchDatasetAdapter(Adapter):
    def make(self, state: Any = None) -> Any:
        import sqlfeed.torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sqlfeed.torch.SQLDataset(
                QUERY, self.url, batch_size=40, shuffle_buffer=150, seed=7, state=state, **PLAN
            )

    def epoch(self, facade: Any, epoch: int) -> Any:
        if facade._resume is None:
            facade.set_epoch(epoch)
        return (batch["id"].tolist() for batch in facade)


def test_a_restored_partition_feeder_is_the_uninterrupted_run(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", ROWS)
    assert check(PartitionFeederAdapter(url, "PartitionFeeder"), KILLS, ROWS) == 3


@pytest.mark.filterwarnings("ignore")
def test_a_restored_tf_feed_is_the_uninterrupted_run(tmp_path: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    pytest.importorskip("tensorflow")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    assert check(TfFeedAdapter(url, "tf.Feed"), KILLS, ROWS) == 3


def test_a_restored_torch_dataset_is_the_uninterrupted_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    assert check(TorchDatasetAdapter(url, "torch.SQLDataset"), KILLS, ROWS) == 3
