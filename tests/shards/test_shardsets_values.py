"""Shardsets keep every value: text shards round-trip every type exactly, view types are
accepted everywhere, and datasets whose shardsets lack a shard index read through SQL."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlfeed
from sqlfeed.feed.converter import Converter
from sqlfeed.feed.tensors import column_mappings
from sqlfeed.shards import create_dataset, open_dataset
from sqlfeed.shards.reshard.columns import check_columns, converter
from sqlfeed.shards.reshard.options import ReshardOptions
from tests.helpers.cli import run_cli

# -- exact round trips of CSV and JSONL shards (item 15) -------------------------------------

UTC = dt.UTC
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # no lone surrogates
AWKWARD = st.sampled_from(["", " ", '"', '""', "a,b", "x\ny", "\r\n", "NULL", "nan", "NA", "é中"])
INT64 = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.one_of(st.floats(), st.sampled_from([-0.0, 0.0, math.inf, -math.inf, math.nan]))
DECIMALS = st.decimals(min_value=-(10**27), max_value=10**27, places=10, allow_nan=False)
MICROS = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31))
NANOS = st.integers(-(2**62), 2**62)  # timestamp[ns] ticks (years 1823..2116)

SCALARS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "string": (pa.string(), st.one_of(TEXT, AWKWARD)),
    "large_string": (pa.large_string(), st.one_of(TEXT, AWKWARD)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int64": (pa.int64(), st.one_of(INT64, st.sampled_from([2**63 - 1, -(2**63)]))),
    "uint64": (pa.uint64(), st.one_of(st.integers(0, 2**64 - 1), st.just(2**64 - 1))),
    "float64": (pa.float64(), FLOATS),
    "float32": (pa.float32(), st.floats(width=32)),
    "decimal": (pa.decimal128(38, 10), DECIMALS),
    "date": (pa.date32(), st.dates()),
    "timestamp_us": (pa.timestamp("us"), MICROS),
    "timestamp_ns_utc": (pa.timestamp("ns", tz="UTC"), NANOS),
    "timestamp_s": (pa.timestamp("s"), MICROS.map(lambda d: d.replace(microsecond=0))),
    "time_us": (pa.time64("us"), st.times()),
    "time_s": (pa.time32("s"), st.times().map(lambda t: t.replace(microsecond=0))),
    "duration": (pa.duration("us"), st.integers(-(2**62), 2**62)),
    "bool": (pa.bool_(), st.booleans()),
    "binary": (pa.binary(), st.binary(max_size=12)),
}
NESTED: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "list_int": (pa.list_(pa.int64()), st.lists(st.one_of(st.none(), INT64), max_size=4)),
    "list_float": (pa.list_(pa.float64()), st.lists(FLOATS, max_size=4)),
    "list_text": (pa.list_(pa.string()), st.lists(st.one_of(TEXT, AWKWARD), max_size=4)),
    "list_list": (
        pa.list_(pa.list_(pa.int64())),
        st.lists(st.lists(INT64, max_size=3), max_size=3),
    ),
    "list_date": (pa.list_(pa.date32()), st.lists(st.dates(), max_size=3)),
    "list_timestamp": (pa.list_(pa.timestamp("us")), st.lists(MICROS, max_size=3)),
    "list_decimal": (pa.list_(pa.decimal128(38, 10)), st.lists(DECIMALS, max_size=3)),
    "struct": (
        pa.struct([("a", pa.int64()), ("b", pa.string())]),
        st.fixed_dictionaries({"a": st.one_of(st.none(), INT64), "b": st.one_of(TEXT, AWKWARD)}),
    ),
}


def comparable(value: Any) -> Any:
    """A value with floats as their bits (so -0.0 differs from 0.0) and NaN as one token."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else struct.pack("<d", value)
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


def column_of(name: str, values: list[Any]) -> pa.Array:
    arrow_type = {**SCALARS, **NESTED}[name][0]
    if name == "timestamp_ns_utc" or name == "duration":
        return pa.array(values, pa.int64()).cast(arrow_type)
    return pa.array(values, arrow_type)


def round_trip(fmt: str, table: pa.Table, folder: Path) -> pa.Table:
    """``table`` written as a shardset of ``fmt`` (3-row shards) and read back, in uid order."""
    dataset = create_dataset(folder / "ds")
    dataset.add_shardset("values", table, format=fmt, shard_rows=3)
    back = open_dataset(folder / "ds", deep=True).read()
    assert back.schema.field("v").type == table.schema.field("v").type
    return back.sort_by("uid")


