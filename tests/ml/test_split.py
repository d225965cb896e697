"""The deterministic train/validation split: the same rows on every engine and every run.

The split's two SELECTs run through each engine's own driver (not sqlfeed's readers), and
their rows are compared by a row id with the engine's own rows and with
:meth:`Split.bucket`, the Python rendering of the scheme.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from sqlglot import exp, parse_one

from sqlfeed.dialects import get_dialect
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml.split import HASH_SCHEME, Split, bucket_expression, split_sql
from tests.conftest import get_engine
from tests.helpers.engines import Engine
from tests.helpers.sources import SourceFactory

ENGINES = ("duckdb", "sqlite", "postgres", "mysql")
MD5_ENGINES = ("duckdb", "postgres", "mysql")
TABLE = f"split_{uuid.uuid4().hex[:8]}"
COLUMNS = [
    ("rid", "int"),
    ("id", "bigint"),
    ("name", "text"),
    ("d", "date"),
    ("f", "float"),
    ("flag", "bool"),
]
NAMES = [name for name, _ in COLUMNS]
ROWS = 1200
EXTREMES = (2**63 - 1, -(2**63), 2**31 - 1, -(2**31), 2**31, -1)


def _row(i: int) -> tuple[Any, ...]:
    if i < 600:
        key: int | None = i
    elif i < 1100:
        key = (i - 600) * 1000 - 7 * (i % 2)  # multiples of 1000, and of them minus 7
    elif i < 1100 + len(EXTREMES):
        key = EXTREMES[i - 1100]
    else:
        key = None  # NULL keys: always training
    name = None if i % 50 == 49 else f"n{i}-é✓" if i % 3 else f"row {i}"
    day = dt.date(1969, 12, 1) + dt.timedelta(days=i * 7)
    return (i, key, name, None if i % 40 == 3 else day, i / 3, i % 2 == 0)


DATA = [_row(i) for i in range(ROWS)]


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, Engine]]:
    """The engines that are up, each with the module's table (dropped at the end)."""
    found: dict[str, Engine] = {}
    for name in ENGINES:
        engine = get_engine(name)
        if name == "duckdb":  # DuckDB's executemany takes a second for these rows
            engine.create_table(TABLE, COLUMNS, [])
            rows = pa.Table.from_pylist([dict(zip(NAMES, row, strict=True)) for row in DATA])
            engine.conn.register("split_rows", rows)
            engine.conn.execute(f"INSERT INTO {TABLE} SELECT * FROM split_rows")
            engine.conn.unregister("split_rows")
        else:
            engine.create_table(TABLE, COLUMNS, DATA)
        found[name] = engine
    yield found
    for engine in found.values():
        engine.execute(f"DROP TABLE IF EXISTS {TABLE}")
        engine.commit()


def _split_rids(
    engine: Engine, make_source: SourceFactory, split: Split, select: str = "*"
) -> tuple[set[int], set[int]]:
    """(training rids, validation rids), each split's SQL run by the engine's driver."""
    query = f"SELECT {select} FROM {engine.qualify(TABLE)}"
    training, validation = split_sql(query, make_source(engine), split)
    train_rows = [r[0] for r in engine.rows(training)]
    valid_rows = [r[0] for r in engine.rows(validation)]
    assert len(set(train_rows)) == len(train_rows)
    assert len(set(valid_rows)) == len(valid_rows)
    return set(train_rows), set(valid_rows)


def _expected(split: Split, position: int) -> set[int]:
    return {row[0] for row in DATA if split.bucket(row[position]) < split.threshold}


@pytest.mark.parametrize("name", ENGINES)
def test_integer_key_partitions_the_rows_as_on_every_engine(
    engines: dict[str, Engine], make_source: SourceFactory, name: str
) -> None:
    split = Split("id", 0.2)
    training, validation = _split_rids(engines[name], make_source, split)
    assert training.isdisjoint(validation)
    assert training | validation == set(range(ROWS))
    assert validation == _expected(split, 1)  # the same rows as Python's rendering: all engines
    assert not any(DATA[r][1] is None for r in validation)  # NULL keys train
    assert abs(len(validation) / ROWS - 0.2) < 0.03


