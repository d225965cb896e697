"""Reads of a plan while its table is written: each read is ONE consistent state.

A writer thread runs transactions against the table while every read path reads it:
each transaction moves value between two rows (the total never changes) or inserts or
deletes a pair of rows whose values cancel out. So any single state of the table has
distinct ids, the same total, and a row count of the same parity. A read that mixes
states (partitions read at different times) breaks one of them: a PostgreSQL ``ctid``
plan reads a row twice when an UPDATE moves it to a page read later; a transfer between
a partition read before it and one read after it changes the total.

The writer is made to commit while each read is in flight (the reader waits for its
commits after the first batch), so a read that is not one snapshot fails here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import multiprocessing
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.feed.export import export
from sqlfeed.io import pinned
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine, SQLiteEngine
from tests.scripts.concurrent_writer import DEADLINE, ROWS, Transactions, write_sqlite

START = 100
TOTAL = ROWS * START
PARTITIONS = 12
READ_BATCH = 64
WRITES_DURING_READ = 40


class Writer(threading.Thread):
    """Transfers and paired inserts/deletes, committed one transaction at a time."""

    def __init__(self, connect: Callable[[], Any], table: str, seed: int) -> None:
        super().__init__(daemon=True, name="concurrent-writer")
        self.connect, self.table = connect, table
        self.writes = Transactions(table, seed)
        self.commits = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.changed = threading.Condition()

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE
        try:
            connection = self.connect()
            try:
                while not self.stop.is_set() and time.monotonic() < deadline:
                    self.one(connection)
                    with self.changed:
                        self.commits += 1
                        self.changed.notify_all()
            finally:
                connection.close()
        except BaseException as err:  # reported by the test
            self.error = err
            with self.changed:
                self.changed.notify_all()

    def one(self, connection: Any) -> None:
        self.writes.one(connection)

    def wait_commits(self, count: int) -> None:
        """Block until ``count`` more transactions committed (the read is in flight)."""
        with self.changed:
            target = self.commits + count
            while self.commits < target and self.error is None and self.is_alive():
                self.changed.wait(timeout=1.0)
        assert self.error is None, f"the writer failed: {self.error!r}"
        assert self.commits >= target, "the writer stopped before the read was done"


class ProcessWriter:
    """A :class:`Writer` in another process, for SQLite: ADBC's driver has a SQLite library
    of its own, and two SQLite libraries writing and reading one file in one process break
    each other's POSIX locks (https://www.sqlite.org/howtocorrupt.html, 2.2.1)."""

    def __init__(self, path: str, table: str, seed: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.commits = context.Value("i", 0)
        self.stop = context.Event()
        self._errors = context.Queue()
        self._failure: str | None = None
        args = (path, table, seed, self.commits, self.stop, self._errors)
        self.process = context.Process(target=write_sqlite, args=args, daemon=True)

    def start(self) -> None:
        self.process.start()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)

    @property
    def error(self) -> str | None:
        if self._failure is None and not self._errors.empty():
            self._failure = self._errors.get()
        return self._failure

    def wait_commits(self, count: int) -> None:
        """Block until ``count`` more transactions committed (the read is in flight)."""
        target = self.commits.value + count
        deadline = time.monotonic() + DEADLINE
        while self.commits.value < target and self.error is None and time.monotonic() < deadline:
            assert self.process.is_alive() or self.commits.value >= target, "the writer ended"
            time.sleep(0.005)
        assert self.error is None, f"the writer failed: {self.error}"
        assert self.commits.value >= target, "the writer stopped before the read was done"


def check_one_state(table: pa.Table, what: str) -> None:
    """The rows of one read are one state of the table (see the module docstring)."""
    ids = table.column("id").to_pylist()
    values = table.column("val").to_pylist()
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{what}: {duplicates} rows read twice ({len(ids)} rows)"
    assert sum(values) == TOTAL, f"{what}: total {sum(values)} != {TOTAL} (states mixed)"
    assert len(ids) % 2 == ROWS % 2, f"{what}: {len(ids)} rows: half of a pair read"
    assert set(range(ROWS)) <= set(ids), f"{what}: a row that always exists was missed"


