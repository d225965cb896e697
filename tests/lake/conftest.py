"""The lakehouse test tables, written once per test process."""

from __future__ import annotations

import pytest

from tests.lake.tables import LakeTable, build_lake_tables


@pytest.fixture(scope="session")
def lake_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LakeTable]:
    """Name -> :class:`~tests.lake.tables.LakeTable`: every Iceberg and Delta test table
    (``iceberg_plain``, ``iceberg_partitioned``, ``iceberg_evolved``, ``iceberg_pos_deletes``,
    ``iceberg_eq_deletes``, ``iceberg_mixed``, ``delta_plain``, ``delta_partitioned``,
    ``delta_deleted``, ``delta_evolved``), each with its snapshots and the oracle's rows."""
    return build_lake_tables(tmp_path_factory.mktemp("lake"))
