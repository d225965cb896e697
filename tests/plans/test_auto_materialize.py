"""auto materializes an expensive PostgreSQL/MySQL query into sqlfeed's default scratch
schema when the user may write there, and falls back to hash saying why when not."""

from __future__ import annotations

import gc
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlparse

import pytest

import sqlfeed
from sqlfeed import Feeder
from sqlfeed.plans.materialize import DEFAULT_SCRATCH
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

pytestmark = pytest.mark.engine

GROUPED = "SELECT s, k, COUNT(*) AS n, SUM(v) AS total FROM {t} GROUP BY s, k"


def _multiset(batches: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for b in batches for r in b.to_pylist())


@pytest.mark.parametrize("name", ["postgres", "mysql"])
@pytest.mark.parametrize("m", [1, 7, 64])
def test_auto_materializes_into_the_default_scratch_schema(name: str, m: int) -> None:
    engine = get_engine(name)
    sql = GROUPED.format(t=engine.qualify("keyed"))
    with engine.source() as source:
        plan = sqlfeed.plan(sql, source, partitions=m)
        try:
            assert plan.strategy == "materialize"
            assert plan.scratch_table is not None
            assert plan.scratch_table.startswith(f"{DEFAULT_SCRATCH}.")
            assert "sqlfeed's default scratch schema" in plan.reason
            assert plan.rows == len(engine.rows(sql))  # the scratch table's own count
            assert _multiset(Feeder(plan, source, batch_size=13)) == _multiset(source.read(sql))
            if name == "postgres" and m > 1:  # pages of the scratch table: TID range scans
                assert "ctid" in plan.partitions[-1].sql
                explained = engine.rows("EXPLAIN " + plan.partitions[-1].sql)
                assert "Tid Range Scan" in " ".join(r[0] for r in explained)
        finally:
            sqlfeed.plans.drop_scratch(plan, source)
        left = [t.name for t in sqlfeed.plans.materialize.list_scratch(source, DEFAULT_SCRATCH)]
        assert plan.scratch_table.rsplit(".", 1)[-1] not in left


def test_a_scan_and_an_explicit_scratch_are_left_as_they_were() -> None:
    engine = get_engine("postgres")
    with engine.source() as source:
        scan = sqlfeed.plan(f"SELECT * FROM {engine.qualify('keyed')}", source, partitions=3)
        given = sqlfeed.plan(
            GROUPED.format(t=engine.qualify("keyed")), source, partitions=3, scratch=engine.scratch
        )
        sqlfeed.plans.drop_scratch(given, source)
    assert scan.strategy == "ctid"
    assert scan.scratch_table is None
    assert given.scratch_table is not None
    assert given.scratch_table.startswith(engine.scratch)
    assert "default scratch" not in given.reason


def test_postgres_without_create_privilege_falls_back_to_hash_with_the_fix() -> None:
    engine = get_engine("postgres")
    role = f"sqlfeed_ro_{uuid.uuid4().hex[:8]}"
    engine.execute(f"CREATE ROLE {role} LOGIN")
    try:
        engine.execute(f"GRANT USAGE ON SCHEMA {engine.schema} TO {role}")
        engine.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {engine.schema} TO {role}")
        url = POSTGRES_URL.replace("postgresql://postgres@", f"postgresql+psycopg://{role}@", 1)
        sql = GROUPED.format(t=engine.qualify("keyed"))
        plan = sqlfeed.plan(sql, url, partitions=4)
        assert plan.strategy == "hash"
        assert "not materialized: sqlfeed may not write its scratch table" in plan.reason
        assert "GRANT CREATE ON" in plan.reason
        assert "scratch=SCHEMA" in plan.reason
        with sqlfeed.connect(url) as source:
            assert _multiset(Feeder(plan, source)) == _multiset(source.read(sql))
        # A read-only session says so.
        engine.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
        engine.execute(f"GRANT CREATE ON DATABASE {urlparse(POSTGRES_URL).path[1:]} TO {role}")
        read_only = sqlfeed.plan(sql, url, partitions=4)
        assert read_only.strategy == "hash"
        assert "session is read-only" in read_only.reason
    finally:
        engine.execute(f"DROP OWNED BY {role}")
        engine.execute(f"DROP ROLE {role}")


def test_mysql_without_create_privilege_falls_back_to_hash() -> None:
    engine = get_engine("mysql")
    user = f"sqlfeed_ro_{uuid.uuid4().hex[:8]}"
    engine.execute(f"CREATE USER '{user}'@'%'")
    engine.execute(f"CREATE USER '{user}'@'localhost'")
    try:
        for host in ("%", "localhost"):
            engine.execute(f"GRANT SELECT ON {engine.schema}.* TO '{user}'@'{host}'")
        address = urlparse(MYSQL_URL)
        url = f"mysql+pymysql://{user}@{address.hostname}:{address.port or 3306}/{engine.schema}"
        plan = sqlfeed.plan(GROUPED.format(t="keyed"), url, partitions=4)
        assert plan.strategy == "hash"
        assert f"may not write its scratch table into {DEFAULT_SCRATCH}" in plan.reason
        assert "scratch=SCHEMA" in plan.reason
    finally:
        for host in ("%", "localhost"):
            engine.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")


def _scratch_tables(source: Any) -> set[str]:
    return {t.name for t in sqlfeed.plans.materialize.list_scratch(source, DEFAULT_SCRATCH)}


@pytest.mark.parametrize("name", ["postgres", "mysql"])
def test_a_feeders_own_materialized_table_is_dropped_when_the_feeder_is_gone(name: str) -> None:
    """Feeder(sql) plans itself: the table auto made is sqlfeed's to drop, not the user's."""
    engine = get_engine(name)
    sql = GROUPED.format(t=engine.qualify("keyed"))
    with engine.source() as source:
        before = _scratch_tables(source)
        feeder = Feeder(sql, source, format="arrow", partitions=3)
        assert feeder.plan.strategy == "materialize"
        made = feeder.plan.scratch_table
        assert made is not None
        assert made.rsplit(".", 1)[-1] in _scratch_tables(source) - before
        assert sum(b.num_rows for b in feeder) == len(engine.rows(sql))
        del feeder
        gc.collect()
        assert made.rsplit(".", 1)[-1] not in _scratch_tables(source)
        marker = f"n_{uuid.uuid4().hex[:8]}"  # a column only this test's table has
        grouped = sql.replace("AS n,", f"AS {marker},")
        stats = sqlfeed.compute_stats(grouped, source, method="accumulate", partitions=3)
        assert stats.rows == len(engine.rows(sql))
        where = "table_schema" if name == "postgres" else "TABLE_SCHEMA"
        left = engine.rows(
            f"SELECT table_name FROM information_schema.columns WHERE {where} = "
            f"'{DEFAULT_SCRATCH}' AND column_name = '{marker}'"
        )
        assert left == []  # the statistics pass dropped the table it made
