"""Lost database connections during reads: the reading connections killed again and again
(PostgreSQL ``pg_terminate_backend``, MariaDB ``KILL CONNECTION``) and, opt-in, the server
restarted, while a static Feeder reads and while a job runs on 2 worker processes.

What a user relies on: no worker exits, every row is delivered exactly once (compared
with the table), and stderr carries at most one warning line per reconnection, never a
traceback. The figures (faults injected, reconnections, recovery time) are printed: run
with ``-s`` to see them.

The server restarts (``pg_ctlcluster ... restart``; MariaDB stopped and started by
``start-stop-daemon``) stop every other test using the server meanwhile, so they run only
with ``SQLFEED_TEST_RESTART_SERVER=1``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

import sqlfeed
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.io.faults import connection_lost
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL
from tests.helpers.killer import Killer, admin_connection, kill_sessions, no_traceback
from tests.helpers.sources import require_module

pytestmark = [pytest.mark.slow, pytest.mark.engine]

ROWS = 24_000
PAD = 400
"""Characters of padding per row: a partition's rows outgrow the socket buffers, so a
kill lands while the server is still sending."""
RESTART = os.environ.get("SQLFEED_TEST_RESTART_SERVER", "") == "1"
ROOT = Path(__file__).resolve().parents[2]
_READER_VARIABLES = {"postgres": "SQLFEED_POSTGRES_READERS", "mysql": "SQLFEED_MYSQL_READERS"}
_READER_MODULES = {"connectorx": "connectorx", "adbc": "adbc_driver_postgresql"}


class Server:
    """A table of ``ROWS`` rows in a schema (database) of its own, a sqlfeed URL whose
    connections can be told apart, and a way to kill them."""

    def __init__(self, name: str, rows: int = ROWS, pad: int = PAD) -> None:
        self.name = name
        self.tag = f"sqlfeed_cf_{uuid.uuid4().hex[:10]}"
        self.table = f"{self.tag}.t"
        self.query = f"SELECT id, pad FROM {self.table}"
        try:
            self.admin: Any = self._connect()
        except Exception as err:
            pytest.skip(f"{name} unreachable: {err}")
        if name == "postgres":
            base = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
            self.url = f"{base}?application_name={self.tag}"
            self._run(f"CREATE SCHEMA {self.tag}")
            self._run(
                f"CREATE TABLE {self.table} AS SELECT g AS id, repeat(chr(65 + g % 26), {pad}) "
                f"AS pad FROM generate_series(0, {rows - 1}) g"
            )
            self._run(f"ALTER TABLE {self.table} ADD PRIMARY KEY (id)")
        else:
            netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
            self.url = f"mysql+pymysql://{netloc}/{self.tag}"
            self._run(f"CREATE DATABASE {self.tag}")
            self._run(f"CREATE TABLE {self.table} (id INT PRIMARY KEY, pad TEXT)")
            self._run(  # MariaDB's sequence engine
                f"INSERT INTO {self.table} SELECT seq, REPEAT(CHAR(65 + seq % 26), {pad}) "
                f"FROM {self.tag}.seq_0_to_{rows - 1}"
            )

    def _connect(self) -> Any:
        """The test's own connection (autocommit), by the engine's own driver."""
        return admin_connection(self.name)

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        for attempt in range(50):  # after a server restart: connect again, while it starts
            try:
                cursor = self.admin.cursor()
                try:
                    cursor.execute(sql)
                    return list(cursor.fetchall()) if cursor.description else []
                finally:
                    cursor.close()
            except Exception as err:
                if not connection_lost(err) or attempt == 49:
                    raise
                time.sleep(0.2)
                with contextlib.suppress(Exception):
                    self.admin = self._connect()
        raise AssertionError("unreachable")

    def ids(self) -> list[int]:
        """The table's ids, read by the test's own connection."""
        return sorted(int(row[0]) for row in self._run(f"SELECT id FROM {self.table}"))

    def kill(self, active: bool = False) -> int:
        """End every connection sqlfeed opened on the table (a PostgreSQL snapshot's
        holder aside: a read cannot outlive it), or only those running a query
        (``active``); how many were ended."""
        return kill_sessions(self._run, self.name, self.tag, active)

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(
                f"DROP SCHEMA IF EXISTS {self.tag} CASCADE"
                if self.name == "postgres"
                else f"DROP DATABASE IF EXISTS {self.tag}"
            )
        with contextlib.suppress(Exception):
            self.admin.close()


@pytest.fixture
def server() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(name: str, rows: int = ROWS, pad: int = PAD) -> Server:
        made.append(Server(name, rows, pad))
        return made[-1]

    yield make
    for one in made:
        one.drop()


def _recovery(kills: list[float], streams: list[list[float]]) -> str:
    """Seconds from each kill until every stream (a Feeder, a worker) that delivers again
    did: median and max over the kills."""
    gaps = []
    for at in kills:
        later = [min(t for t in times if t > at) for times in streams if times and times[-1] > at]
        if later:
            gaps.append(max(later) - at)
    if not gaps:
        return "no delivery after a kill"
    return f"recovery median {statistics.median(gaps):.2f}s max {max(gaps):.2f}s"


def _report(capfd: pytest.CaptureFixture[str], text: str) -> None:
    """Print a test's figures past the capture (seen with ``-s``)."""
    with capfd.disabled():
        print("\n" + text)


