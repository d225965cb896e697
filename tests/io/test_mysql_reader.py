"""Every MySQL/MariaDB reader (connectorx, pymysql) returns exactly the query's rows in the
plan's types: decimals, dates, datetimes, timestamps, NULLs, unicode and latin1 text,
blobs, negative numbers and unsigned BIGINT edge values. Columns connectorx cannot carry
(TIME, wide decimals) are read by pymysql, and no Rust panic ever reaches the caller. A
plan's schema carries the column types that choice needs: its partitions run no type
query of their own. connectorx's decimals are brought to the plan's scale exactly.

The expected values come from pymysql directly (the test harness's own connection).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sqlfeed
from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io import MySQLSource
from sqlfeed.io.arrow import downscale_decimal, without_hints
from sqlfeed.io.mysql import MYSQL_HINT
from tests.conftest import get_engine
from tests.helpers.engines import Engine
from tests.helpers.sources import SourceFactory, require_module

pytestmark = pytest.mark.engine

READERS = ("connectorx", "pymysql")
MODULES = {"connectorx": "connectorx", "pymysql": "pymysql"}

COLUMNS = (
    ("id", "INT NOT NULL PRIMARY KEY"),
    ("neg", "BIGINT"),
    ("tiny", "TINYINT UNSIGNED"),
    ("big_u", "BIGINT UNSIGNED"),
    ("small", "SMALLINT"),
    ("f", "FLOAT"),
    ("d", "DOUBLE"),
    ("money", "DECIMAL(14,2)"),
    ("ratio", "DECIMAL(18,10)"),
    ("u_dec", "DECIMAL(5,2) UNSIGNED"),
    ("day", "DATE"),
    ("at", "DATETIME(6)"),
    ("stamp", "TIMESTAMP(6) NULL"),
    ("yr", "YEAR"),
    ("txt", "VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
    ("latin", "VARCHAR(20) CHARACTER SET latin1"),
    ("body", "TEXT"),
    ("blob_", "BLOB"),
    ("kind", "ENUM('a','b')"),
)
ROWS: list[tuple[Any, ...]] = [
    (
        1,
        -9223372036854775808,
        0,
        0,
        -32768,
        -1.5,
        -2.25,
        decimal.Decimal("-123456789012.34"),
        decimal.Decimal("-99999999.9999999999"),
        decimal.Decimal("0.01"),
        dt.date(1, 1, 1),
        dt.datetime(1000, 1, 1, 0, 0, 0, 1),
        dt.datetime(1970, 1, 2, 0, 0, 0),
        1901,
        "héllo 🐍",
        "café",
        "",
        b"\x00\xff",
        "a",
    ),
    (
        2,
        9223372036854775807,
        255,
        18446744073709551615,
        32767,
        3.5,
        1e300,
        decimal.Decimal("999999999999.99"),
        decimal.Decimal("12345678.0000000001"),
        decimal.Decimal("999.99"),
        dt.date(9999, 12, 31),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2038, 1, 19, 3, 14, 7, 499999),
        2155,
        "日本語 ‘quotes’ \\ '",
        "Ægir",
        "long " * 50,
        b"",
        "b",
    ),
    (3,) + (None,) * (len(COLUMNS) - 1),
    (
        4,
        -1,
        1,
        9223372036854775808,
        -1,
        0.0,
        -0.0,
        decimal.Decimal("0.00"),
        decimal.Decimal("0E-10"),
        decimal.Decimal("0.00"),
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 12, 0),
        dt.datetime(2024, 3, 10, 2, 30),
        2024,
        "",
        "",
        "x",
        b"\x01" * 300,
        "a",
    ),
]

PLAN_TYPES = {
    "neg": pa.int64(),
    "tiny": pa.uint8(),
    "big_u": pa.uint64(),
    "small": pa.int16(),
    "f": pa.float32(),
    "d": pa.float64(),
    "money": pa.decimal128(14, 2),
    "ratio": pa.decimal128(18, 10),
    "u_dec": pa.decimal128(5, 2),
    "day": pa.date32(),
    "at": pa.timestamp("us"),
    "stamp": pa.timestamp("us"),
    "yr": pa.int16(),
    "txt": pa.string(),
    "latin": pa.string(),
    "body": pa.string(),
    "blob_": pa.binary(),
    "kind": pa.string(),
}


@pytest.fixture(scope="module")
def mysql() -> Iterator[Engine]:
    engine = get_engine("mysql")
    ddl = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    engine.execute("SET time_zone = '+00:00'")  # TIMESTAMPs stored as the readers read them
    engine.execute("DROP TABLE IF EXISTS reader_types")
    engine.execute(f"CREATE TABLE reader_types ({ddl}) CHARACTER SET utf8mb4")
    marks = ", ".join(["%s"] * len(COLUMNS))
    cursor = engine.conn.cursor()
    cursor.executemany(f"INSERT INTO reader_types VALUES ({marks})", ROWS)
    cursor.close()
    yield engine
    engine.execute("DROP TABLE IF EXISTS reader_types")
    engine.execute("SET time_zone = DEFAULT")


@pytest.fixture(params=READERS)
def source(
    request: pytest.FixtureRequest, mysql: Engine, make_source: SourceFactory
) -> MySQLSource:
    """A source that reads through one reader only (pymysql when connectorx cannot)."""
    reader = request.param
    opened = make_source(mysql, readers=(reader,), requires=MODULES[reader])
    assert isinstance(opened, MySQLSource)
    return opened


def _expected(mysql: Engine, sql: str) -> list[dict[str, Any]]:
    cursor = mysql.conn.cursor()
    cursor.execute(sql)
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    cursor.close()
    return rows


def _normal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Floats compared as float32 where the plan says float32; decimals by value."""
    out = []
    for row in rows:
        fixed = dict(row)
        if fixed.get("f") is not None:
            fixed["f"] = float(pa.scalar(fixed["f"], pa.float32()).as_py())
        out.append(fixed)
    return out