# -- engines ----------------------------------------------------------------------------


def _postgres_connect(engine: Engine) -> Callable[[], Any]:
    import psycopg

    def connect() -> Any:
        connection = psycopg.connect(POSTGRES_URL)
        connection.execute(f"SET search_path TO {engine.schema}")
        connection.commit()
        return connection

    return connect


def _mysql_connect(engine: Engine) -> Callable[[], Any]:
    import pymysql

    url = urlparse(MYSQL_URL)

    def connect() -> Any:
        return pymysql.connect(
            host=url.hostname or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=engine.schema,
            autocommit=False,
        )

    return connect


def _sqlite_connect(engine: Engine) -> Callable[[], Any]:
    path = engine.path  # type: ignore[attr-defined]

    def connect() -> Any:
        return sqlite3.connect(path, timeout=30, check_same_thread=False)

    return connect


_CONNECT = {"postgres": _postgres_connect, "mysql": _mysql_connect, "sqlite": _sqlite_connect}


@dataclasses.dataclass
class Setup:
    engine: Engine
    table: str
    sql: str
    connect: Callable[[], Any]


_OWN_FILES: list[Engine] = []


@pytest.fixture(autouse=True, scope="module")
def _own_sqlite_files() -> Iterator[None]:
    """The SQLite tables live in files of this module's own, removed at its end: WAL mode
    (which the writer needs) stays with a database file, and no other test's file is
    written by a process that a test ends."""
    yield
    while _OWN_FILES:
        _OWN_FILES.pop().close()


def make_table(name: str) -> Setup:
    """A fresh table of :data:`ROWS` rows (each worth :data:`START`) on engine ``name``."""
    engine = get_engine(name)
    if name == "sqlite":
        engine = SQLiteEngine()
        _OWN_FILES.append(engine)
    table = f"acct_{random.randrange(16**8):08x}"
    text = {"postgres": "TEXT", "mysql": "VARCHAR(200)", "sqlite": "TEXT"}[name]
    engine.execute(
        f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, val INTEGER NOT NULL, "
        f"ver INTEGER NOT NULL, pad {text})"
    )
    if name == "sqlite":
        engine.execute("PRAGMA journal_mode = WAL")  # readers and a writer at once
    connection = _CONNECT[name](engine)()
    cursor = connection.cursor()
    marks = "?, ?, ?, ?" if name == "sqlite" else "%s, %s, %s, %s"
    cursor.executemany(
        f"INSERT INTO {table} VALUES ({marks})",
        [(i, START, 0, "p" * 150) for i in range(ROWS)],
    )
    connection.commit()
    if name == "postgres":  # page statistics for the ctid plan
        connection.commit()
        cursor.execute(f"ANALYZE {table}")
        connection.commit()
    cursor.close()
    connection.close()
    return Setup(
        engine, table, f"SELECT id, val, ver FROM {engine.qualify(table)}", _CONNECT[name](engine)
    )


@pytest.fixture
def writing() -> Iterator[Callable[[Setup], Any]]:
    """Start a writer on a table; stopped (and checked) at the end of the test."""
    started: list[Any] = []

    def start(setup: Setup) -> Any:
        seed = len(started) + 1
        writer: Any = Writer(setup.connect, setup.table, seed)
        if setup.engine.name == "sqlite":
            writer = ProcessWriter(setup.engine.path, setup.table, seed)  # type: ignore[attr-defined]
        writer.start()
        started.append(writer)
        writer.wait_commits(5)
        return writer

    yield start
    for writer in started:
        writer.stop.set()
        writer.join(timeout=30)
        assert writer.error is None, f"the writer failed: {writer.error!r}"


