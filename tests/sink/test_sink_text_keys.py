"""Text keys the table sink writes stay as many as the rows hold (issue #36 item 8).

MariaDB's and MySQL 8's ``utf8mb4_bin`` compare with PAD SPACE ('a' = 'a '): keys 'a',
'a ' and 'A', three in the source, clashed when the output's key was built, or the
finish counted two distinct keys. The sink's text columns take the binary NO PAD
collation the lease queue's names take, picked by the server's version; trailing spaces
are written and read back. The same cases run on every engine that holds a sink.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import EngineError, get_dialect
from sqlfeed.sink.columns import column_definitions
from tests.helpers.cli import run_cli
from tests.helpers.engines import write_through_sqlfeed
from tests.sink.test_predict_chaos import _server_or_file
from tests.sink.test_sink_faults import Output

ENGINES = ["postgres", "mariadb", "sqlite", "duckdb"]

KEYS = ["a", "a ", "A", " a", "a  "]
"""Keys equal under a collation that folds case or pads, apart byte for byte."""
VALUES = ["x", "x ", "X", "  ", ""]
"""A text column that is no key: trailing spaces and blanks kept."""

TEXT = {
    "postgres": "TEXT",
    "mariadb": "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
    "sqlite": "TEXT",
    "duckdb": "VARCHAR",
}
"""A source table's text type per engine, holding the keys apart."""


class Place:
    """An output database of one test: its URL, and the tables made in it (dropped after)."""

    def __init__(self, engine: str, tmp_path: Path, name: str = "data") -> None:
        self.engine = engine
        self.output = Output(engine) if engine in ("postgres", "mariadb") else None
        if self.output is None:  # a file made here: reading never makes one
            (tmp_path / name).mkdir(exist_ok=True)
            self.url = _server_or_file(engine, tmp_path / name)
            connect = duckdb.connect if engine == "duckdb" else sqlite3.connect
            connect(str(tmp_path / name / f"data.{engine}")).close()
        else:
            self.url = self.output.url
        self.made: list[str] = []

    def table(self, base: str) -> str:
        """A new table name, dropped after the test."""
        name = f"{base}_{uuid.uuid4().hex[:8]}"
        self.made.append(name)
        return name

    def execute(self, *statements: str) -> None:
        write_through_sqlfeed(self.url, statements)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlfeed.connect(self.url) as source:
            return source.rows(sql)

    def drop(self) -> None:
        with sqlfeed.connect(self.url) as source:
            for name in self.made:
                source.execute(f"DROP TABLE IF EXISTS {name}")
        if self.output is not None:
            self.output.drop()


@pytest.fixture
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """The output database of engine ``request.param``."""
    found = Place(request.param, tmp_path)
    try:
        yield found
    finally:
        found.drop()


def _data(keys: list[str] = KEYS, values: list[str] = VALUES) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.string()), "v": pa.array(values, pa.string())})


def _read_back(place: Place, table: str) -> list[tuple[str, str]]:
    """The rows of ``table``, each exactly as stored, sorted; every key once."""
    rows = sorted((str(k), str(v)) for k, v in place.rows(f"SELECT k, v FROM {table}"))
    for key in {k for k, _ in rows}:  # the output compares its keys byte for byte too
        literal = "'" + key.replace("'", "''") + "'"
        assert place.rows(f"SELECT COUNT(*) FROM {table} WHERE k = {literal}")[0][0] == 1, key
    return rows


def _expected(*tables: pa.Table) -> list[tuple[str, str]]:
    return sorted(
        (str(k), str(v))
        for t in tables
        for k, v in zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True)
    )


# -- the column types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "collation"),
    [
        ("10.11.6-MariaDB-0+deb12u1", "utf8mb4_nopad_bin"),
        ("11.4.2-MariaDB", "utf8mb4_nopad_bin"),
        ("8.0.36", "utf8mb4_0900_bin"),
        ("", "utf8mb4_bin"),
    ],
)
def test_mysql_text_columns_take_the_queue_names_collation(version: str, collation: str) -> None:
    """Every text column (a key's VARCHAR, a value's LONGTEXT, a column of NULLs), the
    collation :meth:`queue_name_collation` names for the server (none known: the binary
    collation every server has)."""
    schema = pa.schema([("k", pa.string()), ("v", pa.large_string()), ("n", pa.null())])
    columns = column_definitions(schema, get_dialect("mysql"), not_null=["k"], version=version)
    suffix = f"CHARACTER SET utf8mb4 COLLATE {collation}"
    assert columns == [
        f"`k` VARCHAR(255) {suffix} NOT NULL",
        f"`v` LONGTEXT {suffix}",
        f"`n` TEXT {suffix}",
    ]
    if version:
        assert get_dialect("mysql").queue_name_collation(version) == collation


