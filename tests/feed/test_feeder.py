"""The Feeder's contract on the embedded DuckDB: batches, shuffle, determinism, formats."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed import EngineError, Feeder, InvalidArgumentError, Plan, Progress
from sqlfeed.feed.export import export

QUERY = "SELECT id, id % 7 AS g, CAST(id AS VARCHAR) AS s FROM t"


pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(10000)"})


def ids(batches: list[pa.RecordBatch]) -> list[int]:
    return [i for batch in batches for i in batch.column("id").to_pylist()]


def test_batches_have_exactly_batch_size_rows(source: sqlfeed.Source) -> None:
    sizes = [len(b) for b in Feeder(QUERY, source, batch_size=300, partitions=7)]
    assert sizes == [300] * 33 + [100]


def test_drop_remainder_drops_the_last_short_batch(source: sqlfeed.Source) -> None:
    sizes = [len(b) for b in Feeder(QUERY, source, batch_size=300, drop_remainder=True)]
    assert sizes == [300] * 33


def test_every_row_once_per_epoch(source: sqlfeed.Source) -> None:
    feeder = Feeder(QUERY, source, batch_size=512, shuffle_buffer=2000, epochs=3, partitions=5)
    seen = ids(list(feeder))
    assert Counter(seen) == Counter({i: 3 for i in range(10000)})


def test_same_seed_same_order_and_each_epoch_differs(source: sqlfeed.Source) -> None:
    plan = sqlfeed.plan(QUERY, source, partitions=8, strategy="hash")
    first = Feeder(plan, source, batch_size=100, shuffle_buffer=1000, seed=5, readers=3)
    again = Feeder(plan, source, batch_size=100, shuffle_buffer=1000, seed=5, readers=1)
    other = Feeder(plan, source, batch_size=100, shuffle_buffer=1000, seed=6)
    assert ids(list(first.epoch(0))) == ids(list(again.epoch(0)))
    assert ids(list(first.epoch(0))) != ids(list(first.epoch(1)))
    assert ids(list(first.epoch(0))) != ids(list(other.epoch(0)))


def test_shuffle_mixes_rows_across_partitions(source: sqlfeed.Source) -> None:
    feeder = Feeder(QUERY, source, batch_size=1000, shuffle_buffer=5000, partitions=10)
    first = next(iter(feeder))
    # Without mixing, the first batch would hold rows of one or two partitions only.
    assert len(set(first.column("g").to_pylist())) == 7
    assert ids([first]) != sorted(ids([first]))


def test_without_shuffle_partitions_come_in_order(source: sqlfeed.Source) -> None:
    feeder = Feeder(QUERY, source, partitions=4, strategy="ctid", key=None)
    assert feeder.partition_order() == [0, 1, 2, 3]
    assert ids(list(feeder)) == list(range(10000))  # rowid ranges, in storage order


def test_pandas_and_numpy_formats(source: sqlfeed.Source) -> None:
    frame = next(iter(Feeder(QUERY, source, batch_size=10, format="pandas")))
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["id", "g", "s"]
    arrays = next(iter(Feeder(QUERY, source, batch_size=10, format="numpy")))
    assert set(arrays) == {"id", "g", "s"}
    assert arrays["id"].dtype == np.int64
    assert len(arrays["s"]) == 10


def test_progress_is_reported_per_partition(source: sqlfeed.Source) -> None:
    events: list[Progress] = []
    list(Feeder(QUERY, source, partitions=5, strategy="hash", progress=events.append))
    assert [e.partitions_done for e in events] == [1, 2, 3, 4, 5]
    assert events[-1].rows == 10000


def test_a_failing_partition_raises_in_the_consumer(source: sqlfeed.Source) -> None:
    bad = "SELECT CAST(CASE WHEN id = 4321 THEN 'x' ELSE '1' END AS INTEGER) AS v FROM t"
    with pytest.raises(EngineError, match="partition query"):
        list(Feeder(bad, source, partitions=4, strategy="ctid"))


def test_plans_pickle_and_round_trip_through_json(source: sqlfeed.Source) -> None:
    plan = sqlfeed.plan(QUERY, source, partitions=3, strategy="range", key="id")
    assert pickle.loads(pickle.dumps(plan)) == plan
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.fingerprint == plan.fingerprint
    assert again.arrow_schema().names == ["id", "g", "s"]


def test_a_tampered_plan_is_refused(source: sqlfeed.Source) -> None:
    data = sqlfeed.plan(QUERY, source, partitions=2).to_dict()
    data["partitions"][0]["sql"] = "SELECT 1"
    with pytest.raises(InvalidArgumentError, match="fingerprint"):
        Plan.from_dict(data)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "xml"}, "format must be"),
        ({"batch_size": 0}, "batch_size"),
        ({"readers": 0}, "readers"),
        ({"rank": 2, "world_size": 2}, "rank must be"),
        ({"shuffle_buffer": -1}, "shuffle_buffer"),
        ({"strategy": "magic"}, "unknown strategy"),
        ({"partitions": 0}, "partitions"),
    ],
)
def test_bad_feeder_options(
    source: sqlfeed.Source, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Feeder(QUERY, source, **options)  # type: ignore[arg-type]


def test_export_writes_every_row(source: sqlfeed.Source, tmp_path: Path) -> None:
    plan = sqlfeed.plan(QUERY, source, partitions=4)
    summary = export(plan, source, tmp_path / "out.parquet")
    assert summary["rows"] == 10000
    assert sorted(pq.read_table(tmp_path / "out.parquet").column("id").to_pylist()) == list(
        range(10000)
    )
    export(plan, source, tmp_path / "parts", format="jsonl")
    assert len(list((tmp_path / "parts").glob("part-*.jsonl"))) == 4


@pytest.mark.parametrize("out", ["out.parquet", "parts"])
def test_a_failed_export_leaves_nothing_under_the_final_name(
    source: sqlfeed.Source, tmp_path: Path, out: str
) -> None:
    bad = "SELECT CAST(CASE WHEN id = 9876 THEN 'x' ELSE '1' END AS INTEGER) AS v FROM t"
    plan = sqlfeed.plan(bad, source, partitions=4, strategy="ctid")
    with pytest.raises(EngineError):
        export(plan, source, tmp_path / out)
    assert list(tmp_path.iterdir()) == []


MEMORY_PROBE = textwrap.dedent(
    """
    import sys
    import sqlfeed

    def peak_kib():  # VmHWM belongs to this address space (ru_maxrss survives fork+exec)
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

    source = sqlfeed.connect(sys.argv[1])
    query = "SELECT * FROM " + sys.argv[2]
    before = peak_kib()
    if sys.argv[3] == "feeder":
        rows = 0
        for batch in sqlfeed.Feeder(query, source, batch_size=4096, readers=2,
                                    read_batch_rows=16384, partitions=32):
            rows += batch.num_rows
    else:
        rows = source.read_table(query).num_rows
    after = peak_kib()
    print(rows, (after - before) // 1024)
    """
)


@pytest.mark.slow
@pytest.mark.engine
def test_feeding_keeps_memory_flat_as_the_data_grows() -> None:
    """RSS growth of a process feeding 0.4M and then 1.6M rows from PostgreSQL.

    PostgreSQL keeps its buffers in its own processes, so the growth is sqlfeed's own.
    A full read grows with the data; the Feeder's footprint (drivers, threads, a few
    batches) stays the same.
    """
    from tests.conftest import get_engine
    from tests.helpers.engines import POSTGRES_URL

    engine = get_engine("postgres")
    url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    growth: dict[tuple[str, int], int] = {}
    for rows in (400_000, 1_600_000):
        table = engine.qualify(f"big_{rows}")
        engine.execute(
            f"CREATE TABLE {table} AS SELECT i AS id, random() AS x, "
            f"repeat('v', 40) || i AS s FROM generate_series(1, {rows}) AS g(i)"
        )
        for mode in ("feeder", "whole"):
            done = subprocess.run(
                [sys.executable, "-c", MEMORY_PROBE, url, table, mode],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"},
            )
            read, mib = map(int, done.stdout.split())
            assert read == rows
            growth[mode, rows] = mib
    # 1.2M more rows are ~75 MB more of Arrow: a full read holds them, the Feeder does not.
    assert growth["whole", 1_600_000] - growth["whole", 400_000] > 50, growth
    assert growth["feeder", 1_600_000] - growth["feeder", 400_000] < 25, growth


# -- resuming from a state ---------------------------------------------------------------


class CountingSource(sqlfeed.io.DuckDBSource):
    """A DuckDB source that counts the rows its partition reads return."""

    rows_read = 0

    def read(self, sql: str, **options: object) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        for batch in super().read(sql, **options):  # type: ignore[arg-type]
            self.rows_read += batch.num_rows
            yield batch


RESUME_OPTIONS = [
    {"batch_size": 256, "shuffle_buffer": 1500},
    {"batch_size": 300},
    {"shuffle_buffer": 999},
    {"batch_size": 100, "shuffle": True, "drop_remainder": True},
]


@pytest.mark.parametrize("options", RESUME_OPTIONS)
def test_a_restored_feeder_delivers_exactly_the_rest_in_the_same_order(
    source: sqlfeed.Source, options: dict[str, Any]
) -> None:
    plan = sqlfeed.plan(QUERY, source, partitions=7, strategy="hash")
    common = {"seed": 3, "epochs": 2, **options}
    full = [ids([b]) for b in Feeder(plan, source, read_batch_rows=700, **common)]
    for taken in (0, 1, 17, len(full) // 2 + 3, len(full) - 1, len(full)):
        feeder = Feeder(plan, source, read_batch_rows=700, **common)
        batches = iter(feeder)
        before = [ids([next(batches)]) for _ in range(taken)]
        state = json.loads(json.dumps(feeder.state_dict()))
        # Read batches of another size after the restore: the order does not depend on them.
        rest = [ids([b]) for b in Feeder(plan, source, read_batch_rows=300, state=state, **common)]
        assert [i for b in before + rest for i in b] == [i for b in full for i in b]
        if "batch_size" in options:
            assert before + rest == full  # the same batches, too


def test_a_restore_rereads_only_the_shuffle_window_in_flight() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(20000)")
    counting = CountingSource(conn, owned=False, label="counting")
    plan = sqlfeed.plan("SELECT id FROM t", counting, partitions=20, strategy="hash")
    options = {"batch_size": 100, "shuffle_buffer": 1000, "seed": 1}
    feeder = Feeder(plan, counting, **options)
    batches = iter(feeder)
    for _ in range(150):  # 15,000 rows into the epoch
        next(batches)
    state = feeder.state_dict()
    counting.rows_read = 0
    rest = sum(len(b) for b in Feeder(plan, counting, state=state, **options))
    assert rest == 5000
    biggest = max(len(ids(list(Feeder(plan, counting, rank=i, world_size=20)))) for i in range(20))
    counting.rows_read = 0
    Feeder(plan, counting, state=state, **options)  # restoring alone reads nothing
    assert counting.rows_read == 0
    list(Feeder(plan, counting, state=state, **options))
    # The rest, plus at most the window being delivered and the head of its first partition.
    assert counting.rows_read <= rest + 1000 + biggest


def test_the_state_after_an_epoch_resumes_at_the_next(source: sqlfeed.Source) -> None:
    plan = sqlfeed.plan(QUERY, source, partitions=4)
    feeder = Feeder(plan, source, batch_size=1000, shuffle_buffer=2000, epochs=3)
    first = list(feeder.epoch(0))
    state = feeder.state_dict()
    assert (state["epoch"], state["rows"]) == (1, 0)
    rest = list(Feeder(plan, source, batch_size=1000, shuffle_buffer=2000, epochs=3, state=state))
    everything = list(Feeder(plan, source, batch_size=1000, shuffle_buffer=2000, epochs=3))
    assert ids(first + rest) == ids(everything)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 8}, "seed: saved 7, here 8"),
        ({"shuffle_buffer": 100}, "shuffle_buffer: saved 500, here 100"),
        ({"rank": 1, "world_size": 2}, "world_size: saved 1, here 2"),
        ({"partitions": 5}, "plan: saved"),
    ],
)
def test_a_state_of_another_feed_is_refused(
    source: sqlfeed.Source, change: dict[str, Any], message: str
) -> None:
    options: dict[str, Any] = {"batch_size": 50, "shuffle_buffer": 500, "seed": 7, "partitions": 4}
    feeder = Feeder(QUERY, source, **options)
    next(iter(feeder))
    state = feeder.state_dict()
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        Feeder(QUERY, source, **{**options, **change}, state=state)
    with pytest.raises(InvalidArgumentError, match="not a sqlfeed feed state"):
        Feeder(QUERY, source, **options).load_state_dict({"epoch": 0})
