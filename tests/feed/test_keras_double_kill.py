"""A Keras training killed twice, the second time in the rest of a restored epoch k >= 1.

Keras 3's ``BackupAndRestore`` records such a checkpoint as epoch 0; with it the third run
found no feed state for "epoch 0" (or an old one, and rewound the feed to the wrong
place). :func:`sqlfeed.tf.BackupAndRestore` records the running epoch: each epoch is then
every row exactly once across both kills.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.resume_contract import make_table

ROWS = 600
BATCH = 50
EPOCHS = 3


class Crash(Exception):
    """The simulated kill."""


def _fit(url: str, backup: Path, log: dict[int, list[int]], crash: tuple[int, int] | None) -> None:
    import keras
    import tensorflow as tf

    import sqlfeed.tf

    feed = sqlfeed.tf.Feed(
        "SELECT id, x FROM t", url, batch_size=BATCH, label="x", shuffle_buffer=200, seed=3
    )

    class Logged(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.epoch = 0

        def call(self, features: Any) -> Any:
            return self.dense(tf.cast(features["id"], "float32")[:, None] / ROWS)

        def train_step(self, data: Any) -> Any:
            log.setdefault(self.epoch, []).extend(data[0]["id"].numpy().tolist())
            return super().train_step(data)

    class Killer(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            model.epoch, self.taken = epoch, 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.taken += 1
            if crash is not None and (model.epoch, self.taken) == crash:
                raise Crash

    model = Logged()
    model({"id": tf.zeros([1], tf.int64)})
    model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=True)
    callbacks = [  # every batch checkpointed before the kill: nothing is replayed
        sqlfeed.tf.FeedCheckpoint(feed, backup, save_freq=1),
        sqlfeed.tf.BackupAndRestore(backup, save_freq=1),
        Killer(),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Crash):
            model.fit(feed.dataset, epochs=EPOCHS, verbose=0, callbacks=callbacks)
    feed.close()


@pytest.mark.filterwarnings("ignore")
def test_killed_twice_in_a_restored_later_epoch_each_epoch_is_every_row_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    url = make_table(tmp_path / "d.duckdb", ROWS)
    backup = tmp_path / "backup"
    log: dict[int, list[int]] = {}
    _fit(url, backup, log, (1, 7))  # epoch 1, after 7 of its 12 batches
    _fit(url, backup, log, (1, 3))  # the rest of epoch 1, after 3 more
    _fit(url, backup, log, None)  # to the end
    assert sorted(log) == list(range(EPOCHS))
    for epoch, ids in log.items():
        counts = Counter(ids)
        twice = sorted(i for i, n in counts.items() if n > 1)
        assert not twice, f"epoch {epoch}: rows fed twice across the kills: {twice[:10]}"
        assert len(counts) == ROWS, f"epoch {epoch}: {len(counts)} distinct rows of {ROWS}"
