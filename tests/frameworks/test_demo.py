"""``sqlfeed demo`` trains with two elastic workers in lockstep, as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")


@pytest.mark.slow
def test_the_demo_trains_from_the_select_with_two_workers() -> None:
    # A fresh process, as `make demo` runs it: TensorFlow starts inside the demo, which
    # can then split the CPU into two devices for two synchronous replicas.
    done = subprocess.run(
        [sys.executable, "-m", "sqlfeed", "demo", "--rows", "20000", "-m", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "MirroredStrategy over 2 logical CPUs, one worker per replica" in out
    workers = re.findall(r"worker/(\d): (\d+) batches", out)
    assert [w for w, _ in workers] == ["0", "1"]
    assert workers[0][1] == workers[1][1]  # even batches: the replicas stayed in lockstep
    assert "epoch 2/2 done" in out
    accuracy = float(re.search(r"validation .*: accuracy ([\d.]+)", out).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.8, out
    assert re.search(r"feed alone: .* at [\d,]+ rows/s, every row of the query exactly once", out)
    assert "add up to exactly" in out