def feed_all(batches: Iterator[Any], writer: Any) -> pa.Table:
    """All batches of a read; after its first one, the writer commits meanwhile."""
    got: list[pa.RecordBatch] = []
    for batch in batches:
        if not got:
            writer.wait_commits(WRITES_DURING_READ)
        got.append(batch)
    return pa.Table.from_batches(got)


STRATEGIES = {
    "postgres": ("ctid", "range", "hash"),
    "mysql": ("range", "hash"),
    "sqlite": ("ctid", "range", "hash"),
}
CASES = [(engine, strategy) for engine, all_ in STRATEGIES.items() for strategy in all_]


def _plan(setup: Setup, source: Any, strategy: str) -> sqlfeed.Plan:
    key = "id" if strategy == "range" else None
    return sqlfeed.plan(setup.sql, source, partitions=PARTITIONS, strategy=strategy, key=key)


@pytest.mark.parametrize(("name", "strategy"), CASES)
def test_static_feeder_reads_one_state(
    name: str, strategy: str, writing: Callable[[Setup], Any]
) -> None:
    setup = make_table(name)
    with setup.engine.source() as source:
        plan = _plan(setup, source, strategy)
        assert plan.num_partitions > 4
        writer = writing(setup)
        feeder = sqlfeed.Feeder(plan, source, readers=2, read_batch_rows=READ_BATCH)
        check_one_state(feed_all(iter(feeder), writer), f"{name} {strategy} Feeder")
        # a second epoch is a consistent state too (of its own time)
        check_one_state(feed_all(feeder.epoch(1), writer), f"{name} {strategy} epoch 1")


@pytest.mark.parametrize("reader", ["copy", "connectorx", "adbc", "psycopg"])
def test_every_postgres_reader_reads_one_state(
    reader: str, writing: Callable[[Setup], Any]
) -> None:
    setup = make_table("postgres")
    with setup.engine.source() as source:
        source.readers = (reader, "psycopg")
        plan = _plan(setup, source, "ctid")
        writer = writing(setup)
        feeder = sqlfeed.Feeder(plan, source, readers=3, read_batch_rows=READ_BATCH)
        check_one_state(feed_all(iter(feeder), writer), f"postgres reader {reader}")


@pytest.mark.parametrize("name", ["postgres", "mysql", "sqlite"])
@pytest.mark.parametrize("out", ["rows.parquet", "folder"])
def test_export_writes_one_state(
    name: str, out: str, tmp_path: Path, writing: Callable[[Setup], Any]
) -> None:
    setup = make_table(name)
    with setup.engine.source() as source:
        plan = _plan(setup, source, "range" if name == "mysql" else "ctid")
        writer = writing(setup)
        gate = threading.Event()

        def progress(done: int, rows: int) -> None:
            if not gate.is_set():
                gate.set()
                writer.wait_commits(WRITES_DURING_READ)

        target = tmp_path / out
        export(plan, source, target, readers=2, on_partition=progress)
        check_one_state(pq.read_table(target), f"{name} export {out}")


def test_a_feeder_can_opt_out_of_the_snapshot_and_says_what_it_risks() -> None:
    setup = make_table("mysql")
    with setup.engine.source() as source:
        plan = _plan(setup, source, "range")
        assert "one consistent transaction" in plan.reason
        assert "LOCK TABLES ... READ" in plan.reason
        assert "snapshot=False" in plan.reason
        rows = sum(b.num_rows for b in sqlfeed.Feeder(plan, source, snapshot=False))
        assert rows == ROWS


def test_a_lost_snapshot_is_an_error_not_a_silent_read() -> None:
    setup = make_table("postgres")
    with setup.engine.source() as source:
        plan = _plan(setup, source, "ctid")
        holder = source.export_snapshot()
        holder.close()  # the exporting session ended: the id names nothing now
        with pytest.raises(sqlfeed.EngineError, match=r"snapshot .* is no longer held"):
            list(sqlfeed.Feeder(plan, source, snapshot=holder.snapshot))


