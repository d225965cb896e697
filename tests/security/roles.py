"""Database users of the security tests: made on the test servers, dropped after.

Users are global to a server: each gets a unique name, and the schema (PostgreSQL) or
database (MariaDB) it may read is the engine harness's own (see ``tests.helpers.engines``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlparse

from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine


def unique_user() -> str:
    """A user name no other test run uses."""
    return f"sqlfeed_u_{uuid.uuid4().hex[:10]}"


def user_url(engine: Engine, user: str, password: str) -> str:
    """The sqlfeed URL of ``engine``'s test database as ``user`` (password percent-encoded)."""
    if engine.name == "postgres":
        server = urlparse(POSTGRES_URL)
        host = f"{server.hostname or '127.0.0.1'}:{server.port or 5432}"
        return f"postgresql+psycopg://{user}:{quote(password, safe='')}@{host}{server.path}"
    server = urlparse(MYSQL_URL)
    host = f"{server.hostname or '127.0.0.1'}:{server.port or 3306}"
    return f"mysql+pymysql://{user}:{quote(password, safe='')}@{host}/{engine.schema}"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


@contextmanager
def database_user(engine: Engine, password: str, *, writes: bool = False) -> Iterator[str]:
    """A user of ``engine``'s test schema with ``password``; its URL. Dropped on exit.

    Without ``writes``, a SELECT-only user: PostgreSQL: LOGIN, USAGE on the schema and
    SELECT on its tables, nothing else (temporary tables stay allowed, as for every role by
    default; sqlfeed's reads make none); MariaDB: SELECT on the test database. With
    ``writes``: every privilege on the schema (or database) too.
    """
    user = unique_user()
    if engine.name == "postgres":
        engine.execute(f"CREATE ROLE {user} LOGIN PASSWORD {_literal(password)}")
        what = "ALL" if writes else "USAGE"
        engine.execute(f"GRANT {what} ON SCHEMA {engine.schema} TO {user}")
        what = "ALL" if writes else "SELECT"
        engine.execute(f"GRANT {what} ON ALL TABLES IN SCHEMA {engine.schema} TO {user}")
        engine.execute(f"ALTER ROLE {user} SET search_path TO {engine.schema}")
    else:
        engine.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY {_literal(password)}")
        what = "ALL" if writes else "SELECT"
        engine.execute(f"GRANT {what} ON {engine.schema}.* TO '{user}'@'%'")
    try:
        yield user_url(engine, user, password)
    finally:
        if engine.name == "postgres":
            engine.execute(f"REASSIGN OWNED BY {user} TO CURRENT_USER")
            engine.execute(f"DROP OWNED BY {user}")
            engine.execute(f"DROP ROLE IF EXISTS {user}")
        else:
            engine.execute(f"DROP USER IF EXISTS '{user}'@'%'")
