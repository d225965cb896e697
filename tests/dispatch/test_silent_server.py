"""A MariaDB queue whose server goes silent (no reset, no close: a frozen host, a network
gone) never hangs a worker: the driver's socket timeouts (``QueueBounds.socket_s``) make
the wait a lost connection, the call is tried again and, while the silence lasts, fails
as busy; once the server answers again, the queue works on.

pymysql waits for ever by default: before the timeouts, the call below never returned.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

import sqlfeed
from sqlfeed.dispatch import sessions
from sqlfeed.dispatch.queue import JobSpec, QueueBusyError
from sqlfeed.dispatch.sqlqueue import SQLQueue
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL
from tests.helpers.proxy import SilentProxy

SOCKET_S = 2


@pytest.mark.engine
def test_a_silent_mysql_queue_server_fails_the_call_instead_of_hanging_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = get_engine("mysql").schema
    url = urlparse(MYSQL_URL)
    monkeypatch.setattr(sessions, "BOUNDS", dataclasses.replace(sessions.BOUNDS, socket_s=SOCKET_S))
    data = tmp_path / "data.db"
    import sqlite3

    with sqlite3.connect(data) as connection:
        connection.execute("CREATE TABLE t (id INTEGER)")
        connection.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    plan = sqlfeed.plan("SELECT id FROM t", f"sqlite:///{data}", partitions=4, strategy="hash")
    with SilentProxy(url.hostname or "127.0.0.1", url.port or 3306) as proxy:
        user = f"{url.username or 'root'}:{url.password or ''}@"
        queue = SQLQueue(f"mysql+pymysql://{user}127.0.0.1:{proxy.port}/{schema}")
        try:
            job = f"silent-{uuid.uuid4().hex[:8]}"
            queue.create_job(JobSpec(job, plan, lease_ttl=5))
            proxy.silence()
            outcome: list[object] = []

            def call() -> None:
                try:
                    outcome.append(queue.acquire(job, "w1"))
                except BaseException as err:  # what the test asserts
                    outcome.append(err)

            started = time.monotonic()
            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            caller.join(timeout=60)
            took = time.monotonic() - started
            assert not caller.is_alive(), "the queue call hung on a silent server"
            assert isinstance(outcome[0], QueueBusyError), outcome
            assert took < sessions.MIN_TRIES * (SOCKET_S + 10) + 10, took
            proxy.speak()
            lease = queue.acquire(job, "w1")  # the server answers again: the queue works on
            assert lease is not None
        finally:
            proxy.speak()
            queue.close()