def _written_after(setup: Setup, transactions: int = 60) -> None:
    """Commit transfers and pairs now (after a snapshot was taken)."""
    writes = Transactions(setup.table, seed=7)
    connection = setup.connect()
    for _ in range(transactions):
        writes.one(connection)
    connection.close()


def test_a_plan_carries_its_snapshot_to_every_read(tmp_path: Path) -> None:
    """A plan with a snapshot id (another session's) is read inside it by every read,
    wherever the plan goes (JSON, other processes); once its holder closes, an error."""
    setup = make_table("postgres")
    with setup.engine.source() as source:
        plan = _plan(setup, source, "ctid")
        holder = source.export_snapshot()
        carried = dataclasses.replace(plan, snapshot=holder.snapshot)
        again = sqlfeed.Plan.from_json(carried.to_json())
        assert again.snapshot == holder.snapshot
        assert again.fingerprint == plan.fingerprint  # the same rows, read in one state
        _written_after(setup)
        fed = pa.Table.from_batches(list(sqlfeed.Feeder(again, source, readers=3)))
        export(again, source, tmp_path / "parts", readers=3)
        exported = pq.read_table(tmp_path / "parts")
        for table, what in ((fed, "Feeder"), (exported, "export")):
            check_one_state(table, what)
            assert sorted(table.column("id").to_pylist()) == list(range(ROWS)), what
        holder.close()
        with pytest.raises(sqlfeed.EngineError, match=r"snapshot .* is no longer held"):
            list(sqlfeed.Feeder(again, source))


@pytest.mark.slow
def test_dataloader_workers_read_the_snapshot_their_plan_carries() -> None:
    import sqlfeed.torch

    setup = make_table("postgres")
    url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    with setup.engine.source() as source:
        plan = _plan(setup, source, "ctid")
        with source.export_snapshot() as holder:
            carried = dataclasses.replace(plan, snapshot=holder.snapshot)
            _written_after(setup)
            dataset = sqlfeed.torch.SQLDataset(carried, url, batch_size=100)
            loader = sqlfeed.torch.dataloader(dataset, num_workers=2, stateful=False)
            got = [pa.record_batch({k: v.numpy() for k, v in b.items()}) for b in loader]
    table = pa.Table.from_batches(got)
    check_one_state(table, "DataLoader workers")
    assert sorted(table.column("id").to_pylist()) == list(range(ROWS))


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_tf_and_torch_read_one_state(framework: str, writing: Callable[[Setup], Any]) -> None:
    setup = make_table("postgres")
    with setup.engine.source() as source:
        plan = _plan(setup, source, "ctid")
        writer = writing(setup)
        if framework == "torch":
            import sqlfeed.torch

            elements: Any = sqlfeed.torch.SQLDataset(plan, source, batch_size=100)
        else:
            import sqlfeed.tf

            elements = sqlfeed.tf.dataset(plan, source, batch_size=100, read_batch_rows=READ_BATCH)
        got: list[pa.RecordBatch] = []
        for element in elements:
            if not got:
                writer.wait_commits(WRITES_DURING_READ)
            got.append(pa.record_batch({k: v.numpy() for k, v in element.items()}))
        check_one_state(pa.Table.from_batches(got), framework)


@pytest.mark.slow
def test_dask_reads_inside_the_snapshot_taken_when_it_was_built() -> None:
    setup = make_table("postgres")
    url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    import sqlfeed.dask

    with setup.engine.source() as source:
        plan = _plan(setup, source, "ctid")
    app = f"sqlfeed_snap_{random.randrange(16**8):08x}"
    frame = sqlfeed.dask.dataframe(plan, f"{url}?application_name={app}")
    _written_after(setup)  # transfers and pairs committed after the frame was built
    table = pa.Table.from_pandas(frame.compute(scheduler="threads"), preserve_index=False)
    check_one_state(table, "dask")
    assert sorted(table.column("id").to_pylist()) == list(range(ROWS))  # as when built
    holders = (
        f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' "
        "AND query LIKE '%pg_export_snapshot%'"
    )
    assert len(setup.engine.rows(holders)) == 1  # held while the frame lives
    del frame
    gc.collect()
    for _ in range(50):  # a closed session leaves pg_stat_activity when its backend exits
        if not setup.engine.rows(holders):
            break
        time.sleep(0.1)
    assert setup.engine.rows(holders) == []


