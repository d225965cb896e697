"""``sqlfeed worker --start-wait``: a worker started before its database server waits for it.

A scheduler often starts the database and the workers together. A worker whose server
refuses connections at start tries again, with a growing pause and one line per try, for
``--start-wait`` seconds (default 120), then reads the job as usual; a server that never
comes gives one clean line after that time. Real PostgreSQL behind a port that is closed at
first and then forwards to it (tests/helpers/proxy.py).
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import POSTGRES_URL
from tests.helpers.proxy import SilentProxy

pytestmark = pytest.mark.engine


def _closed_port() -> int:
    """A port nothing listens on (the system's pick, given back)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return int(listener.getsockname()[1])


def _through(port: int) -> str:
    url = urlparse(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    netloc = f"{url.username or 'postgres'}@127.0.0.1:{port}"
    return url._replace(netloc=netloc).geturl()


def test_a_worker_started_before_its_database_waits_and_reads_the_job(tmp_path: Path) -> None:
    if urlparse(POSTGRES_URL).port not in (None, 5432):
        pytest.skip("the proxy forwards to PostgreSQL's default port")
    engine = get_engine("postgres")
    sql = f"SELECT id, k FROM {engine.qualify('keyed')}"
    [(rows,)] = engine.rows(f"SELECT COUNT(*) FROM {engine.qualify('keyed')}")
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    made = run_cli(["job", "create", "--queue", queue, "--job", "j", "--db", POSTGRES_URL, sql])
    assert made.code == 0, made.err
    port = _closed_port()
    proxies: list[SilentProxy] = []
    opener = threading.Timer(3.0, lambda: proxies.append(SilentProxy("127.0.0.1", 5432, port)))
    opener.start()
    try:
        run = run_cli(
            [
                *("worker", "--queue", queue, "--job", "j", "--db", _through(port)),
                *("--out", str(tmp_path / "out"), "--format", "json"),
            ]
        )
    finally:
        opener.join()
        for proxy in proxies:
            proxy.close()
    assert run.code == 0, run.err
    waits = [line for line in run.err.splitlines() if "waiting for the database server" in line]
    assert waits, run.err
    assert all(line.startswith("sqlfeed: ") and "--start-wait" in line for line in waits), waits
    assert "Traceback" not in run.err
    assert f'"rows": {rows}' in run.out, run.out


def test_a_server_that_never_answers_is_given_up_after_start_wait(tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    made = run_cli(
        ["job", "create", "--queue", queue, "--job", "j", "--db", "duckdb://", "SELECT 1 AS a"]
    )
    assert made.code == 0, made.err
    run = run_cli(
        [
            *("worker", "--queue", queue, "--job", "j"),
            *("--db", _through(_closed_port()), "--start-wait", "2"),
        ]
    )
    assert run.code == 1, run.err
    last = run.err.strip().splitlines()[-1]
    assert last.startswith("sqlfeed: engine error: the database server at postgresql+psycopg://")
    assert "did not answer within --start-wait 2 s" in last, last
    assert "Traceback" not in run.err
    tries = int(re.search(r"\((\d+) tries\)", last).group(1))  # type: ignore[union-attr]
    waits = [line for line in run.err.splitlines() if "waiting for the database server" in line]
    assert tries >= 2, run.err  # tried again before giving up
    assert len(waits) == tries - 1, run.err


@pytest.mark.parametrize("wait", ["-1", "nan", "inf"])
def test_start_wait_must_be_seconds(wait: str, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    run = run_cli(
        ["worker", "--queue", queue, "--job", "j", "--db", "duckdb://", "--start-wait", wait]
    )
    assert run.code == 2, run.err
    assert f"--start-wait must be a number of seconds >= 0, got {float(wait)}" in run.err
