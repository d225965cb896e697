"""The table sink's engine knowledge (issue #27): column types that hold each Arrow value
kind exactly, and the statements that rename and swap tables, run on the real engines.

Each engine's table of every kind it holds is written through the engine's own driver (as
the sink's writer binds values: SQLite's text kinds as their text, zone-aware timestamps
as naive UTC where ``SINK_TZ_AS_UTC``) and read back with sqlfeed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError, get_dialect
from tests.helpers.engines import Engine

PARIS = dt.timezone(dt.timedelta(hours=1))
AWARE = dt.datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=PARIS)
MOMENT = dt.datetime(2024, 2, 29, 12, 34, 56, 123456)

# (kind, sink_type's parameters, the Arrow type written, a value of it)
CASES: list[tuple[str, dict[str, Any], pa.DataType, Any]] = [
    ("bool", {}, pa.bool_(), True),
    ("int8", {}, pa.int8(), -128),
    ("int16", {}, pa.int16(), -32768),
    ("int32", {}, pa.int32(), -(2**31)),
    ("int64", {}, pa.int64(), -(2**63)),
    ("uint8", {}, pa.uint8(), 255),
    ("uint16", {}, pa.uint16(), 65535),
    ("uint32", {}, pa.uint32(), 2**32 - 1),
    ("uint64", {}, pa.uint64(), 2**64 - 1),
    ("float32", {}, pa.float32(), float(np.float32(0.123456789))),
    ("float64", {}, pa.float64(), 1 / 3),
    (
        "decimal",
        {"precision": 38, "scale": 10},
        pa.decimal128(38, 10),
        decimal.Decimal("-1234567890123456789012345678.0123456789"),
    ),
    ("decimal", {"precision": 12, "scale": 2}, pa.decimal128(12, 2), decimal.Decimal("0.10")),
    ("string", {}, pa.string(), "h€llo 😀 'q' \"d\" \\"),
    ("binary", {}, pa.binary(), b"\x00\xff'\\"),
    ("date", {}, pa.date32(), dt.date(2024, 2, 29)),
    ("timestamp", {"unit": "s"}, pa.timestamp("s"), MOMENT.replace(microsecond=0)),
    ("timestamp", {"unit": "ms"}, pa.timestamp("ms"), MOMENT.replace(microsecond=123000)),
    ("timestamp", {"unit": "us"}, pa.timestamp("us"), MOMENT),
    ("timestamp", {"unit": "ns"}, pa.timestamp("ns"), MOMENT),
    ("timestamp", {"unit": "us", "tz": "+01:00"}, pa.timestamp("us", tz="+01:00"), AWARE),
    ("time", {"unit": "us"}, pa.time64("us"), dt.time(12, 34, 56, 123456)),
    ("duration", {"unit": "us"}, pa.duration("us"), dt.timedelta(days=1, microseconds=5)),
    ("null", {}, pa.null(), None),
]

UNHELD = {
    "postgres": {"timestamp ns"},
    "mysql": {"timestamp ns", "duration"},
    "sqlite": {"timestamp ns", "duration", "uint64"},
    "duckdb": {"duration"},
}
"""The kinds (with a unit where it matters) of :data:`CASES` each engine holds no column of."""


def _case_name(kind: str, params: dict[str, Any]) -> str:
    return f"{kind} ns" if params.get("unit") == "ns" else kind


def _written(dialect_name: str, column_type: str, value: Any) -> Any:
    """``value`` as the sink's writer binds it: naive UTC where the engine keeps no zone,
    SQLite's text kinds as their ISO or decimal text."""
    dialect = get_dialect(dialect_name)
    if isinstance(value, dt.datetime) and value.tzinfo and dialect.SINK_TZ_AS_UTC:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    if dialect_name == "sqlite" and column_type == "TEXT" and value is not None:
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ")
        if isinstance(value, (dt.date, dt.time, decimal.Decimal)):
            return value.isoformat() if not isinstance(value, decimal.Decimal) else str(value)
    return value


