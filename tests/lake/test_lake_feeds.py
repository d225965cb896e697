"""Iceberg and Delta tables through every facade: statistics, tf, torch, Ray, Dask, export,
reshard and the command line each give exactly the oracle's rows of the pinned snapshot.

The tables have deletes of every kind (``iceberg_mixed``: position and scoped and global
equality deletes over two partition specs; ``delta_dv``: deletion vectors;
``delta_deleted``: rewritten files), read at their newest snapshot and, pinned by the URL,
at an older one. Facades that read in other processes (DataLoader workers, Ray tasks, Dask
workers, the CLI) reopen the source by its URL there; a table that grows after the plan is
made shows those processes still read the plan's snapshot.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sqlfeed
import sqlfeed.tf as sqlfeed_tf
import sqlfeed.torch as sqlfeed_torch
from sqlfeed.shards.manifest import Manifest
from sqlfeed.shards.reader import read_shard
from sqlfeed.shards.validation import validate
from tests.helpers.cli import run_cli
from tests.lake import builders as b
from tests.lake.oracle import iceberg_rows, same_rows
from tests.lake.tables import LakeTable, rows

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EPOCH = dt.date(1970, 1, 1)
QUERY = "SELECT * FROM t"
COLUMNS = ["id", "a", "s", "d", "x"]
FED = ["id", "a", "s", "s_is_null", "d", "x", "x_is_null"]
"""A tensor feed's columns with ``masks=["s", "x"]``: NULLs filled, their masks beside."""

CASES = {
    "iceberg_mixed": ("iceberg_mixed", None),
    "iceberg_mixed@4": ("iceberg_mixed", 4),  # after its scoped and global equality deletes
    "delta_dv": ("delta_dv", None),
    "delta_deleted@3": ("delta_deleted", 3),  # after its first DELETE
}
"""Case -> (table, index of the snapshot pinned by the URL; None: no pin, the newest)."""
SPAWNING = ["iceberg_mixed@4", "delta_dv"]
"""The cases of the tests that start processes (one of each format, one pinned)."""


def case(lake_tables: dict[str, LakeTable], name: str) -> tuple[str, pa.Table]:
    """The URL of case ``name`` (view ``t``) and the oracle's rows of its snapshot."""
    table, index = CASES[name]
    entry = lake_tables[table]
    pin = ""
    snapshot = entry.latest
    if index is not None:
        snapshot = entry.snapshots[index]
        pin = f"&{'snapshot' if entry.format == 'iceberg' else 'version'}={snapshot}"
    expected = entry.expected[snapshot]
    assert expected.num_rows <= pc.max(expected["id"]).as_py()  # some rows are deleted
    return f"{entry.url}?view=t{pin}", expected.select(COLUMNS)


def fed_rows(expected: pa.Table, text: Callable[[str], Any] = str) -> Counter[tuple[Any, ...]]:
    """The oracle's rows as a tensor feed gives them (``FED``): dates as days since 1970,
    NULL strings as "" and NULL doubles as 0.0 with their masks; strings through ``text``."""
    out: Counter[tuple[Any, ...]] = Counter()
    for row in expected.to_pylist():
        s, x = row["s"], row["x"]
        days = (row["d"] - EPOCH).days
        out[(row["id"], row["a"], text(s or ""), s is None, days, x or 0.0, x is None)] += 1
    return out


def growing_table(tmp_path: Path) -> tuple[Any, str, pa.Table]:
    """An Iceberg table of a SQLite catalog with deletes, its catalog URL (view ``t``, no
    pin: the newest snapshot whenever opened) and the oracle's rows of its snapshot now."""
    catalog = b.iceberg_catalog(tmp_path / "grow", "sqlfeed_grow")
    name = f"grow_{uuid.uuid4().hex[:6]}"
    table = b.iceberg_table(catalog, name, rows(0, 4000), target_file_rows=1000)
    b.delete_positions(table, {b.live_data_files(table)[0].file_path: list(range(0, 1000, 9))})
    properties = {k: str(v) for k, v in catalog.properties.items()}
    url = (
        f"iceberg://{catalog.name}/{b.NAMESPACE}.{name}?uri={properties['uri']}"
        f"&warehouse={properties['warehouse']}&view=t"
    )
    return table, url, iceberg_rows(table, b.snapshot_ids(table)[-1]).select(COLUMNS)


def grow(table: Any) -> None:
    """The table gets a new snapshot of more rows, then one deleting some of its first rows."""
    b.append(table, rows(50_000, 2000))
    b.delete_positions(table, {b.live_data_files(table)[0].file_path: [1, 2, 3]})


