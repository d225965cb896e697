"""sqlfeed.ray.write_table: a Ray Data pipeline's output lands in a table exactly once.

Runs on a local Ray started once for the module (``ray.init(num_cpus=2)``): each write
task runs in a Ray worker process, attaches to the table sink and commits its blocks. A
task that fails after committing some of them is retried by Ray and skips what it
committed. Skipped when Ray Data is not installed (``pip install 'sqlfeed[ray]'``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sqlfeed
from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.plans.materialize import scratch_created
from tests.helpers.engines import Engine
from tests.helpers.remote_engines import QUERY, url_engine

ray = pytest.importorskip("ray", reason="Ray Data is not installed: pip install 'sqlfeed[ray]'")
pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'sqlfeed[ray]'")

pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.xdist_group("ray")]

ENGINES = ["sqlite", "postgres"]
"""Outputs every Ray worker process can write (DuckDB: one process writes a file)."""


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray with 2 CPUs for the whole module, shut down after it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def _name(engine: Engine) -> str:
    return engine.qualify(f"ray_out_{uuid.uuid4().hex[:10]}")


def _sqlfeed_tables(engine: Engine) -> int:
    """Staging and commits tables left in the engine's schema (``sqlfeed_<time>_<hex>``;
    not the lease queue's ``sqlfeed_jobs``... another test may have made there)."""
    if engine.name == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE name LIKE 'sqlfeed\\_%' ESCAPE '\\'"
    else:
        sql = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            f"'{engine.schema}' AND table_name LIKE 'sqlfeed\\_%'"
        )
    return sum(scratch_created(str(row[0])) is not None for row in engine.rows(sql))


def _scaled(factor: float) -> Any:
    def scale(batch: pd.DataFrame) -> pd.DataFrame:
        batch["w"] = batch["v"] * factor
        return batch

    return scale


