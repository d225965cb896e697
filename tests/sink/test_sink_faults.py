"""The table sink while its output connections are killed (issue #36 item 10), and what it
refuses or names on the way (item 23).

The output's connections are told apart from the input's: on PostgreSQL by the output
URL's ``application_name``, on MariaDB by a database of their own. A killer thread ends
them every 1-3 s (pg_terminate_backend, KILL CONNECTION) while a 4-process ``predict`` job
runs, and while a single-process ``predict``, an ``export --into`` and a ``write_table``
run: no worker exits, no traceback, every row exactly once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.errors import InvalidArgumentError
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL
from tests.helpers.killer import Killer, admin_connection, kill_sessions, no_traceback
from tests.sink.test_predict_chaos import (
    MY,
    PG,
    ROOT,
    SELECT,
    _begun,
    _complete,
    _make_input,
    _train,
)

pytestmark = [pytest.mark.slow, pytest.mark.engine]

ROWS = 40_000
ENGINES = ["postgres", "mariadb"]


class Output:
    """An output place whose connections can be killed: a PostgreSQL URL with an
    ``application_name`` of its own, or a MariaDB database of its own."""

    def __init__(self, engine: str) -> None:
        self.engine = "postgres" if engine == "postgres" else "mysql"
        self.tag = f"sqlfeed_sk_{uuid.uuid4().hex[:10]}"
        try:
            self.admin = admin_connection(self.engine)
        except Exception as err:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"{engine} unreachable: {err}")
        if self.engine == "postgres":
            self.plain = PG
            self.url = f"{PG}?application_name={self.tag}"
        else:
            self.plain = MY
            self._run(f"CREATE DATABASE {self.tag}")
            netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
            self.url = f"mysql+pymysql://{netloc}/{self.tag}"
        self.tables: list[str] = []

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        cursor = self.admin.cursor()
        try:
            cursor.execute(sql)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def kill(self, active: bool = False) -> int:
        """End the output's connections; how many."""
        return kill_sessions(self._run, self.engine, self.tag, active)

    def table(self, base: str) -> str:
        """A new table name of this test, dropped after it."""
        table = f"{base}_{uuid.uuid4().hex[:8]}"
        self.tables.append(table)
        return table

    def name(self, table: str) -> str:
        """``table`` of the output as the plain URL's queries name it."""
        return table if self.engine == "postgres" else f"{self.tag}.{table}"

    def leftovers(self) -> list[str]:
        """MariaDB: the tables of the output database besides ``tables`` (staging, commits)."""
        found = self._run(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{self.tag}'"
        )
        return sorted(str(r[0]) for r in found if r[0] not in self.tables)

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            if self.engine == "mysql":
                self._run(f"DROP DATABASE IF EXISTS {self.tag}")
            for table in self.tables:
                self._run(f"DROP TABLE IF EXISTS {table}")
        with contextlib.suppress(Exception):
            self.admin.close()


@pytest.fixture
def output(request: pytest.FixtureRequest) -> Iterator[Output]:
    place = Output(request.param)
    yield place
    place.drop()


@pytest.fixture
def inputs() -> Iterator[dict[str, Any]]:
    """``make(url)``: an input table of ``ROWS`` rows on ``url``'s server, dropped after."""
    made: list[tuple[Any, str]] = []

    def make(url: str, rows: int = ROWS) -> str:
        source = sqlfeed.connect(url)
        table = f"sk_in_{uuid.uuid4().hex[:8]}"
        made.append((source, table))
        _make_input(source, url, table, rows)
        return table

    yield {"make": make}
    for source, table in made:
        with contextlib.suppress(Exception):
            source.execute(f"DROP TABLE IF EXISTS {table}")
        source.close()