def assert_same_values(fmt: str, name: str, values: list[Any]) -> None:
    table = pa.table(
        {"uid": pa.array(range(len(values)), pa.int64()), "v": column_of(name, values)}
    )
    with tempfile.TemporaryDirectory(prefix="sqlfeed-roundtrip-") as folder:
        back = round_trip(fmt, table, Path(folder))
    assert back.column("uid").to_pylist() == list(range(len(values)))
    got, want = back.column("v").to_pylist(), table.column("v").to_pylist()
    assert comparable(got) == comparable(want)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("name", sorted(SCALARS))
def test_text_shards_round_trip_every_scalar_type(fmt: str, name: str) -> None:
    strategy = SCALARS[name][1]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(st.none(), strategy), min_size=1, max_size=8))
    def check(values: list[Any]) -> None:
        assert_same_values(fmt, name, values)

    check()


@pytest.mark.parametrize("name", sorted(NESTED))
def test_jsonl_shards_round_trip_lists_and_structs(name: str) -> None:
    strategy = NESTED[name][1]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(st.none(), strategy), min_size=1, max_size=6))
    def check(values: list[Any]) -> None:
        assert_same_values("jsonl", name, values)

    check()


def test_the_empty_string_is_not_null_in_csv_through_read_and_sql(tmp_path: Path) -> None:
    dataset = create_dataset(tmp_path / "ds")
    dataset.add_shardset(
        "text", pa.table({"uid": [1, 2, 3, 4], "s": ["", None, "NULL", " "]}), format="csv"
    )
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.read().column("s").to_pylist() == ["", None, "NULL", " "]
    with dataset.source() as source:
        rows = source.arrow("SELECT s, s IS NULL AS missing FROM dataset ORDER BY uid")
    assert rows.to_pylist() == [
        {"s": "", "missing": False},
        {"s": None, "missing": True},
        {"s": "NULL", "missing": False},
        {"s": " ", "missing": False},
    ]


def test_csv_refuses_lists_and_jsonl_refuses_what_it_cannot_cast_back(tmp_path: Path) -> None:
    dataset = create_dataset(tmp_path / "ds")
    lists = pa.table({"uid": [1], "l": pa.array([[1]], pa.list_(pa.int64()))})
    with pytest.raises(sqlfeed.InvalidArgumentError, match="CSV cannot hold"):
        dataset.add_shardset("l", lists, format="csv")
    binary_lists = pa.table({"uid": [1], "b": pa.array([[b"x"]], pa.list_(pa.binary()))})
    with pytest.raises(sqlfeed.InvalidArgumentError, match="JSONL cannot hold"):
        dataset.add_shardset("b", binary_lists, format="jsonl")
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["dataset.json"]


# -- a main shardset's shard index that another shardset lacks (item 16) ---------------------


@pytest.mark.parametrize("formats", [("jsonl", "jsonl"), ("csv", "orc"), ("parquet", "jsonl")])
def test_samples_in_a_shard_another_shardset_lacks_are_skipped_through_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, formats: tuple[str, str]
) -> None:
    base = pa.table({"uid": [1, 2, 3], "x": [10, 20, 30]})
    labels = pa.table({"uid": [1, 9], "y": ["a", "b"]})
    dataset = create_dataset(tmp_path / "ds")
    dataset.add_shardset("base", base, format=formats[0])
    dataset.add_shardset("lab", labels, format=formats[1])  # uid 9 goes to a new shard 1
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.main.name == "lab"
    assert dataset.main.shard_indices == [0, 1]
    common = sorted(set(base.column("uid").to_pylist()) & set(labels.column("uid").to_pylist()))
    expected = [{"uid": 1, "x": 10, "y": "a"}]
    assert [row["uid"] for row in expected] == common
    assert dataset.read().to_pylist() == expected
    with dataset.source() as source:
        assert source.arrow("SELECT * FROM dataset").to_pylist() == expected
        assert source.count(source.parse("SELECT * FROM dataset")) == 1
        batches = sqlfeed.Feeder(
            "SELECT * FROM dataset", source, strategy="fragments", batch_size=2
        )
        assert [row for batch in batches for row in batch.to_pylist()] == expected
    monkeypatch.chdir(tmp_path)
    count = run_cli(["count", "--db", "dataset:///ds", "SELECT * FROM dataset"])
    assert (count.code, count.out.strip(), count.err) == (0, "1", "")
    export = run_cli(
        ["export", "--db", "dataset:///ds", "SELECT * FROM dataset", "--out", "out.parquet"]
    )
    assert export.code == 0, export.err
    assert pq.read_table(tmp_path / "out.parquet").to_pylist() == expected


