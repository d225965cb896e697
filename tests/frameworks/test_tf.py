"""sqlfeed.tf: element_spec from the Arrow schema, exact values, sharding, jobs, Keras."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import gc
import os
import subprocess
import sys
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Iterable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

import sqlfeed  # noqa: E402
import sqlfeed.tf as sqlfeed_tf  # noqa: E402
from sqlfeed import InvalidArgumentError, MissingDependencyError, QueryError  # noqa: E402
from sqlfeed.dispatch.backends import open_queue  # noqa: E402
from sqlfeed.feed.converter import Converter  # noqa: E402
from tests.helpers.engines import Engine  # noqa: E402

EPOCH = dt.datetime(1970, 1, 1)


pytestmark = pytest.mark.source(
    tables={
        "t": "SELECT range AS id, range % 7 AS g, range * 0.5 AS x, "
        "CAST(range % 2 AS INTEGER) AS y FROM range(1000)"
    }
)


def elements(dataset: Any) -> list[tuple[dict[str, Any], Any]]:
    """Every element as (features as NumPy/lists, label or None)."""
    out = []
    for element in dataset:
        features, label = element if isinstance(element, tuple) else (element, None)
        out.append(
            ({k: _py(v) for k, v in features.items()}, None if label is None else _py(label))
        )
    return out


def _py(tensor: Any) -> Any:
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.to_list()
    return tensor.numpy().tolist()


def rows(dataset: Any, names: Iterable[str] | None = None) -> list[tuple[Any, ...]]:
    """The dataset's rows as tuples (features in order, then the label)."""
    out = []
    for features, label in elements(dataset):
        keys = list(names) if names is not None else list(features)
        columns = [features[k] for k in keys] + ([label] if label is not None else [])
        out.extend(zip(*columns, strict=True))
    return out


# -- element_spec --------------------------------------------------------------------------

TYPES_QUERY = """
SELECT 1::TINYINT AS i8, 1::SMALLINT AS i16, 1::INTEGER AS i32, 1::BIGINT AS i64,
       1::UTINYINT AS u8, 1::USMALLINT AS u16, 1::UINTEGER AS u32, 1::UBIGINT AS u64,
       1.5::FLOAT AS f32, 1.5::DOUBLE AS f64, TRUE AS b, 'é' AS s, 'x'::BLOB AS bin,
       1.5::DECIMAL(10, 2) AS d, 1.5::DECIMAL(38, 10) AS d38, DATE '2020-01-02' AS dt,
       TIMESTAMP '2020-01-02 03:04:05.678901' AS ts, TIMESTAMP_S '2020-01-02 03:04:05' AS ts_s,
       TIMESTAMP_MS '2020-01-02 03:04:05.678' AS ts_ms, TIMESTAMP_NS '2020-01-02' AS ts_ns,
       TIMESTAMPTZ '2020-01-02 03:04:05+00' AS tz, TIME '01:02:03' AS tm,
       'b'::ENUM('a', 'b') AS en, [1, 2]::INTEGER[] AS li, [[1.5], []]::DOUBLE[][] AS lli,
       ['a', NULL] AS ls, [1, 2]::INTEGER[2] AS fixed, 1 AS y
"""


def test_element_spec_follows_the_arrow_schema(source: sqlfeed.Source) -> None:
    spec = sqlfeed_tf.dataset(
        TYPES_QUERY, source, label="y", batch_size=8, partitions=2
    ).element_spec
    features, label = spec
    scalar = {
        **dict.fromkeys(["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"], tf.int64),
        "f32": tf.float32,
        "f64": tf.float32,
        "b": tf.bool,
        "s": tf.string,
        "bin": tf.string,
        "d": tf.float64,
        "d38": tf.float64,
        **dict.fromkeys(["dt", "ts", "ts_s", "ts_ms", "ts_ns", "tz", "tm"], tf.int64),
        "en": tf.string,
    }
    for name, dtype in scalar.items():
        assert features[name] == tf.TensorSpec([None], dtype), name
    ragged = {
        "li": (tf.int64, 1),
        "lli": (tf.float32, 2),
        "ls": (tf.string, 1),
        "fixed": (tf.int64, 1),
    }
    for name, (dtype, depth) in ragged.items():
        assert features[name] == tf.RaggedTensorSpec(
            [None] * (depth + 1), dtype, ragged_rank=depth, row_splits_dtype=tf.int64
        ), name
    assert list(features) == [n for n in scalar | ragged if n in features]
    assert label == tf.TensorSpec([None], tf.int64)


def test_float_dtype_float64_and_features_subset(source: sqlfeed.Source) -> None:
    spec = sqlfeed_tf.dataset(
        TYPES_QUERY,
        source,
        features=["f32", "s"],
        batch_size=8,
        float_dtype="float64",
        partitions=1,
    ).element_spec
    assert spec == {"f32": tf.TensorSpec([None], tf.float64), "s": tf.TensorSpec([None], tf.string)}


