"""``TrainOptions.replicas``: MirroredStrategy, one elastic worker of a job per replica.

The training runs in a child interpreter: the CPU splits into two logical devices only
before TensorFlow starts, and this process may have started it already. The child counts
the rows each worker hands to the model in each epoch (``JobEpochs.epoch_batches``, where
a worker's epoch is cut) and prints them as JSON beside the progress lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml import TrainOptions

pytest.importorskip("tensorflow")

ROWS = 6000
CHILD = """
import json, sys
from collections import defaultdict
import sqlfeed.ml
from sqlfeed.dispatch.epochs import JobEpochs

seen = defaultdict(list)   # (worker, its epoch) -> x values handed to the model
calls = defaultdict(int)
plain = JobEpochs.epoch_batches

def counted(self):
    epoch = calls[id(self)]
    calls[id(self)] += 1
    for batch in plain(self):
        seen[(self.worker.worker_id, epoch)].extend(batch.column("x").to_pylist())
        yield batch

JobEpochs.epoch_batches = counted
lines = []
sqlfeed.ml.train(
    "SELECT id, x, g, y FROM t", sys.argv[1], label="y", out=sys.argv[2], key="id",
    replicas=2, epochs=2, batch_size=128, partitions=4, report=False,
    progress=lines.append,
)
print(json.dumps({"lines": lines, "seen": [[w, e, xs] for (w, e), xs in seen.items()]}))
"""


@pytest.fixture
def table(tmp_path: Path) -> str:
    path = tmp_path / "replicas.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            f"CREATE TABLE t AS SELECT range AS id, CAST(range AS DOUBLE) + 0.5 AS x, "
            f"(['a', 'b', 'c'])[1 + range % 3] AS g, "
            f"CAST((range * 7919) % 100 < 40 + 10 * (range % 3) AS INTEGER) AS y "
            f"FROM range({ROWS})"
        )
    return f"duckdb:///{path}"


@pytest.mark.slow  # a child interpreter that starts TensorFlow and trains (about 15 s)
def test_two_replicas_each_fed_by_a_worker_see_every_row_once_an_epoch(
    table: str, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, table, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    text = "\n".join(result["lines"])
    assert "MirroredStrategy over 2 logical CPUs, one worker per replica" in text
    training = int(re.search(r"([\d,]+) training rows", text).group(1).replace(",", ""))  # type: ignore[union-attr]
    # the job completed (train raises otherwise), every partition done or cut short
    job = re.search(r"job 'train': epoch 1: (\d+) partitions done, (\d+) cut short", text)
    assert job is not None, text
    assert int(job.group(1)) + int(job.group(2)) == 4, text
    workers = re.findall(r"(worker/\d): (\d+) batches, ([\d,]+) rows", text)
    assert [w for w, _, _ in workers] == ["worker/0", "worker/1"]
    assert workers[0][1] == workers[1][1]  # even batches: the replicas in lockstep
    fed = int(re.search(r"([\d,]+) of 2 x ([\d,]+) rows fed", text).group(1).replace(",", ""))  # type: ignore[union-attr]
    # each epoch: every training row at most once over both workers, the rest left over
    per_epoch: dict[int, list[float]] = {}
    for _worker, epoch, xs in result["seen"]:
        per_epoch.setdefault(epoch, []).extend(xs)
    assert sorted(per_epoch) == [0, 1]
    training_x = {i + 0.5 for i in range(ROWS)}
    for xs in per_epoch.values():
        assert len(xs) == len(set(xs)), "a row was fed twice in one epoch"
        assert set(xs) <= training_x
        left = training - len(xs)
        assert 0 <= left < 4 * 128  # even batches leave less than a batch per partition
    assert sum(len(xs) for xs in per_epoch.values()) == fed  # what the job reports
    assert sum(int(rows.replace(",", "")) for _, _, rows in workers) == fed
    manifest = json.loads((out / "manifest.json").read_text())
    assert any("trained on 2 replicas" in note for note in manifest["notes"])
    assert manifest["metrics"]["validation"]["accuracy"] > 0.5


def test_replicas_are_checked_when_the_options_are_made() -> None:
    assert TrainOptions(replicas=2, batch_size=256).replicas == 2
    with pytest.raises(InvalidArgumentError, match="not divisible by the 3 replicas"):
        TrainOptions(replicas=3, batch_size=256)
    with pytest.raises(InvalidArgumentError, match="not gbdt"):
        TrainOptions(replicas=2, family="gbdt")
    with pytest.raises(InvalidArgumentError, match="replicas must be an integer > 0"):
        TrainOptions(replicas=0)
