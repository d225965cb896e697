"""Every SQLite reader (ADBC, connectorx, sqlite3) returns exactly the query's rows in the
plan's types, whatever SQLite's dynamic typing holds: NULLs (also in a column's first row),
unicode text, negative and int64 edge numbers, reals in an INTEGER column, numbers in a
TEXT-affinity-less column, BOOLEAN columns holding 2, dates and datetimes as text, blobs.
Queries calling sqlfeed's own functions (hash partitions) are read by sqlite3. ADBC, which
types a column by its first batch and turns some later values into that type, reads only
columns whose declared affinity rules that out, falls back before its first batch and
fails in one line after it; it keeps one connection per reading thread.

The expected values come from the ``sqlite3`` module directly.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io import SQLiteSource, connect
from sqlfeed.io.sqlite import SQLITE_HINT
from tests.helpers.sources import SourceFactory, require_module

READERS = ("adbc", "connectorx", "sqlite3")
MODULES = {"adbc": "adbc_driver_sqlite", "connectorx": "connectorx", "sqlite3": "sqlite3"}

ROWS: list[tuple[Any, ...]] = [
    (1, None, None, None, None, None, None, None, None),
    (
        2,
        -9223372036854775808,
        -1.5,
        "héllo 🐍",
        "2024-02-29",
        "2024-02-29 12:00:00.5",
        b"\x00\xff",
        1,
        7,
    ),
    (
        3,
        9223372036854775807,
        1e300,
        "日本語 'q' \\",
        "0001-01-01",
        "9999-12-31 23:59:59",
        b"",
        0,
        "seven",
    ),
    (4, 0, -0.0, "", "2024-13-45", "not a date", b"\x01" * 300, 2, 7.5),
]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-reader") / "types.db"
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, r REAL, txt TEXT, day DATE,"
            " at DATETIME, data BLOB, flag BOOLEAN, anything)"
        )
        connection.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
        connection.execute("CREATE TABLE i (id INTEGER PRIMARY KEY, x INTEGER)")
        connection.executemany("INSERT INTO i VALUES (?, ?)", [(1, 1), (2, 2.5), (3, -3)])
        connection.execute(
            "CREATE TABLE typed (id INTEGER PRIMARY KEY, n BIGINT, r DOUBLE, txt VARCHAR(20),"
            " flag BOOLEAN)"
        )
        connection.executemany("INSERT INTO typed VALUES (?, ?, ?, ?, ?)", TYPED)
    connection.close()
    return path


TYPED: list[tuple[Any, ...]] = [
    (1, None, None, None, None),
    (2, -9223372036854775808, -1.5, "héllo 🐍", 1),
    (3, 9223372036854775807, 1e300, "日本語 'q' \\", 0),
    (4, 0, -0.0, "", 2),
    (5, 42, 2.0, "2024-02-29", None),
]
"""Declared INTEGER, REAL and TEXT affinities, each holding only its own kind: ADBC's."""


def _require(reader: str) -> None:
    require_module(MODULES[reader])


@pytest.fixture(params=READERS)
def source(
    request: pytest.FixtureRequest, database: Path, make_source: SourceFactory
) -> SQLiteSource:
    reader = request.param
    opened = make_source(f"sqlite:///{database}", readers=(reader,), requires=MODULES[reader])
    assert isinstance(opened, SQLiteSource)
    return opened


def _expected(database: Path, sql: str) -> list[dict[str, Any]]:
    with sqlite3.connect(database) as connection:
        cursor = connection.execute(sql)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    connection.close()
    return rows


def _as_planned(rows: list[dict[str, Any]], schema: pa.Schema) -> list[dict[str, Any]]:
    """sqlite3's values in the plan's types (text columns: numbers as their text)."""
    out = []
    for row in rows:
        fixed = {}
        for name, value in row.items():
            wanted = schema.field(name).type
            if pa.types.is_string(wanted) and value is not None and not isinstance(value, str):
                value = str(value)
            elif pa.types.is_floating(wanted) and isinstance(value, int):
                value = float(value)
            fixed[name] = value
        out.append(fixed)
    return out


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t ORDER BY id",
        "SELECT id, n, r, txt, day, at, data FROM t WHERE id > 1 ORDER BY id",
        "SELECT id, flag, anything FROM t WHERE id > 1 ORDER BY id",
        "SELECT id, x FROM i ORDER BY id",
        "SELECT id, n * 2 AS twice, r / 2 AS half FROM t WHERE id > 1 ORDER BY id",
        "SELECT * FROM typed ORDER BY id",
        "SELECT typed.txt AS label, r, n FROM typed WHERE id > 1 ORDER BY id",
    ],
)
def test_every_reader_returns_the_rows_in_the_plans_types(
    source: SQLiteSource, database: Path, sql: str
) -> None:
    schema = source.schema(sql)
    table = source.read_table(sql, schema=schema)
    assert table.schema == schema
    assert table.to_pylist() == _as_planned(_expected(database, sql), schema)