@pytest.mark.parametrize("engine", ["postgres", "sqlite", "duckdb"])
def test_the_other_engines_text_types_ignore_the_version(engine: str) -> None:
    dialect = get_dialect(engine)
    assert dialect.sink_type("string", version="8.0.36") == dialect.sink_type("string")


# -- written and read back -------------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("place", ENGINES, indirect=True)
def test_write_table_keeps_keys_that_differ_in_case_and_trailing_spaces(place: Place) -> None:
    """``create``, ``replace`` and ``append`` with ``key=``: every row once, as written; an
    append of a key the table has (byte for byte) is refused, one that differs is not."""
    table = place.table("text_keys")
    data = _data()
    assert sqlfeed.write_table(data, place.url, table, key=["k"]).rows == len(KEYS)
    assert _read_back(place, table) == _expected(data)
    assert sqlfeed.write_table(data, place.url, table, mode="replace", key=["k"]).rows == 5
    more = _data(["a   ", "A ", "b"], ["y ", "Y", " y"])
    assert sqlfeed.write_table(more, place.url, table, mode="append", key=["k"]).rows == 3
    assert _read_back(place, table) == _expected(data, more)
    with pytest.raises(EngineError, match=r"1 keys \(k\) of the rows to append are in"):
        sqlfeed.write_table(
            _data(["a ", "c"], ["z", "z"]), place.url, table, mode="append", key=["k"]
        )
    assert _read_back(place, table) == _expected(data, more)


@pytest.mark.engine
@pytest.mark.parametrize("collation", ["utf8mb4_bin", "utf8mb4_general_ci", "latin1_bin"])
def test_an_append_with_a_key_compares_with_a_table_of_another_collation(
    collation: str, tmp_path: Path
) -> None:
    """MariaDB: a table made by an older sqlfeed (``utf8mb4_bin``) or by hand: its text key
    compares with the staging table's byte for byte (``utf8mb4_bin`` against
    ``utf8mb4_nopad_bin`` was error 1267, an illegal mix of collations)."""
    place = Place("mariadb", tmp_path)
    try:
        table = place.table("padded")
        charset = collation.split("_")[0]
        text = f"VARCHAR(20) CHARACTER SET {charset} COLLATE {collation}"
        place.execute(
            f"CREATE TABLE {table} (k {text} NOT NULL, v {text})",
            f"INSERT INTO {table} VALUES ('a', 'x')",
        )
        more = _data(["a ", "A"], ["x ", "X"])
        assert sqlfeed.write_table(more, place.url, table, mode="append", key=["k"]).rows == 2
        assert sorted(place.rows(f"SELECT k, v FROM {table}")) == [
            ("A", "X"),
            ("a", "x"),
            ("a ", "x "),
        ]
        with pytest.raises(EngineError, match=r"1 keys \(k\) of the rows to append are in"):
            sqlfeed.write_table(_data(["a"], ["y"]), place.url, table, mode="append", key=["k"])
    finally:
        place.drop()


@pytest.mark.engine
@pytest.mark.parametrize("primary_key", [True, False], ids=["catalog-key", "counted-key"])
@pytest.mark.parametrize("origin", ["same", "duckdb"])
@pytest.mark.parametrize("place", ENGINES, indirect=True)
def test_export_into_with_a_key_keeps_every_text_key(
    place: Place, origin: str, primary_key: bool, tmp_path: Path
) -> None:
    """``export --into --key k`` from a table holding the keys apart (its primary key,
    which makes the output's; or none: the distinct keys counted), from the same engine
    and from DuckDB: every row once, read back equal."""
    engine = place.engine if origin == "same" else "duckdb"
    files = engine in ("sqlite", "duckdb")  # a file of its own: the output's is written
    source = Place(engine, tmp_path, "src") if files else place
    name = source.table("text_src")
    text = TEXT[engine]
    constraint = " NOT NULL PRIMARY KEY" if primary_key else ""
    rows = ", ".join(f"('{k}', '{v}')" for k, v in zip(KEYS, VALUES, strict=True))
    source.execute(
        f"CREATE TABLE {name} (k {text}{constraint}, v {text})",
        f"INSERT INTO {name} VALUES {rows}",
    )
    try:
        table = place.table("text_out")
        run = run_cli(
            [
                *("export", "--db", source.url, "--into-db", place.url, "--into", table),
                *("--key", "k", "--partitions", "2", "--format", "json"),
                f"SELECT k, v FROM {name}",
            ]
        )
        assert run.code == 0, run.err
        assert f'"rows": {len(KEYS)}' in run.out, run.out
        assert _read_back(place, table) == _expected(_data())
    finally:
        if source is not place:
            source.drop()
