"""The lakehouse test tables, written once per test process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.helpers.remote_engines import url_engine
from tests.lake.tables import LakeTable, build_lake_tables, insert_ids


@pytest.fixture(scope="session")
def lake_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LakeTable]:
    """Name -> :class:`~tests.lake.tables.LakeTable`: every Iceberg and Delta test table
    (``iceberg_plain``, ``iceberg_partitioned``, ``iceberg_evolved``, ``iceberg_pos_deletes``,
    ``iceberg_eq_deletes``, ``iceberg_mixed``, ``delta_plain``, ``delta_partitioned``,
    ``delta_deleted``, ``delta_evolved``), each with its snapshots and the oracle's rows."""
    return build_lake_tables(tmp_path_factory.mktemp("lake"))


@pytest.fixture(params=["postgres", "mysql"])
def growing(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, sa.Engine]]:
    """A fresh table ``(id, v)`` of ids 0..499 on the server, its URL (dropped afterwards)."""
    _engine, url = url_engine(request.param)
    table = f"wm_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v INTEGER)")
    insert_ids(engine, table, range(0, 500))
    yield url, table, engine
    with engine.begin() as c:
        c.exec_driver_sql(f"DROP TABLE {table}")
    engine.dispose()
