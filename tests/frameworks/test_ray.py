"""sqlfeed.ray: a plan as a Ray Data dataset has exactly the query's rows, on every engine.

Runs on a local Ray started once for the module (``ray.init(num_cpus=2)``) and shut down
after it; each read task runs in a Ray worker process and opens the source's URL there.
Skipped when Ray Data is not installed (``pip install 'sqlfeed[ray]'``).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import InvalidArgumentError, MissingDependencyError
from sqlfeed.feed.remote import plan_for_url
from tests.helpers.remote_engines import (
    PLANS,
    QUERY,
    close_duckdb_file,
    expected_rows,
    refusal,
    rows_of,
    url_engine,
)

ray = pytest.importorskip("ray", reason="Ray Data is not installed: pip install 'sqlfeed[ray]'")
pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'sqlfeed[ray]'")

pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray with 2 CPUs for the whole module, shut down after it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()
    close_duckdb_file()


def read_all(ds: Any) -> pa.Table:
    """Every row of a Ray dataset, as Ray hands them out (``iter_batches`` of Arrow)."""
    batches = list(ds.iter_batches(batch_format="pyarrow", batch_size=None))
    return pa.concat_tables(batches) if batches else pa.table({})


@pytest.mark.parametrize("plan_name", sorted(PLANS))
@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_the_dataset_has_exactly_the_query_rows(engine_name: str, plan_name: str) -> None:
    engine, url = url_engine(engine_name)
    sql = QUERY.format(keyed=engine.qualify("keyed"))
    refused = refusal(engine_name, plan_name)
    if refused:
        with pytest.raises(InvalidArgumentError) as error:
            sqlfeed.ray.dataset(sql, url, partitions=7, **PLANS[plan_name])
        assert str(error.value) == refused
        return
    ds = sqlfeed.ray.dataset(sql, url, partitions=7, **PLANS[plan_name])
    plan = plan_for_url(sql, url, {"partitions": 7, **PLANS[plan_name]})
    table = read_all(ds)
    assert ds.schema().base_schema == plan.arrow_schema()
    assert table.schema == plan.arrow_schema()
    expected = expected_rows(engine, sql)
    assert sum(expected.values()) == 400
    assert rows_of(table) == expected
    # NULL keys and negative values are among them (the awkward rows this checks).
    assert None in table.column("k").to_pylist()
    assert min(v for v in table.column("k").to_pylist() if v is not None) < 0


def test_one_read_task_per_partition_and_fewer_blocks_when_asked() -> None:
    engine, url = url_engine("duckdb")
    sql = QUERY.format(keyed="keyed")
    plan = plan_for_url(sql, url, {"strategy": "range", "key": "k", "partitions": 7})
    default = sqlfeed.ray.dataset(plan, url).materialize()
    assert default.num_blocks() == plan.num_partitions == 8  # 7 ranges and the NULL keys
    grouped = sqlfeed.ray.dataset(plan, url, override_num_blocks=3, concurrency=1)
    assert grouped.materialize().num_blocks() == 3
    assert rows_of(read_all(grouped)) == expected_rows(engine, sql)
    assert grouped.count() == 400


def test_read_tasks_of_one_worker_process_reuse_its_server_session() -> None:
    engine, url = url_engine("postgres")
    app = f"sqlfeed_ray_reuse_{uuid.uuid4().hex[:12]}"
    tagged = f"{url}{'&' if '?' in url else '?'}application_name={app}"
    sql = QUERY.format(keyed=engine.qualify("keyed"))
    ds = sqlfeed.ray.dataset(sql, tagged, strategy="hash", partitions=12)
    assert rows_of(read_all(ds)) == expected_rows(engine, sql)
    sessions = engine.rows(f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}'")
    # 12 read tasks on 2 worker processes: their sessions, kept open, not one per task.
    assert 0 < len(sessions) < 12


def test_an_empty_result_keeps_the_plan_schema() -> None:
    _, url = url_engine("duckdb")
    ds = sqlfeed.ray.dataset(QUERY.format(keyed="empty_keyed"), url, strategy="hash", partitions=3)
    table = read_all(ds)
    assert table.num_rows == 0
    assert ds.schema().names == ["id", "k", "ts", "v", "s"]


def test_materialize_and_fragments_plans_are_exact(tmp_path: Any) -> None:
    engine, url = url_engine("postgres")
    sql = f"SELECT k, COUNT(*) AS n, SUM(v) AS total FROM {engine.qualify('keyed')} GROUP BY k"
    plan = sqlfeed.plan(sql, url, strategy="materialize", scratch=engine.scratch, partitions=4)
    try:
        table = read_all(sqlfeed.ray.dataset(plan, url))
        assert rows_of(table) == expected_rows(engine, sql)
    finally:
        sqlfeed.plans.drop_scratch(plan, url)

    keyed = pa.table(
        {"uid": list(range(300)), "k": [None if i % 5 == 0 else i - 150 for i in range(300)]}
    )
    dataset = sqlfeed.create_dataset(tmp_path / "data", uid="uid")
    dataset.add_shardset("main", keyed, shard_rows=70)
    dataset_url = f"dataset:///{tmp_path / 'data'}"
    ds = sqlfeed.ray.dataset("SELECT * FROM dataset", dataset_url, strategy="fragments")
    table = read_all(ds)
    assert sorted(table.column("uid").to_pylist()) == list(range(300))
    assert sorted(map(str, table.column("k").to_pylist())) == sorted(
        map(str, keyed.column("k").to_pylist())
    )


def test_a_source_other_processes_cannot_open_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="in-memory DuckDB"):
        sqlfeed.ray.dataset("SELECT 1 AS x", "duckdb://")
    with pytest.raises(InvalidArgumentError, match="pass the database URL"):
        sqlfeed.ray.dataset("SELECT 1 AS x", sqlfeed.connect("duckdb://"))  # type: ignore[arg-type]
    _, url = url_engine("duckdb")
    with pytest.raises(InvalidArgumentError, match="unknown option"):
        sqlfeed.ray.dataset("SELECT id FROM keyed", url, partitons=3)
    with pytest.raises(InvalidArgumentError, match="override_num_blocks"):
        sqlfeed.ray.dataset("SELECT id FROM keyed", url, override_num_blocks=0)


def test_a_duckdb_file_open_for_writing_elsewhere_is_a_clear_error(tmp_path: Any) -> None:
    path = tmp_path / "busy.duckdb"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
            "c.execute('CREATE TABLE t AS SELECT 1 AS x'); print('ready', flush=True); "
            "sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        with pytest.raises(sqlfeed.EngineError, match="open for writing"):
            sqlfeed.ray.dataset("SELECT x FROM t", f"duckdb:///{path}", partitions=2)
    finally:
        writer.communicate("")


def test_import_sqlfeed_never_imports_ray_and_a_missing_ray_names_the_extra() -> None:
    code = (
        "import sys, sqlfeed, sqlfeed.ray, sqlfeed.dask\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'dask')))\n"
        "sys.modules['ray'] = None\n"
        "try:\n"
        "    sqlfeed.ray.dataset('SELECT 1 AS x', 'duckdb:///x.duckdb')\n"
        "except sqlfeed.MissingDependencyError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "Ray Data datasets needs ray: pip install 'sqlfeed[ray]'"]
    assert issubclass(MissingDependencyError, ImportError)
