"""Every PostgreSQL reader (connectorx, ADBC, psycopg): server errors are one-line
EngineErrors with the database's message, and types connectorx or ADBC cannot carry are
read by another reader with the right values (never a Rust panic, never a traceback).

The expected values come from psycopg directly (the test harness's own connection), as
PostgreSQL prints them (``::text``) for the types without an Arrow form of their own.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gc
import importlib.util
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import EngineError
from sqlfeed.io import PostgresSource, arrow, connect
from sqlfeed.io import source as sourcemodule
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import POSTGRES_URL, Engine
from tests.helpers.sources import SourceFactory, require_module

pytestmark = pytest.mark.engine

URL = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
MODULES = {
    "copy": "psycopg",
    "connectorx": "connectorx",
    "adbc": "adbc_driver_postgresql",
    "psycopg": "psycopg",
}

# Columns of types connectorx cannot carry (it panics on them) or ADBC returns raw.
ODD = {
    "iv": "CASE WHEN i % 5 = 0 THEN NULL ELSE i * interval '1 year -13 mons 3 days 04:05:06.5' END",
    "rec": "ROW(i, 'a,b')",
    "m": "(i * 1.25)::money",
    "x": "xmlelement(name a, i)",
    "p": "point(i, -i)",
    "na": "ARRAY[i * 1.5, 2.25, NULL]::numeric[]",
    "nd": "ARRAY[i * 1.5]::numeric(10, 2)[]",
    "r": "int4range(i, i + 5)",
    "tr": "tsrange('2024-01-01'::timestamp + i * interval '1 hour', '2024-02-01'::timestamp)",
}
TEXT_FORM = ("rec", "m", "x", "p", "r", "tr")


@pytest.fixture
def postgres() -> Engine:
    return get_engine("postgres")


@pytest.fixture(params=list(MODULES))
def source(
    request: pytest.FixtureRequest, postgres: Engine, make_source: SourceFactory
) -> PostgresSource:
    """A source that reads through one reader only (psycopg when it cannot carry a type)."""
    reader = request.param
    opened = make_source(URL, readers=(reader,), requires=MODULES[reader])
    assert isinstance(opened, PostgresSource)
    return opened


def _odd_query(rows: int) -> str:
    columns = ", ".join(f"{expr} AS {name}" for name, expr in ODD.items())
    return f"SELECT i, {columns} FROM generate_series(1, {rows}) AS g(i)"


def _expected(postgres: Engine, rows: int) -> list[dict[str, Any]]:
    """The rows as psycopg reads them, text-form types as PostgreSQL prints them."""
    texts = ", ".join(f"({ODD[n]})::text" for n in TEXT_FORM)
    picked = f"{ODD['iv']}, {ODD['na']}, {ODD['nd']}, {texts}"
    sql = f"SELECT i, {picked} FROM generate_series(1, {rows}) AS g(i)"
    out = []
    for i, iv, na, nd, *text in postgres.rows(sql):
        row = {
            "i": i,
            "iv": iv,
            "na": [None if v is None else float(v) for v in na],
            "nd": list(nd),
        }
        row.update(zip(TEXT_FORM, text, strict=True))
        out.append(row)
    return out


def test_types_connectorx_cannot_carry_are_read_right_on_every_path(
    source: PostgresSource, postgres: Engine
) -> None:
    rows = 300
    table = source.read_table(_odd_query(rows))
    assert source.reader_for(_odd_query(rows)) == "psycopg"  # interval + record + money ...
    assert table.schema.field("iv").type == pa.duration("us")
    assert table.schema.field("na").type == pa.list_(pa.float64())
    assert table.schema.field("nd").type == pa.list_(pa.decimal128(10, 2))
    assert all(table.schema.field(n).type == pa.string() for n in TEXT_FORM)
    got = [{k: row[k] for k in ("i", "iv", "na", "nd", *TEXT_FORM)} for row in table.to_pylist()]
    nd_normalised = [{**r, "nd": [decimal.Decimal(v).normalize() for v in r["nd"]]} for r in got]
    expected = _expected(postgres, rows)
    assert nd_normalised == [
        {**r, "nd": [decimal.Decimal(v).normalize() for v in r["nd"]]} for r in expected
    ]
    assert sum(1 for r in got if r["iv"] is None) == rows // 5


@pytest.mark.parametrize("columns", ["iv", "m", "rec", "x", "p", "na", "r", "tr"])
def test_each_odd_type_alone_is_read_right(
    source: PostgresSource, postgres: Engine, columns: str
) -> None:
    sql = f"SELECT i, {ODD[columns]} AS v FROM generate_series(1, 50) AS g(i)"
    got = source.read_table(sql).column("v").to_pylist()
    if columns in TEXT_FORM:
        expected = [
            r[0]
            for r in postgres.rows(
                f"SELECT ({ODD[columns]})::text FROM generate_series(1, 50) AS g(i)"
            )
        ]
    elif columns == "na":
        expected = [[1.5 * i, 2.25, None] for i in range(1, 51)]
    else:
        expected = [
            r[0]
            for r in postgres.rows(f"SELECT {ODD[columns]} FROM generate_series(1, 50) AS g(i)")
        ]
    assert got == expected


def test_adbc_carries_interval_numeric_and_json_exactly(postgres: Engine) -> None:
    require_module("adbc_driver_postgresql")
    sql = (
        "SELECT i, " + ODD["iv"] + " AS iv, i * 0.1 AS n, (i * 1.25)::numeric(12, 2) AS d, "
        "json_build_object('b', i, 'a', 1) AS j, jsonb_build_object('bb', i, 'a', 2) AS jb "
        "FROM generate_series(-40, 40) AS g(i)"
    )
    with connect(URL) as source:
        assert isinstance(source, PostgresSource)
        source.readers = ("adbc",)
        assert source.reader_for(sql) == "adbc"
        via_adbc = source.read_table(sql)
        source.readers = ("psycopg",)
        via_psycopg = source.read_table(sql)
    assert via_adbc.equals(via_psycopg)
    text = postgres.rows(
        "SELECT json_build_object('b', i, 'a', 1)::text FROM generate_series(-40, 40) AS g(i)"
    )
    assert via_adbc.column("j").to_pylist() == [r[0] for r in text]  # not re-serialized
    assert via_adbc.column("d").to_pylist()[0] == decimal.Decimal("-50.00")
    intervals = postgres.rows(f"SELECT {ODD['iv']} FROM generate_series(-40, 40) AS g(i)")
    assert via_adbc.column("iv").to_pylist() == [r[0] for r in intervals]
    assert any(isinstance(r[0], dt.timedelta) and r[0].days > 365 for r in intervals)


@pytest.mark.parametrize("fails_at", [50, 150_000])  # before connectorx's first batch, after it
def test_a_server_error_is_one_line_with_the_database_message(
    source: PostgresSource, postgres: Engine, fails_at: int
) -> None:
    sql = f"SELECT i, 1 / (i - {fails_at}) AS r FROM generate_series(1, 200000) AS g(i)"
    assert source.reader_for(sql) == source.readers[0]
    with pytest.raises(EngineError) as caught:
        for _ in source.read(sql, batch_rows=10_000):
            pass
    message = str(caught.value)
    assert message == "postgres failed running the partition query: division by zero"


def test_an_odd_type_with_a_server_error_is_one_line(source: PostgresSource) -> None:
    sql = (
        "SELECT i, i * interval '1 day' AS iv, 1 / (i - 70000) AS r "
        "FROM generate_series(1, 90000) AS g(i)"
    )
    with pytest.raises(
        EngineError, match=r"^postgres failed running the partition query: division by zero$"
    ):
        source.read_table(sql)


def test_the_reader_follows_the_column_types(postgres: Engine) -> None:
    with connect(URL) as source:
        assert isinstance(source, PostgresSource)
        installed = [
            r for r in ("connectorx", "adbc", "psycopg") if importlib.util.find_spec(MODULES[r])
        ]
        source.readers = ("connectorx", "adbc", "psycopg")
        plain = "SELECT i, 'x' || i AS t, i * 0.5::float8 AS f, ARRAY[i, 2] AS a FROM t3 AS g(i)"
        exact = "SELECT i, i * 0.1 AS n, i * interval '1 day' AS iv FROM t3 AS g(i)"
        odd = "SELECT i, point(i, i) AS p FROM t3 AS g(i)"
        plain, exact, odd = (q.replace("t3", "generate_series(1, 3)") for q in (plain, exact, odd))
        assert source.reader_for(plain) == installed[0]
        assert source.reader_for(exact) == ("adbc" if "adbc" in installed else "psycopg")
        assert source.reader_for(odd) == "psycopg"
        # every reader reads inside a snapshot (tests/engines/test_concurrent_writes.py)
        assert source.reader_for(plain, snapshot="00000003-1") == installed[0]
        source.readers = ("copy", "connectorx", "psycopg")
        scalars = "SELECT i, 'x' || i AS t, (i * 0.5)::numeric(15, 2) AS d FROM t3 AS g(i)"
        scalars = scalars.replace("t3", "generate_series(1, 3)")
        assert source.reader_for(scalars) == "copy"  # every type parsed from its text
        assert source.reader_for(plain) == installed[0]  # a list: the next reader
        source.readers = ("connectorx", "psycopg")  # a bounded numeric: connectorx
        assert source.reader_for(scalars) == installed[0]


@pytest.mark.parametrize("reader", list(MODULES))
@pytest.mark.parametrize("command", ["sample", "export"])
def test_cli_reads_give_one_line_for_a_server_error(
    postgres: Engine, reader: str, command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    require_module(MODULES[reader])
    monkeypatch.setenv("SQLFEED_POSTGRES_READERS", reader)
    sql = "SELECT i, 1 / (i - 150000) AS r FROM generate_series(1, 200000) AS g(i)"
    out = tmp_path / "out"
    args = {
        "sample": ["sample", "--db", URL, "--rows", "200000", sql],
        "export": ["export", "--db", URL, "-m", "2", "--out", str(out), sql],
    }[command]
    run = run_cli(args)
    assert run.code == 1, run.err
    assert run.err.strip().splitlines() == [
        "sqlfeed: engine error: postgres failed running the partition query: division by zero"
    ]


def test_an_unknown_reader_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLFEED_POSTGRES_READERS", "connectorx,turbo")
    run = run_cli(["count", "--db", URL, "SELECT 1 AS a"])
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        "sqlfeed: error: SQLFEED_POSTGRES_READERS='connectorx,turbo': unknown reader 'turbo'; "
        "use a comma-separated list of copy, connectorx, adbc, psycopg"
    ]


def test_a_late_value_no_reader_can_type_is_one_line(source: PostgresSource) -> None:
    # connectorx panics on the first 2-D array (not a server error: no database message),
    # after it delivered batches; the read runs again on psycopg, which names the value.
    sql = (
        "SELECT i, CASE WHEN i < 50000 THEN ARRAY[i] ELSE ARRAY[[i]] END AS a "
        "FROM generate_series(1, 60000) AS g(i)"
    )
    with pytest.raises(EngineError) as caught:
        for _ in source.read(sql, batch_rows=1000):
            pass
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("postgres returned a value that does not fit its column's Arrow")
    assert "[50000]" in message


# -- connections kept per reading thread; batches in the plan's own types ----------------------

KEPT = ("copy", "adbc")


@pytest.fixture
def items(postgres: Engine) -> Iterator[str]:
    """A table of numeric(15,2), int4, text and date columns (with NULLs), dropped after."""
    table = postgres.qualify(f"reader_items_{uuid.uuid4().hex[:8]}")
    postgres.execute(
        f"CREATE TABLE {table} AS SELECT i::int4 AS n, (i * 1.25)::numeric(15, 2) AS price, "
        "CASE WHEN i % 7 = 0 THEN NULL ELSE 'item ' || i END AS label, "
        "DATE '2024-01-01' + i AS day FROM generate_series(1, 20000) AS g(i)"
    )
    yield table
    postgres.execute(f"DROP TABLE {table}")


def _named_source(reader: str, name: str) -> PostgresSource:
    require_module(MODULES[reader])
    source = connect(f"{URL}?application_name={name}")
    assert isinstance(source, PostgresSource)
    source.readers = (reader,)
    return source


def _backends(postgres: Engine, name: str) -> set[int]:
    rows = postgres.rows(f"SELECT pid FROM pg_stat_activity WHERE application_name = '{name}'")
    return {int(r[0]) for r in rows}


@pytest.mark.parametrize("reader", KEPT)
def test_a_reading_thread_keeps_one_connection_for_all_its_partitions(
    postgres: Engine, items: str, reader: str
) -> None:
    name = f"sqlfeed_keep_{uuid.uuid4().hex[:8]}"
    source = _named_source(reader, name)
    try:
        plan = sqlfeed.plan(f"SELECT * FROM {items}", source, strategy="ctid", partitions=8)
        schema = plan.arrow_schema()
        before = _backends(postgres, name)  # the engine's own pool (planning queries)
        served = []
        rows = 0
        for partition in plan.partitions:
            rows += sum(b.num_rows for b in source.read(partition.sql, schema=schema))
            served.append(_backends(postgres, name) - before)
        assert rows == 20000
        assert len(served[0]) == 1
        assert all(s == served[0] for s in served)
        assert source.connections[reader].opened == 1
        (pid,) = served[0]
        postgres.execute(f"SELECT pg_terminate_backend({pid})")  # a connection broken
        _wait_gone(postgres, {pid})
        assert source.read_table(f"SELECT count(*) AS c FROM {items}").column(0)[0].as_py() == (
            20000
        )
        assert source.connections[reader].opened == 2  # dropped and reopened once
    finally:
        source.close()
    _wait_gone(postgres, _backends(postgres, name))  # closing the source closes them all


def test_a_thread_connection_closes_when_its_thread_ends(postgres: Engine, items: str) -> None:
    name = f"sqlfeed_thread_{uuid.uuid4().hex[:8]}"
    with _named_source("copy", name) as source:
        assert isinstance(source, PostgresSource)
        before = _backends(postgres, name)
        seen: list[set[int]] = []

        def read() -> None:
            source.read_table(f"SELECT * FROM {items}")
            seen.append(_backends(postgres, name) - before)  # its connection, still open

        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
        assert len(seen[0]) == 1
        del thread
        gc.collect()
        _wait_gone(postgres, seen[0])


def _wait_gone(postgres: Engine, pids: set[int]) -> None:
    """Poll until none of ``pids`` is a backend any more (a backend exits asynchronously)."""
    listed = ", ".join(str(p) for p in pids) or "0"
    for _ in range(100):
        if not postgres.rows(f"SELECT pid FROM pg_stat_activity WHERE pid IN ({listed})"):
            return
        time.sleep(0.05)
    raise AssertionError(f"backends {pids} still open")


@pytest.mark.parametrize("reader", ["copy", "connectorx", "adbc", "psycopg"])
def test_batches_arrive_in_the_plan_types_on_every_reader(
    postgres: Engine, items: str, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _named_source(reader, "sqlfeed_types")
    cast: list[str] = []

    def watch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        if not batch.schema.equals(schema):
            cast.append(str(batch.schema))
        return arrow.conform(batch, schema)

    monkeypatch.setattr(sourcemodule, "conform", watch)
    sql = f"SELECT * FROM {items}"
    expected = postgres.rows(f"{sql} ORDER BY n")
    with source:
        plan = sqlfeed.plan(sql, source, strategy="ctid", partitions=4)
        schema = plan.arrow_schema()
        assert [f.type for f in schema] == [
            pa.int32(),
            pa.decimal128(15, 2),
            pa.string(),
            pa.date32(),
        ]
        batches = [b for p in plan.partitions for b in source.read(p.sql, schema=schema)]
    table = pa.Table.from_batches(batches).sort_by("n")
    assert [tuple(r.values()) for r in table.to_pylist()] == [tuple(r) for r in expected]
    if reader in ("copy", "psycopg"):  # connectorx: int64 and decimal128(38, 10), cast
        assert cast == []  # ADBC: numeric as text, cast


def test_copy_keeps_null_empty_and_odd_text_apart(source: PostgresSource) -> None:
    sql = (
        "SELECT i, CASE WHEN i % 3 = 0 THEN NULL WHEN i % 3 = 1 THEN '' ELSE "
        "E'a,\"b\"\\n' || i END AS t, 'NULL' AS n, (i * 0.1)::float4 AS f4, "
        "CASE WHEN i = 2 THEN 'NaN'::float8 ELSE 1.0 / i END AS f8, i % 2 = 0 AS b, "
        "TIMESTAMPTZ '2024-03-01 10:00:00.25+02' + i * interval '1 min' AS tz "
        "FROM generate_series(1, 30) AS g(i)"
    )
    got = source.read_table(sql).to_pylist()
    assert source.reader_for(sql) == source.readers[0] or source.readers[0] == "adbc"
    for row in got:
        i = row["i"]
        assert row["t"] == (None if i % 3 == 0 else "" if i % 3 == 1 else f'a,"b"\n{i}')
        assert row["n"] == "NULL"
        assert row["f4"] == pa.scalar(i * 0.1, pa.float32()).as_py()
        assert row["b"] == (i % 2 == 0)
        assert row["tz"] == dt.datetime(2024, 3, 1, 8, i, 0, 250000, tzinfo=dt.UTC)
    assert got[1]["f8"] != got[1]["f8"]  # NaN
    assert got[2]["f8"] == 1.0 / 3


@pytest.mark.parametrize("batch_rows", [5_000, 20_000, 65_536])
def test_copy_batches_have_exactly_batch_rows_across_parse_blocks(
    batch_rows: int, postgres: Engine
) -> None:
    """The copy reader parses blocks of PARSE_ROWS rows while the server sends the next
    ones, and joins them into batches of exactly ``batch_rows`` (the last one smaller)."""
    source = _named_source("copy", "sqlfeed_blocks")
    sql = "SELECT i, 'r' || i AS t FROM generate_series(1, 50000) AS g(i)"
    with source:
        batches = list(source.read(sql, batch_rows=batch_rows))
        assert source.connections["copy"].opened == 1
    sizes = [b.num_rows for b in batches]
    assert sizes[:-1] == [batch_rows] * (len(sizes) - 1)
    assert 0 < sizes[-1] <= batch_rows
    assert sum(sizes) == 50_000
    values = pa.Table.from_batches(batches).column("i").to_pylist()
    assert values == list(range(1, 50_001))


def test_an_abandoned_copy_read_leaves_the_next_read_whole(postgres: Engine) -> None:
    """A read left in the middle of its COPY drops that connection: the thread's next read
    gets a fresh one and all its rows."""
    source = _named_source("copy", "sqlfeed_abandon")
    sql = "SELECT i FROM generate_series(1, 300000) AS g(i)"
    with source:
        reads = source.read(sql, batch_rows=10_000)
        assert next(reads).num_rows == 10_000
        reads.close()
        assert sum(b.num_rows for b in source.read(sql, batch_rows=10_000)) == 300_000
        assert source.connections["copy"].opened == 2


def test_a_feeders_readers_keep_their_connections_across_partitions(
    postgres: Engine, items: str
) -> None:
    """A static Feeder's reader threads live for the whole epoch: 12 partitions read by 2
    readers open 2 copy connections (one per thread), not 12."""
    source = _named_source("copy", "sqlfeed_lanes")
    with source:
        plan = sqlfeed.plan(f"SELECT * FROM {items}", source, strategy="ctid", partitions=12)
        assert plan.num_partitions == 12, plan.reason
        feeder = sqlfeed.Feeder(plan, source, readers=2, merge_reads=False)
        assert sum(batch.num_rows for batch in feeder) == 20_000
        assert feeder.queries == 12
        assert source.connections["copy"].opened == 2
