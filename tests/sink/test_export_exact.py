"""``sqlfeed export --into`` (issue #27): a query's rows copied into a table of another
engine, exactly, on the four real engines both ways; its modes and its refusals.

The input is a table of every Arrow type the readers produce, written into the source
engine with ``sqlfeed.write_table``; it is read back with sqlfeed, exported into the target
with the CLI (in-process), and the output read back with sqlfeed must equal the input
value for value, where the target keeps another representation normalised to it (SQLite
keeps decimals, dates and timestamps as their exact text; MySQL and SQLite keep a zoned
timestamp as the naive UTC time of its instant: instants are compared).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import get_dialect
from sqlfeed.sink.columns import arrow_kind
from tests.helpers.cli import run_cli
from tests.helpers.engines import (
    MYSQL_URL,
    POSTGRES_URL,
    EngineUnavailable,
    ServerEngine,
    open_engine,
    write_through_sqlfeed,
)

pytestmark = pytest.mark.slow  # 20 to 30 s over the four engines, more under load

PARIS = dt.timezone(dt.timedelta(hours=1))
NAIVE = [
    dt.datetime(2024, 2, 29, 12, 34, 56, 123456),
    dt.datetime(1970, 1, 1),
    dt.datetime(2038, 1, 19, 3, 14, 8, 1),
    dt.datetime(1900, 1, 1, 0, 0, 0, 999999),
]
AWARE = [
    dt.datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=PARIS),
    dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 31, 1, 59, 59, tzinfo=PARIS),
    dt.datetime(2000, 12, 31, 23, 59, 59, 999999, tzinfo=PARIS),
]

# name: (Arrow type, 4 values; a 5th row of NULLs is added to every column)
COLUMNS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "i8": (pa.int8(), [-128, 127, 0, -1]),
    "i16": (pa.int16(), [-32768, 32767, 0, 1]),
    "i32": (pa.int32(), [-(2**31), 2**31 - 1, 0, 7]),
    "i64": (pa.int64(), [-(2**63), 2**63 - 1, 0, 2**53 + 1]),
    "u8": (pa.uint8(), [0, 255, 1, 128]),
    "u16": (pa.uint16(), [0, 65535, 1, 32768]),
    "u32": (pa.uint32(), [0, 2**32 - 1, 1, 2**31]),
    "u64": (pa.uint64(), [0, 2**64 - 1, 1, 2**63]),
    "f32": (pa.float32(), [float(np.float32(0.1)), -1.5, float(np.float32(3.4e38)), 0.0]),
    "f64": (pa.float64(), [1 / 3, -2.5e-300, 1.7976931348623157e308, 5e-324]),
    "f64_nan": (pa.float64(), [math.nan, 1.0, math.nan, -1.0]),
    "f64_inf": (pa.float64(), [math.inf, -math.inf, 0.5, math.inf]),
    "d12": (
        pa.decimal128(12, 2),
        [decimal.Decimal(v) for v in ("0.10", "-9999999999.99", "0.00", "12.30")],
    ),
    "d38": (
        pa.decimal128(38, 10),
        [
            decimal.Decimal(v)
            for v in (
                "-1234567890123456789012345678.0123456789",
                "0.0000000001",
                "0E-10",
                "9999999999999999999999999999.9999999999",
            )
        ],
    ),
    "ts": (pa.timestamp("us"), NAIVE),
    "ts_utc": (pa.timestamp("us", tz="UTC"), [t.replace(tzinfo=dt.UTC) for t in NAIVE]),
    "ts_paris": (pa.timestamp("us", tz="+01:00"), AWARE),
    "day": (
        pa.date32(),
        [dt.date(2024, 2, 29), dt.date(1970, 1, 1), dt.date(9999, 12, 31), dt.date(1000, 1, 1)],
    ),
    "flag": (pa.bool_(), [True, False, True, False]),
    "txt": (pa.string(), ["h€llo 😀 日本", "", "'q' \"d\" \\ %s ?", "tab\tnew\nline\r"]),
    "raw": (pa.binary(), [b"", b"\x00", b"\x00\xff'\\", bytes(range(256))]),
}

PAIRS = [
    ("duckdb", "postgres"),
    ("postgres", "mysql"),
    ("mysql", "sqlite"),
    ("sqlite", "duckdb"),
    ("postgres", "duckdb"),
    ("duckdb", "mysql"),
    ("mysql", "postgres"),
    ("sqlite", "postgres"),
    ("duckdb", "sqlite"),
    ("sqlite", "mysql"),
    ("mysql", "duckdb"),
    ("postgres", "sqlite"),
]


class Endpoint:
    """A database a test writes into: its URL, and how a table in it is named."""

    def __init__(self, name: str, url: str, schema: str | None) -> None:
        self.name = name
        self.url = url
        self.schema = schema
        self.dialect = get_dialect(name)

    def table(self, name: str) -> str:
        """``name`` as the CLI's ``--into`` and a query name it (schema-qualified on
        PostgreSQL, whose URL's default schema is shared)."""
        return f"{self.schema}.{name}" if self.name == "postgres" else name

    def arrow(self, sql: str) -> pa.Table:
        with sqlfeed.connect(self.url) as source:
            return source.arrow(sql)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlfeed.connect(self.url) as source:
            return source.rows(sql)

    def execute(self, statements: list[str]) -> None:
        """Run DDL/DML through the engine's own driver."""
        write_through_sqlfeed(self.url, statements)

    def sqlfeed_tables(self) -> list[str]:
        """The tables named like sqlfeed's staging and commits tables in our schema."""
        like = "name LIKE 'sqlfeed%'"
        if self.name == "sqlite":
            sql = f"SELECT name FROM sqlite_master WHERE type = 'table' AND {like}"
        else:
            schema = self.schema or "main"
            sql = (
                "SELECT table_name AS name FROM information_schema.tables "
                f"WHERE table_schema = '{schema}' AND table_name LIKE 'sqlfeed%'"
            )
        return sorted(str(r[0]) for r in self.rows(sql))

    def primary_key(self, table: str) -> list[str]:
        """The primary key columns of ``table`` (unqualified name), from the catalog."""
        if self.name == "sqlite":
            info = self.rows(f"SELECT name, pk FROM pragma_table_info('{table}') WHERE pk > 0")
            return [str(n) for n, _ in sorted(info, key=lambda r: r[1])]
        if self.name == "duckdb":
            rows = self.rows(
                "SELECT constraint_column_names FROM duckdb_constraints() WHERE "
                f"table_name = '{table}' AND constraint_type = 'PRIMARY KEY'"
            )
            return [str(c) for c in rows[0][0]] if rows else []
        rows = self.rows(
            "SELECT k.column_name FROM information_schema.table_constraints c JOIN "
            "information_schema.key_column_usage k ON k.constraint_name = c.constraint_name "
            "AND k.table_schema = c.table_schema AND k.table_name = c.table_name WHERE "
            f"c.constraint_type = 'PRIMARY KEY' AND c.table_schema = '{self.schema}' AND "
            f"c.table_name = '{table}' ORDER BY k.ordinal_position"
        )
        return [str(r[0]) for r in rows]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerEngine | None]]:
    """A PostgreSQL schema and a MariaDB database of this run (None: server down)."""
    found: dict[str, ServerEngine | None] = {}
    for name in ("postgres", "mysql"):
        try:
            engine = open_engine(name)
        except EngineUnavailable:
            engine = None
        assert engine is None or isinstance(engine, ServerEngine)
        found[name] = engine
    yield found
    for engine in found.values():
        if engine is not None:
            engine.close()


