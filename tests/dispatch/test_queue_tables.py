"""The queue's tables: made once by the first job's creation, never by a reader.

Processes (here: threads, each with its own engine) that open a fresh queue at once take
turns under a lock; a command that only reads a queue that is not there says so in one
line and creates nothing.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sqlfeed
from sqlfeed.dispatch.queue import JobSpec, UnknownJobError
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.sqlschema import queue_tables
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(1000)"})

OPENERS = 8
"""Processes opening one fresh queue at once (the reported failure: 1 of 8)."""


def _server(backend: str) -> tuple[str, str]:
    """(admin URL, URL of a database the queue may live in) of a server backend."""
    if backend == "postgres":
        base = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        return base, base
    netloc = MYSQL_URL.split("://", 1)[1].split("/", 1)[0]
    return f"mysql+pymysql://{netloc}/test", f"mysql+pymysql://{netloc}"


Fresh = tuple[str, Callable[[], set[str]]]
"""A queue URL where nothing is yet, and a function listing the tables there."""


@contextmanager
def _fresh(backend: str, tmp_path: Path) -> Iterator[Fresh]:
    """A queue URL in a file, schema or database of its own (dropped afterwards)."""
    name = f"sqlfeed_q_{uuid.uuid4().hex[:10]}"
    if backend == "sqlite":
        path = tmp_path / "queue.db"

        def sqlite_tables() -> set[str]:
            if not path.exists():
                return set()
            engine = sa.create_engine(f"sqlite:///{path}")
            try:
                return set(sa.inspect(engine).get_table_names())
            finally:
                engine.dispose()

        yield f"sqlite:///{path}", sqlite_tables
        return
    admin_url, base = _server(backend)
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    kind = "SCHEMA" if backend == "postgres" else "DATABASE"
    with admin.connect() as c:
        c.exec_driver_sql(f"CREATE {kind} {name}")
    url = f"{base}?options=-csearch_path%3D{name}" if backend == "postgres" else f"{base}/{name}"

    def server_tables() -> set[str]:
        with admin.connect() as c:
            return set(sa.inspect(c).get_table_names(schema=name))

    try:
        yield url, server_tables
    finally:
        with admin.connect() as c:
            c.exec_driver_sql(f"DROP {kind} {name}" + (" CASCADE" if backend == "postgres" else ""))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fresh]:
    """A queue URL where nothing is yet, on each queue backend."""
    with _fresh(request.param, tmp_path) as made:
        yield made


@pytest.fixture(params=["postgres", "mysql"])
def fresh_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fresh]:
    """A queue URL where nothing is yet, on each server (a missing SQLite file:
    tests/io/test_database_files.py)."""
    with _fresh(request.param, tmp_path) as made:
        yield made


def _spec(source: sqlfeed.Source, name: str = "j") -> JobSpec:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=4, strategy="ctid")
    return JobSpec(name, plan)


def _at_once(count: int, action: Callable[[int], Any]) -> list[BaseException]:
    """Run ``action(i)`` in ``count`` threads released together; the errors they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(30)
            action(i)
        except BaseException as err:  # every failure is reported
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


def test_a_fresh_queue_opened_by_many_at_once_is_made_once(
    fresh: Fresh, source: sqlfeed.Source
) -> None:
    url, tables = fresh
    spec = _spec(source)

    def open_and_create(_: int) -> None:
        queue = SQLQueue(url)
        try:
            queue.create_job(spec)
            assert queue.status("j").partitions == 4
        finally:
            queue.close()

    errors = _at_once(OPENERS, open_and_create)
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors]
    assert tables() == set(queue_tables().tables)


def test_reading_a_queue_that_is_not_there_creates_nothing(
    fresh: Fresh,
) -> None:
    url, tables = fresh
    queue = SQLQueue(url)
    try:
        assert queue.find_job("j") is None
        reads: list[Callable[[], Any]] = [
            lambda: queue.job("j"),
            lambda: queue.status("j"),
            lambda: queue.leases("j"),
            lambda: queue.checkpoints("j"),
            lambda: queue.completions("j"),
            lambda: queue.acquire("j", "w"),
        ]
        for read in reads:
            with pytest.raises(UnknownJobError, match=r"no lease queue at .*no job was created"):
                read()
        for change in (queue.reset, queue.delete):  # nothing to change: no queue either
            with pytest.raises(UnknownJobError, match="no lease queue at"):
                change("j")
    finally:
        queue.close()
    assert tables() == set()


def test_many_readers_of_a_queue_that_is_not_there_create_nothing(
    fresh: Fresh,
) -> None:
    url, tables = fresh

    def status(_: int) -> None:
        queue = SQLQueue(url)
        try:
            with pytest.raises(UnknownJobError, match="no lease queue at"):
                queue.status("j")
        finally:
            queue.close()

    assert not _at_once(OPENERS, status)
    assert tables() == set()


def test_a_reader_finds_the_queue_made_after_it_opened(
    fresh: Fresh, source: sqlfeed.Source
) -> None:
    url, _ = fresh
    reader = SQLQueue(url)  # before any job: no queue yet
    maker = SQLQueue(url)
    try:
        assert reader.find_job("j") is None
        maker.create_job(_spec(source))
        assert reader.status("j").partitions == 4
    finally:
        reader.close()
        maker.close()


@pytest.mark.parametrize("command", ["status", "delete", "reset", "rewind"])
def test_job_commands_on_a_server_with_no_queue_say_so_and_create_nothing(
    fresh_server: Fresh, command: str
) -> None:
    url, tables = fresh_server
    extra = ["--to", "1"] if command == "rewind" else []
    run = run_cli(["job", command, "--queue", url, "--job", "j", *extra])
    assert run.code == 2, run
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert "no lease queue at" in lines[0]
    assert "no job was created" in lines[0]
    assert tables() == set()


def _sqlfeed_at_once(*args: str) -> list[subprocess.CompletedProcess[str]]:
    """``sqlfeed ARGS`` in :data:`OPENERS` processes started together."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sqlfeed", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(OPENERS)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.slow
def test_processes_started_together_on_a_fresh_queue(fresh: Fresh, tmp_path: Path) -> None:
    """The reported failure: 8 ``job status`` (one exited 1: duplicate key value violates
    unique constraint pg_type_typname_nsp_index), then 8 ``job create`` at once."""
    url, tables = fresh
    data = tmp_path / "data.db"
    with sqlite3.connect(data) as db:
        db.execute("CREATE TABLE t AS SELECT 1 AS id UNION ALL SELECT 2")
    for run in _sqlfeed_at_once("job", "status", "--queue", url, "--job", "j"):
        assert run.returncode == 2, run.stderr
        assert re.search("no (lease )?queue (at|file)", run.stderr), run.stderr
    assert tables() == set()
    create = ["job", "create", "--queue", url, "--job", "j", "--db", f"sqlite:///{data}"]
    for run in _sqlfeed_at_once(*create, "-m", "2", "SELECT id FROM t"):
        assert run.returncode == 0, run.stderr
    queue = SQLQueue(url)
    try:
        assert queue.status("j").partitions == 2
    finally:
        queue.close()
