"""sqlfeed.dask: a plan as a Dask DataFrame has exactly the query's rows, on every engine.

Each case runs on Dask's threaded scheduler and on a local distributed cluster (two
worker processes, started once for the module), where every partition is read in a
worker process that opens the source's URL. Skipped when Dask is not installed
(``pip install 'sqlfeed[dask]'``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.remote import plan_for_url, release_sources
from tests.helpers.remote_engines import (
    PLANS,
    QUERY,
    close_duckdb_file,
    expected_rows,
    refusal,
    rows_of,
    url_engine,
)

dd = pytest.importorskip(
    "dask.dataframe", reason="Dask is not installed: pip install 'sqlfeed[dask]'"
)

pytestmark = pytest.mark.engine

SCHEDULERS = ["threads", pytest.param("distributed", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local distributed cluster of two single-threaded worker processes."""
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is not installed: pip install 'sqlfeed[dask]'"
    )
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        yield client


@pytest.fixture(scope="module", autouse=True)
def _duckdb_file() -> Iterator[None]:
    yield
    close_duckdb_file()


def compute(frame: Any, scheduler: str, request: pytest.FixtureRequest) -> pd.DataFrame:
    """The frame computed on ``scheduler`` (the module's cluster for ``distributed``)."""
    if scheduler == "distributed":
        client = request.getfixturevalue("cluster")
        return client.compute(frame).result()  # type: ignore[no-any-return]
    return frame.compute(scheduler="threads")  # type: ignore[no-any-return]


def as_arrow(frame: pd.DataFrame) -> pa.Table:
    """The frame's rows in the query's column order (an index column back in its place)."""
    flat = frame.reset_index(drop=frame.index.name is None)
    return pa.Table.from_pandas(flat[["id", "k", "ts", "v", "s"]], preserve_index=False)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("plan_name", sorted(PLANS))
@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_the_dataframe_has_exactly_the_query_rows(
    engine_name: str, plan_name: str, scheduler: str, request: pytest.FixtureRequest
) -> None:
    engine, url = url_engine(engine_name)
    sql = QUERY.format(keyed=engine.qualify("keyed"))
    refused = refusal(engine_name, plan_name)
    if refused:
        with pytest.raises(InvalidArgumentError) as error:
            sqlfeed.dask.dataframe(sql, url, partitions=7, **PLANS[plan_name])
        assert str(error.value) == refused
        return
    frame = sqlfeed.dask.dataframe(sql, url, partitions=7, **PLANS[plan_name])
    plan = plan_for_url(sql, url, {"partitions": 7, **PLANS[plan_name]})
    assert frame.npartitions == plan.num_partitions
    result = compute(frame, scheduler, request)
    assert list(result.columns) == list(plan.columns)
    assert result.dtypes.to_dict() == frame._meta.dtypes.to_dict()
    assert str(result["k"].dtype) == "Int64"  # NULL keys never turn int64 into float
    expected = expected_rows(engine, sql)
    assert sum(expected.values()) == 400
    assert rows_of(as_arrow(result)) == expected
    assert result["k"].isna().any()
    assert result["k"].min() < 0


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("engine_name", ["duckdb", "sqlite", "postgres", "mysql"])
def test_a_range_plan_on_the_index_has_known_divisions(
    engine_name: str, scheduler: str, request: pytest.FixtureRequest
) -> None:
    engine, url = url_engine(engine_name)
    sql = QUERY.format(keyed=engine.qualify("keyed"))
    frame = sqlfeed.dask.dataframe(sql, url, strategy="range", key="id", index="id", partitions=5)
    assert frame.known_divisions
    assert frame.npartitions == 5
    result = compute(frame, scheduler, request)
    assert rows_of(as_arrow(result)) == expected_rows(engine, sql)
    # Every partition's ids lie within its divisions, in order.
    divisions = frame.divisions
    for i in range(frame.npartitions):
        part = compute(frame.get_partition(i), scheduler, request)
        assert part.index.is_monotonic_increasing
        if len(part):
            assert divisions[i] <= part.index.min()
            assert part.index.max() < divisions[i + 1] or i == frame.npartitions - 1
    assert len(compute(frame.loc[100:199], scheduler, request)) == 100


