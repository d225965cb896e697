"""Every PostgreSQL reader (connectorx, ADBC, psycopg): server errors are one-line
EngineErrors with the database's message, and types connectorx or ADBC cannot carry are
read by another reader with the right values (never a Rust panic, never a traceback).

The expected values come from psycopg directly (the test harness's own connection), as
PostgreSQL prints them (``::text``) for the types without an Arrow form of their own.
"""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from dialects import EngineError
from sqlfeed.io import PostgresSource, connect
from tests.cli_helpers import run_cli
from tests.conftest import get_engine
from tests.engines import POSTGRES_URL, Engine

pytestmark = pytest.mark.engine

URL = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
MODULES = {"connectorx": "connectorx", "adbc": "adbc_driver_postgresql", "psycopg": "psycopg"}

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
def source(request: pytest.FixtureRequest, postgres: Engine) -> Iterator[PostgresSource]:
    """A source that reads through one reader only (psycopg when it cannot carry a type)."""
    if importlib.util.find_spec(MODULES[request.param]) is None:
        pytest.skip(f"{MODULES[request.param]} is not installed")
    with connect(URL) as opened:
        assert isinstance(opened, PostgresSource)
        opened.readers = (request.param,)
        yield opened


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
    if importlib.util.find_spec("adbc_driver_postgresql") is None:
        pytest.skip("adbc-driver-postgresql is not installed")
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
        installed = [r for r in MODULES if importlib.util.find_spec(MODULES[r])]
        source.readers = ("connectorx", "adbc", "psycopg")
        plain = "SELECT i, 'x' || i AS t, i * 0.5::float8 AS f, ARRAY[i, 2] AS a FROM t3 AS g(i)"
        exact = "SELECT i, i * 0.1 AS n, i * interval '1 day' AS iv FROM t3 AS g(i)"
        odd = "SELECT i, point(i, i) AS p FROM t3 AS g(i)"
        plain, exact, odd = (q.replace("t3", "generate_series(1, 3)") for q in (plain, exact, odd))
        assert source.reader_for(plain) == installed[0]
        assert source.reader_for(exact) == ("adbc" if "adbc" in installed else "psycopg")
        assert source.reader_for(odd) == "psycopg"
        assert source.reader_for(plain, snapshot="00000003-1") == "psycopg"


@pytest.mark.parametrize("reader", list(MODULES))
@pytest.mark.parametrize("command", ["sample", "export"])
def test_cli_reads_give_one_line_for_a_server_error(
    postgres: Engine, reader: str, command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    if importlib.util.find_spec(MODULES[reader]) is None:
        pytest.skip(f"{MODULES[reader]} is not installed")
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
        "use a comma-separated list of connectorx, adbc, psycopg"
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
