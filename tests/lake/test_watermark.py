"""Epochs over a growing database table with a monotone key (``watermark=COLUMN``): rows
inserted between epochs are read exactly once, in the next epoch, and a resume reads the
epoch in progress as it was."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import sqlfeed
from tests.lake.tables import insert_ids

pytestmark = pytest.mark.engine


def test_rows_inserted_between_epochs_are_read_once_in_the_next(
    growing: tuple[str, str, sa.Engine],
) -> None:
    url, table, engine = growing
    sql = f"SELECT id, v FROM {table} WHERE v <> 3"
    options = {"watermark": "id", "epochs": 4, "batch_size": 64, "partitions": 3}
    feeder = sqlfeed.Feeder(sql, url, **options)
    epochs: list[list[int]] = []
    state, at_state = None, 0
    for epoch in range(4):
        ids: list[int] = []
        for number, batch in enumerate(feeder.epoch(epoch)):
            ids.extend(batch.column("id").to_pylist())
            if epoch == 1 and number == 0:
                state, at_state = feeder.state_dict(), len(ids)
        epochs.append(ids)
        insert_ids(engine, table, range(1000 * (epoch + 1), 1000 * (epoch + 1) + 150))
    wanted = [range(0, 500), range(1000, 1150), range(2000, 2150), range(3000, 3150)]
    for ids, keys in zip(epochs, wanted, strict=True):
        assert sorted(ids) == [i for i in keys if i % 7 != 3]
    # resumed inside epoch 1 after more inserts: epoch 1 as it was, then everything newer
    assert state is not None
    resumed = sqlfeed.Feeder(sql, url, state=state, **options)
    rest = [i for batch in resumed for i in batch.column("id").to_pylist()]
    tail_of_1 = len(epochs[1]) - at_state
    assert sorted(rest[:tail_of_1]) == sorted(epochs[1][at_state:])
    newer = [*range(2000, 2150), *range(3000, 3150), *range(4000, 4150)]
    assert sorted(rest[tail_of_1:]) == [i for i in newer if i % 7 != 3]


def test_a_watermark_must_be_an_output_column(growing: tuple[str, str, sa.Engine]) -> None:
    url, table, _engine = growing
    with pytest.raises(sqlfeed.SqlfeedError, match="watermark='nope' is not an output column"):
        sqlfeed.Feeder(f"SELECT id FROM {table}", url, watermark="nope")
    with pytest.raises(sqlfeed.SqlfeedError, match="needs a lakehouse table"):
        sqlfeed.Feeder(f"SELECT id FROM {table}", url, follow=True)