def test_the_plans_types_of_sqlites_values(source: SQLiteSource) -> None:
    schema = source.schema("SELECT * FROM t WHERE id > 1")
    assert dict(zip(schema.names, schema.types, strict=True)) == {
        "id": pa.int64(),
        "n": pa.int64(),
        "r": pa.float64(),
        "txt": pa.string(),
        "day": pa.string(),
        "at": pa.string(),
        "data": pa.binary(),
        "flag": pa.int64(),
        "anything": pa.string(),
    }
    assert source.schema("SELECT x FROM i").field("x").type == pa.float64()


def test_hash_partitions_are_read_by_sqlite3_with_every_row_once(source: SQLiteSource) -> None:
    sql = "SELECT id, txt FROM t"
    plan = sqlfeed.plan(sql, source, strategy="hash", partitions=3)
    assert source.reader_for(plan.partitions[0].sql) == "sqlite3"
    ids = [i for p in plan.partitions for i in source.read_table(p.sql).column("id").to_pylist()]
    assert sorted(ids) == [1, 2, 3, 4]


def test_connectorx_reads_plain_queries_on_files(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQLFEED_SQLITE_READERS", raising=False)
    with connect(f"sqlite:///{database}") as opened:
        assert isinstance(opened, SQLiteSource)
        expected = "connectorx" if importlib.util.find_spec("connectorx") else "sqlite3"
        assert opened.reader_for("SELECT * FROM t") == expected  # not ADBC: untyped columns
    with connect("sqlite://") as memory:
        assert isinstance(memory, SQLiteSource)
        assert memory.reader_for("SELECT 1") == "sqlite3"


@pytest.mark.parametrize(
    ("sql", "adbc"),
    [
        ("SELECT * FROM typed", True),
        ("SELECT txt AS label, x.r FROM typed AS x WHERE n > 0", True),
        ("SELECT id * 2 AS twice, n FROM typed", True),  # integers: ADBC fails on others
        ("SELECT id, r / 2 AS half FROM typed", False),  # an expression: no affinity
        ("SELECT id, x FROM i", False),  # reals in an INTEGER column: floats, not REAL
        ("SELECT id, txt FROM t", True),
        ("SELECT id, anything FROM t", False),  # no declared type: may hold numbers
        ("SELECT id, data FROM t", False),  # bytes: a number would become its text
        ("SELECT id, txt FROM (SELECT * FROM typed) AS s", False),  # not a plain table
    ],
)
def test_adbc_reads_only_columns_whose_affinity_keeps_their_kind(
    database: Path, monkeypatch: pytest.MonkeyPatch, sql: str, adbc: bool
) -> None:
    _require("adbc")
    monkeypatch.setenv("SQLFEED_SQLITE_READERS", "adbc,sqlite3")
    with connect(f"sqlite:///{database}") as opened:
        assert isinstance(opened, SQLiteSource)
        schema = opened.schema(sql)
        assert opened.reader_for(sql, schema) == ("adbc" if adbc else "sqlite3")
        assert opened.read_table(sql, schema=schema).to_pylist() == _as_planned(
            _expected(database, sql), schema
        )


def test_the_plans_schema_carries_the_affinities_and_batches_do_not(
    database: Path,
) -> None:
    with connect(f"sqlite:///{database}") as opened:
        plan = sqlfeed.plan("SELECT * FROM typed", opened, partitions=2)
        schema = plan.arrow_schema()
        hints = {f.name: (f.metadata or {}).get(SQLITE_HINT) for f in schema}
        assert hints == {
            "id": b"INTEGER",
            "n": b"INTEGER",
            "r": b"REAL",
            "txt": b"TEXT",
            "flag": b"NUMERIC",
        }
        batch = next(opened.read(plan.partitions[0].sql, schema=schema))
        assert batch.schema == schema
        assert all(not f.metadata for f in batch.schema)


def _adbc_source(database: Path) -> SQLiteSource:
    _require("adbc")
    opened = connect(f"sqlite:///{database}")
    assert isinstance(opened, SQLiteSource)
    opened.readers = ("adbc", "sqlite3")
    return opened


def _mixed(tmp_path: Path, rows: list[tuple[Any, ...]]) -> Path:
    """A database whose TEXT column ``txt`` holds ``rows``' values (blobs too), by id."""
    path = tmp_path / "mixed.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, txt TEXT)")
        connection.executemany("INSERT INTO m VALUES (?, ?)", rows)
    connection.close()
    return path