# -- view types (item 17) -----------------------------------------------------------------------


def views(n: int = 10) -> pa.Table:
    """A table of view-typed columns, NULLs included."""
    text = [f"value {i}" * (i % 3) if i % 4 else None for i in range(n)]
    return pa.table(
        {
            "uid": pa.array(range(n), pa.int64()),
            "s": pa.array(text, pa.string_view()),
            "b": pa.array([t.encode() + b"\xff" if t else None for t in text], pa.binary_view()),
            "l": pa.array(
                [[i, i + 1] if i % 3 else None for i in range(n)], pa.list_view(pa.int64())
            ),
            "ls": pa.array([[t or ""] for t in text], pa.list_(pa.string_view())),
        }
    )


PLAIN = {"s": pa.string(), "b": pa.binary(), "l": pa.list_(pa.int64()), "ls": pa.list_(pa.string())}


@pytest.mark.parametrize("fmt", ["parquet", "orc", "csv", "jsonl", "tar"])
def test_shardsets_accept_view_types(tmp_path: Path, fmt: str) -> None:
    table = views()
    if fmt == "csv":
        table = table.drop_columns(["l", "ls"])  # CSV holds no lists
    dataset = create_dataset(tmp_path / "ds")
    dataset.add_shardset("v", table, format=fmt, shard_rows=4)
    dataset.add_shardset("more", pa.table({"uid": [3, 1, 2], "z": [3.0, 1.0, 2.0]}))
    back = open_dataset(tmp_path / "ds").read().sort_by("uid")
    expected = {name: table.column(name).to_pylist() for name in table.column_names}
    for name in table.column_names:
        if name != "uid":
            want = [expected[name][u] for u in (1, 2, 3)]
            if fmt == "tar":  # tar members are bytes: text as UTF-8, the rest as JSON
                continue
            assert back.schema.field(name).type == PLAIN[name]
            assert back.column(name).to_pylist() == want
    with open_dataset(tmp_path / "ds").source() as source:
        assert source.arrow("SELECT count(*) AS n FROM dataset").column(0).to_pylist() == [3]


def test_reshard_and_tf_converters_accept_view_types() -> None:
    table = views()
    options = ReshardOptions(
        out=Path("unused"),
        fmt="parquet",
        seed=None,
        sort=[],
        group_by=[],
        shard_rows=4,
        shard_bytes=None,
        memory_limit=None,
        threads=None,
        temp_dir=None,
        uid=None,
        overwrite=False,
    )
    columns = check_columns(table.schema, options)
    assert [f.type for f in columns.out_schema] == [pa.int64(), *PLAIN.values()]
    converted = converter(columns)(table.to_batches()[0])
    converted.validate(full=True)
    assert converted.schema == columns.out_schema
    assert converted.to_pylist() == table.to_pylist()
    mappings = column_mappings(table.schema, features=["s", "b", "l", "ls"])
    arrays = Converter(mappings, "us").arrays(table.to_batches()[0])
    text = [t.encode() if t else b"" for t in table.column("s").to_pylist()]
    assert arrays[0].tolist() == text
    lengths = [2 if i % 3 else 0 for i in range(10)]
    assert arrays[3].tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()


def test_view_typed_query_results_feed_shuffle_and_statistics() -> None:
    connection = duckdb.connect()
    connection.execute("SET produce_arrow_string_view = true")
    connection.execute("SET arrow_output_version = '1.4'")
    sql = "SELECT range AS id, 'k' || (range % 7) AS k FROM range(200)"
    assert connection.sql(sql).to_arrow_table().schema.field("k").type == pa.string_view()
    source = sqlfeed.connect(connection)
    rows = [
        r
        for b in sqlfeed.Feeder(sql, source, batch_size=16, shuffle_buffer=50, seed=3, partitions=4)
        for r in b.to_pylist()
    ]
    assert sorted(r["id"] for r in rows) == list(range(200))
    assert all(r["k"] == f"k{r['id'] % 7}" for r in rows)
    stats = sqlfeed.compute_stats(sql, source, method="accumulate", partitions=3)
    assert stats["k"].vocabulary_counts == [29, 29, 29, 29, 28, 28, 28]
    assert stats["k"].distinct == 7


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_decimal_text_keeps_its_digits(tmp_path: Path, fmt: str) -> None:
    values = [decimal.Decimal("-0.0000000001"), decimal.Decimal("1234567890123456789012.9")]
    table = pa.table({"uid": [0, 1], "v": pa.array(values, pa.decimal128(38, 10))})
    assert round_trip(fmt, table, tmp_path).column("v").to_pylist() == values