@pytest.fixture
def endpoints(servers: dict[str, ServerEngine | None], tmp_path: Path) -> dict[str, Any]:
    """``endpoints(name)``: an :class:`Endpoint` on engine ``name`` (skips if it is down)."""

    def make(name: str) -> Endpoint:
        if name == "duckdb":
            path = tmp_path / "db.duckdb"
            duckdb.connect(str(path)).close()  # a source file must exist
            return Endpoint(name, f"duckdb:///{path}", None)
        if name == "sqlite":
            return Endpoint(name, f"sqlite:///{tmp_path / 'db.sqlite'}", None)
        engine = servers[name]
        if engine is None:
            pytest.skip(f"{name} server unreachable")
        if name == "postgres":
            url = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        else:
            netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
            url = f"mysql+pymysql://{netloc}/{engine.schema}"
        return Endpoint(name, url, engine.schema)

    return {"make": make}


def _held_columns(source: Endpoint, target: Endpoint) -> dict[str, tuple[pa.DataType, list[Any]]]:
    """The columns both engines hold (NaN and the infinities only where both do)."""
    held = {}
    for name, (arrow_type, values) in COLUMNS.items():
        if name == "f64_nan" and not (source.dialect.FLOAT_NAN and target.dialect.FLOAT_NAN):
            continue
        if name == "f64_inf" and not (
            source.dialect.FLOAT_INFINITY and target.dialect.FLOAT_INFINITY
        ):
            continue
        kind, params = arrow_kind(arrow_type)
        if all(e.dialect.sink_type(kind, **params) is not None for e in (source, target)):  # type: ignore[arg-type]
            held[name] = (arrow_type, values)
    return held