def test_every_reader_returns_the_rows_in_the_plans_types(
    source: MySQLSource, mysql: Engine
) -> None:
    sql = "SELECT * FROM reader_types ORDER BY id"
    schema = source.schema(sql)
    assert {f.name: f.type for f in schema if f.name != "id"} == PLAN_TYPES
    expected_reader = "connectorx" if source.readers == ("connectorx",) else "pymysql"
    assert source.reader_for(sql) == expected_reader
    table = source.read_table(sql, schema=schema)
    assert table.schema == schema
    assert _normal(table.to_pylist()) == _normal(_expected(mysql, sql))


def test_columns_connectorx_cannot_carry_are_read_by_pymysql(
    source: MySQLSource, mysql: Engine
) -> None:
    sql = (
        "SELECT id, CAST(-12345678901234567890 AS DECIMAL(20,0)) AS wide, "
        "CAST(1.123456789012 AS DECIMAL(14,12)) AS fine, "
        "CAST('-838:59:59.5' AS TIME(1)) AS span, txt FROM reader_types ORDER BY id"
    )
    assert source.reader_for(sql) == "pymysql"
    table = source.read_table(sql)
    assert table.schema.field("wide").type == pa.decimal128(20, 0)
    assert table.schema.field("span").type == pa.duration("us")
    assert table.to_pylist() == _expected(mysql, sql)


def test_a_column_typed_otherwise_by_the_plan_is_read_as_the_plan_says(
    source: MySQLSource, mysql: Engine
) -> None:
    """The plan's schema decides: an INT column planned as text is text from every reader."""
    sql = "SELECT id, small FROM reader_types ORDER BY id"
    schema = pa.schema([("id", pa.int32()), ("small", pa.string())])
    table = source.read_table(sql, schema=schema)
    assert table.schema == schema
    assert table.column("small").to_pylist() == ["-32768", "32767", None, "-1"]


def test_every_reader_runs_the_session_settings(source: MySQLSource) -> None:
    sql = "SELECT @@session.time_zone AS tz, id FROM reader_types WHERE id = 1"
    table = source.read_table(sql)
    assert table.column("tz").to_pylist() == ["+00:00"]


def test_a_server_error_is_one_line_with_the_databases_message(source: MySQLSource) -> None:
    with pytest.raises(EngineError, match="reader_nothing' doesn't exist") as err:
        source.read_table("SELECT id FROM reader_nothing")
    assert "\n" not in str(err.value)