def _check_output(engine: Engine, table: str, factor: float) -> None:
    """The output holds each row of ``keyed`` once, ``w`` = ``v * factor``."""
    source = dict(engine.rows(f"SELECT id, v FROM {engine.qualify('keyed')}"))
    counts = engine.rows(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {table}")
    assert counts == [(len(source), len(source))] == [(400, 400)]
    out = {i: (v, w) for i, v, w in engine.rows(f"SELECT id, v, w FROM {table}")}
    assert out == {i: (v, None if v is None else v * factor) for i, v in source.items()}


@pytest.mark.filterwarnings("ignore:sqlite cannot share a snapshot")
@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_pipeline_lands_each_row_once_created_then_replaced(engine_name: str) -> None:
    engine, url = url_engine(engine_name)
    table = _name(engine)
    plan = sqlfeed.plan(QUERY.format(keyed=engine.qualify("keyed")), url, strategy="hash")
    ds = sqlfeed.ray.dataset(plan, url)
    report = sqlfeed.ray.write_table(
        ds.map_batches(_scaled(2.0), batch_format="pandas"), url, table
    )
    assert (report.rows, report.mode, report.finished_by) == (400, "create", "this process")
    _check_output(engine, table, 2.0)
    # the row identity: the write task (one per partition read) and the row's position
    ids = engine.rows(f"SELECT COUNT(DISTINCT _sqlfeed_partition) FROM {table}")
    assert ids[0][0] == plan.num_partitions > 1

    with pytest.raises(InvalidArgumentError, match="exists"):
        sqlfeed.ray.write_table(ds, url, table)
    report = sqlfeed.ray.write_table(
        ds.map_batches(_scaled(-3.0), batch_format="pandas"), url, table, mode="replace"
    )
    assert (report.rows, report.mode) == (400, "replace")
    _check_output(engine, table, -3.0)
    assert _sqlfeed_tables(engine) == 0
    engine.execute(f"DROP TABLE {table}")


def _staging_sql(engine: Engine) -> str:
    """The query naming the run's staging table (``sqlfeed_<time>_<hex>0``)."""
    if engine.name == "sqlite":
        return "SELECT name FROM sqlite_master WHERE name LIKE 'sqlfeed\\_%0' ESCAPE '\\'"
    return (
        f"SELECT '{engine.schema}.' || table_name FROM information_schema.tables WHERE "
        f"table_schema = '{engine.schema}' AND table_name LIKE 'sqlfeed\\_%0'"
    )


def _failing_once(marker: str, url: str, staging_sql: str, crash: bool) -> Any:
    """A transform that fails at row 700 the first time (``marker`` absent): raises, or
    ends its worker process (``crash``). ``marker`` records how many rows from 500 to 699
    (batches of the failing task read before) the staging table held then."""

    def transform(batch: pd.DataFrame) -> pd.DataFrame:
        if 700 in set(batch["id"]) and not os.path.exists(marker):
            with sqlfeed.connect(url) as source:  # sqlfeed's SQLite library, as the sink's
                [(staging,)] = source.rows(staging_sql)
                sql = f"SELECT COUNT(*) FROM {staging} WHERE id BETWEEN 500 AND 699"
                committed = source.rows(sql)[0][0]
            with open(marker, "w") as out:
                out.write(str(committed))
            if crash:
                os._exit(1)
            raise RuntimeError("the first attempt fails")
        batch["w"] = batch["v"] * 2
        return batch

    return transform


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize(
    ("engine_name", "failure"), [("sqlite", "error"), ("postgres", "error"), ("sqlite", "crash")]
)
def test_a_task_retried_after_committing_lands_each_row_once(
    engine_name: str, failure: str, tmp_path: Any
) -> None:
    engine, url = url_engine(engine_name)
    table = _name(engine)
    marker = str(tmp_path / "failed")
    context = ray.data.DataContext.get_current()
    saved = (context.target_max_block_size, context.retried_map_errors, context.max_map_retries)
    context.target_max_block_size = 2_000  # each 100-row batch a block of its own
    # an error: Ray Data runs the task's transforms again; a crash: Ray runs the task again
    context.retried_map_errors, context.max_map_retries = True, 2
    try:
        ds = ray.data.from_items(
            [{"id": i, "v": i * 0.5} for i in range(1_000)], override_num_blocks=2
        ).map_batches(
            _failing_once(marker, url, _staging_sql(engine), failure == "crash"),
            batch_format="pandas",
            batch_size=100,
        )
        report = sqlfeed.ray.write_table(ds, url, table)
    finally:
        (context.target_max_block_size, context.retried_map_errors, context.max_map_retries) = saved
    assert report.rows == 1_000
    with open(marker) as failed:  # the failing task had committed its first two batches
        assert int(failed.read()) == 200
    counts = engine.rows(f"SELECT COUNT(*), COUNT(DISTINCT id), SUM(w) FROM {table}")
    assert counts == [(1_000, 1_000, sum(i for i in range(1_000)))]
    assert _sqlfeed_tables(engine) == 0
    engine.execute(f"DROP TABLE {table}")


def _fails(batch: pd.DataFrame) -> pd.DataFrame:
    if 7 in set(batch["id"]):
        raise RuntimeError("no retry for this one")
    return batch


def test_a_failed_write_leaves_the_output_as_it_was() -> None:
    engine, url = url_engine("sqlite")
    table = _name(engine)
    items = [{"id": i, "v": float(i)} for i in range(20)]
    sqlfeed.ray.write_table(ray.data.from_items(items, override_num_blocks=2), url, table)
    ds = ray.data.from_items(items, override_num_blocks=4).map_batches(
        _fails, batch_format="pandas"
    )
    with pytest.raises(Exception, match="no retry for this one"):
        sqlfeed.ray.write_table(ds, url, table, mode="replace")
    assert engine.rows(f"SELECT COUNT(*), SUM(v) FROM {table}") == [(20, 190.0)]
    assert _sqlfeed_tables(engine) == 0
    engine.execute(f"DROP TABLE {table}")


def test_outputs_ray_tasks_cannot_all_write_are_refused_before_anything_runs(
    tmp_path: Any,
) -> None:
    ds = ray.data.from_items([{"id": 1}])
    path = tmp_path / "out.duckdb"
    with pytest.raises(InvalidArgumentError) as error:
        sqlfeed.ray.write_table(ds, f"duckdb:///{path}", "t")
    assert str(error.value) == (
        "DuckDB lets one process write a database, and Ray writes from many: write into a "
        "server database or SQLite, or collect the dataset here and use sqlfeed.write_table"
    )
    assert not path.exists()
    with pytest.raises(InvalidArgumentError, match="in-memory database"):
        sqlfeed.ray.write_table(ds, "sqlite://", "t")
    with pytest.raises(InvalidArgumentError, match="pass the output database URL"):
        sqlfeed.ray.write_table(ds, sqlfeed.connect("sqlite://"), "t")  # type: ignore[arg-type]
    _, url = url_engine("sqlite")
    with pytest.raises(InvalidArgumentError, match="schema is unknown"):
        sqlfeed.ray.write_table(ray.data.from_items([]), url, "t")
    tensors = ray.data.from_items([{"id": 1, "x": np.ones(3)}])
    with pytest.raises(InvalidArgumentError, match=r"column 'x' is .*Tensor.*one value per row"):
        sqlfeed.ray.write_table(tensors, url, "t")
    with pytest.raises(InvalidArgumentError, match="mode 'upsert'"):
        sqlfeed.ray.write_table(ds, url, "t", mode="upsert")
