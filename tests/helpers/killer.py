"""Ending a test's own database connections from outside, as a server or an administrator
does (PostgreSQL ``pg_terminate_backend``, MariaDB ``KILL CONNECTION``), again and again
from a thread: the connections sqlfeed opened with a URL that marks them (PostgreSQL's
``application_name``, MariaDB's default database), never anyone else's.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlparse

from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

__all__ = ["Killer", "admin_connection", "kill_sessions", "no_traceback"]


def admin_connection(engine: str) -> Any:
    """The test's own connection (autocommit) to ``engine``'s server, by its own driver."""
    if engine == "postgres":
        import psycopg

        return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    import pymysql

    url = urlparse(MYSQL_URL)
    return pymysql.connect(
        host=url.hostname or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        autocommit=True,
        connect_timeout=5,
    )


def kill_sessions(
    run: Callable[[str], list[tuple[Any, ...]]], engine: str, tag: str, active: bool = False
) -> int:
    """End the connections marked ``tag``; how many were ended.

    PostgreSQL: those whose ``application_name`` is ``tag`` (a snapshot's exporter aside: a
    read cannot outlive it); MariaDB: those whose default database is ``tag`` (the killer's
    own aside). ``active``: only those running a statement. ``run`` runs SQL on the
    killer's connection.
    """
    if engine == "postgres":
        running = " AND state = 'active'" if active else ""
        rows = run(
            "SELECT pid FROM pg_stat_activity WHERE application_name = "
            f"'{tag}' AND query NOT ILIKE '%pg_export_snapshot%'{running}"
        )
        done = [run(f"SELECT pg_terminate_backend({pid})") for (pid,) in rows]
        return sum(1 for answer in done if answer and answer[0][0])
    running = " AND command IN ('Query', 'Execute')" if active else ""
    rows = run(
        "SELECT id FROM information_schema.processlist WHERE db = "
        f"'{tag}' AND id <> CONNECTION_ID(){running}"
    )
    killed = 0
    for (pid,) in rows:
        with contextlib.suppress(Exception):  # it ended meanwhile
            run(f"KILL CONNECTION {pid}")
            killed += 1
    return killed


class _Kills(Protocol):
    def kill(self, active: bool = False) -> int:
        """End the marked connections (only those running a statement: ``active``)."""


class Killer:
    """Calls ``target.kill()`` every ``low``-``high`` seconds, in a thread, and records when.

    ``first``: kill the first statement as soon as it runs (``kill(active=True)``), for
    work that may be over in a fraction of a second.
    """

    def __init__(
        self, target: _Kills, low: float, high: float, seed: int = 5, first: bool = False
    ) -> None:
        self.target = target
        self._first = first
        self.times: list[float] = []
        self.kills = 0
        self._rng = random.Random(seed)
        self._range = (low, high)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="killer")

    def start(self) -> Killer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while self._first and not self._stop.wait(0.005):
            ended = self.target.kill(active=True)
            if ended:
                self.kills += ended
                self.times.append(time.time())
                break
        while not self._stop.wait(self._rng.uniform(*self._range)):
            ended = self.target.kill()
            if ended:
                self.kills += ended
                self.times.append(time.time())

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def __enter__(self) -> Killer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def no_traceback(err: str, readers: str = "") -> None:
    """Assert that ``err`` (a process's stderr) holds no traceback of any kind."""
    assert "Traceback" not in err, err[-3000:]
    assert "Exception ignored" not in err, err[-3000:]
    assert "Exception during reset" not in err, err[-3000:]
    if readers != "connectorx":  # Rust prints connectorx's panics itself (documented)
        assert "panicked" not in err, err[-3000:]