def _same(got: pa.ChunkedArray, arrow_type: pa.DataType, value: Any, written: Any) -> None:
    """The value read back is the one written, once cast to the Arrow type written (a
    string where SQLite keeps the value's text; MySQL's TIME reads back as a duration)."""
    assert got[1].as_py() is None
    if pa.types.is_null(arrow_type):
        return
    if pa.types.is_string(got.type) and not pa.types.is_string(arrow_type):
        assert got[0].as_py() == written
        return
    if pa.types.is_time(arrow_type) and pa.types.is_duration(got.type):
        since_midnight = got[0].as_py()
        assert (dt.datetime.min + since_midnight).time() == value
        return
    if pa.types.is_timestamp(got.type) and got.type.tz is None and arrow_type.tz:
        got = got.cast(pa.timestamp(got.type.unit, tz="UTC"))  # stored as UTC
    expected = pa.array([value, None], arrow_type)
    assert got.cast(arrow_type).combine_chunks() == expected, (got, expected)


def test_sink_types_read_back_exactly(engine: Engine) -> None:
    dialect = get_dialect(engine.name)
    held, unheld = [], set()
    for kind, params, arrow_type, value in CASES:
        column_type = dialect.sink_type(kind, **params)
        if column_type is None:
            unheld.add(_case_name(kind, params))
        else:
            held.append((column_type, arrow_type, value))
    assert unheld == UNHELD[engine.name]
    for kind in ("list", "struct", "map"):
        assert dialect.sink_type(kind) is None
    table = engine.qualify(f"sink_types_{uuid.uuid4().hex[:8]}")
    columns = ", ".join(f"c{i} {t}" for i, (t, _, _) in enumerate(held))
    engine.execute(f"CREATE TABLE {table} ({columns})")
    try:
        written = [_written(engine.name, t, v) for t, _, v in held]
        marks = ", ".join([engine.placeholder] * len(held))
        cursor = engine.conn.cursor()
        cursor.executemany(f"INSERT INTO {table} VALUES ({marks})", [written, [None] * len(held)])
        cursor.close()
        engine.commit()
        with engine.source() as source:
            got = source.arrow(f"SELECT * FROM {table} ORDER BY c1 IS NULL")
        for i, (_, arrow_type, value) in enumerate(held):
            _same(got.column(i), arrow_type, value, written[i])
    finally:
        engine.execute(f"DROP TABLE {table}")
        engine.commit()


def _schema(engine: Engine) -> str:
    return engine.schema if engine.name in ("postgres", "mysql") else "main"


def _run_on_one_cursor(engine: Engine, statements: list[str]) -> None:
    """Run ``statements`` in order on one cursor (a DuckDB cursor is a session of its own)."""
    cursor = engine.conn.cursor()
    try:
        for sql in statements:
            cursor.execute(sql)
    finally:
        cursor.close()


def _scalar(engine: Engine, table: exp.Table, dialect_name: str) -> Any:
    return engine.rows(f"SELECT v FROM {table.sql(dialect_name)}")[0][0]


def test_swap_and_rename_run_on_the_engine(engine: Engine) -> None:
    dialect = get_dialect(engine.name)
    tag = uuid.uuid4().hex[:8]
    table = exp.table_(f"my table {tag}", db=_schema(engine))
    staging = exp.table_(f"sqlfeed_1_{tag}", db=_schema(engine))
    old = exp.table_(f'old "{tag}', db=_schema(engine))
    renamed = exp.table_(f"Renamed {tag}", db=_schema(engine))
    for name, v in ((table, 1), (staging, 2)):
        engine.execute(f"CREATE TABLE {name.sql(dialect.sqlglot_dialect)} (v INTEGER)")
        engine.execute(f"INSERT INTO {name.sql(dialect.sqlglot_dialect)} VALUES ({v})")
    engine.commit()
    statements = dialect.swap_sql(table, staging, old.name)
    if dialect.TRANSACTIONAL_DDL:
        statements = ["BEGIN", *statements, "COMMIT"]
    else:
        assert len(statements) == 1  # one atomic statement
    _run_on_one_cursor(engine, statements)
    assert _scalar(engine, table, dialect.sqlglot_dialect) == 2
    assert _scalar(engine, old, dialect.sqlglot_dialect) == 1
    for sql in dialect.rename_sql(old, renamed.name):
        engine.execute(sql)
    engine.commit()
    assert _scalar(engine, renamed, dialect.sqlglot_dialect) == 1
    for name in (table, renamed):
        engine.execute(f"DROP TABLE {name.sql(dialect.sqlglot_dialect)}")
    engine.commit()