def test_a_key_with_nulls_gives_unknown_divisions_but_every_row() -> None:
    engine, url = url_engine("duckdb")
    sql = QUERY.format(keyed="keyed")
    frame = sqlfeed.dask.dataframe(sql, url, strategy="range", key="k", index="k", partitions=4)
    assert not frame.known_divisions  # NULL keys have no place in an ordered index
    result = frame.compute(scheduler="threads")
    assert rows_of(as_arrow(result)) == expected_rows(engine, sql)


def test_pyarrow_dtypes_and_an_empty_result() -> None:
    engine, url = url_engine("duckdb")
    frame = sqlfeed.dask.dataframe(
        QUERY.format(keyed="empty_keyed"),
        url,
        strategy="hash",
        partitions=3,
        dtype_backend="pyarrow",
    )
    result = frame.compute(scheduler="threads")
    assert len(result) == 0
    assert list(result.columns) == ["id", "k", "ts", "v", "s"]
    assert all(isinstance(t, pd.ArrowDtype) for t in result.dtypes)
    full = sqlfeed.dask.dataframe(QUERY.format(keyed="keyed"), url, dtype_backend="pyarrow")
    assert rows_of(as_arrow(full.compute(scheduler="threads"))) == expected_rows(
        engine, QUERY.format(keyed="keyed")
    )


def test_bad_arguments_fail_before_anything_is_read() -> None:
    _, url = url_engine("duckdb")
    with pytest.raises(InvalidArgumentError, match="in-memory DuckDB"):
        sqlfeed.dask.dataframe("SELECT 1 AS x", "duckdb:///:memory:")
    with pytest.raises(InvalidArgumentError, match="index 'nope'"):
        sqlfeed.dask.dataframe("SELECT id FROM keyed", url, index="nope")
    with pytest.raises(InvalidArgumentError, match="dtype_backend"):
        sqlfeed.dask.dataframe("SELECT id FROM keyed", url, dtype_backend="numpy")
    plan = plan_for_url("SELECT id FROM keyed", url, {"partitions": 2})
    with pytest.raises(InvalidArgumentError, match="need a SQL query"):
        sqlfeed.dask.dataframe(plan, url, partitions=3)
    with pytest.raises(InvalidArgumentError, match="the plan is for duckdb"):
        sqlfeed.dask.dataframe(plan, "sqlite:///x.db")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_tasks_of_one_process_reuse_its_server_sessions(
    scheduler: str, request: pytest.FixtureRequest
) -> None:
    engine, url = url_engine("postgres")
    app = f"sqlfeed_reuse_{uuid.uuid4().hex[:12]}"
    tagged = f"{url}{'&' if '?' in url else '?'}application_name={app}"
    sql = QUERY.format(keyed=engine.qualify("keyed"))
    frame = sqlfeed.dask.dataframe(sql, tagged, strategy="hash", partitions=12)
    count_sql = (  # the readers' sessions: not the frame's snapshot, held while it lives
        f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' "
        "AND query NOT LIKE '%pg_export_snapshot%'"
    )
    assert len(compute(frame, scheduler, request)) == 400
    first = {row[0] for row in engine.rows(count_sql)}
    assert 0 < len(first) < 12  # fewer sessions than the 12 tasks that read
    assert len(compute(frame, scheduler, request)) == 400
    assert {row[0] for row in engine.rows(count_sql)} == first  # the same sessions again
    if scheduler == "distributed":
        request.getfixturevalue("cluster").run(release_sources)
    else:
        release_sources()
    for _ in range(50):  # a closed session leaves pg_stat_activity when its backend exits
        if not engine.rows(count_sql):
            break
        time.sleep(0.1)
    assert engine.rows(count_sql) == []