@pytest.mark.parametrize(
    "first",
    [[None, None], [b"\xff\xfe", "a"]],
    ids=["all-null-first-batch", "blob-in-first-batch"],
)
def test_adbc_falls_back_when_its_first_batch_types_a_column_otherwise(
    tmp_path: Path, first: list[Any]
) -> None:
    """ADBC types an all-NULL first batch as integers, a BLOB in a TEXT column as bytes:
    sqlite3 reads the partition, in the plan's types (text, from the rows past those)."""
    rows = [(i, v) for i, v in enumerate([*first, "x", "y", None, "z"], start=1)]
    path = _mixed(tmp_path, rows)
    sql = "SELECT id, txt FROM m ORDER BY id"
    with _adbc_source(path) as opened:
        schema = opened.schema("SELECT id, txt FROM m WHERE id > 2")
        assert schema.field("txt").type == pa.string()
        assert opened.reader_for(sql, schema) == "adbc"
        table = pa.Table.from_batches(list(opened.read(sql, schema=schema, batch_rows=2)))
    assert table.schema == schema
    assert table.column("txt").to_pylist() == [
        v if v is None or isinstance(v, str) else v.decode("utf-8", "replace") for _, v in rows
    ]


def test_adbc_text_that_is_not_utf8_past_its_first_batch_is_a_one_line_error(
    tmp_path: Path,
) -> None:
    """A BLOB in a TEXT column after ADBC's first batch would be text of invalid UTF-8:
    never a value, never a traceback."""
    path = _mixed(tmp_path, [(1, "a"), (2, "b"), (3, "c"), (4, b"\xff\xfe")])
    with _adbc_source(path) as opened:
        schema = opened.schema("SELECT id, txt FROM m WHERE id < 4")
        assert opened.reader_for("SELECT id, txt FROM m", schema) == "adbc"
        with pytest.raises(EngineError, match="partition query") as err:
            for _ in opened.read("SELECT id, txt FROM m", schema=schema, batch_rows=2):
                pass
    assert "\n" not in str(err.value)


def test_adbc_keeps_one_connection_per_reading_thread(database: Path) -> None:
    sql = "SELECT * FROM typed WHERE id = {}"
    with _adbc_source(database) as opened:
        schema = opened.schema("SELECT * FROM typed")
        for k in range(1, 5):
            assert opened.read_table(sql.format(k), schema=schema).num_rows == 1
        assert opened.connections.opened == 1  # every partition on this thread: one
        kept = opened.connections.get().connection
        rows: list[int] = []

        def read_two() -> None:
            for k in (1, 2):
                rows.append(opened.read_table(sql.format(k), schema=schema).num_rows)

        threads = [threading.Thread(target=read_two) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert rows == [1] * 4
        assert opened.connections.opened == 3  # one more per reading thread
        assert opened.connections.get().connection is kept


def test_a_query_error_is_one_line_with_the_databases_message(source: SQLiteSource) -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(EngineError, match="partition query: no such table: missing_t") as err:
        source.read_table("SELECT id FROM missing_t", schema=schema)
    assert "\n" not in str(err.value)


def test_the_readers_come_from_the_environment(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQLFEED_SQLITE_READERS", "sqlite3")
    with connect(f"sqlite:///{database}") as opened:
        assert isinstance(opened, SQLiteSource)
        assert opened.readers == ("sqlite3",)
        assert opened.reader_for("SELECT * FROM t") == "sqlite3"
    monkeypatch.setenv("SQLFEED_SQLITE_READERS", "adbc,sqlite3")
    with connect(f"sqlite:///{database}") as opened:
        assert isinstance(opened, SQLiteSource)
        assert opened.readers == ("adbc", "sqlite3")
    monkeypatch.setenv("SQLFEED_SQLITE_READERS", "fast")
    with pytest.raises(InvalidArgumentError, match=r"SQLFEED_SQLITE_READERS.*'fast'"):
        connect(f"sqlite:///{database}")


def test_a_value_past_the_first_batch_that_does_not_fit_is_a_one_line_error(
    source: SQLiteSource, tmp_path: Path
) -> None:
    """connectorx fails mid-stream (a text value in an INTEGER column): never a panic."""
    path = tmp_path / "late.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE late (x INTEGER)")
        connection.executemany("INSERT INTO late VALUES (?)", [(i,) for i in range(3000)])
        connection.execute("INSERT INTO late VALUES ('abc')")
    connection.close()
    with connect(f"sqlite:///{path}") as opened:
        assert isinstance(opened, SQLiteSource)
        opened.readers = source.readers
        schema = pa.schema([("x", pa.int64())])
        with pytest.raises(EngineError, match="does not fit its column's Arrow type") as err:
            for _ in opened.read("SELECT x FROM late", schema=schema, batch_rows=100):
                pass
    assert "\n" not in str(err.value)


def test_a_real_in_an_integer_column_is_an_error_never_truncated(
    source: SQLiteSource, tmp_path: Path
) -> None:
    """SQLite may hold 4.5 in an INTEGER column; the plan types the column int64 (its
    sample's values), so whichever reader reads it, 4.5 is a one-line error, not 4; a
    whole 7.0 is the integer 7."""
    path = tmp_path / "reals.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE m (id INTEGER, x INTEGER)")
        connection.executemany("INSERT INTO m VALUES (?, ?)", [(i, i) for i in range(50)])
        connection.execute("INSERT INTO m VALUES (50, 7.0), (51, 4.5)")
    connection.close()
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    with connect(f"sqlite:///{path}") as opened:
        assert isinstance(opened, SQLiteSource)
        opened.readers = source.readers
        whole = opened.read_table("SELECT id, x FROM m WHERE id <= 50 ORDER BY id", schema=schema)
        assert whole.column("x").to_pylist() == [*range(50), 7]
        with pytest.raises(EngineError, match="does not fit its column's Arrow type") as err:
            opened.read_table("SELECT id, x FROM m ORDER BY id", schema=schema)
    assert "4.5" in str(err.value)
    assert "\n" not in str(err.value)