def _exactly_once(url: str, inp: str, out: str, rows: int) -> None:
    """COUNT = COUNT DISTINCT = the input's, and EXCEPT both ways empty."""
    with sqlfeed.connect(url) as source:
        assert tuple(source.rows(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {out}")[0]) == (
            rows,
            rows,
        )
        assert source.rows(f"SELECT id FROM {inp} EXCEPT SELECT id FROM {out}") == []
        assert source.rows(f"SELECT id FROM {out} EXCEPT SELECT id FROM {inp}") == []


def _lost(text: str) -> int:
    return text.count("lost the connection")


def _job_worker(command: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "sqlfeed", command, *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("output", ENGINES, indirect=True)
@pytest.mark.parametrize("command", ["predict", "export"])
def test_a_job_survives_killed_output_connections(
    output: Output, command: str, inputs: dict[str, Any], tmp_path: Path
) -> None:
    """4 worker processes of a ``predict`` (``export --into``) job; the output's
    connections killed every 1-3 s until the job is done: every worker exits 0, no
    traceback, every row once. A job done before a kill met a sink's connection (an
    export can be that quick, and a loaded machine may starve the killer's thread) is run
    again, at most twice more: one run must reconnect."""
    inp = inputs["make"](output.plain)
    model = str(_train(output.plain, inp, tmp_path / "model")) if command == "predict" else None
    reconnected = 0
    for attempt in range(3):
        reconnected = _killed_job(output, command, inp, model, tmp_path / f"run{attempt}")
        if reconnected:
            break
    assert reconnected > 0, "no kill met a sink in 3 runs: the test tested nothing"


def _killed_job(output: Output, command: str, inp: str, model: str | None, folder: Path) -> int:
    """One job under kills, checked; how many times its sinks reconnected."""
    folder.mkdir()
    queue, job = f"sqlite:///{folder / 'queue.db'}", "k"
    out = output.table(f"out_{folder.name}")
    args = ["--db", output.plain, "--into-db", output.url, "--into", out, "--key", "id"]
    args += ["--queue", queue, "--job", job, "--partitions", "24", "--format", "json"]
    if model is not None:
        args += ["--model", model, "--batch-size", "1000"]
    logs = [folder / f"w{i}.log" for i in range(4)]
    workers = [_job_worker(command, [*args, SELECT.format(table=inp)], log) for log in logs]
    killer = Killer(output, 1.0, 3.0, first=True)  # the first kill at once: a job may be quick
    try:
        until = time.monotonic() + 120
        while not _begun(queue, job):
            assert time.monotonic() < until, "the job did not begin"
            assert all(w.poll() is None for w in workers), [log.read_text() for log in logs]
            time.sleep(0.1)
        killer.start()
        codes = [w.wait(timeout=400) for w in workers]
    finally:
        killer.stop()
        for w in workers:
            if w.poll() is None:
                w.kill()
    errors = [log.read_text() for log in logs]
    assert codes == [0, 0, 0, 0], errors
    assert _complete(queue, job)
    for err in errors:
        no_traceback(err)
    _exactly_once(output.plain, inp, output.name(out), ROWS)
    if output.engine == "mysql":
        assert output.leftovers() == []
    return sum(_lost(err) for err in errors)


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("output", ENGINES, indirect=True)
def test_single_process_writes_survive_killed_output_connections(
    output: Output,
    inputs: dict[str, Any],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A single-process ``predict`` (its threads on an in-memory queue), an ``export
    --into`` and a ``write_table``, each while the output's connections are killed: each
    completes, no traceback, every row once. A run that ended before a kill met its
    connection is made again (at most twice more): one of them must reconnect."""
    rows = ROWS // 2
    inp = inputs["make"](output.plain, rows)
    model = str(_train(output.plain, inp, tmp_path / "model"))
    sql = SELECT.format(table=inp)
    common = ["--db", output.plain, "--into-db", output.url]
    runs = {
        "pred": ["predict", *common, "--model", model, "--key", "id", "--batch-size", "500"],
        "copy": ["export", *common, "--partitions", "40"],  # rows by their identity
    }
    caplog.set_level(logging.WARNING, logger="sqlfeed.io")
    for base, argv in runs.items():
        for _ in range(3):
            caplog.clear()
            into = output.table(base)
            with Killer(output, 0.3, 1.0, first=True) as killer:
                run = run_cli([*argv, "--into", into, "--format", "json", sql])
            assert run.code == 0, run.err
            no_traceback(run.err)
            assert killer.kills > 0
            assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
            _exactly_once(output.plain, inp, output.name(into), rows)
            if _reconnected(caplog):
                break
        assert _reconnected(caplog), f"{base}: no reconnection in 3 runs: the test tested nothing"

    with sqlfeed.connect(output.plain) as source:
        table = source.arrow(f"SELECT id, x1, x2 FROM {inp}")

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in table.to_batches(max_chunksize=250):
            time.sleep(0.01)  # a program producing its batches
            yield batch

    for _ in range(3):
        caplog.clear()
        wrote = output.table("wrote")
        with Killer(output, 0.3, 1.0, first=True) as killer:
            report = sqlfeed.write_table(batches(), output.url, wrote, key=["id"])
        assert report.rows == rows
        assert killer.kills > 0
        no_traceback(capfd.readouterr().err)
        _exactly_once(output.plain, inp, output.name(wrote), rows)
        if _reconnected(caplog):
            break
    assert _reconnected(caplog), "write_table: no reconnection in 3 runs: tested nothing"
    if output.engine == "mysql":
        assert output.leftovers() == []


def _reconnected(caplog: pytest.LogCaptureFixture) -> bool:
    return any("lost the connection" in r.getMessage() for r in caplog.records)


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("output", ENGINES, indirect=True)
def test_a_run_that_cannot_reconnect_fails_in_one_line(
    output: Output, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Reconnecting turned off: a killed write_table fails with sqlfeed's one line naming
    the lost connection and the variable that allows more, no traceback."""
    monkeypatch.setenv("SQLFEED_RECONNECT_TRIES", "0")
    batch = pa.record_batch({"id": pa.array(range(100), pa.int64())})

    def batches() -> Iterator[pa.RecordBatch]:
        yield batch
        assert output.kill() >= 1  # the sink's connections, between two batches
        yield pa.record_batch({"id": pa.array(range(100, 200), pa.int64())})

    with pytest.raises(sqlfeed.EngineError, match="lost the connection") as caught:
        sqlfeed.write_table(batches(), output.url, output.table("gone"))
    assert "\n" not in str(caught.value)
    assert "SQLFEED_RECONNECT_TRIES" in str(caught.value)
    no_traceback(capfd.readouterr().err)


# -- values an engine cannot hold (item 23) ----------------------------------------------


@pytest.mark.parametrize("output", ["mariadb"], indirect=True)
@pytest.mark.parametrize(
    ("value", "label"), [(float("nan"), "NaN"), (float("inf"), "infinite")], ids=["nan", "inf"]
)
def test_values_mariadb_cannot_hold_are_refused_before_writing(
    output: Output, value: float, label: str
) -> None:
    """NaN and the infinities: refused naming the column and the rows, before anything is
    made for a first batch, before its transaction for a later one (nothing left)."""
    good = pa.record_batch({"id": [1, 2, 3], "score": [0.5, 1.5, 2.5]})
    bad = pa.record_batch({"id": [4, 5, 6], "score": [value, 1.0, value]})
    for batches in ([bad, good], [good, bad]):
        with pytest.raises(InvalidArgumentError) as caught:
            sqlfeed.write_table(batches, output.url, output.table("floats"))
        message = str(caught.value)
        assert "column 'score' holds" in message, message
        assert f"{label} values in 2 of 3 rows" in message, message
        assert "\n" not in message
        assert output.leftovers() == []  # no staging or commits table made, or left


def test_nan_sqlite_would_store_as_null_is_refused(tmp_path: Path) -> None:
    """SQLite stores a bound NaN as NULL, silently: refused like MariaDB's (infinities kept)."""
    url = f"sqlite:///{tmp_path / 'out.db'}"
    inf = pa.record_batch({"id": [1, 2], "score": [float("inf"), float("-inf")]})
    assert sqlfeed.write_table(inf, url, "kept").rows == 2
    nan = pa.record_batch({"id": [1, 2], "score": [float("nan"), 1.0]})
    with pytest.raises(InvalidArgumentError, match="column 'score' holds NaN values in 1 of 2"):
        sqlfeed.write_table(nan, url, "refused")


@pytest.mark.parametrize("output", ["mariadb"], indirect=True)
def test_an_export_of_values_mariadb_cannot_hold_fails_in_one_line(
    output: Output, tmp_path: Path
) -> None:
    """The job path (``export --into``): its one line names the column, exit 2, and the
    run leaves nothing behind."""
    path = tmp_path / "in.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE t AS SELECT i AS id, CASE WHEN i % 4 = 0 THEN 'NaN'::DOUBLE "
        "ELSE i / 3 END AS score FROM range(100) r(i)"
    )
    con.close()
    run = run_cli(
        [
            "export",
            "--db",
            f"duckdb:///{path}",
            "--into-db",
            output.url,
            "--into",
            "t",
            "SELECT id, score FROM t",
        ]
    )
    assert run.code == 2, run.err
    assert "column 'score' holds NaN values" in run.err, run.err
    assert len(run.err.strip().splitlines()) == 1, run.err
    assert output.leftovers() == []
