"""PostgreSQL's connectorx reader reading a small partition whole (new with the reader
protocol, #25): the same rows and types as psycopg, for the types it carries.

A partition the planner estimates at 262,144 rows or fewer is read by one
``return_type="arrow"`` call instead of the stream. That path has no first-batch type
check (connectorx is not typed by values on PostgreSQL), so the values must come out exact
through ``conform``: timestamptz, timestamp (microseconds), date, numeric, text with NULLs
and non-ASCII, bool with NULLs, float8, bigint.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import sqlfeed
from tests.conftest import get_engine
from tests.helpers.engines import POSTGRES_URL
from tests.helpers.sources import require_module

pytestmark = pytest.mark.engine

URL = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)


def _read(table: str, readers: list[str]) -> tuple[pa.Table, set[str]]:
    source = sqlfeed.connect(URL, readers=readers)
    try:
        plan = sqlfeed.plan(
            f"SELECT * FROM {table}", source, partitions=4, strategy="range", key="id"
        )
        assert all(
            p.estimated_rows is not None and p.estimated_rows < 262_144 for p in plan.partitions
        )
        used = {source.reader_for(p.sql, plan.arrow_schema()) for p in plan.partitions}
        batches = list(sqlfeed.Feeder(plan, source))
        return pa.Table.from_batches(batches, schema=batches[0].schema).sort_by("id"), used
    finally:
        source.close()


def test_connectorx_reads_a_small_partition_whole_exactly_as_psycopg() -> None:
    require_module("connectorx")
    engine = get_engine("postgres")
    table = engine.qualify("cx_whole")
    engine.execute(
        f"CREATE TABLE {table} (id int PRIMARY KEY, ts timestamptz, t timestamp, d date, "
        "n numeric(20,5), txt text, b bool, f float8, i8 bigint)"
    )
    engine.execute(
        f"INSERT INTO {table} SELECT g, "
        "'2024-01-01 00:00:00+02'::timestamptz + g * interval '1 hour 1.5 sec', "
        "'1999-12-31 23:59:59.999999'::timestamp + g * interval '1 day', DATE '2000-02-28' + g, "
        "(g * 1.23457)::numeric(20,5) * CASE WHEN g % 2 = 0 THEN -1 ELSE 1 END, "
        "CASE WHEN g % 7 = 0 THEN NULL ELSE 'row ' || g || ' é' END, "
        "CASE WHEN g % 5 = 0 THEN NULL ELSE g % 3 = 0 END, g / 3.0, g::bigint * 1000000007 "
        "FROM generate_series(1, 5000) g"
    )
    engine.execute(f"ANALYZE {table}")
    expected, by = _read(table, ["psycopg"])
    got, used = _read(table, ["connectorx"])
    assert (by, used) == ({"psycopg"}, {"connectorx"})
    assert got.num_rows == 5000
    assert got.schema == expected.schema
    for name in expected.column_names:
        assert got[name].equals(expected[name]), name