def _readers(monkeypatch: pytest.MonkeyPatch, engine: str, readers: str) -> None:
    module = _READER_MODULES.get(readers)
    if module is not None:
        require_module(module)
    monkeypatch.setenv(_READER_VARIABLES[engine], readers)


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize(
    ("engine", "readers"),
    [("postgres", "copy"), ("postgres", "psycopg"), ("postgres", "adbc"), ("mysql", "pymysql")],
)
def test_a_static_feed_survives_killed_connections(
    engine: str,
    readers: str,
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Feeder (2 readers, 8 partitions) while its connections are killed every
    0.2-0.5 s: every row once, each kill survived, no traceback."""
    db = server(engine)
    _readers(monkeypatch, engine, readers)
    # MariaDB cannot share a snapshot: its default consistent read is one connection whose
    # loss cannot resume (sqlfeed.io.pinned); a table that does not change needs none.
    options: dict[str, Any] = {"snapshot": False} if engine == "mysql" else {}
    feeder = sqlfeed.Feeder(
        db.query,
        db.url,
        partitions=8,
        strategy="range",
        key="id",
        readers=2,
        batch_size=250,
        read_batch_rows=250,
        **options,
    )
    caplog.set_level(logging.WARNING, logger="sqlfeed.io")
    ids: list[int] = []
    delivered: list[float] = []
    killer = Killer(db, 0.2, 0.5)
    for batch in feeder:
        if not delivered:
            killer.start()
        ids += batch.column("id").to_pylist()
        delivered.append(time.time())
        time.sleep(0.03)  # a consumer doing some work
    killer.stop()
    reconnects = [r for r in caplog.records if "lost the connection" in r.getMessage()]
    _report(
        capfd,
        f"{engine}/{readers} static feed: {killer.kills} connections killed, "
        f"{len(reconnects)} reads reconnected, rows {len(ids)}/{ROWS}, "
        f"{_recovery(killer.times, [delivered])}",
    )
    assert reconnects, "no read lost its connection: the test did not test anything"
    assert Counter(ids) == Counter(db.ids())  # every row exactly once
    no_traceback(capfd.readouterr().err, readers)


@pytest.mark.parametrize("engine", ["postgres", "mysql"])
def test_a_connectorx_stream_survives_killed_connections(
    engine: str,
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """connectorx reads a partition estimated small at once (a kill lands between reads,
    see the Feeder test); a read of unknown size streams, and survives kills mid-stream.
    A read whose kills all met an idle connection (connectorx reads fast; a loaded machine
    may starve the killer's thread) is checked and made again, at most twice more: one must
    reconnect. (Rust prints connectorx's panics itself: stderr is not checked here.)"""
    db = server(engine, rows=150_000, pad=300)
    _readers(monkeypatch, engine, "connectorx")
    caplog.set_level(logging.WARNING, logger="sqlfeed.io")
    for _attempt in range(3):
        caplog.clear()
        source = sqlfeed.connect(db.url)
        killer = Killer(db, 0.3, 1.0, first=True).start()  # connectorx reads fast
        ids: list[int] = []
        try:
            for batch in source.read(db.query, batch_rows=2000, ordered=True):
                ids += batch.column("id").to_pylist()
                time.sleep(0.01)
        finally:
            killer.stop()
            source.close()
        reconnects = [r for r in caplog.records if "lost the connection" in r.getMessage()]
        print(
            f"\n{engine}/connectorx stream: {killer.kills} connections killed, "
            f"{len(reconnects)} reads reconnected, rows {len(ids)}/{len(set(ids))}"
        )
        assert Counter(ids) == Counter(db.ids())  # every row once, whether a kill met it or not
        if reconnects:
            break
    assert reconnects, "no read lost its connection in 3 reads: the test did not test anything"


@pytest.mark.parametrize(("engine", "readers"), [("mysql", "pymysql"), ("postgres", "psycopg")])
def test_a_read_that_cannot_reconnect_fails_in_one_line_without_traceback(
    engine: str,
    readers: str,
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With reconnecting off, a killed read (pymysql's unbuffered cursor, psycopg's
    server-side cursor) ends in sqlfeed's one-line error naming the lost connection: not
    pymysql's ``AttributeError`` from closing the cursor on the dead connection, and no
    "Exception during reset" or finalizer traceback on stderr."""
    db = server(engine)
    _readers(monkeypatch, engine, readers)
    monkeypatch.setenv("SQLFEED_RECONNECT_TRIES", "0")
    unraisable: list[Any] = []  # what Python prints as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    caplog.set_level(logging.WARNING)
    source = sqlfeed.connect(db.url)

    def read_all() -> None:
        for count, _ in enumerate(source.read(db.query, batch_rows=100, ordered=True)):
            if count == 10:  # mid-read: the server ends the reading connection
                assert db.kill() >= 1

    try:
        with pytest.raises(sqlfeed.EngineError, match="lost the connection") as caught:
            read_all()
    finally:
        source.close()
    gc.collect()  # pymysql's finalizers run here: they must not print either
    assert not unraisable, [u.exc_value for u in unraisable]
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]  # SQLAlchemy's pool
    assert not tracebacks, tracebacks
    assert "\n" not in str(caught.value)
    assert "SQLFEED_RECONNECT_TRIES" in str(caught.value)
    no_traceback(capfd.readouterr().err)


def test_a_lost_consistent_mariadb_read_fails_in_one_line_without_traceback(
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A static Feeder on MariaDB reads in one consistent session by default (one
    connection, :mod:`sqlfeed.io.pinned`): its loss cannot resume, and says so in one
    line, with no traceback (the same cleanup as item 10: cursor and rollback on a dead
    connection)."""
    db = server("mysql")
    _readers(monkeypatch, "mysql", "pymysql")
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    caplog.set_level(logging.WARNING)
    feeder = sqlfeed.Feeder(
        db.query,
        db.url,
        partitions=8,
        strategy="range",
        key="id",
        batch_size=100,
        read_batch_rows=100,
    )

    def read_all() -> None:
        for count, _ in enumerate(feeder):
            if count == 20:  # in the second of 8 partitions: the session's connection ends
                assert db.kill() >= 1

    with pytest.raises(sqlfeed.EngineError, match="lost") as caught:
        read_all()
    gc.collect()
    assert not unraisable, [u.exc_value for u in unraisable]
    assert not [r.getMessage() for r in caplog.records if r.exc_info]
    assert "\n" not in str(caught.value)
    no_traceback(capfd.readouterr().err)


@pytest.mark.parametrize("engine", ["postgres", "mysql"])
def test_a_small_query_survives_a_killed_connection(
    engine: str, server: Callable[..., Server], caplog: pytest.LogCaptureFixture
) -> None:
    """Planning's own queries (counts, bounds, schemas) are reads too: a count whose
    connection is killed while it runs is run again, and its answer is the table's."""
    db = server(engine)
    source = sqlfeed.connect(db.url)
    caplog.set_level(logging.WARNING, logger="sqlfeed.io")
    slow = f"SELECT a.id FROM {db.table} a CROSS JOIN {db.table} b WHERE b.id < 1000"
    killer = Killer(db, 30, 60, first=True).start()  # one kill, of the count running
    try:
        counted = source.count(slow)
    finally:
        killer.stop()
        source.close()
    assert killer.kills >= 1
    assert [r for r in caplog.records if "lost the connection running" in r.getMessage()]
    assert counted == ROWS * 1000


@pytest.mark.parametrize(("engine", "readers"), [("postgres", "copy"), ("mysql", "pymysql")])
def test_a_read_whose_rows_changed_before_it_resumed_fails_rather_than_guess(
    engine: str,
    readers: str,
    server: Callable[..., Server],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resuming drops the rows delivered before the connection was lost; if the re-read
    returns other rows there (rows delivered were deleted meanwhile, outside any
    snapshot), dropping them would lose rows silently: the read fails in one line."""
    db = server(engine)
    _readers(monkeypatch, engine, readers)
    source = sqlfeed.connect(db.url)
    ids: list[int] = []

    def read_all() -> None:
        for batch in source.read(db.query, batch_rows=100, ordered=True):
            ids.extend(batch.column("id").to_pylist())
            if len(ids) == 1000:  # delivered ids 0-999: delete some, then lose the read
                db._run(f"DELETE FROM {db.table} WHERE id < 10")
                assert db.kill(active=False) >= 1
            time.sleep(0.001)

    try:
        with pytest.raises(sqlfeed.EngineError, match="changed") as caught:
            read_all()
    finally:
        source.close()
    assert "\n" not in str(caught.value)
    assert len(ids) == len(set(ids))  # nothing delivered twice before it failed


def _start_worker(
    queue: str, job: str, source: str, logs: Path, name: str, env: dict[str, str], consume: float
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "tests.scripts.fault_worker",
        queue,
        job,
        source,
        str(logs / f"{name}.log"),
        name,
        "--batch-size",
        "100",
        "--consume",
        str(consume),
        "--ack-interval",
        "0.05",
    ]
    err = open(logs / f"{name}.err", "wb")  # noqa: SIM115 (closed when the test ends)
    return subprocess.Popen(argv, cwd=ROOT, stderr=err, env=env)


def _run_job(
    db: Server,
    tmp_path: Path,
    during: Callable[[SQLQueue, str], None],
    epochs: int = 2,
    consume: float = 0.01,
    queue_url: str | None = None,
) -> tuple[list[int], list[str], list[list[list[str]]]]:
    """A job of ``epochs`` over the table on 2 worker processes (a SQLite queue), with
    ``during(queue, job)`` run once both deliver; the workers' exit codes, stderr and
    log lines (split), per worker."""
    plan = sqlfeed.plan(db.query, db.url, partitions=12, strategy="range", key="id")
    queue = SQLQueue(queue_url or f"sqlite:///{tmp_path / 'queue.db'}")
    job = f"cf-{uuid.uuid4().hex[:8]}"
    queue.create_job(JobSpec(job, plan, epochs=epochs, seed=3, lease_ttl=10))
    logs = tmp_path / "logs"
    logs.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if db.name == "mysql":
        env["SQLFEED_MYSQL_READERS"] = "pymysql"  # the reader of item 10 (forked: no connectorx)
    workers = [_start_worker(queue.url, job, db.url, logs, f"w{i}", env, consume) for i in (1, 2)]
    try:
        until = time.monotonic() + 120
        while not all(
            (logs / f"w{i}.log").exists() and "\nD " in (logs / f"w{i}.log").read_text()
            for i in (1, 2)
        ):
            assert time.monotonic() < until, "no worker delivered"
            assert all(w.poll() is None for w in workers), "a worker exited before delivering"
            time.sleep(0.05)
        during(queue, job)
        codes = [w.wait(timeout=max(1.0, until + 120 - time.monotonic())) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        queue.close()
    errors = [(logs / f"w{i}.err").read_text() for i in (1, 2)]
    logged = [
        [line.split() for line in (logs / f"w{i}.log").read_text().splitlines()] for i in (1, 2)
    ]
    return codes, errors, logged


def _epoch_ids(lines: list[list[str]], epochs: int) -> list[Counter[int]]:
    counts: list[Counter[int]] = [Counter() for _ in range(epochs)]
    for line in lines:
        if line and line[0] == "D":
            counts[int(line[2])].update(int(i) for i in line[5:])
    return counts


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("engine", ["postgres", "mysql"])
def test_b_job_workers_survive_killed_connections(
    engine: str, server: Callable[..., Server], tmp_path: Path
) -> None:
    """2 worker processes, 2 epochs, their reading connections killed every 0.3-0.8 s
    until the job is done: both exit 0, every row once per epoch, no traceback."""
    db = server(engine)
    killer = Killer(db, 0.3, 0.8)

    def kill_until_done(queue: SQLQueue, job: str) -> None:
        killer.start()
        until = time.monotonic() + 240
        while not queue.status(job).complete and time.monotonic() < until:
            time.sleep(0.1)
        killer.stop()

    codes, errors, logged = _run_job(db, tmp_path, kill_until_done)
    lines = logged[0] + logged[1]
    delivered = [[float(line[1]) for line in log if line and line[0] == "D"] for log in logged]
    reconnects = sum(err.count("lost the connection") for err in errors)
    print(
        f"\n{engine} job: {killer.kills} connections killed, {reconnects} reads "
        f"reconnected, worker exits {codes}, {_recovery(killer.times, delivered)}"
    )
    assert codes == [0, 0], errors
    table = Counter(db.ids())
    assert all(ids == table for ids in _epoch_ids(lines, 2))  # every row once per epoch
    assert reconnects, "no read lost its connection: the test did not test anything"
    for err in errors:
        no_traceback(err)


def _restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _restart_mariadb() -> None:
    """Stop this machine's MariaDB (SIGTERM: a clean shutdown, waited for) and start it
    again, as its own start command does; back once it takes connections."""
    daemon = ["start-stop-daemon", "--oknodo", "--exec", "/usr/sbin/mariadbd"]
    subprocess.run(
        [*daemon, "--stop", "--retry", "60"], check=True, capture_output=True, timeout=90
    )
    subprocess.run(
        [*daemon, "--start", "--background"], check=True, capture_output=True, timeout=30
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            admin_connection("mysql").close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _restart(engine: str) -> None:
    """Restart the engine's server on this machine: PostgreSQL's cluster, or MariaDB."""
    if engine == "postgres":
        _restart_postgres()
    else:
        _restart_mariadb()


@pytest.mark.skipif(
    not RESTART, reason="restarts the shared database server: set SQLFEED_TEST_RESTART_SERVER=1"
)
@pytest.mark.parametrize(
    ("engine", "queue"),
    [("postgres", "sqlite"), ("postgres", "postgres"), ("mysql", "sqlite"), ("mysql", "mysql")],
)
def test_c_a_server_restart_mid_job_and_mid_feed_is_survived(
    engine: str,
    queue: str,
    server: Callable[..., Server],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The server restarted twice while 2 workers run a job (its lease queue in SQLite, or
    on the same server), and once while a static Feeder (no snapshot: a snapshot does not
    survive its server) reads."""
    db = server(engine)
    base = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    queue_url = {
        "postgres": f"{base}?options=-csearch_path%3D{db.tag}",
        "mysql": db.url,  # the queue's tables beside the table read, on the same server
    }.get(queue)
    restarts: list[tuple[float, float]] = []

    def restart_twice(queue: SQLQueue, job: str) -> None:
        for _ in range(2):
            started = time.time()
            _restart(engine)
            restarts.append((started, time.time()))
            time.sleep(3)

    codes, errors, logged = _run_job(db, tmp_path, restart_twice, consume=0.06, queue_url=queue_url)
    lines = logged[0] + logged[1]
    delivered = sorted(float(line[1]) for line in lines if line and line[0] == "D")
    back = [
        min(t for t in delivered if t > end) - start
        for start, end in restarts
        if delivered[-1] > end
    ]
    took = ", ".join(f"{end - start:.1f}s" for start, end in restarts)
    _report(
        capfd,
        f"{engine} job ({queue} queue), {len(restarts)} restarts (each {took}): "
        f"worker exits {codes}, first delivery "
        f"{', '.join(f'{s:.1f}s' for s in back)} after each began",
    )
    assert codes == [0, 0], errors
    assert len(back) == len(restarts), "the job ended before a restart: it tested nothing"
    table = Counter(db.ids())
    assert all(ids == table for ids in _epoch_ids(lines, 2))
    for err in errors:
        no_traceback(err)

    if queue == "sqlite":  # the static feeds once per engine
        _static_feeds_through_a_restart(engine, db, table, capfd)


def _static_feeds_through_a_restart(
    engine: str, db: Server, table: Counter[int], capfd: pytest.CaptureFixture[str]
) -> None:
    feeder = sqlfeed.Feeder(
        db.query,
        db.url,
        partitions=8,
        strategy="range",
        key="id",
        readers=2,
        batch_size=250,
        read_batch_rows=250,
        snapshot=False,
    )
    ids: list[int] = []
    started = ended = 0.0
    times: list[float] = []
    for batch in feeder:
        ids += batch.column("id").to_pylist()
        times.append(time.time())
        if len(ids) == 2500:
            started = time.time()
            _restart(engine)
            ended = time.time()
        time.sleep(0.02)
    _report(
        capfd,
        f"{engine} static feed, 1 restart ({ended - started:.1f}s): rows {len(ids)}/{ROWS}, "
        f"first batch {min(t for t in times if t > ended) - started:.1f}s after it began",
    )
    assert Counter(ids) == table
    no_traceback(capfd.readouterr().err)

    # In one snapshot (the default): a restart ends the snapshot's session (PostgreSQL's
    # exported one, MariaDB's consistent read), so the read cannot resume; it says so in
    # one line, and closing the snapshot adds nothing.
    snapped = sqlfeed.Feeder(
        db.query,
        db.url,
        partitions=8,
        strategy="range",
        key="id",
        readers=2,
        batch_size=250,
        read_batch_rows=250,
    )

    def read_through_a_restart() -> None:
        for count, _ in enumerate(snapped):
            if count == 10:
                _restart(engine)

    with pytest.raises(sqlfeed.EngineError, match=r"snapshot|consistent read") as caught:
        read_through_a_restart()
    assert "\n" not in str(caught.value)
    _report(capfd, f"{engine} static feed in one snapshot, 1 restart: {caught.value}")
    no_traceback(capfd.readouterr().err)


@pytest.mark.parametrize(
    "message",
    [
        "terminating connection due to administrator command",
        "consuming input failed: server closed the connection unexpectedly",
        "(2013, 'Lost connection to MySQL server during query')",
        "(1927, 'Connection was killed')",
        "connection failed: Connection refused",
        "Source(MySQLError(CodecError { IO error: `bytes remaining on stream' }))",
    ],
)
def test_lost_connections_are_told_from_other_errors(message: str) -> None:
    """The one classification: a lost connection by its words, sqlfeed's own errors and
    a query's errors never (an unrelated word like "connection" in a table name)."""
    assert connection_lost(RuntimeError(message))
    wrapped = sqlfeed.EngineError(f"postgres failed running the partition query: {message}")
    assert connection_lost(wrapped)
    assert not connection_lost(sqlfeed.InvalidArgumentError(message))
    assert not connection_lost(RuntimeError('relation "connection_log" does not exist'))
    assert not connection_lost(RuntimeError("canceling statement due to statement timeout"))
