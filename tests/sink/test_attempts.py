"""A job's output folder: a late attempt whose files the job's sweep removed while it wrote.

Workers of ``predict``/``export --out DIR --queue ...`` write each partition as one
attempt; the worker that sees the job complete sweeps the files no manifest lists. A
worker that stalled past its lease may still be writing a partition another attempt
committed: its temporary file vanishes under it. It must give the attempt up quietly (the
partition is committed), not exit with "No such file or directory" (seen in the chaos test
with frozen workers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sqlfeed.sink.attempts import Attempt, committed, sweep


def _batch(start: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + 5), pa.int64())})


def test_a_late_attempt_swept_while_writing_gives_up_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    late, winner = Attempt(tmp_path, 3), Attempt(tmp_path, 3)
    late.write(_batch(0))  # before the stall
    winner.write(_batch(0))
    winner.write(_batch(5))
    assert winner.commit() is True
    write = pq.write_table

    def swept_meanwhile(table: Any, where: Any, **options: Any) -> None:
        write(table, where, **options)
        sweep(tmp_path)  # the job is complete: a worker removes what no manifest lists

    monkeypatch.setattr(pq, "write_table", swept_meanwhile)
    late.write(_batch(5))  # its temporary vanishes before the rename
    monkeypatch.undo()
    assert late.superseded
    late.write(_batch(10))  # writes nothing more
    assert late.commit() is False
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([*(f["name"] for f in winner.files), "_manifest-00003.json"])
    assert [p.name for _, p in committed(tmp_path)] == [f["name"] for f in winner.files]


def test_a_vanished_file_of_a_partition_nobody_committed_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a manifest, a vanished temporary is not a lost race: it is raised."""
    attempt = Attempt(tmp_path, 4)
    write = pq.write_table

    def removed(table: Any, where: Any, **options: Any) -> None:
        write(table, where, **options)
        Path(where).unlink()

    monkeypatch.setattr(pq, "write_table", removed)
    with pytest.raises(FileNotFoundError):
        attempt.write(_batch(0))
    assert not attempt.superseded