# -- statistics ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["pushdown", "accumulate"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_statistics_are_those_of_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str, method: str
) -> None:
    url, expected = case(lake_tables, name)
    stats = sqlfeed.compute_stats(QUERY, url, method=method, partitions=7)
    assert stats.rows == expected.num_rows
    days = pc.cast(expected["d"], pa.int32()).cast(pa.int64())
    means = {"id": expected["id"], "a": expected["a"], "x": expected["x"], "d": days}
    for column in COLUMNS:
        got = stats[column]
        assert got.count == expected.num_rows, column
        assert got.nulls == expected[column].null_count, column
    for column, values in means.items():
        assert stats[column].mean == pytest.approx(pc.mean(values).as_py(), rel=1e-12), column
    assert stats["id"].min == pc.min(expected["id"]).as_py()
    assert stats["id"].max == pc.max(expected["id"]).as_py()
    for column in ("a", "s"):
        values = {v for v in expected[column].to_pylist() if v is not None}
        assert stats[column].distinct == len(values), column


# -- tf ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_tf_dataset_has_the_oracle_rows(lake_tables: dict[str, LakeTable], name: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pytest.importorskip("tensorflow")

    url, expected = case(lake_tables, name)
    ds = sqlfeed_tf.dataset(
        QUERY,
        url,
        label="a",
        masks=["s", "x"],
        float_dtype="float64",
        batch_size=1000,
        partitions=7,
    )
    got: Counter[tuple[Any, ...]] = Counter()
    for features, label in ds:
        columns = {k: v.numpy().tolist() for k, v in features.items()}
        columns["a"] = label.numpy().tolist()
        got.update(zip(*(columns[n] for n in FED), strict=True))
    assert got == fed_rows(expected, str.encode)


# -- torch -------------------------------------------------------------------------------------


def torch_rows(url: str, workers: int, **options: Any) -> Counter[tuple[Any, ...]]:
    """The rows a DataLoader with ``workers`` worker processes yields (``FED``)."""
    pytest.importorskip("torch")

    dataset = sqlfeed_torch.SQLDataset(
        QUERY,
        url,
        batch_size=500,
        masks=["s", "x"],
        float_dtype="float64",
        partitions=6,
        **options,
    )
    got: Counter[tuple[Any, ...]] = Counter()
    for batch in sqlfeed_torch.dataloader(dataset, num_workers=workers, stateful=False):
        columns = [batch[n] if isinstance(batch[n], list) else batch[n].tolist() for n in FED]
        got.update(zip(*columns, strict=True))
    return got


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_torch_dataloader_has_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str
) -> None:
    url, expected = case(lake_tables, name)
    assert torch_rows(url, 0) == fed_rows(expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", SPAWNING)
def test_two_dataloader_workers_reopen_the_url_and_read_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str
) -> None:
    url, expected = case(lake_tables, name)
    assert torch_rows(url, 2) == fed_rows(expected)


@pytest.mark.slow
def test_dataloader_workers_read_the_plans_snapshot_of_a_growing_table(tmp_path: Path) -> None:
    pytest.importorskip("torch")

    table, url, expected = growing_table(tmp_path)
    dataset = sqlfeed_torch.SQLDataset(
        QUERY, url, batch_size=500, masks=["s", "x"], float_dtype="float64", partitions=6
    )
    grow(table)  # after the plan, before any worker opens the table
    got: Counter[tuple[Any, ...]] = Counter()
    for batch in sqlfeed_torch.dataloader(dataset, num_workers=2, stateful=False):
        columns = [batch[n] if isinstance(batch[n], list) else batch[n].tolist() for n in FED]
        got.update(zip(*columns, strict=True))
    assert got == fed_rows(expected)


# -- Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """One local Ray with 2 CPUs for the module's Ray tests, shut down after them."""
    ray = pytest.importorskip("ray", reason="Ray Data is not installed: pip install 'sqlfeed[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def ray_table(ds: Any) -> pa.Table:
    """Every row of a Ray dataset, as Ray hands them out (Arrow batches)."""
    return pa.concat_tables(list(ds.iter_batches(batch_format="pyarrow", batch_size=None)))


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("name", SPAWNING)
def test_the_ray_dataset_has_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str, local_ray: Any
) -> None:
    url, expected = case(lake_tables, name)
    same_rows(ray_table(sqlfeed.ray.dataset(QUERY, url, partitions=7)), expected)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_tasks_read_the_plans_snapshot_of_a_growing_table(
    tmp_path: Path, local_ray: Any
) -> None:
    table, url, expected = growing_table(tmp_path)
    ds = sqlfeed.ray.dataset(QUERY, url, partitions=5)
    grow(table)
    same_rows(ray_table(ds), expected)


# -- Dask ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local distributed cluster of two single-threaded worker processes."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        yield client