def test_a_snapshot_that_cannot_be_exported_is_said_not_silent() -> None:
    """No connection for the exporting session (a pool of one, taken): the read goes on
    without a snapshot and a SnapshotWarning says what that risks."""
    import sqlalchemy

    from sqlfeed.feed.snapshots import SnapshotWarning

    setup = make_table("postgres")
    url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sqlalchemy.create_engine(url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        source = sqlfeed.connect(engine)
        source.readers = ("copy",)  # its own connections, not the pool's
        plan = _plan(setup, source, "ctid")
        taken = engine.raw_connection()
        try:
            with pytest.warns(SnapshotWarning, match="exported no snapshot.*read twice"):
                rows = sum(b.num_rows for b in sqlfeed.Feeder(plan, source))
        finally:
            taken.close()
        assert rows == ROWS
        source.close()
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", ["mysql", "sqlite"])
@pytest.mark.parametrize("sync", ["held", "disabled"])
def test_several_connections_begin_at_one_state(
    name: str, sync: str, writing: Callable[[Setup], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL/MariaDB and SQLite read a plan on several connections at once (where the
    source allows them: ``session_connections``), each in a transaction begun while a
    short lock (LOCK TABLES ... READ; BEGIN IMMEDIATE) holds the writer off: one state.
    The writer is given time to commit between two sessions' begins; with the lock
    disabled it does, and the read mixes states (the check fails). Whether the rows a
    session read show the commits it missed is up to chance (which session reads which
    partitions, which rows the writer touched): the control is tried up to 3 times, the
    writer running on."""
    setup = make_table(name)
    with setup.engine.source() as source:
        source.session_connections = 3  # type: ignore[attr-defined]
        plan = _plan(setup, source, "range")
        begun: list[Any] = []
        run = pinned._run
        writers: list[Any] = []

        def begin(connection: Any, statements: Any) -> None:
            run(connection, statements)
            begun.append(connection)
            if sync == "disabled":
                writers[-1].wait_commits(10)  # commits between two sessions' begins
            else:
                time.sleep(0.2)  # the writer tries to commit meanwhile; the lock holds it off

        monkeypatch.setattr(pinned, "_run", begin)
        if sync == "disabled":
            monkeypatch.setattr(
                type(source),
                "_snapshot_sync",
                lambda self, sql: lambda: contextlib.nullcontext("no lock"),
            )
        mixed: list[str] = []
        writers.append(writing(setup))  # one writer for every try (a second one's ids clash)
        for _ in range(1 if sync == "held" else 3):
            begun.clear()
            feeder = sqlfeed.Feeder(plan, source, readers=3, read_batch_rows=READ_BATCH)
            table = feed_all(iter(feeder), writers[-1])
            assert len(begun) == 3, "the read was not made on 3 connections"
            if sync == "held":
                check_one_state(table, f"{name}: 3 readers")
                return
            try:
                check_one_state(table, f"{name}: 3 readers begun at different times")
            except AssertionError as err:
                mixed.append(str(err))
                break
        assert mixed, "3 reads begun at different times each looked like one state"
        assert re.search(r"states mixed|read twice|half of a pair", mixed[0]), mixed[0]


def test_a_user_who_may_not_lock_reads_on_one_connection_and_is_told_why(
    writing: Callable[[Setup], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A MariaDB user with SELECT alone (neither LOCK TABLES nor RELOAD): the consistent
    read runs on one connection, still one state, and one warning line says why and
    which privilege would make it parallel."""
    import pymysql

    setup = make_table("mysql")
    user, password = f"sqlfeed_ro_{random.randrange(16**6):06x}", "pw"
    admin = setup.connect()
    admin.autocommit(True)
    cursor = admin.cursor()
    cursor.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    try:
        cursor.execute(f"GRANT SELECT ON `{setup.engine.schema}`.* TO '{user}'@'%'")
        url = urlparse(MYSQL_URL)
        ro_url = f"mysql+pymysql://{user}:{password}@{url.hostname}:{url.port or 3306}/"
        ro_url += setup.engine.schema
        caplog.set_level(logging.WARNING, logger="sqlfeed.io")
        with sqlfeed.connect(ro_url) as source:
            source.session_connections = 3  # type: ignore[attr-defined]
            plan = _plan(setup, source, "range")
            writer = writing(setup)
            feeder = sqlfeed.Feeder(plan, source, readers=3, read_batch_rows=READ_BATCH)
            check_one_state(feed_all(iter(feeder), writer), "mysql: one connection")
            list(sqlfeed.Feeder(plan, source, readers=3))  # said once per source
        said = [r.getMessage() for r in caplog.records if "ONE connection" in r.getMessage()]
        assert len(said) == 1, said
        assert "\n" not in said[0]
        assert "LOCK TABLES" in said[0], said[0]
        assert "grant LOCK TABLES on the tables read (or RELOAD)" in said[0], said[0]
    finally:
        with contextlib.suppress(pymysql.Error):
            cursor.execute(f"DROP USER '{user}'@'%'")
        admin.close()


def test_the_lock_names_a_hostile_table_as_an_identifier(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A table whose name holds a backtick, a comment opener and a dash pair is locked by
    that name (LOCK TABLES quotes it), so the 3 connections begin under the lock; nothing
    falls back to one connection."""
    engine = get_engine("mysql")
    name = f"we`ird/*x -- {random.randrange(16**6):06x}"
    quoted = "`" + name.replace("`", "``") + "`"
    engine.execute(f"CREATE TABLE {quoted} (id INTEGER PRIMARY KEY)")
    engine.execute(f"INSERT INTO {quoted} VALUES " + ", ".join(f"({i})" for i in range(50)))
    engine.commit()
    try:
        caplog.set_level(logging.INFO, logger="sqlfeed.io")
        with engine.source() as source:
            source.session_connections = 3  # type: ignore[attr-defined]
            sql = f"SELECT id FROM {quoted}"
            plan = sqlfeed.plan(sql, source, partitions=6, strategy="range", key="id")
            ids = [i for b in sqlfeed.Feeder(plan, source, readers=3) for i in b["id"].to_pylist()]
        assert sorted(ids) == list(range(50))
        said = [r.getMessage() for r in caplog.records]
        assert any("on 3 connections: LOCK TABLES" in line for line in said), said
        assert not any("ONE connection" in line for line in said), said
    finally:
        engine.execute(f"DROP TABLE IF EXISTS {quoted}")
        engine.commit()


def test_the_lock_leaves_no_short_lock_wait_on_a_pooled_connection() -> None:
    """The connection that held the lock goes back to the source's pool with the server's
    own lock_wait_timeout: a later statement on it (a DDL waiting for a table in use) is
    not cut off after the lock's 10 s."""
    setup = make_table("mysql")
    with setup.engine.source() as source:
        source.session_connections = 3  # type: ignore[attr-defined]
        plan = _plan(setup, source, "range")
        assert sum(b.num_rows for b in sqlfeed.Feeder(plan, source, readers=3)) == ROWS
        pool = source.engine.pool
        taken = [source.engine.raw_connection() for _ in range(pool.checkedin())]
        try:
            assert taken, "the read left no connection in the pool"
            for connection in taken:
                cursor = connection.cursor()
                cursor.execute("SELECT @@session.lock_wait_timeout, @@global.lock_wait_timeout")
                session, server = cursor.fetchone()
                assert session == server, f"a pooled connection waits {session} s for locks"
        finally:
            for connection in taken:
                connection.close()