def test_values_of_every_type_arrive_exactly(source: sqlfeed.Source) -> None:
    [(features, label)] = elements(
        sqlfeed_tf.dataset(TYPES_QUERY, source, label="y", batch_size=8, partitions=1)
    )
    at = dt.datetime(2020, 1, 2, 3, 4, 5, 678901)
    expected = {
        "i8": [1],
        "u64": [1],
        "f32": [1.5],
        "f64": [1.5],
        "b": [True],
        "s": ["é".encode()],
        "bin": [b"x"],
        "d": [1.5],
        "d38": [1.5],
        "dt": [(dt.date(2020, 1, 2) - EPOCH.date()).days],
        "ts": [(at - EPOCH) // dt.timedelta(microseconds=1)],
        "ts_s": [(at.replace(microsecond=0) - EPOCH) // dt.timedelta(microseconds=1)],
        "ts_ms": [(at.replace(microsecond=678000) - EPOCH) // dt.timedelta(microseconds=1)],
        "ts_ns": [(dt.datetime(2020, 1, 2) - EPOCH) // dt.timedelta(microseconds=1)],
        "tz": [(at.replace(microsecond=0) - EPOCH) // dt.timedelta(microseconds=1)],
        "tm": [3723 * 10**6],
        "en": [b"b"],
        "li": [[1, 2]],
        "lli": [[[1.5], []]],
        "ls": [[b"a", b""]],
        "fixed": [[1, 2]],
    }
    for name, values in expected.items():
        assert features[name] == values, name
    assert label == [1]


@pytest.mark.parametrize(
    ("arrow_type", "values", "dtype", "expected"),
    [
        (pa.float16(), [np.float16(1.5), None], "float32", [1.5, 0.0]),
        (pa.large_string(), ["é", None], "string", [b"\xc3\xa9", b""]),
        (pa.string_view(), ["a", None], "string", [b"a", b""]),
        (pa.large_binary(), [b"\x00\xff", None], "string", [b"\x00\xff", b""]),
        (pa.binary(2), [b"ab", None], "string", [b"ab", b""]),
        (pa.date64(), [dt.date(1969, 12, 31), None], "int64", [-1, 0]),
        (pa.time32("ms"), [dt.time(0, 0, 1, 500000), None], "int64", [1_500_000, 0]),
        (pa.time64("ns"), [dt.time(0, 0, 2), None], "int64", [2_000_000, 0]),
        (pa.duration("s"), [dt.timedelta(seconds=-3), None], "int64", [-3_000_000, 0]),
        (pa.decimal256(50, 3), [decimal.Decimal("-1.125"), None], "float64", [-1.125, 0.0]),
        (pa.uint64(), [2**63 - 1, None], "int64", [2**63 - 1, 0]),
        (
            pa.decimal128(38, 10),
            [decimal.Decimal("12345678901234567.1234567891")],
            "float64",
            [float(decimal.Decimal("12345678901234567.1234567891"))],
        ),
        (pa.decimal128(15, 2), [decimal.Decimal("236.45"), None], "float64", [236.45, 0.0]),
        (pa.large_list(pa.int16()), [[1, None], None], "int64", [[1, 0], []]),
        (pa.list_(pa.int32(), 2), [[1, 2], None], "int64", [[1, 2], []]),
        (pa.list_(pa.list_(pa.int8())), [[[1], None], None], "int64", [[[1], []], []]),
        (pa.dictionary(pa.int8(), pa.string()), ["x", None], "string", [b"x", b""]),
    ],
)
def test_arrow_types_no_engine_returns_convert_exactly(
    arrow_type: pa.DataType, values: list[Any], dtype: str, expected: list[Any]
) -> None:
    array = (
        pa.array(values, type=arrow_type)
        if not pa.types.is_dictionary(arrow_type)
        else (pa.array(values).dictionary_encode().cast(arrow_type))
    )
    schema = pa.schema([pa.field("c", arrow_type)])
    [mapping] = sqlfeed_tf.column_mappings(schema)
    assert mapping.dtype == dtype
    converter = Converter([mapping], "us")
    arrays = converter.arrays(pa.RecordBatch.from_arrays([array], schema=schema))
    if mapping.ragged_rank:
        got = tf.RaggedTensor.from_nested_row_splits(arrays[0], arrays[1:]).to_list()
    else:
        got = [v.encode() if isinstance(v, str) else v for v in arrays[0].tolist()]
    assert got == expected
    sliced = converter.arrays(pa.RecordBatch.from_arrays([array.slice(1)], schema=schema))
    if mapping.ragged_rank:
        assert (
            tf.RaggedTensor.from_nested_row_splits(sliced[0], sliced[1:]).to_list()
            == (expected[1:])
        )


def test_fill_values_are_given_in_the_tensors_type_or_converted() -> None:
    schema = pa.schema(
        [("ts", pa.timestamp("ms")), ("d", pa.date32()), ("s", pa.string()), ("f", pa.float64())]
    )
    fill = {"ts": dt.datetime(1970, 1, 1, 0, 0, 2), "d": dt.date(1970, 1, 3), "s": "?", "f": 1}
    mappings = sqlfeed_tf.column_mappings(schema, fill=fill)
    assert [m.fill for m in mappings] == [2_000_000, 2, "?", 1.0]
    with pytest.raises(InvalidArgumentError, match="does not fit column 'ts'"):
        sqlfeed_tf.column_mappings(
            schema, fill={"ts": dt.datetime(1970, 1, 1, 0, 0, 0, 1)}, time_unit="ms"
        )


@pytest.mark.parametrize(
    ("select", "what"),
    [
        ("{'x': 1} AS v", "struct"),
        ("MAP {'a': 1} AS v", "map"),
        ("INTERVAL 1 DAY AS v", "month_day_nano_interval"),
        ("[{'x': 1}] AS v", "a list of struct"),
    ],
)
def test_types_without_a_mapping_are_refused_up_front(
    source: sqlfeed.Source, select: str, what: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"'v' is {what}.*no tf.data mapping"):
        sqlfeed_tf.dataset(f"SELECT 1 AS a, {select}", source, batch_size=4, partitions=1)


# -- values ---------------------------------------------------------------------------------


def expected_row(row: tuple[Any, ...], mappings: list[sqlfeed_tf.ColumnMapping]) -> tuple[Any, ...]:
    """A row of the engine's own driver, as sqlfeed.tf documents its tensors."""
    out: list[Any] = []
    for value, m in zip(row, mappings, strict=True):
        if value is None:
            value = m.fill
        if m.kind == "string":
            out.append(value.encode() if isinstance(value, str) else value)
        elif m.kind in ("float", "decimal"):
            out.append(float(value) if m.dtype == "float64" else float(np.float32(value)))
        elif m.kind == "date" and isinstance(value, dt.date):
            out.append((value - EPOCH.date()).days)
        elif m.kind == "timestamp" and isinstance(value, dt.datetime):
            naive = value.replace(tzinfo=None) - (value.utcoffset() or dt.timedelta())
            out.append((naive - EPOCH) // dt.timedelta(microseconds=1))
        elif m.kind == "bool":
            out.append(bool(value))
        else:
            out.append(int(value))
    return tuple(out)


@pytest.mark.engine
@pytest.mark.parametrize("table", ["people", "orders"])
def test_dataset_over_all_partitions_equals_the_query_result(engine: Engine, table: str) -> None:
    sql = f"SELECT * FROM {engine.qualify(table)}"
    with engine.source() as src:
        feed = sqlfeed_tf.Feed(sql, src, batch_size=16, float_dtype="float64", partitions=7)
        got = rows(feed.dataset)
    expected = [expected_row(r, feed.mappings) for r in engine.rows(sql)]
    assert len(got) == len(expected)
    assert Counter(got) == Counter(expected)


def test_values_survive_the_trip_exactly(source: sqlfeed.Source) -> None:
    conn = source.connection  # type: ignore[attr-defined]
    conn.execute(
        """
        CREATE TABLE awkward AS SELECT * FROM (VALUES
            (1, 'é ü 中文 🙂', 9223372036854775807, TIMESTAMP '1969-12-31 23:59:59.999999',
             1.5, TRUE),
            (2, '', -9223372036854775808, TIMESTAMP '2262-04-11 23:47:16.854775', -0.1, FALSE),
            (3, NULL, NULL, NULL, NULL, NULL),
            (4, 'tab\tand\nnewline', 0, TIMESTAMP '0001-01-01 00:00:00', 1e300, NULL)
        ) AS v(id, s, big, ts, x, b)
        """
    )
    feed = sqlfeed_tf.Feed(
        "SELECT * FROM awkward",
        source,
        batch_size=3,
        masks=["s", "big"],
        float_dtype="float64",
        fill={"big": 42, "x": -1.0},
        partitions=3,
    )
    got = {
        r[0]: r[1:]
        for r in rows(feed.dataset, ["id", "s", "big", "ts", "x", "b", "s_is_null", "big_is_null"])
    }
    micros = dt.timedelta(microseconds=1)
    assert got == {
        1: ("é ü 中文 🙂".encode(), 2**63 - 1, -1, 1.5, True, False, False),
        2: (
            b"",
            -(2**63),
            (dt.datetime(2262, 4, 11, 23, 47, 16, 854775) - EPOCH) // micros,
            -0.1,
            False,
            False,
            False,
        ),
        3: (b"", 42, 0, -1.0, False, True, True),
        4: (
            b"tab\tand\nnewline",
            0,
            (dt.datetime(1, 1, 1) - EPOCH) // micros,
            1e300,
            False,
            False,
            False,
        ),
    }


def test_lists_become_ragged_tensors_with_null_lists_empty(source: sqlfeed.Source) -> None:
    query = """
        SELECT id, CASE WHEN id = 1 THEN NULL ELSE [id, NULL, -id] END AS li,
               CASE WHEN id = 2 THEN [[], ['x', NULL]] ELSE [['é']] END AS nested
        FROM (SELECT range AS id FROM range(4))
    """
    feed = sqlfeed_tf.Feed(query, source, batch_size=3, masks=["li"], partitions=2)
    got = {r[0]: r[1:] for r in rows(feed.dataset, ["id", "li", "nested", "li_is_null"])}
    assert got == {
        0: ([0, 0, 0], [[b"\xc3\xa9"]], False),
        1: ([], [[b"\xc3\xa9"]], True),
        2: ([2, 0, -2], [[], [b"x", b""]], False),
        3: ([3, 0, -3], [[b"\xc3\xa9"]], False),
    }


def test_batches_have_batch_size_rows_and_drop_remainder(source: sqlfeed.Source) -> None:
    sizes = [
        len(f["id"])
        for f, _ in elements(
            sqlfeed_tf.dataset("SELECT * FROM t", source, batch_size=300, partitions=4)
        )
    ]
    assert sizes == [300, 300, 300, 100]
    dropped = sqlfeed_tf.dataset(
        "SELECT * FROM t", source, batch_size=300, drop_remainder=True, partitions=4
    )
    assert [len(f["id"]) for f, _ in elements(dropped)] == [300, 300, 300]
    assert dropped.element_spec["id"] == tf.TensorSpec([300], tf.int64)


def test_each_iteration_is_an_epoch_in_its_own_seeded_order(source: sqlfeed.Source) -> None:
    def ids(dataset: Any) -> list[int]:
        return [i for f, _ in elements(dataset) for i in f["id"]]

    options = {"batch_size": 100, "shuffle_buffer": 500, "seed": 3, "partitions": 4}
    ds = sqlfeed_tf.dataset("SELECT id FROM t", source, **options)
    first, second = ids(ds), ids(ds)
    assert sorted(first) == sorted(second) == list(range(1000))
    assert first != second
    assert ids(sqlfeed_tf.dataset("SELECT id FROM t", source, **options)) == first


# -- NULLs and exactness ---------------------------------------------------------------------


def test_a_null_label_is_an_error_unless_it_has_a_fill(source: sqlfeed.Source) -> None:
    query = "SELECT id, CASE WHEN id = 5 THEN NULL ELSE y END AS y FROM t"
    ds = sqlfeed_tf.dataset(query, source, label="y", batch_size=64, partitions=2)
    message = r"^label column 'y' has a NULL: leave such rows out"
    with pytest.raises(QueryError, match=message) as err:  # sqlfeed's own, not buried in
        list(ds)  # TensorFlow's InvalidArgumentError (issue 36 item 14)
    assert err.value.__traceback__ is not None
    with pytest.raises(QueryError, match=message):
        list(ds)  # every iteration
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label column \\?'y\\?' has"):
        tf.function(lambda: ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))()
    filled = sqlfeed_tf.dataset(query, source, label="y", fill={"y": -1}, batch_size=64)
    assert sorted(r[1] for r in rows(filled)).count(-1) == 1


@pytest.mark.parametrize("column", ["y", "li"], ids=["dense", "ragged"])
def test_a_failed_iteration_frees_its_iterator_at_once(source: sqlfeed.Source, column: str) -> None:
    """No reference cycle keeps the failed iterator for a garbage collection to free.

    Freed by a collection at interpreter shutdown, its prefetch thread waiting for a GIL
    Python no longer hands out, the process hung (CI, a child running a NULL label).
    """
    features = "id" if column == "y" else "id, [id] AS li"
    query = f"SELECT {features}, CASE WHEN id = 5 THEN NULL ELSE y END AS y FROM t"
    ds = sqlfeed_tf.dataset(query, source, label="y", batch_size=64, partitions=2)
    gc.collect()
    gc.disable()
    try:
        iterator = iter(ds)
        freed = weakref.ref(iterator)
        raised = False
        try:
            for _ in iterator:
                pass
        except QueryError:
            raised = True
        del iterator
        alive = freed() is not None
    finally:
        gc.enable()
    assert raised
    assert not alive, "the failed iterator is kept alive by a reference cycle"


def test_fill_nulls_false_refuses_a_null(source: sqlfeed.Source) -> None:
    query = "SELECT id, CASE WHEN id = 5 THEN NULL ELSE x END AS x FROM t"
    ds = sqlfeed_tf.dataset(query, source, batch_size=64, fill_nulls=False, partitions=2)
    with pytest.raises(QueryError, match=r"column 'x' has a NULL and fill_nulls"):
        list(ds)


NULL_LABEL_SCRIPT = r"""
import duckdb, sqlfeed, sqlfeed.tf
conn = duckdb.connect()
conn.execute("CREATE TABLE t AS SELECT range AS id, [range] AS li, "
             "CASE WHEN range = 70 THEN NULL ELSE range END AS y FROM range(100)")
for query in ("SELECT id, y FROM t", "SELECT id, li, y FROM t"):  # dense, ragged
    try:
        list(sqlfeed.tf.dataset(query, sqlfeed.connect(conn), label="y", batch_size=8))
    except Exception as err:
        print("RAISED", type(err).__name__, flush=True)
"""


@pytest.mark.slow  # a child interpreter that imports TensorFlow (17-24 s in the file's run)
def test_a_null_label_logs_no_python_traceback() -> None:
    """TensorFlow logged the generator's traceback twice before raising (at WARNING)."""
    done = subprocess.run(
        [sys.executable, "-c", NULL_LABEL_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"},
    )
    assert done.stdout.count("RAISED QueryError") == 2, done.stderr[-3000:]
    assert "has a NULL" in done.stderr  # TF's one-line warning says it
    assert "Traceback" not in done.stderr


def test_a_uint64_beyond_int64_is_refused_not_wrapped(source: sqlfeed.Source) -> None:
    ds = sqlfeed_tf.dataset("SELECT 18446744073709551615::UBIGINT AS h", source, batch_size=4)
    with pytest.raises(QueryError, match=r"'h' .* beyond int64"):
        list(ds)


@pytest.mark.parametrize(
    ("array", "options", "message"),
    [
        (pa.array([1e39]), {}, "beyond float32's range: pass float_dtype='float64'"),
        (pa.array([1], pa.timestamp("ns")), {}, "does not fit int64 us exactly"),
        (pa.array([1500], pa.timestamp("ms")), {"time_unit": "s"}, "does not fit int64 s"),
    ],
)
def test_lossy_conversions_are_refused(
    array: pa.Array, options: dict[str, Any], message: str
) -> None:
    schema = pa.schema([pa.field("c", array.type)])
    mappings = sqlfeed_tf.column_mappings(schema, **options)
    converter = Converter(mappings, options.get("time_unit", "us"))
    with pytest.raises(QueryError, match=message):
        converter.arrays(pa.RecordBatch.from_arrays([array], schema=schema))


def test_time_units_scale_timestamps(source: sqlfeed.Source) -> None:
    query = "SELECT TIMESTAMP_NS '1970-01-01 00:00:01.000000123' AS t, DATE '1970-01-11' AS d"
    [(features, _)] = elements(sqlfeed_tf.dataset(query, source, batch_size=2, time_unit="ns"))
    assert features == {"t": [1_000_000_123], "d": [10]}
    query = "SELECT TIMESTAMP '1970-01-01 00:00:03' AS t"
    [(features, _)] = elements(sqlfeed_tf.dataset(query, source, batch_size=2, time_unit="s"))
    assert features == {"t": [3]}


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"label": "nope"}, "unknown label column 'nope': the query returns id, g, x, y"),
        ({"features": ["id", "z"]}, "unknown feature column 'z'"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"float_dtype": "float16"}, "float_dtype must be one of float32, float64"),
        ({"time_unit": "h"}, "time_unit must be one of s, ms, us, ns"),
        ({"fill": {"x": "zero"}}, "fill value 'zero' does not fit column 'x'"),
        ({"fill": {"id": 1.5}}, "fill value 1.5 does not fit column 'id'"),
        ({"fill": {"q": 0}}, "unknown fill column 'q'"),
        ({"masks": ["y"], "label": "y"}, "masks names 'y', which is not a feature"),
        ({"label": "y", "features": ["y"]}, "'y' is both a feature and the label"),
        ({"even_batches": True}, "even_batches needs job="),
        ({"job": "j", "drop_remainder": True}, "drop_remainder works on the whole epoch"),
        ({"rank": 1, "world_size": 2, "input_context": "ctx"}, "not both"),
        ({"prefetch": -2}, "prefetch must be an integer >= -1"),
        ({"strategy": "magic"}, "unknown strategy"),
        ({"lable": "y"}, r"unknown option 'lable' \(did you mean 'label'\?\)"),
        ({"features": []}, "no feature columns"),
        ({"fill_nulls": "no"}, "fill_nulls must be True or False"),
        ({"fill": [0]}, "fill must be a dict"),
    ],
)
def test_bad_arguments_are_refused_before_reading(
    source: sqlfeed.Source, options: dict[str, Any], message: str
) -> None:
    options = {"batch_size": 10, **options}
    with pytest.raises(InvalidArgumentError, match=message):
        sqlfeed_tf.dataset("SELECT * FROM t", source, **options)


def test_a_mask_name_taken_by_a_column_is_refused(source: sqlfeed.Source) -> None:
    with pytest.raises(InvalidArgumentError, match="would be named 'x_is_null'"):
        sqlfeed_tf.dataset(
            "SELECT x, x IS NULL AS x_is_null FROM t", source, batch_size=4, masks=True
        )


def test_repeated_column_names_are_made_unique(source: sqlfeed.Source) -> None:
    """As DuckDB does (id, id_1): the plan's schema has unique names (#24 item 6)."""
    feed = sqlfeed_tf.Feed("SELECT id, g AS id FROM t", source, batch_size=1000)
    assert [m.name for m in feed.mappings] == ["id", "id_1"]
    (features, _), *_ = elements(feed.dataset)
    assert [i % 7 for i in features["id"]] == features["id_1"]


def test_plan_options_with_a_plan_are_refused(source: sqlfeed.Source) -> None:
    plan = sqlfeed.plan("SELECT * FROM t", source, partitions=2)
    with pytest.raises(InvalidArgumentError, match=r"plan options .* need a SQL query"):
        sqlfeed_tf.dataset(plan, source, batch_size=4, partitions=3)


def test_without_tensorflow_the_error_names_the_extra(
    source: sqlfeed.Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'sqlfeed\[tf\]'"):
        sqlfeed_tf.dataset("SELECT * FROM t", source, batch_size=4)


def test_importing_sqlfeed_does_not_import_tensorflow() -> None:
    code = (
        "import sys, sqlfeed, sqlfeed.tf, sqlfeed.cli.demo; "
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- Keras ------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Your input ran out of data")  # Keras, unknown length
def test_a_keras_model_learns_a_target_from_a_select() -> None:
    import keras

    conn = duckdb.connect()
    conn.execute(
        "CREATE TABLE s AS SELECT (hash(range, 'a') % 1000) / 1000.0 AS a, "
        "(hash(range, 'b') % 1000) / 1000.0 AS b FROM range(4096)"
    )
    query = "SELECT a, b, 3 * a - 2 * b + 1 AS target FROM s"
    ds = sqlfeed_tf.dataset(
        query,
        sqlfeed.connect(conn),
        label="target",
        batch_size=128,
        shuffle_buffer=1000,
        partitions=4,
    )
    keras.utils.set_random_seed(0)
    inputs = {name: keras.Input(shape=(1,), name=name) for name in ("a", "b")}
    output = keras.layers.Dense(1)(keras.layers.Concatenate()(list(inputs.values())))
    model = keras.Model(inputs, output)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    losses = model.fit(ds, epochs=6, verbose=0, shuffle=False).history["loss"]
    assert losses[-1] < 0.2 * losses[0], losses


# -- splitting the work ----------------------------------------------------------------------


def test_two_input_pipelines_read_disjoint_shares_that_cover_everything(
    source: sqlfeed.Source,
) -> None:
    make = sqlfeed_tf.input_fn("SELECT id FROM t", source, batch_size=64, partitions=6)
    shares = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(2, pipeline, 2)
        elements_ = elements(make(context))
        assert all(len(f["id"]) <= 32 for f, _ in elements_)  # the per-replica batch size
        shares.append([i for f, _ in elements_ for i in f["id"]])
    assert shares[0]
    assert shares[1]
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == list(range(1000))
    assert sorted(i for f, _ in elements(make()) for i in f["id"]) == list(range(1000))


def test_input_fn_checks_its_options_when_made(source: sqlfeed.Source) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown label column 'nope'"):
        sqlfeed_tf.input_fn("SELECT id FROM t", source, batch_size=8, label="nope")
    with pytest.raises(InvalidArgumentError, match="unknown option 'batchsize'"):
        sqlfeed_tf.input_fn("SELECT id FROM t", source, batch_size=8, batchsize=3)


def test_a_global_batch_size_must_divide_among_replicas(source: sqlfeed.Source) -> None:
    make = sqlfeed_tf.input_fn("SELECT id FROM t", source, batch_size=63, partitions=2)
    with pytest.raises(InvalidArgumentError, match="not divisible by the 2 replicas"):
        make(tf.distribute.InputContext(2, 0, 2))


def run_workers(feeds: list[sqlfeed_tf.Feed], epochs: int) -> list[list[list[list[int]]]]:
    """Each feed iterated ``epochs`` times in a thread of its own: [worker][epoch][batch] ids."""
    seen: list[list[list[list[int]]]] = [[] for _ in feeds]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for _ in range(epochs):
                seen[index].append([f["id"] for f, _ in elements(feeds[index].dataset)])
        except BaseException as err:  # handed to the test thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return seen


def job_feeds(source: sqlfeed.Source, queue_url: str, **options: Any) -> list[sqlfeed_tf.Feed]:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=7)
    return [
        sqlfeed_tf.Feed(
            plan, source, job="j", queue=queue_url, epochs=2, worker_id=f"w{i}", seed=1, **options
        )
        for i in range(2)
    ]


def test_two_job_workers_cover_each_partition_once_per_epoch(source: sqlfeed.Source) -> None:
    queue_url = f"memory://{uuid.uuid4().hex}"
    seen = run_workers(job_feeds(source, queue_url, batch_size=50), epochs=2)
    # An iteration is the job's next epoch for that worker: a worker that starts after the
    # other finished epoch 0 sees epoch 1 in its first iteration. So: every id once per
    # iteration, twice over the two epochs, and every partition completed once per epoch.
    for worker in seen:
        for iteration in worker:
            ids = [i for batch in iteration for i in batch]
            assert len(ids) == len(set(ids))
    together = [i for worker in seen for iteration in worker for batch in iteration for i in batch]
    assert Counter(together) == Counter(list(range(1000)) * 2)
    queue = open_queue(queue_url)
    assert queue.status("j").complete
    assert set(queue.completions("j").values()) == {1}  # type: ignore[attr-defined]


def test_even_batches_give_each_worker_the_same_number_of_batches(
    source: sqlfeed.Source,
) -> None:
    queue_url = f"memory://{uuid.uuid4().hex}"
    feeds = job_feeds(source, queue_url, batch_size=64, even_batches=True, replicas=2)
    seen = run_workers(feeds, epochs=2)
    share = 1000 // (2 * 64)
    assert [[len(epoch) for epoch in worker] for worker in seen] == [[share, share]] * 2
    for epoch in range(2):
        ids = [i for worker in seen for batch in worker[epoch] for i in batch]
        assert len(ids) == len(set(ids)) > 0  # none twice (leftovers are dropped)
    assert open_queue(queue_url).status("j").complete


STRATEGY_SCRIPT = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import duckdb, keras, sqlfeed, sqlfeed.tf
from sqlfeed.dispatch.backends import open_queue

conn = duckdb.connect()
conn.execute("CREATE TABLE s AS SELECT range AS id, (range % 100) / 100.0 AS a, "
             "2 * ((range % 100) / 100.0) + 1 AS target FROM range(5000)")
source = sqlfeed.connect(conn)
plan = sqlfeed.plan("SELECT id, a, target FROM s", source, partitions=8)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
result = {"replicas": strategy.num_replicas_in_sync}
steps = []

class Count(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        steps.append(0)
    def on_train_batch_end(self, batch, logs=None):
        steps[-1] += 1

def train(dataset):
    with strategy.scope():
        inputs = {"a": keras.Input(shape=(1,), name="a")}
        model = keras.Model(inputs, keras.layers.Dense(1)(inputs["a"]))
        model.compile(keras.optimizers.Adam(0.05), "mse")
    return model.fit(dataset, epochs=2, verbose=0, callbacks=[Count()]).history["loss"]

queue = "memory://strategy"
dynamic = sqlfeed.tf.distributed_dataset(
    strategy, plan, source, global_batch_size=200, per_replica=True, label="target",
    features=["a"], job="sync", queue=queue, epochs=2, even_batches=True)
result["dynamic_loss"] = train(dynamic)
result["dynamic_steps"] = list(steps)
status = open_queue(queue).status("sync")
result["complete"] = status.complete
result["share"] = open_queue(queue).job("sync").share
result["worker_batches"] = sorted(w["batches"] for w in status.workers)
steps.clear()
static = sqlfeed.tf.distributed_dataset(
    strategy, plan, source, global_batch_size=200, label="target", features=["a"])
result["static_loss"] = train(static)
result["static_steps"] = list(steps)
print("RESULT " + json.dumps(result))
"""


@pytest.mark.slow
def test_mirrored_strategy_replicas_stay_in_lockstep_with_job_workers() -> None:
    """Two replicas (two logical CPUs), each fed by its own elastic worker, in a subprocess."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", STRATEGY_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    share = 5000 // (2 * 100)
    assert result["replicas"] == 2
    assert result["share"] == share
    assert result["complete"]
    assert result["worker_batches"] == [2 * share, 2 * share]  # the same, every epoch
    assert result["dynamic_steps"] == [share, share]  # each step: one batch per replica
    assert result["dynamic_loss"][-1] < result["dynamic_loss"][0]
    assert result["static_steps"] == [25, 25]  # 5000 rows / 200 per step


# -- resuming from a checkpoint ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("job", [None, "resumable"])
def test_feed_checkpoint_resumes_where_the_model_was_checkpointed(
    source: sqlfeed.Source, tmp_path: Any, job: str | None
) -> None:
    """Train 9 steps with saves every 4, crash at step 9, restore: step 8's checkpoint."""
    import keras

    class Crash(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 8:
                raise RuntimeError("preempted")

    def train(crash: bool) -> list[int]:
        ids: list[int] = []

        class Logged(keras.Model):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.dense = keras.layers.Dense(1)

            def call(self, features: Any) -> Any:
                return self.dense(tf.cast(features["id"], "float32")[:, None])

            def train_step(self, data: Any) -> Any:
                ids.extend(data[0]["id"].numpy().tolist())
                return super().train_step(data)

        options: dict[str, Any] = {"batch_size": 50, "label": "x", "features": ["id"], "seed": 2}
        if job is None:
            options |= {"shuffle_buffer": 200}
        else:
            options |= {"job": job, "queue": f"sqlite:///{tmp_path / 'q.db'}", "worker_id": "w"}
        feed = sqlfeed_tf.Feed("SELECT id, x FROM t", source, partitions=4, **options)
        model = Logged()
        model({"id": tf.zeros([1], tf.int64)})
        model.compile("sgd", "mse", run_eagerly=True)
        backup = tmp_path / "backup"
        callbacks = [
            sqlfeed_tf.FeedCheckpoint(feed, backup, save_freq=4),
            keras.callbacks.BackupAndRestore(backup, save_freq=4),
        ]
        with contextlib.suppress(RuntimeError):
            model.fit(
                feed.dataset,
                epochs=1,
                verbose=0,
                callbacks=callbacks + ([Crash()] if crash else []),
            )
        feed.close()
        return ids

    first = train(crash=True)
    rest = train(crash=False)
    seen = first[: 8 * 50] + rest  # the checkpoint of step 8 was restored
    assert Counter(seen) == Counter(range(1000))
    if job is None:
        uninterrupted = sqlfeed_tf.Feed(
            "SELECT id, x FROM t",
            source,
            partitions=4,
            batch_size=50,
            label="x",
            features=["id"],
            seed=2,
            shuffle_buffer=200,
        )
        order = [i for f, _ in elements(uninterrupted.dataset) for i in f["id"]]
        assert seen == order


def test_input_fn_drops_only_the_table_it_materialized_and_only_when_nothing_reads_it(
    tmp_path: Any,
) -> None:
    """A user's materialized Plan is the user's: an input_fn over it never drops its table
    (it did, when the input_fn was collected: the demo's last read failed on a missing
    table). A table input_fn materialized itself lives while a dataset it made is read."""
    import gc

    url = f"duckdb:///{tmp_path / 'm.duckdb'}"
    with duckdb.connect(str(tmp_path / "m.duckdb")) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id, range % 3 AS y FROM range(500)")
    source = sqlfeed.connect(url)
    query = "SELECT DISTINCT id, y FROM t"
    users = sqlfeed.plan(query, source, strategy="materialize", scratch="main", partitions=3)
    make = sqlfeed_tf.input_fn(users, source, batch_size=64, label="y")
    del make
    gc.collect()
    ids = [
        int(i)
        for x, _ in sqlfeed_tf.dataset(users, source, batch_size=64, label="y")
        for i in x["id"].numpy()
    ]
    assert sorted(ids) == list(range(500))

    make = sqlfeed_tf.input_fn(
        query,
        source,
        batch_size=64,
        label="y",
        strategy="materialize",
        scratch="main",
        partitions=3,
    )
    ds = make()
    del make
    gc.collect()
    assert sorted(int(i) for x, _ in ds for i in x["id"].numpy()) == list(range(500))
    source.close()


def test_the_cli_reads_a_feed_error_carried_by_tensorflow_as_sqlfeeds_own(tmp_path: Any) -> None:
    """A feed's error inside a tf.function reaches the caller as a TensorFlow error; the CLI
    words it as the sqlfeed error it carries (it said 'internal error ... a bug')."""
    from sqlfeed.cli.run import _carried_by_tensorflow

    path = tmp_path / "gone.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id, range % 2 AS y FROM range(100)")
    source = sqlfeed.connect(f"duckdb:///{path}")
    ds = sqlfeed_tf.dataset("SELECT id, y FROM t", source, batch_size=10, label="y")
    source.execute("DROP TABLE t")
    with pytest.raises(tf.errors.OpError) as caught:
        tf.function(lambda: ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))()
    carried = _carried_by_tensorflow(caught.value)
    assert carried is not None
    assert carried[0] == "EngineError"
    assert "partition query" in carried[1]
    assert "t" in carried[1]
    source.close()