def _input_table(columns: dict[str, tuple[pa.DataType, list[Any]]]) -> pa.Table:
    arrays = {"id": pa.array([1, 2, 3, 4, 5], pa.int64())}
    for name, (arrow_type, values) in columns.items():
        arrays[name] = pa.array([*values, None], arrow_type)
    return pa.table(arrays)


def _canon(value: Any, like: Any, arrow_type: pa.DataType) -> Any:
    """``value`` in the representation of ``like`` (the input's; ``arrow_type``: the type
    the test wrote), to compare them."""
    if value is None:
        return None
    if pa.types.is_float32(arrow_type) and isinstance(value, float) and not math.isnan(value):
        return float(np.float32(value))  # PostgreSQL's REAL reads as its shortest double
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(like, dt.datetime):
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        if value.tzinfo is not None:  # compare instants
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(like, dt.date) and isinstance(value, str):
        return dt.date.fromisoformat(value)
    if isinstance(like, decimal.Decimal) and isinstance(value, (str, int)):
        return decimal.Decimal(value)
    if isinstance(like, bool):
        return bool(value) if value in (0, 1) else value
    if isinstance(like, int) and isinstance(value, decimal.Decimal) and value == int(value):
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _assert_same(got: pa.Table, want: pa.Table, what: str) -> None:
    assert got.column_names == want.column_names, what
    for name in want.column_names:
        arrow_type = COLUMNS[name][0] if name in COLUMNS else want.schema.field(name).type
        for row, (g, w) in enumerate(
            zip(got.column(name).to_pylist(), want.column(name).to_pylist(), strict=True)
        ):
            same = _canon(g, w, arrow_type) == _canon(w, w, arrow_type)
            assert same, f"{what}: {name} row {row}: {g!r} != {w!r}"
            if isinstance(w, decimal.Decimal) and isinstance(g, (str, decimal.Decimal)):
                assert decimal.Decimal(g).as_tuple().exponent == w.as_tuple().exponent, (
                    f"{what}: {name} row {row}: scale {g!r} != {w!r}"
                )


def _into(source: Endpoint, target: Endpoint, table: str, sql: str, *extra: str) -> Any:
    return run_cli(
        [
            "export",
            "--db",
            source.url,
            "--into-db",
            target.url,
            "--into",
            target.table(table),
            "--format",
            "json",
            *extra,
            sql,
        ]
    )