def _read_in_child(database: str, answers: Any) -> None:
    with connect(f"sqlite:///{database}") as opened:
        assert isinstance(opened, SQLiteSource)
        table = opened.read_table("SELECT id, n, txt FROM t ORDER BY id")
        answers.put((opened.reader_for("SELECT id FROM t"), table.column("id").to_pylist()))


def test_a_process_forked_after_a_connectorx_read_reads_with_sqlite3(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """connectorx's runtime does not survive fork (DataLoader workers): the child must not
    take it, and must still read every row."""
    monkeypatch.setenv("SQLFEED_SQLITE_READERS", "connectorx,sqlite3")  # the child's too
    _require("connectorx")
    with connect(f"sqlite:///{database}") as opened:
        assert opened.reader_for("SELECT id FROM t") == "connectorx"
        assert opened.read_table("SELECT id FROM t").num_rows == len(ROWS)
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(database), answers))
    child.start()
    child.join(60)
    assert child.exitcode == 0, f"the forked reader exited with {child.exitcode}"
    reader, ids = answers.get(timeout=5)
    assert reader == "sqlite3"
    assert ids == [row[0] for row in ROWS]


def _read_with_the_parents_source(opened: SQLiteSource, schema: pa.Schema, answers: Any) -> None:
    table = opened.read_table("SELECT * FROM typed ORDER BY id", schema=schema)
    answers.put((opened.connections.opened, table.column("id").to_pylist()))


def test_a_forked_process_opens_its_own_adbc_connection(database: Path) -> None:
    """A child forked while its parent keeps an ADBC connection (DataLoader workers) reads
    through one of its own, and leaves the parent's open."""
    sql = "SELECT * FROM typed ORDER BY id"
    with _adbc_source(database) as opened:
        schema = opened.schema(sql)
        assert opened.read_table(sql, schema=schema).num_rows == len(TYPED)
        assert opened.connections.opened == 1
        context = multiprocessing.get_context("fork")
        answers = context.Queue()
        child = context.Process(
            target=_read_with_the_parents_source, args=(opened, schema, answers)
        )
        child.start()
        child.join(60)
        assert child.exitcode == 0, f"the forked reader exited with {child.exitcode}"
        opened_in_child, ids = answers.get(timeout=5)
        assert opened_in_child == 2  # the parent's one, and its own
        assert ids == [row[0] for row in TYPED]
        assert opened.read_table(sql, schema=schema).num_rows == len(TYPED)
        assert opened.connections.opened == 1
