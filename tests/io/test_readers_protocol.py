"""The reader protocol: a frozen ReadRequest, one reader table per engine, readers chosen by
``connect(url, readers=[...])``, and the one fallback chain every engine shares (before
the first batch: the next reader; after it: the engine's one-line error, no row read
twice), on the real engines.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io import Reader, ReadRequest, Source, connect
from sqlfeed.io import duckdb as duckdb_io
from sqlfeed.io import mysql as mysql_io
from sqlfeed.io import postgres as postgres_io
from sqlfeed.io import sqlite as sqlite_io
from sqlfeed.io.readers import compatible
from tests.conftest import get_engine
from tests.helpers.engines import POSTGRES_URL

PG_URL = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)

TABLES = {
    "postgres": postgres_io.READER_TABLE,
    "mysql": mysql_io.READER_TABLE,
    "sqlite": sqlite_io.READER_TABLE,
    "duckdb": duckdb_io.READER_TABLE,
}

LAST = {"postgres": "psycopg", "mysql": "pymysql", "sqlite": "sqlite3"}
"""Each engine's last reader: it carries every type."""

QUERY = {
    "postgres": "SELECT i AS id, 'r' || i AS name FROM generate_series(1, 3000) AS g(i)",
    "mysql": "SELECT id, name FROM people",
    "sqlite": "SELECT id, name FROM people",
}


def _source(engine: str, readers: list[str] | None = None) -> Any:
    if engine == "postgres":
        get_engine("postgres")  # skips when the server is down
        return connect(PG_URL, readers=readers)
    source = get_engine(engine).source()
    if readers is not None:
        source.use_readers(readers)
    return source


def _spy(source: Source, name: str, monkeypatch: pytest.MonkeyPatch) -> list[ReadRequest]:
    """The requests the reader ``name`` of ``source`` is asked to read, as it reads them."""
    reader = source.reader_table()[name]
    real = reader.batches
    seen: list[ReadRequest] = []

    def batches(request: ReadRequest) -> Iterator[pa.RecordBatch]:
        seen.append(request)
        return real(request)

    monkeypatch.setattr(reader, "batches", batches)
    return seen


# -- ReadRequest, reader tables ---------------------------------------------------------------