def test_finish_lock_is_taken_and_released(engine: Engine) -> None:
    dialect = get_dialect(engine.name)
    lock = dialect.finish_lock_sql(f"sqlfeed finish {uuid.uuid4().hex[:8]}")
    if engine.name in ("sqlite", "duckdb"):
        assert lock is None
        return
    assert lock is not None
    take, release = lock
    if dialect.TRANSACTIONAL_DDL:
        engine.execute("BEGIN")
    engine.rows(take)
    if release:
        assert engine.rows(release) == [(1,)]
    if dialect.TRANSACTIONAL_DDL:
        engine.execute("COMMIT")


@pytest.mark.parametrize(
    ("name", "rename", "swap"),
    [
        (
            "postgres",
            'ALTER TABLE "s x"."my table" RENAME TO "new"',
            [
                'ALTER TABLE "s x"."my table" RENAME TO "old"',
                'ALTER TABLE "s x".stage RENAME TO "my table"',
            ],
        ),
        (
            "mysql",
            "RENAME TABLE `s x`.`my table` TO `s x`.`new`",
            ["RENAME TABLE `s x`.`my table` TO `s x`.`old`, `s x`.stage TO `s x`.`my table`"],
        ),
        (
            "duckdb",
            'ALTER TABLE "s x"."my table" RENAME TO "new"',
            [
                'ALTER TABLE "s x"."my table" RENAME TO "old"',
                'ALTER TABLE "s x".stage RENAME TO "my table"',
            ],
        ),
    ],
)
def test_rename_and_swap_quote_both_names(name: str, rename: str, swap: list[str]) -> None:
    dialect = get_dialect(name)
    table = exp.table_("my table", db="s x")
    assert dialect.rename_sql(table, "new") == [rename]
    assert dialect.swap_sql(table, exp.table_("stage", db="s x"), "old") == swap


def test_an_unquoted_identifier_keeps_the_engines_case_rule() -> None:
    table = exp.table_("t", db="s")
    unquoted = exp.to_identifier("Plain")
    assert get_dialect("postgres").rename_sql(table, unquoted) == [
        "ALTER TABLE s.t RENAME TO Plain"
    ]
    assert get_dialect("postgres").rename_sql(table, "Plain") == [
        'ALTER TABLE s.t RENAME TO "Plain"'
    ]


def test_flags_and_bad_kinds() -> None:
    flags = {n: get_dialect(n) for n in ("postgres", "mysql", "sqlite", "duckdb", "trino")}
    assert {n: d.TRANSACTIONAL_DDL for n, d in flags.items()} == {
        "postgres": True,
        "mysql": False,
        "sqlite": True,
        "duckdb": True,
        "trino": False,
    }
    assert {n: d.SINK_TZ_AS_UTC for n, d in flags.items()} == {
        "postgres": False,
        "mysql": True,
        "sqlite": True,
        "duckdb": False,
        "trino": False,
    }
    assert get_dialect("mysql").sink_type("decimal", precision=66, scale=2) is None
    assert get_dialect("mysql").sink_type("decimal", precision=65, scale=31) is None
    assert get_dialect("duckdb").sink_type("decimal", precision=39, scale=0) is None
    assert get_dialect("postgres").sink_type("decimal", precision=200, scale=20) == (
        "NUMERIC(200,20)"
    )
    assert get_dialect("duckdb").sink_type("timestamp", unit="ns", tz="UTC") is None
    assert get_dialect("trino").sink_type("timestamp", tz="UTC") is None
    with pytest.raises(InvalidArgumentError, match="unknown value kind 'float16'"):
        get_dialect("postgres").sink_type("float16")
