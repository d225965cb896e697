"""The table sink's rules on every engine: keys checked before anything is written, an
append that would repeat a key refused whole, a failed run leaving nothing behind, and
``write_table``'s inputs."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pandas as pd
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dispatch import Worker, open_queue
from sqlfeed.errors import EngineError, InvalidArgumentError
from sqlfeed.plans.materialize import (
    SCRATCH_TTL_SECONDS,
    drop_expired_scratch,
    list_scratch,
    write_back_table,
)
from sqlfeed.sink import TableSink, copy_into, write_table
from sqlfeed.sink.job import job_sink, run_workers
from tests.conftest import get_engine
from tests.helpers.cli import run_cli as sqlfeed_cli
from tests.helpers.engines import Engine


@pytest.fixture
def place(engine: Engine) -> Iterator[tuple[Engine, str, str]]:
    """An input table of 50 rows (``k`` repeats) and a name for the output."""
    name = f"rin_{uuid.uuid4().hex[:8]}"
    rows = [(i, i % 10, f"v{i}") for i in range(50)]
    engine.create_table(name, [("id", "bigint"), ("k", "int"), ("v", "text")], rows)
    out = f"rout_{uuid.uuid4().hex[:8]}"
    yield engine, engine.qualify(name), engine.qualify(out)
    for table in (name, out):
        engine.execute(f"DROP TABLE IF EXISTS {table}")
    engine.commit()


def _left(engine: Engine, source: sqlfeed.Source) -> list[str]:
    schema = engine.schema if engine.name in ("postgres", "mysql") else "main"
    return [t.name for t in list_scratch(source, schema)]


def test_keys_are_checked_before_anything_is_written(place: tuple[Engine, str, str]) -> None:
    engine, table, out = place
    source = engine.source()
    with pytest.raises(InvalidArgumentError, match="--key k is not unique in the SELECT"):
        copy_into(f"SELECT id, k, v FROM {table}", source, None, out, key=["k"])
    with pytest.raises(InvalidArgumentError, match="key column 'nope' is not among"):
        copy_into(f"SELECT id, k, v FROM {table}", source, None, out, key=["nope"])
    assert _left(engine, source) == []
    report = copy_into(f"SELECT id, k, v FROM {table}", source, None, out, key=["id"])
    assert report is not None
    assert report.rows == 50


def test_an_append_repeating_a_key_is_refused_whole(place: tuple[Engine, str, str]) -> None:
    engine, table, out = place
    source = engine.source()
    copy_into(f"SELECT id, v FROM {table} WHERE id < 20", source, None, out, key=["id"])
    with pytest.raises(EngineError, match="5 keys \\(id\\) of the rows to append are in"):
        copy_into(
            f"SELECT id, v FROM {table} WHERE id >= 15",
            source,
            None,
            out,
            key=["id"],
            mode="append",
        )
    assert source.rows(f"SELECT COUNT(*) FROM {out}") == [(20,)]
    copy_into(
        f"SELECT id, v FROM {table} WHERE id >= 20", source, None, out, key=["id"], mode="append"
    )
    assert source.rows(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {out}") == [(50, 50)]


def test_a_run_that_fails_leaves_the_table_as_it_was(place: tuple[Engine, str, str]) -> None:
    engine, _table, out = place
    source = engine.source()
    write_table(pa.table({"id": [1, 2, 3]}), source, out)

    def broken() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"id": [7, 8]})
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError, match="the producer failed"):
        write_table(broken(), source, out, mode="replace")
    assert sorted(r[0] for r in source.rows(f"SELECT id FROM {out}")) == [1, 2, 3]
    assert _left(engine, source) == []


def test_a_commit_is_once_per_batch(place: tuple[Engine, str, str]) -> None:
    engine, _, out = place
    source = engine.source()
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    sink = TableSink.create(source, out, batch.schema, expected_rows=3)
    other = TableSink.attach(source, sink.spec)  # a second worker, redelivered the batch
    try:
        assert sink.commit(4, 0, batch) is True
        assert other.commit(4, 0, batch) is False  # its commit record is there: skipped
        assert sink.committed() == (1, 3)
        # the same rows cut otherwise: refused at once where the key is made with the
        # table (SQLite), else committed under another record and refused by the finish
        made_with_key = source.dialect.add_key_sql(sink.staging, ["a"], True) is None
        if made_with_key:
            with pytest.raises(EngineError, match="under other batch boundaries"):
                other.commit(4, 1, batch.slice(1))
            assert sink.finish().rows == 3
            return
        assert other.commit(4, 1, batch.slice(1)) is True
        with pytest.raises(EngineError, match="rows were written but the SELECT counts"):
            sink.finish()
        staged = sink.staging.sql(dialect=source.dialect.sqlglot_dialect)
        assert source.rows(f"SELECT COUNT(*) FROM {staged}") == [(5,)]
        sink.spec["expected_rows"] = 5  # even with a count that fits: the identity
        with pytest.raises(EngineError, match="two rows written share"):
            sink.finish()
        sink.abort()
    finally:
        sink.close()
        other.close()
        assert _left(engine, source) == []


def test_the_expiry_of_scratch_tables_leaves_a_waiting_run_alone(
    place: tuple[Engine, str, str],
) -> None:
    """A write-back run whose output schema is also the plans' scratch schema waits longer
    than the scratch TTL for its workers: the next materialize plan's expiry drops the
    plans' expired scratch tables, not the run's staging and commits tables, and the run
    then finishes with every row. Before, both went, and the run was taken for finished
    (its workers skipped every partition, the finish reported the rows put in place)."""
    engine, _, out = place
    source = engine.source()
    schema = engine.schema if engine.name in ("postgres", "mysql") else "main"
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    sink = TableSink.create(source, out, batch.schema, expected_rows=3)
    expired = f"sqlfeed_{int(time.time()) - 2 * SCRATCH_TTL_SECONDS}_ab12cd34"  # a plan's
    engine.execute(f"CREATE TABLE {engine.qualify(expired)} (x INTEGER)")
    engine.commit()
    try:
        assert sink.commit(1, 0, batch) is True
        assert write_back_table(sink.spec["staging"])
        assert write_back_table(sink.spec["commits"])
        assert not write_back_table(expired)
        # every table counts as expired (the cutoff a minute ahead): the run's are kept
        assert drop_expired_scratch(source, schema, older_than=-60) == [expired]
        report = sink.finish()
        assert (report.rows, report.finished_by) == (3, "this process")
        assert sorted(r[0] for r in source.rows(f"SELECT id FROM {out}")) == [1, 2, 3]
    finally:
        sink.close()
        engine.execute(f"DROP TABLE IF EXISTS {engine.qualify(expired)}")
        engine.commit()
    assert _left(engine, source) == []


def test_abort_with_an_attempt_open_drops_its_tables(place: tuple[Engine, str, str]) -> None:
    """A run given up in the middle of a partition: ``abort`` ends its own attempt before
    dropping the tables (the attempt's locks made the DROP wait on itself, for ever on
    PostgreSQL and MariaDB)."""
    engine, _, out = place
    source = engine.source()
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    sink = TableSink.create(source, out, batch.schema, expected_rows=3)
    aborting = threading.Thread(target=sink.abort)
    try:
        sink.open_partition(0)
        sink.write_rows(0, batch)
        aborting.start()
        aborting.join(30)
        assert not aborting.is_alive(), "abort waited on the sink's own open attempt"
        assert _left(engine, source) == []
    finally:
        sink.close()  # ends the attempt if abort is stuck behind it
        if aborting.is_alive():
            aborting.join(30)


def test_write_table_takes_frames_and_refuses_what_it_cannot_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'o.db'}"
    report = write_table(pd.DataFrame({"a": [1, 2], "b": ["x", None]}), url, "t")
    assert report.rows == 2
    assert sqlfeed.connect(url).rows("SELECT a, b FROM t ORDER BY a") == [(1, "x"), (2, None)]
    with pytest.raises(InvalidArgumentError, match="write_table was given no batches"):
        write_table([], url, "u")
    with pytest.raises(InvalidArgumentError, match="cannot write a int"):
        write_table(3, url, "u")
    with pytest.raises(InvalidArgumentError, match="column 'l' is list<item: int64>"):
        write_table(pa.table({"l": [[1]]}), url, "u")
    mixed = [pa.record_batch({"a": [1]}), pa.record_batch({"a": ["x"]})]
    with pytest.raises(InvalidArgumentError, match="give batches of one schema"):
        write_table(mixed, url, "u")
    names = {
        r[0]
        for r in sqlfeed.connect(url).rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    assert names == {"t"}


def test_a_partition_read_again_in_another_order_is_written_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker dies part-way through a partition; an UPDATE then moves a row (PostgreSQL
    keeps no row order); the next worker reads the partition again from its first row:
    every row once, none lost (position-numbered batches committed one by one repeated
    one row and lost another here, with the count unchanged)."""
    engine = get_engine("postgres")
    source = engine.source()
    name = f"rord_{uuid.uuid4().hex[:8]}"
    engine.create_table(name, [("i", "bigint"), ("touched", "int")], [(i, 0) for i in range(1000)])
    table, out = engine.qualify(name), engine.qualify(f"rordo_{uuid.uuid4().hex[:8]}")
    queue = open_queue("memory://")
    spec, sink = job_sink(
        queue,
        "j",
        f"SELECT i FROM {table}",
        source,
        source,
        out,
        mode="create",
        key=None,
        partitions=1,
        batch_size=100,
        lease_ttl=60,
        transform=None,
    )
    first = Worker(queue, "j", source, batch_size=spec.batch_size, whole_partitions=True)
    first.on_lease = lambda lease: sink.open_partition(lease.partition)
    for delivery in first.deliveries():  # one batch written, then the worker dies
        sink.write_rows(delivery.row, delivery.batch)
        break
    first.close()
    sink.rollback_partition()
    engine.execute(f"UPDATE {table} SET touched = 1 WHERE i = 5")
    engine.commit()
    run_workers(queue, spec, source, sink, 1, None, None)
    assert sink.finish().rows == 1000
    sink.close()
    assert source.rows(f"SELECT COUNT(*), COUNT(DISTINCT i), MIN(i), MAX(i) FROM {out}") == [
        (1000, 1000, 0, 999)
    ]
    for drop in (out, table):
        source.execute(f"DROP TABLE {drop}")


@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql"])
def test_an_output_that_cannot_be_reached_is_said_after_the_starting_budget(
    scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run's first connection to its output tries STARTING's budget, then gives the
    database's refusal (it retried for the whole reconnect budget of a running job: ~54 s
    of 'lost the connection' before an unreachable --into-db was said)."""
    from sqlfeed.sink.output import STARTING

    url = f"{scheme}://me:pw@127.0.0.1:1/db"
    with pytest.raises(EngineError, match=r"^cannot connect to .*127\.0\.0\.1:1") as refused:
        write_table(pa.table({"a": [1, 2]}), url, "made")
    assert "pw" not in str(refused.value)
    retries = [r for r in caplog.records if "reconnecting in" in r.getMessage()]
    assert len(retries) == STARTING.tries
    run = sqlfeed_cli(["export", "--db", "duckdb://", "--into", "t", "--into-db", url, "SELECT 1"])
    assert run.code == 1, run.err
    assert run.err.strip().splitlines()[-1].startswith("sqlfeed: engine error: cannot connect")