def test_a_read_request_is_a_frozen_value() -> None:
    schema = pa.schema([("a", pa.int64())])
    request = ReadRequest("SELECT 1 AS a", schema, 10, threading.Event(), rows=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.sql = "SELECT 2 AS a"  # type: ignore[misc]
    assert request == ReadRequest("SELECT 1 AS a", schema, 10, rows=5)  # the stop aside
    assert (request.ordered, request.snapshot, request.stopped) == (False, None, False)
    assert dataclasses.replace(request, ordered=True).ordered


@pytest.mark.parametrize("engine", sorted(TABLES))
def test_each_engine_lists_its_readers_in_one_table(engine: str) -> None:
    table = TABLES[engine]
    assert all(issubclass(kind, Reader) for kind in table)
    names = [kind.name for kind in table]
    assert len(set(names)) == len(names)
    if engine in LAST:
        assert names[-1] == LAST[engine]  # the reader that carries every type ends it


def test_the_readers_names_are_the_tables_names() -> None:
    assert postgres_io.READERS == ("copy", "connectorx", "adbc", "psycopg")
    assert mysql_io.READERS == ("connectorx", "pymysql")
    assert sqlite_io.READERS == ("adbc", "connectorx", "sqlite3")


# -- connect(url, readers=[...]) --------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("engine", ["postgres", "mysql", "sqlite"])
def test_connect_readers_picks_exactly_those_readers(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = LAST[engine]
    with _source(engine, readers=[last]) as source:
        assert source.readers == (last,)
        seen = _spy(source, last, monkeypatch)
        others = {
            name: _spy(source, name, monkeypatch) for name in source.reader_table() if name != last
        }
        table = source.read_table(QUERY[engine])
        assert table.num_rows > 0
        assert len(seen) == 1
        assert all(not requests for requests in others.values())


@pytest.mark.engine
def test_connect_readers_are_tried_in_the_order_given(monkeypatch: pytest.MonkeyPatch) -> None:
    get_engine("postgres")
    with connect(PG_URL, readers=["psycopg"]) as plain:
        assert plain.readers == ("psycopg",)
    monkeypatch.setenv("SQLFEED_POSTGRES_READERS", "psycopg")  # the argument wins over it
    with connect(PG_URL, readers=["copy", "psycopg"]) as source:
        assert source.readers == ("copy", "psycopg")
        seen = _spy(source, "copy", monkeypatch)
        assert source.read_table(QUERY["postgres"]).num_rows == 3000
        assert len(seen) == 1
        assert source.reader_for(QUERY["postgres"]) == "copy"


@pytest.mark.engine
@pytest.mark.parametrize(
    ("target", "engine", "readers"),
    [
        (PG_URL, "postgres", "copy, connectorx, adbc, psycopg"),
        ("duckdb://", "duckdb", "duckdb"),
        ("sqlite", "sqlite", "adbc, connectorx, sqlite3"),
    ],
)
def test_an_unknown_reader_name_is_one_line_naming_the_engines_readers(
    target: str, engine: str, readers: str
) -> None:
    if target == "sqlite":
        target = f"sqlite:///{get_engine('sqlite').path}"
    elif target == PG_URL:
        get_engine("postgres")
    with pytest.raises(InvalidArgumentError) as caught:
        connect(target, readers=["turbo"])
    assert (
        str(caught.value)
        == f"readers: unknown {engine} reader 'turbo'; {engine} reads with {readers}"
    )


def test_no_reader_at_all_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^readers: no reader given; duckdb reads"):
        connect("duckdb://", readers=[])


def test_duckdb_reads_with_its_one_reader() -> None:
    with connect("duckdb://", readers=["duckdb"]) as source:
        assert source.readers == ("duckdb",)
        assert source.read_table("SELECT 42 AS a").column("a").to_pylist() == [42]


# -- the fallback chain -------------------------------------------------------------------------


def _cx_source(engine: str) -> Any:
    if importlib.util.find_spec("connectorx") is None:
        pytest.skip("connectorx is not installed")
    source = _source(engine, readers=["connectorx", LAST[engine]])
    schema = source.schema(QUERY[engine])
    if source.reader_for(QUERY[engine], schema) != "connectorx":
        source.close()
        pytest.skip(f"connectorx cannot read {engine} here")
    return source


def _inject(
    source: Source,
    monkeypatch: pytest.MonkeyPatch,
    fail: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
) -> None:
    reader = source.reader_table()["connectorx"]
    real = reader.batches
    monkeypatch.setattr(reader, "batches", lambda request: fail(real(request)))


@pytest.mark.engine
@pytest.mark.parametrize("engine", ["postgres", "mysql", "sqlite"])
def test_a_failure_before_the_first_batch_reads_with_the_next_reader(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _cx_source(engine) as source:
        expected = source.read_table(QUERY[engine]).to_pylist()

        def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            raise RuntimeError("connectorx could not start")  # a connectorx failure
            yield from batches

        _inject(source, monkeypatch, fail)
        seen = _spy(source, LAST[engine], monkeypatch)
        assert source.read_table(QUERY[engine]).to_pylist() == expected
        assert len(seen) == 1


@pytest.mark.engine
@pytest.mark.parametrize("engine", ["postgres", "mysql", "sqlite"])
def test_a_failure_after_a_batch_is_the_engines_one_line_error_not_a_reread(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _cx_source(engine) as source:

        def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            yield next(iter(batches))
            raise RuntimeError("cx writer failed\n  at a line of Rust")

        _inject(source, monkeypatch, fail)
        delivered: list[int] = []
        reads = source.read(QUERY[engine], batch_rows=2)
        with pytest.raises(EngineError) as caught:
            delivered.extend(batch.num_rows for batch in reads)
        assert str(caught.value) == (
            f"{source.dialect.name} failed running the partition query: cx writer failed"
        )
        assert delivered == [2]  # nothing delivered again by the next reader


@pytest.mark.engine
def test_a_first_batch_of_another_type_family_reads_with_the_next_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _cx_source("sqlite") as source:

        def as_text(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield pa.RecordBatch.from_arrays(
                    [c.cast(pa.string()) for c in batch.columns], names=batch.schema.names
                )

        expected = source.read_table(QUERY["sqlite"]).to_pylist()
        _inject(source, monkeypatch, as_text)
        seen = _spy(source, "sqlite3", monkeypatch)
        assert source.read_table(QUERY["sqlite"]).to_pylist() == expected
        assert len(seen) == 1


def test_compatible_compares_type_families() -> None:
    plan = pa.schema([("a", pa.int32()), ("b", pa.decimal128(15, 2))])
    assert compatible(pa.schema([("a", pa.int64()), ("b", pa.decimal128(38, 10))]), plan)
    assert not compatible(pa.schema([("a", pa.float64()), ("b", pa.decimal128(15, 2))]), plan)
    assert not compatible(pa.schema([("a", pa.int64())]), plan)


# -- the row estimate on PostgreSQL -------------------------------------------------------------


@pytest.mark.engine
def test_postgres_connectorx_reads_a_partition_estimated_small_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connectorx = pytest.importorskip("connectorx")
    with _cx_source("postgres") as source:
        kinds: list[str] = []
        real = connectorx.read_sql

        def read_sql(url: str, sql: str, **options: Any) -> Any:
            kinds.append(options["return_type"])
            return real(url, sql, **options)

        monkeypatch.setattr(connectorx, "read_sql", read_sql)
        small = list(source.read(QUERY["postgres"], batch_rows=1000, rows=3000))
        big = list(source.read(QUERY["postgres"], batch_rows=1000))
        assert kinds == ["arrow", "arrow_stream"]
        assert all(b.num_rows <= 1000 for b in small + big)
        assert pa.Table.from_batches(small).equals(pa.Table.from_batches(big))
        assert pa.Table.from_batches(small).num_rows == 3000