@pytest.mark.parametrize("name", MD5_ENGINES)
@pytest.mark.parametrize(("key", "position"), [("name", 2), ("d", 3)])
def test_text_and_date_keys_split_alike_on_the_engines_with_md5(
    engines: dict[str, Engine], make_source: SourceFactory, name: str, key: str, position: int
) -> None:
    split = Split(key, 0.25, buckets=400)
    training, validation = _split_rids(engines[name], make_source, split)
    assert training.isdisjoint(validation)
    assert training | validation == set(range(ROWS))
    assert validation == _expected(split, position)
    assert abs(len(validation) / ROWS - 0.25) < 0.04


def _row_text(row: tuple[Any, ...]) -> str:
    """A row's text as the module's docstring defines it (rid, id, name, d, flag)."""
    parts = []
    for value in (row[0], row[1], row[2], row[3], row[5]):
        if value is None:
            parts.append("-")
        elif isinstance(value, bool):
            parts.append("+1" if value else "+0")
        elif isinstance(value, dt.date):
            parts.append(f"+{(value - dt.date(1970, 1, 1)).days}")
        else:
            parts.append(f"+{value}")
    return "|".join(parts)


def test_whole_row_splits_alike_on_the_engines_with_md5(
    engines: dict[str, Engine], make_source: SourceFactory
) -> None:
    split = Split(None, 0.3)
    expected = {
        row[0]
        for row in DATA
        if int(hashlib.md5(_row_text(row).encode()).hexdigest()[:7], 16) % 1000 < 300
    }
    for name in MD5_ENGINES:
        training, validation = _split_rids(
            engines[name], make_source, split, "rid, id, name, d, flag"
        )
        assert training.isdisjoint(validation)
        assert training | validation == set(range(ROWS))
        assert validation == expected, name
    assert abs(len(expected) / ROWS - 0.3) < 0.04


def test_the_same_split_every_run_and_the_sql_in_the_engines_dialect(
    engines: dict[str, Engine], make_source: SourceFactory
) -> None:
    engine = engines["postgres"]
    query = f"SELECT rid, id FROM {engine.qualify(TABLE)} ORDER BY id LIMIT 500"
    first = split_sql(query, make_source(engine), Split("id", 0.5, 10))
    assert first == split_sql(query, make_source(engine), Split("id", 0.5, 10))
    training, validation = first
    assert training.startswith("SELECT * FROM (")
    assert "LIMIT 500" in training
    assert "% 10, 10) >= 5" in training
    assert "% 10, 10) < 5" in validation
    # ORDER BY id may tie (NULLs, and id is no key): completed, so LIMIT keeps the same rows
    train_rows, valid_rows = engine.rows(training), engine.rows(validation)
    assert len(train_rows) + len(valid_rows) == 500
    assert {r[0] for r in train_rows}.isdisjoint(r[0] for r in valid_rows)


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("k", "UBIGINT"),
        ("k", "HUGEINT"),
        ("k", "INTEGER"),
        ("k", "DECIMAL(20, 0)"),
        ("k", "TIMESTAMP"),
    ],
)
def test_duckdb_integer_widths_and_timestamps(
    make_source: SourceFactory, key: str, kind: str
) -> None:
    values: list[Any]
    if kind == "TIMESTAMP":
        values = [dt.datetime(1969, 7, 20, 20, 17, 40), dt.datetime(2024, 2, 29, 1, 2, 3, 456789)]
    elif kind in ("UBIGINT", "DECIMAL(20, 0)"):
        values = [0, 2**64 - 1, 2**63, 12345678901234567890]
    elif kind == "HUGEINT":
        values = [2**100, -(2**90), 0]
    else:
        values = [2**31 - 1, -(2**31), 7]
    rows = ", ".join(f"({i}, CAST('{v}' AS {kind}))" for i, v in enumerate(values))
    source = make_source(tables={"t": f"SELECT * FROM (VALUES {rows}) AS v(rid, {key})"})
    split = Split(key, 0.5, buckets=100)
    sql = f"SELECT rid, {key} FROM t"
    for text, validation in zip(split_sql(sql, source, split), (False, True), strict=True):
        got = {r[0] for r in source.rows(text)}
        assert got == {i for i, v in enumerate(values) if (split.bucket(v) < 50) == validation}