def dask_table(frame: Any, client: Any = None) -> pa.Table:
    """A Dask frame computed (on ``client``'s cluster, else threads), as Arrow."""
    result = client.compute(frame).result() if client else frame.compute(scheduler="threads")
    return pa.Table.from_pandas(result.reset_index(drop=True), preserve_index=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_dask_dataframe_has_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str
) -> None:
    pytest.importorskip("dask.dataframe", reason="Dask is not installed")
    url, expected = case(lake_tables, name)
    frame = sqlfeed.dask.dataframe(QUERY, url, partitions=7, dtype_backend="pyarrow")
    same_rows(dask_table(frame), expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", SPAWNING)
def test_dask_workers_reopen_the_url_and_read_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str, cluster: Any
) -> None:
    url, expected = case(lake_tables, name)
    frame = sqlfeed.dask.dataframe(QUERY, url, partitions=7, dtype_backend="pyarrow")
    same_rows(dask_table(frame, cluster), expected)


@pytest.mark.slow
def test_dask_workers_read_the_plans_snapshot_of_a_growing_table(
    tmp_path: Path, cluster: Any
) -> None:
    table, url, expected = growing_table(tmp_path)
    frame = sqlfeed.dask.dataframe(QUERY, url, partitions=5, dtype_backend="pyarrow")
    grow(table)
    same_rows(dask_table(frame, cluster), expected)


# -- export, reshard -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_to_parquet_writes_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str, tmp_path: Path
) -> None:
    url, expected = case(lake_tables, name)
    single = tmp_path / "all.parquet"
    run = run_cli(["export", "--db", url, "--out", str(single), "-m", "7", QUERY])
    assert run.code == 0, run.err
    same_rows(pq.read_table(single), expected)
    parts = tmp_path / "parts"
    run = run_cli(["export", "--db", url, "--out", str(parts), "-m", "7", QUERY])
    assert run.code == 0, run.err
    assert len(list(parts.glob("*.parquet"))) > 1  # one per partition
    same_rows(pq.read_table(parts), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reshard_writes_the_oracle_rows(
    lake_tables: dict[str, LakeTable], name: str, tmp_path: Path
) -> None:
    url, expected = case(lake_tables, name)
    out = tmp_path / "shuffled"
    metrics = sqlfeed.reshard(QUERY, url, out=out, shuffle=3, shard_rows=4000)
    assert metrics.rows == expected.num_rows
    report = validate(out, deep=True)
    assert report.ok, report.problems
    manifest = Manifest.read(out)
    shards = [
        read_shard(out / e.file, manifest.format, schema=manifest.schema, key=manifest.uid)
        for e in manifest.shards
    ]
    assert [s.num_rows for s in shards[:-1]] == [4000] * (len(shards) - 1)
    same_rows(pa.concat_tables(shards).drop_columns(["uid"]), expected)


# -- the command line ----------------------------------------------------------------------


def test_cli_count_and_plan_read_the_pinned_snapshot(lake_tables: dict[str, LakeTable]) -> None:
    url, expected = case(lake_tables, "iceberg_mixed@4")
    run = run_cli(["count", "--db", url, QUERY])
    assert run.code == 0, run.err
    assert run.out.split() == [str(expected.num_rows)]
    run = run_cli(["plan", "--db", url, "-m", "7", "--format", "json", QUERY])
    assert run.code == 0, run.err
    saved = json.loads(run.out)
    planned = sqlfeed.plan(QUERY, url, partitions=7)  # the library's plan, pinned
    assert saved["strategy"] == planned.strategy == "fragments"
    assert f"snapshot {lake_tables['iceberg_mixed'].snapshots[4]}" in saved["reason"]
    assert [p["sql"] for p in saved["partitions"]] == [p.sql for p in planned.partitions]


@pytest.mark.slow
def test_a_fresh_process_opens_a_lake_url_through_a_framework_package(
    lake_tables: dict[str, LakeTable],
) -> None:
    """``import sqlfeed.torch`` alone (as in a training script, or a worker process that
    unpickles a reader) must know the ``iceberg:`` and ``delta:`` schemes."""
    pytest.importorskip("torch")
    url, expected = case(lake_tables, "iceberg_mixed@4")
    script = (
        "import sys, sqlfeed.torch as st\n"
        "ds = st.SQLDataset('SELECT id FROM t', sys.argv[1], batch_size=4096, partitions=3)\n"
        "print(sum(len(b['id']) for b in ds))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(expected.num_rows)]


@pytest.mark.slow
def test_the_sqlfeed_command_reads_a_lake_url_and_refuses_a_bad_one(
    lake_tables: dict[str, LakeTable], tmp_path: Path
) -> None:
    url, expected = case(lake_tables, "iceberg_mixed@4")
    command = [sys.executable, "-m", "sqlfeed"]
    ok = subprocess.run(
        [*command, "count", "--db", url, QUERY], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [str(expected.num_rows)]
    bad = f"iceberg:///{tmp_path}/missing/v1.metadata.json?view=t"
    refused = subprocess.run(
        [*command, "plan", "--db", bad, QUERY], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("sqlfeed: error: ")
    assert "no Iceberg metadata file" in lines[0]
    assert refused.stdout == ""
