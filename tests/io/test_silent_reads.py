"""A MariaDB read whose session the server ended without the client hearing it (a killed
connection whose close was lost: a loaded host, a broken path) ends instead of hanging.

pymysql waits for its server's bytes for ever: such a read hung its worker for good, its
lease kept alive by heartbeats (issue 38). The silence guard (:mod:`sqlfeed.io.silence`)
probes a read silent for ``SQLFEED_SILENCE_PROBE_SECONDS`` from a connection of its own;
the server no longer has the session, so its socket is shut, the read fails as a lost
connection, and reconnects and resumes: every row once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

import sqlfeed
from sqlfeed.io import silence
from tests.helpers.engines import MYSQL_URL
from tests.helpers.proxy import SilentProxy
from tests.io.test_connection_faults import Server

pytestmark = pytest.mark.engine

WAIT = 60
"""Seconds the test gives the read (it hung for ever without the guard)."""


@pytest.fixture
def mariadb() -> Iterator[Server]:
    db = Server("mysql", rows=24_000, pad=400)
    yield db
    db.drop()


@pytest.fixture
def proxy() -> Iterator[SilentProxy]:
    url = urlparse(MYSQL_URL)
    with SilentProxy(url.hostname or "127.0.0.1", url.port or 3306) as opened:
        yield opened


def _through(proxy: SilentProxy, db: Server) -> str:
    user = urlparse(MYSQL_URL).username or "root"
    password = urlparse(MYSQL_URL).password
    login = f"{user}:{password}@" if password else f"{user}@"
    return f"mysql+pymysql://{login}127.0.0.1:{proxy.port}/{db.tag}"


def _read(url: str, db: Server, after: int, fault: object) -> tuple[list[int], list[BaseException]]:
    """Read ``db``'s table in a thread, calling ``fault()`` once ``after`` rows came."""
    ids: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        source = sqlfeed.connect(url)
        try:
            for batch in source.read(db.query, batch_rows=250, ordered=True):
                ids.extend(batch.column("id").to_pylist())
                if len(ids) == after:
                    fault()  # type: ignore[operator]
        except BaseException as err:  # what the test asserts
            errors.append(err)
        finally:
            source.close()

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(timeout=WAIT)
    assert not reader.is_alive(), f"the read still waits after {WAIT}s: it hangs"
    return ids, errors


def test_a_read_whose_ended_session_went_unheard_reconnects_and_resumes(
    mariadb: Server,
    proxy: SilentProxy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(silence.PROBE_VARIABLE, "1")
    monkeypatch.setenv("SQLFEED_MYSQL_READERS", "pymysql")  # connectorx reads at once
    caplog.set_level(logging.WARNING, logger="sqlfeed.io")
    shut = silence.GUARD.shut

    def kill_unheard() -> None:
        proxy.freeze_connections()  # nothing more of this session reaches the client
        assert mariadb.kill() >= 1  # the server ends it; its close is lost too

    started = time.monotonic()
    ids, errors = _read(_through(proxy, mariadb), mariadb, 500, kill_unheard)
    assert not errors, errors
    assert Counter(ids) == Counter(mariadb.ids())  # every row once: resumed, not restarted
    assert silence.GUARD.shut > shut
    said = [r.getMessage() for r in caplog.records]
    assert any("the server no longer has the session" in m for m in said), said
    assert any("lost the connection" in m for m in said), said
    assert time.monotonic() - started < WAIT


def test_a_long_silent_query_the_server_is_still_running_is_left_alone(
    mariadb: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Silence alone is not death: a query that sends nothing for several probe periods
    (here ``SLEEP``) is probed, found alive, and answers."""
    monkeypatch.setenv(silence.PROBE_VARIABLE, "0.5")
    monkeypatch.setenv("SQLFEED_MYSQL_READERS", "pymysql")
    shut = silence.GUARD.shut
    with sqlfeed.connect(mariadb.url) as source:
        assert source.scalar("SELECT SLEEP(3) + 7") == 7
    assert silence.GUARD.shut == shut