@pytest.mark.parametrize(
    "keys",
    [range(10_000), range(0, 1_000_000, 100), range(0, 10_000_000, 1000), range(-5000, 5000)],
)
def test_integer_buckets_spread_evenly(keys: range) -> None:
    split = Split("id", 0.2)
    slices = collections.Counter(split.bucket(k) // 200 for k in keys)
    assert sorted(slices) == [0, 1, 2, 3, 4]
    assert all(abs(n / len(keys) - 0.2) < 0.01 for n in slices.values()), slices
    for remainder in (0, 1):  # no parity pattern either
        part = [k for k in keys if (k // keys.step) % 2 == remainder]
        share = sum(split.bucket(k) < 200 for k in part) / len(part)
        assert abs(share - 0.2) < 0.02


def test_rule_round_trips_and_refuses_an_unknown_scheme() -> None:
    split = Split("id", 0.2, 500)
    rule = split.rule()
    assert rule == {"key": "id", "fraction": 0.2, "buckets": 500, "hash": HASH_SCHEME}
    assert Split.from_rule(rule) == split
    assert Split.from_rule(Split(None, 0.1).rule()) == Split(None, 0.1)
    with pytest.raises(InvalidArgumentError, match="hash scheme 'sqlfeed-split-9' is unknown"):
        Split.from_rule({**rule, "hash": "sqlfeed-split-9"})
    with pytest.raises(InvalidArgumentError, match="lacks buckets"):
        Split.from_rule({"key": "id", "fraction": 0.2, "hash": HASH_SCHEME})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("id", 0.0), r"must be in \(0, 1\)"),
        (("id", 1), r"must be in \(0, 1\)"),
        (("id", True), "must be a number"),
        (("id", 0.2, 1), r"buckets must be in \[2, "),
        (("id", 0.0001), "is 0 of 1000 buckets"),
        (("", 0.2), "column name or None"),
    ],
)
def test_bad_split_arguments(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as err:
        Split(*args)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "split", "message"),
    [
        ("duckdb", Split("nope", 0.2), "split key 'nope' is not a column of the query"),
        ("duckdb", Split("f", 0.2), "split key 'f' is a float"),
        ("mysql", Split("f", 0.2), "split key 'f' is a float"),
        (
            "sqlite",
            Split("name", 0.2),
            "SQLite has no md5 to split by a text key or by the whole row: pass "
            "key=<an integer column>",
        ),
        ("sqlite", Split(None, 0.2), "SQLite has no md5"),
    ],
)
def test_bad_keys_are_one_line_errors(
    engines: dict[str, Engine], make_source: SourceFactory, name: str, split: Split, message: str
) -> None:
    engine = engines[name]
    with pytest.raises(InvalidArgumentError) as err:
        split_sql(f"SELECT * FROM {engine.qualify(TABLE)}", make_source(engine), split)
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    if "nope" in message:
        assert "rid, id, name, d, f, flag" in text


def test_a_struct_key_is_refused(make_source: SourceFactory) -> None:
    source = make_source(tables={"t": "SELECT {'a': 1} AS s, 1 AS rid"})
    with pytest.raises(InvalidArgumentError, match="split key 's' is of type struct"):
        split_sql("SELECT * FROM t", source, Split("s", 0.2))


@pytest.mark.parametrize("dialect", ["bigquery", "snowflake", "spark"])
@pytest.mark.parametrize("key", ["id", "name", None])
def test_render_only_dialects_write_a_parseable_bucket(dialect: str, key: str | None) -> None:
    engine = get_dialect(dialect)
    columns = [exp.column("id", table="q"), exp.column("name", table="q")]
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    bucket = bucket_expression(Split(key, 0.2), columns, ["id", "name"], schema, engine)
    text = engine.sql(bucket)
    assert parse_one(text, read=engine.sqlglot_dialect).sql(engine.sqlglot_dialect) == text
    assert ("MD5" in text) == (key != "id")
