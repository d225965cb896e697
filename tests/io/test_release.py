"""A pooled connection given back after a server ended it: invalidated quietly.

The server may end a connection (``pg_terminate_backend``, ``KILL CONNECTION``) after its
last statement and before it goes back to the pool. SQLAlchemy's pool then rolls it back,
the rollback fails, and the pool logs "Exception during reset or similar" with a
traceback at ERROR: a user (and CI) saw that traceback from a predict run that had
recovered. :func:`sqlfeed.io.sqlalchemy.release` rolls back itself and invalidates a
connection whose rollback fails, so nothing is logged and the pool hands out a live one.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from sqlfeed.dialects import get_dialect
from sqlfeed.io.sqlalchemy import create_engine, release
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL
from tests.helpers.killer import admin_connection

pytestmark = pytest.mark.engine


def _url(engine: str, tag: str) -> str:
    if engine == "postgres":
        base = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        return f"{base}?application_name={tag}"
    return MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1)


def _session_id(engine: str, cursor: object) -> int:
    cursor.execute("SELECT pg_backend_pid()" if engine == "postgres" else "SELECT CONNECTION_ID()")  # type: ignore[attr-defined]
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize("engine", ["postgres", "mysql"])
@pytest.mark.parametrize("state", ["failed statement", "open transaction"])
def test_a_connection_ended_before_it_is_given_back_is_invalidated_quietly(
    engine: str, state: str, caplog: pytest.LogCaptureFixture
) -> None:
    get_engine(engine)  # skips (or, under CI=true, fails) when the server is down
    tag = f"sqlfeed_rel_{uuid.uuid4().hex[:8]}"
    pool = create_engine(_url(engine, tag), get_dialect(engine))
    admin = admin_connection(engine)
    try:
        connection = pool.raw_connection()
        cursor = connection.cursor()
        pid = _session_id(engine, cursor)
        failed: BaseException | None = None
        if state == "failed statement":  # PostgreSQL: the transaction is now aborted
            try:
                cursor.execute(f"SELECT * FROM {tag}_missing")
            except Exception as err:
                failed = err
        cursor.close()
        with admin.cursor() as kill:
            if engine == "postgres":
                kill.execute(f"SELECT pg_terminate_backend({pid})")
            else:
                kill.execute(f"KILL CONNECTION {pid}")
        with caplog.at_level(logging.DEBUG, logger="sqlalchemy.pool"):
            release(connection, failed)
        logged = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
        assert not logged, [r.getMessage() for r in logged]
        again = pool.raw_connection()  # the pool gives a live connection, not the dead one
        try:
            check = again.cursor()
            assert _session_id(engine, check) != pid
            check.close()
        finally:
            release(again)
    finally:
        pool.dispose()
        admin.close()