@pytest.mark.parametrize(("from_", "to"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_export_into_is_exact(from_: str, to: str, endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"](from_), endpoints["make"](to)
    if from_ == to:
        pytest.skip("one engine")
    columns = _held_columns(source, target)
    tag = uuid.uuid4().hex[:8]
    sqlfeed.write_table(_input_table(columns), source.url, source.table(f"src_{tag}"))
    names = ", ".join(["id", *columns])
    select = f"SELECT {names} FROM {source.table(f'src_{tag}')}"
    want = source.arrow(f"{select} ORDER BY id")
    _assert_same(want, _input_table(columns), f"{from_} input")  # the input itself is exact
    run = _into(source, target, f"out_{tag}", select, "--partitions", "3", "--readers", "2")
    assert run.code == 0, run.err
    assert '"rows": 5' in run.out, run.out
    assert '"mode": "create"' in run.out, run.out
    got = target.arrow(f"SELECT {names} FROM {target.table(f'out_{tag}')} ORDER BY id")
    _assert_same(got, want, f"{from_} -> {to}")
    _assert_kinds_kept(got.schema, want.schema, target)
    assert target.sqlfeed_tables() == []


def _assert_kinds_kept(got: pa.Schema, want: pa.Schema, target: Endpoint) -> None:
    """Typed values stay typed (SQLite keeps some as text); zoned timestamps stay zoned
    where the target keeps zones."""
    for field in want:
        out = got.field(field.name).type
        if target.name != "sqlite" and not pa.types.is_string(field.type):
            assert not pa.types.is_string(out), (field, out)
        if pa.types.is_timestamp(field.type) and pa.types.is_timestamp(out):
            zoned = field.type.tz is not None and not target.dialect.SINK_TZ_AS_UTC
            assert (out.tz is not None) == zoned, (field, out)


def test_modes_create_replace_append(endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"]("duckdb"), endpoints["make"]("postgres")
    tag = uuid.uuid4().hex[:8]
    out = target.table(f"modes_{tag}")
    ten = "SELECT range AS id, 'r' || range AS v FROM range(10)"
    assert _into(source, target, f"modes_{tag}", ten, "--partitions", "4").code == 0
    run = _into(source, target, f"modes_{tag}", ten.replace("10", "3"), "--mode", "replace")
    assert run.code == 0, run.err
    assert '"mode": "replace"' in run.out
    assert target.rows(f"SELECT COUNT(*) FROM {out}") == [(3,)]
    run = _into(source, target, f"modes_{tag}", ten.replace("10", "4"), "--mode", "append")
    assert run.code == 0, run.err
    rows = target.rows(f"SELECT id, v FROM {out} ORDER BY id, v")
    assert sorted(rows) == sorted([(i, f"r{i}") for n in (3, 4) for i in range(n)])
    identity = target.rows(
        f"SELECT COUNT(*), COUNT(DISTINCT (_sqlfeed_partition, _sqlfeed_row)) FROM {out}"
    )
    assert identity == [(7, 7)]
    assert target.sqlfeed_tables() == []


def _one_line_exit_2(run: Any) -> str:
    assert run.code == 2, (run.code, run.err)
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    return str(lines[0])


def test_refusals_write_nothing(endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"]("duckdb"), endpoints["make"]("postgres")
    tag = uuid.uuid4().hex[:8]
    out = target.table(f"ref_{tag}")
    five = "SELECT range AS id FROM range(5)"
    assert _into(source, target, f"ref_{tag}", five).code == 0
    line = _one_line_exit_2(_into(source, target, f"ref_{tag}", five.replace("5", "9")))
    assert "exists: give --mode replace" in line, line
    assert target.rows(f"SELECT COUNT(*) FROM {out}") == [(5,)]
    line = _one_line_exit_2(
        _into(source, target, f"ref_{tag}", five.replace("id", "other"), "--mode", "append")
    )
    assert "append needs the same columns" in line, line
    line = _one_line_exit_2(
        _into(source, target, f"list_{tag}", "SELECT [range, 1] AS numbers FROM range(3)")
    )
    assert "column 'numbers'" in line, line
    line = _one_line_exit_2(_into(source, target, f"gone_{tag}", five, "--mode", "append"))
    assert "does not exist" in line, line
    line = _one_line_exit_2(_into(source, target, f"key_{tag}", five, "--key", "nope"))
    assert "--key nope is not a column" in line, line
    assert target.rows(f"SELECT COUNT(*) FROM {out}") == [(5,)]
    assert target.sqlfeed_tables() == []
    tables = target.rows(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = "
        f"'{target.schema}' AND table_name LIKE '%{tag}'"
    )
    assert tables == [(f"ref_{tag}",)]


def test_cli_refusals_before_anything_runs(endpoints: dict[str, Any]) -> None:
    source = endpoints["make"]("duckdb")
    base = ["export", "--db", source.url]
    cases = [
        ([*base, "SELECT 1"], "--out PATH"),
        ([*base, "--into", "t", "--as", "csv", "SELECT 1"], "--as goes with --out"),
        ([*base, "--out", "x.parquet", "--mode", "append", "SELECT 1"], "--mode goes with --into"),
        ([*base, "--into", "t", "--queue", "sqlite:///q.db", "SELECT 1"], "--queue and --job"),
        ([*base, "--into", "t", "--finish"], "--finish"),
        ([*base, "--into", "t", "--strategy", "hash", "SELECT 1"], "--strategy"),
        ([*base, "--into", " ", "SELECT 1"], "--into ' ' is not a table name: it is empty"),
        ([*base, "--into", "t"], "SQL"),
        ([*base, "--into", "t", "--readers", "0", "SELECT 1"], "--readers"),
    ]
    for argv, needle in cases:
        run = run_cli(argv)
        assert run.code == 2, (argv, run.err)
        assert needle in run.err, (argv, run.err)
        assert len(run.err.strip().splitlines()) == 1, (argv, run.err)
    run = run_cli([*base, "--into", "t", "--out", "x.parquet", "SELECT 1"])
    assert run.code == 2
    assert "not allowed with" in run.err


@pytest.mark.parametrize("to", ["mysql", "duckdb", "sqlite"])
def test_a_unique_key_becomes_the_primary_key(to: str, endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"]("postgres"), endpoints["make"](to)
    tag = uuid.uuid4().hex[:8]
    src = source.table(f"keyed_{tag}")
    source.execute(
        [
            f"CREATE TABLE {src} (id INTEGER PRIMARY KEY, v TEXT)",
            f"INSERT INTO {src} SELECT g, 'v' || g FROM generate_series(1, 50) g",
        ]
    )
    select = f"SELECT id, v FROM {src}"
    run = _into(source, target, f"pk_{tag}", select, "--key", "id", "--partitions", "4")
    assert run.code == 0, run.err
    assert target.primary_key(f"pk_{tag}") == ["id"]
    got = target.arrow(f"SELECT * FROM {target.table(f'pk_{tag}')} ORDER BY id")
    assert got.column_names == ["id", "v"]
    assert got.column("id").to_pylist() == list(range(1, 51))
    run = _into(source, target, f"nokey_{tag}", select, "--partitions", "4")
    assert run.code == 0, run.err
    assert target.primary_key(f"nokey_{tag}") == []
    out = target.table(f"nokey_{tag}")
    got = target.arrow(f"SELECT * FROM {out}")
    assert got.column_names == ["id", "v", "_sqlfeed_partition", "_sqlfeed_row"]
    pairs = set(zip(got.column(2).to_pylist(), got.column(3).to_pylist(), strict=True))
    assert len(pairs) == got.num_rows == 50
    assert target.sqlfeed_tables() == []


def test_a_queue_job_and_finish(endpoints: dict[str, Any], tmp_path: Path) -> None:
    source, target = endpoints["make"]("duckdb"), endpoints["make"]("sqlite")
    queue = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    endpoints["make"]("postgres")  # skips when the queue's server is down
    job = f"into-{uuid.uuid4().hex[:8]}"
    select = "SELECT range AS id FROM range(100)"
    run = _into(source, target, "queued", select, "--queue", queue, "--job", job)
    assert run.code == 0, run.err
    assert target.rows("SELECT COUNT(*) FROM queued") == [(100,)]
    finish = ["--into-db", target.url, "--into", "queued", "--queue", queue, "--job", job]
    run = run_cli(["export", "--db", source.url, *finish, "--finish", "--format", "json"])
    assert run.code == 0, run.err
    assert '"finished_by": "before"' in run.out, run.out
    finish[3] = "other"
    line = _one_line_exit_2(run_cli(["export", "--db", source.url, *finish, "--finish"]))
    assert "writes queued, not other" in line, line
    assert target.sqlfeed_tables() == []


def test_an_unquoted_name_keeps_the_engines_case_rule(endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"]("duckdb"), endpoints["make"]("postgres")
    tag = uuid.uuid4().hex[:8]
    name = f"Mixed_{tag}"
    five = "SELECT range AS id FROM range(5)"
    assert _into(source, target, name, five).code == 0
    assert target.rows(f"SELECT COUNT(*) FROM {target.table(name)}") == [(5,)]
    run = _into(source, target, name, five.replace("5", "2"), "--mode", "replace")
    assert run.code == 0, run.err
    assert target.rows(f"SELECT COUNT(*) FROM {target.table(name)}") == [(2,)]


def test_a_keyed_append_into_a_table_with_row_identity(endpoints: dict[str, Any]) -> None:
    source, target = endpoints["make"]("postgres"), endpoints["make"]("duckdb")
    tag = uuid.uuid4().hex[:8]
    src = source.table(f"pk_src_{tag}")
    source.execute(
        [
            f"CREATE TABLE {src} (id INTEGER PRIMARY KEY, v TEXT)",
            f"INSERT INTO {src} SELECT g, 'v' || g FROM generate_series(1, 10) g",
        ]
    )
    select = f"SELECT id, v FROM {src}"
    assert _into(source, target, f"ident_{tag}", select).code == 0
    run = _into(source, target, f"ident_{tag}", select, "--mode", "append", "--key", "id")
    assert target.sqlfeed_tables() == []
    assert run.code == 2, run.err
    assert "identifies its rows by _sqlfeed_partition" in run.err, run.err
    assert target.rows(f"SELECT COUNT(*) FROM ident_{tag}") == [(10,)]