def test_decimal_columns_stay_exact_arrow_decimals_by_default(tmp_path: Path) -> None:
    """numpy_nullable keeps decimals exact (pd.ArrowDtype), not float and not objects."""
    db = tmp_path / "decimals.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(
            "CREATE TABLE t AS SELECT i, (i * 1.25 - 3)::DECIMAL(15, 2) AS d "
            "FROM range(-5, 20) r(i)"
        )
        con.execute("INSERT INTO t VALUES (99, NULL)")
    frame = sqlfeed.dask.dataframe(
        "SELECT i, d FROM t", f"duckdb:///{db}", strategy="hash", partitions=3
    ).compute(scheduler="sync")
    assert frame["d"].dtype == pd.ArrowDtype(pa.decimal128(15, 2))
    got = sorted((int(i), d) for i, d in zip(frame["i"], frame["d"], strict=True) if i != 99)
    assert got == [(i, Decimal(i * 125 - 300) / 100) for i in range(-5, 20)]
    assert frame.loc[frame["i"] == 99, "d"].isna().all()


OBJECT_TYPES = """SELECT i::INTEGER AS id, ['t' || (i % 2), 't1'] AS tags, [i, 7] AS nums,
    [[i], [2, 3]] AS nested, {'x': i % 2, 'y': 'a'} AS rec, MAP {'k': i % 2} AS mp,
    [{'z': i}] AS recs, ('b' || i)::BLOB AS bytes, DATE '2020-01-01' + i::INTEGER AS day,
    TIME '01:00:00' + to_minutes(i) AS tod, to_days(i::INTEGER) AS span,
    CASE WHEN i = 3 THEN NULL ELSE ['n'] END AS maybe
FROM range(6) r(i)"""


def test_nested_and_object_types_keep_their_values_by_default(tmp_path: Path) -> None:
    """Lists stay lists, structs dicts, maps maps, bytes bytes, dates dates (pd.ArrowDtype):
    never the text Dask's string conversion makes of pandas object columns."""
    db = tmp_path / "nested.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(f"CREATE TABLE t AS {OBJECT_TYPES}")
        expected = con.sql("SELECT * FROM t ORDER BY id").to_arrow_table()
    frame = sqlfeed.dask.dataframe(
        "SELECT * FROM t", f"duckdb:///{db}", strategy="hash", partitions=2
    ).compute(scheduler="threads")
    frame = frame.sort_values("id").reset_index(drop=True)
    for name in expected.column_names:
        if name == "id":
            continue
        arrow_type = expected.schema.field(name).type
        assert frame[name].dtype == pd.ArrowDtype(arrow_type), name
        assert pa.array(frame[name].array).to_pylist() == expected.column(name).to_pylist(), name


def test_a_postgres_array_column_stays_a_list() -> None:
    engine, url = url_engine("postgres")
    table = f"dask_arrays_{uuid.uuid4().hex[:8]}"
    engine.execute(
        f"CREATE TABLE {engine.qualify(table)} AS SELECT i AS id, "
        "ARRAY['t' || (i % 2), 't1'] AS tags, ARRAY[i, 7] AS nums, "
        "DATE '2020-01-01' + i AS day, ('b' || i)::bytea AS bytes "
        "FROM generate_series(1, 9) i"
    )
    try:
        frame = sqlfeed.dask.dataframe(
            f"SELECT * FROM {engine.qualify(table)}", url, partitions=3
        ).compute(scheduler="threads")
        expected = engine.rows(f"SELECT id, tags, nums, day, bytes FROM {engine.qualify(table)}")
    finally:
        engine.execute(f"DROP TABLE {engine.qualify(table)}")
    assert frame["tags"].dtype == pd.ArrowDtype(pa.list_(pa.string()))
    got = sorted((int(r.id), r.tags, r.nums, r.day, r.bytes) for r in frame.itertuples(index=False))
    assert got == sorted((i, list(t), list(n), d, bytes(b)) for i, t, n, d, b in expected)