def test_the_readers_come_from_the_environment(
    mysql: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQLFEED_MYSQL_READERS", "pymysql")
    with mysql.source() as opened:
        assert opened.readers == ("pymysql",)
        assert opened.reader_for("SELECT id FROM reader_types") == "pymysql"
    monkeypatch.setenv("SQLFEED_MYSQL_READERS", "connectorx,turbo")
    with pytest.raises(InvalidArgumentError, match=r"SQLFEED_MYSQL_READERS.*'turbo'"):
        mysql.source()


def test_a_plans_partitions_run_no_type_query_of_their_own(
    mysql: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's schema carries each column's MySQL type (field metadata), so choosing a
    partition's reader costs no ``LIMIT 0`` query; every pymysql query is counted."""
    require_module("connectorx")
    pymysql = pytest.importorskip("pymysql")
    sent: list[str] = []
    query = pymysql.connections.Connection.query

    def counted(connection: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
        if connection is not mysql.conn:  # the harness's own connection aside
            sent.append(str(sql))
        return query(connection, sql, *args, **kwargs)

    with mysql.source() as opened:
        opened.readers = ("connectorx", "pymysql")
        plan = sqlfeed.plan("SELECT * FROM reader_types", opened, strategy="hash", partitions=4)
        schema = plan.arrow_schema()
        assert schema.field("money").metadata[MYSQL_HINT] == b"246,14,2"
        monkeypatch.setattr(pymysql.connections.Connection, "query", counted)
        ids = []
        for partition in plan.partitions:
            assert opened.reader_for(partition.sql, schema) == "connectorx"
            for batch in opened.read(partition.sql, schema=schema):
                assert batch.schema == schema
                assert not any(f.metadata for f in batch.schema)
                ids += batch.column("id").to_pylist()
        assert sorted(ids) == [row[0] for row in ROWS]
        assert sent == []  # connectorx reads over its own connections, not pymysql's
        for partition in plan.partitions:  # a schema without the hints: one query each
            opened.reader_for(partition.sql, without_hints(schema))
        assert len(sent) == len(plan.partitions)
        assert all("LIMIT 0" in sql.upper() for sql in sent)


def test_a_decimal_with_more_digits_than_the_plans_type_is_an_error_never_a_change(
    source: MySQLSource,
) -> None:
    schema = pa.schema([("id", pa.int32()), ("money", pa.decimal128(14, 2))])
    wider = "SELECT id, CAST(money {} AS DECIMAL(16,3)) AS money FROM reader_types WHERE id = 2"
    exact = source.read_table(wider.format(""), schema=schema)  # 999999999999.990
    assert exact.column("money").to_pylist() == [decimal.Decimal("999999999999.99")]
    with pytest.raises(EngineError, match="does not fit its column's Arrow type") as err:
        source.read_table(wider.format("+ 0.001"), schema=schema)
    assert "\n" not in str(err.value)


_DECIMAL38 = st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.none(),
            _DECIMAL38,
            st.integers(-(10**20), 10**20).map(lambda q: q * 10**8),  # exact at scale 2
            st.integers(-(10**15) + 1, 10**15 - 1).map(lambda q: q * 10**8),  # and fits (15, 2)
        ),
        max_size=40,
    ),
    precision=st.integers(1, 18),
    scale=st.integers(0, 8),
)
def test_connectorx_decimals_are_rescaled_exactly_or_by_arrows_checked_cast(
    values: list[int | None], precision: int, scale: int
) -> None:
    """connectorx's decimal128(38, 10) brought to the plan's (p, s): the same values as
    Arrow's checked cast, or None where that cast would raise (and then it does)."""
    scale = min(scale, precision)
    unscaled = [None if v is None else decimal.Decimal(f"{v}E-10") for v in values]  # exact
    column = pa.array(unscaled, type=pa.decimal128(38, 10))
    target = pa.decimal128(precision, scale)
    fast = downscale_decimal(column, target)
    try:
        checked = column.cast(target)
    except pa.ArrowInvalid:
        assert fast is None
        return
    if fast is not None:
        assert fast.type == target
        assert fast.to_pylist() == checked.to_pylist()
        assert fast.equals(checked)


def test_exact_decimals_skip_arrows_long_division() -> None:
    """The common case (a DECIMAL(15,2) column through connectorx) takes the exact
    shortcut, NULLs and signs included."""
    text = ["-9999999999999.99", "9999999999999.99", "0", "-0.01", "123.45", None]
    column = pa.array(
        [None if t is None else decimal.Decimal(t) for t in text], pa.decimal128(38, 10)
    )
    fast = downscale_decimal(column, pa.decimal128(15, 2))
    assert fast is not None
    assert fast.equals(column.cast(pa.decimal128(15, 2)))
    assert fast.null_count == 1
