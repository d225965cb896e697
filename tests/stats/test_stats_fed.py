"""Statistics are in the feeds' own representation: the Keras layers built from them work on
the tensors :mod:`sqlfeed.tf` feeds, for every Arrow type the readers produce, on every
engine and by every statistics method.

For each column of a table of many types (few distinct values each, no NULL, so every
value is in the top-k vocabulary): either the tf feed takes it, and a layer from
``to_keras`` applied to the fed tensor maps no value to the out-of-vocabulary index
(lookups), standardizes it (Normalization) or puts it in the buckets the statistics'
histogram counts (Discretization); or the tf feed refuses it, and so does ``to_keras``,
in one line. The torch feed gives the same values as the vocabulary.
"""

from __future__ import annotations

import warnings
from typing import Any

import duckdb
import numpy as np
import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError, StatsSpec
from sqlfeed.feed.tensors import column_mappings
from sqlfeed.stats.fed import fed_kind, fed_value
from sqlfeed.stats.keras import to_keras
from tests.helpers.engines import Engine

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.engine

TABLE = "fed_types"
ROWS = 48

DDL = {
    "duckdb": [
        f"""CREATE OR REPLACE TABLE {TABLE} AS SELECT i::INTEGER AS id,
            (i % 4)::TINYINT AS tiny, (i % 4)::UBIGINT AS ubig, (i % 4)::HUGEINT AS huge,
            ((i % 4) * 0.5)::DECIMAL(6, 1) AS dec, ((i % 4) * 0.5)::FLOAT AS f4,
            ((i % 4) * 0.5)::DOUBLE AS f8, i % 2 = 0 AS flag, 'c' || (i % 4) AS txt,
            ('\\xFF\\x00b' || (i % 3))::BLOB AS bytes,
            DATE '2020-01-01' + (i % 5)::INTEGER AS day,
            TIMESTAMP '2020-01-01' + to_hours((i % 5)::BIGINT) AS ts,
            TIMESTAMPTZ '2020-01-01 00:00:00+00' + to_hours((i % 5)::BIGINT) AS tstz,
            TIMESTAMP_NS '2020-01-01' + to_hours((i % 5)::BIGINT) AS ts_ns,
            TIME '01:00:00' + to_minutes((i % 5)::BIGINT) AS tod,
            to_days((i % 4)::INTEGER) AS span,
            ('00000000-0000-0000-0000-00000000000' || (i % 3))::UUID AS uid,
            json_object('v', i % 3) AS js, ('e' || (i % 3))::ENUM('e0', 'e1', 'e2') AS mood,
            ['t' || (i % 2), 't1'] AS tags, [i % 3, 7] AS nums,
            [['a' || (i % 2)], ['b']] AS nested, {{'x': i % 2}} AS rec,
            MAP {{'k': i % 2}} AS mp, [i % 2, 5]::INTEGER[2] AS pair,
            union_value(num := i % 2)::UNION(num INTEGER, str VARCHAR) AS choice
        FROM range({ROWS}) r(i)"""
    ],
    "postgres": [
        f"""CREATE TABLE {TABLE} AS SELECT i AS id, (i % 4)::smallint AS small,
            (i % 4)::bigint AS big, ((i % 4) * 0.5)::numeric(6, 1) AS dec,
            ((i % 4) * 0.5)::numeric AS num, ((i % 4) * 0.5)::real AS f4,
            ((i % 4) * 0.5)::float8 AS f8, i % 2 = 0 AS flag, 'c' || (i % 4) AS txt,
            ('c' || (i % 4))::varchar(10) AS vc, ('c' || (i % 4))::char(4) AS ch,
            ('b' || (i % 3))::bytea AS bytes, DATE '2020-01-01' + (i % 5) AS day,
            TIMESTAMP '2020-01-01' + make_interval(hours => i % 5) AS ts,
            TIMESTAMPTZ '2020-01-01 00:00+00' + make_interval(hours => i % 5) AS tstz,
            make_time(1, i % 5, 0) AS tod, make_interval(days => i % 4) AS span,
            md5((i % 3)::text)::uuid AS uid, jsonb_build_object('v', i % 3, 'w', 'x') AS jb,
            json_build_object('v', i % 3, 'w', 'x') AS js,
            ARRAY['t' || (i % 2), 't1'] AS tags, ARRAY[i % 3, 7] AS nums,
            ARRAY[(i % 2) * 0.5, 1.5]::float8[] AS fnums,
            ((i % 3)::numeric)::money AS cash, ('10.0.0.' || (i % 3))::inet AS ip,
            make_time(1, i % 5, 0)::timetz AS tz_time, ARRAY[i % 2 = 0] AS flags,
            ARRAY[DATE '2020-01-01' + (i % 3)] AS days, ARRAY[((i % 3) * 0.5)::numeric(6, 1)]
            AS decs, ARRAY[md5((i % 3)::text)::uuid] AS uids, xmlelement(name x, i % 2) AS doc
        FROM generate_series(0, {ROWS - 1}) i"""
    ],
    "mysql": [
        f"""CREATE TABLE {TABLE} (id INT, tiny TINYINT, ubig BIGINT UNSIGNED,
            `dec` DECIMAL(6, 1), f4 FLOAT, f8 DOUBLE, flag BOOLEAN,
            txt VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, bytes VARBINARY(20),
            day DATE, ts DATETIME(6), tod TIME(6), js JSON, mood ENUM('e0', 'e1', 'e2'),
            yr YEAR, bits BIT(8), uid UUID)""",
        f"""INSERT INTO {TABLE} SELECT seq, seq % 4, seq % 4, (seq % 4) * 0.5,
            (seq % 4) * 0.5, (seq % 4) * 0.5, seq % 2 = 0, CONCAT('c', seq % 4),
            CONCAT('b', seq % 3), DATE '2020-01-01' + INTERVAL (seq % 5) DAY,
            TIMESTAMP '2020-01-01 00:00:00' + INTERVAL (seq % 5) HOUR,
            MAKETIME(1, seq % 5, 0), JSON_OBJECT('v', seq % 3), ELT(seq % 3 + 1, 'e0', 'e1', 'e2'),
            2000 + seq % 3, seq % 3, CONCAT('00000000-0000-0000-0000-00000000000', seq % 3)
            FROM seq_0_to_{ROWS - 1}""",
    ],
    "sqlite": [
        f"""CREATE TABLE {TABLE} (id INTEGER, n INTEGER, r REAL, txt TEXT, bytes BLOB,
            num NUMERIC, flag BOOLEAN, day DATE, ts TIMESTAMP, js TEXT)""",
        f"""INSERT INTO {TABLE} WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s
            WHERE i < {ROWS - 1}) SELECT i, i % 4, (i % 4) * 0.5, 'c' || (i % 4),
            CAST('b' || (i % 3) AS BLOB), (i % 4) * 0.5, i % 2 = 0,
            date('2020-01-01', '+' || (i % 5) || ' days'),
            datetime('2020-01-01', '+' || (i % 5) || ' hours'), json_object('v', i % 3)
            FROM s""",
    ],
}
"""Per engine, a table of the types its readers produce (each with a few distinct values)."""

METHODS = ["pushdown", "sample", "accumulate"]
_tables: set[str] = set()


def typed_query(engine: Engine) -> str:
    if engine.name not in _tables:
        engine.execute(f"DROP TABLE IF EXISTS {TABLE}")
        for sql in DDL[engine.name]:
            engine.execute(sql)
        engine.commit()
        _tables.add(engine.name)
    return f"SELECT * FROM {engine.qualify(TABLE)}"


def statistics(source: Any, query: str, method: str) -> sqlfeed.FeatureStats:
    options: dict[str, Any] = {"sample_rows": 10 * ROWS} if method == "sample" else {}
    return sqlfeed.compute_stats(query, source, method=method, spec=StatsSpec(), **options)


def fed_columns(schema: Any) -> tuple[list[str], dict[str, str]]:
    """The columns the tf feed takes, and the one-line refusal of each other column."""
    taken, refused = [], {}
    for name in schema.names:
        try:
            column_mappings(schema, features=[name])
        except InvalidArgumentError as err:
            refused[name] = str(err)
        else:
            taken.append(name)
    return taken, refused


def layer_for(stats: sqlfeed.FeatureStats, name: str) -> tuple[Any, str | None]:
    """The layer to_keras builds (normalize, else discretize), or its one-line refusal."""
    try:
        return to_keras(stats, [name])[name], None
    except InvalidArgumentError as first:
        if stats[name].kind != "numeric":
            return None, str(first)
        try:
            return to_keras(stats, [name], numeric="discretize")[name], None
        except InvalidArgumentError as second:
            return None, str(second)


def flat(tensor: Any) -> np.ndarray:
    values = tensor.flat_values if isinstance(tensor, tf.RaggedTensor) else tensor
    return np.asarray(values).reshape(-1)


def check_layer(stats: sqlfeed.ColumnStats, layer: Any, fed: Any) -> None:
    """The layer applied to the fed tensor does what its statistics promise."""
    out = flat(layer(fed))
    kind = fed_kind(stats.arrow_type)[0]
    assert kind is not None
    if "lookup" in layer.name:
        assert len(out)
        assert (out > 0).all(), (
            f"{stats.name} ({stats.arrow_type}): {int((out == 0).sum())} of {len(out)} "
            f"values out of vocabulary {stats.vocabulary} (fed {flat(fed)[:4]})"
        )
    elif "normalized" in layer.name:  # float32 resolves a time to ~1e-7 of its size
        values = flat(fed).astype(np.float64)
        tolerance = 1e-3 + 2e-7 * float(np.abs(values).max()) / float(values.std())
        assert abs(float(out.mean())) < tolerance, stats.name
        assert abs(float(out.std()) - 1) < tolerance, stats.name
    else:  # Discretization: the statistics' histogram, buckets of repeated bounds merged
        bounds = [float(fed_value(b, kind, "us")) for b in stats.boundaries]
        unique = sorted(set(bounds))
        expected = np.zeros(len(unique) + 1, dtype=int)
        for j, count in enumerate(stats.histogram):
            expected[0 if j == 0 else unique.index(bounds[j - 1]) + 1] += count
        got = np.bincount(out.astype(int), minlength=len(unique) + 1)
        assert got.tolist() == expected.tolist(), stats.name


@pytest.mark.parametrize("method", METHODS)
def test_keras_layers_take_every_fed_type(engine: Engine, method: str) -> None:
    source = engine.source()
    query = typed_query(engine)
    stats = statistics(source, query, method)
    schema = source.schema(source.parse(query))
    taken, refused = fed_columns(schema)
    assert set(stats.columns) == set(schema.names)
    batch = next(iter(sqlfeed.tf.dataset(query, source, features=taken, batch_size=10 * ROWS)))
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every value is in its vocabulary: no warning
        for name in schema.names:
            layer, refusal = layer_for(stats, name)
            if name in refused:  # the feed refuses it: so does to_keras, in one line
                assert layer is None, f"{name}: to_keras built a layer for {refused[name]}"
                assert refusal is not None
                assert "\n" not in refusal
                assert repr(name) in refusal
                continue
            if layer is None:
                problems.append(f"{name} ({schema.field(name).type}): refused: {refusal}")
                continue
            check_layer(stats[name], layer, batch[name])
    assert not problems, "\n".join(problems)


def _leaves(values: Any) -> list[Any]:
    """The values of a torch batch's column: nested lists and tensors flattened."""
    if isinstance(values, list):
        return [leaf for value in values for leaf in _leaves(value)]
    if hasattr(values, "numpy"):
        return list(np.asarray(values).reshape(-1).tolist())
    return [values]


def test_vocabularies_are_the_values_the_torch_feed_gives(engine: Engine) -> None:
    pytest.importorskip("torch")
    import sqlfeed.torch

    source = engine.source()
    query = typed_query(engine)
    schema = source.schema(source.parse(query))
    taken, _ = fed_columns(schema)
    stats = statistics(source, query, "pushdown")
    dataset = sqlfeed.torch.SQLDataset(
        query, source, features=taken, batch_size=10 * ROWS, lists="padded"
    )
    batch = next(iter(dataset))
    for name in taken:
        column = stats[name]
        kind, _ = fed_kind(column.arrow_type)
        if column.kind != "categorical" or kind in ("float", "decimal"):
            continue
        fed = set(_leaves(batch[name]))  # a list column's elements (padding included)
        if kind == "string":
            vocabulary = {v for v in column.vocabulary}
        else:
            vocabulary = {fed_value(v, kind or "", "us") for v in column.vocabulary}
        assert vocabulary <= fed, f"{name}: {vocabulary - fed} not fed (fed {sorted(fed)[:4]})"


def test_saved_statistics_build_the_same_layers(engine: Engine, tmp_path: Any) -> None:
    """A JSON round trip keeps what the layers need: binary values (base64, NUL and
    non-UTF-8 bytes included), durations (microseconds), times and dates (ISO text), list
    elements."""
    source = engine.source()
    query = typed_query(engine)
    stats = statistics(source, query, "pushdown")
    stats.save(str(tmp_path / "stats.json"))
    loaded = sqlfeed.FeatureStats.load(str(tmp_path / "stats.json"))
    schema = source.schema(source.parse(query))
    taken, _ = fed_columns(schema)
    batch = next(iter(sqlfeed.tf.dataset(query, source, features=taken, batch_size=10 * ROWS)))
    for name in taken:
        before, _ = layer_for(stats, name)
        after, _ = layer_for(loaded, name)
        assert after is not None, name
        fed = batch[name]
        assert flat(after(fed)).tolist() == flat(before(fed)).tolist(), name
        check_layer(loaded[name], after, fed)


def test_statistics_saved_by_format_1_still_load(tmp_path: Any) -> None:
    """Format 1 kept a binary column's values as UTF-8 text: read as that text, not base64."""
    column = sqlfeed.ColumnStats(
        "b",
        "categorical",
        "binary",
        count=3,
        distinct=2,
        vocabulary=[b"ab", b"cd"],
        vocabulary_counts=[2, 1],
    )
    saved = sqlfeed.FeatureStats({"b": column}, rows=3, method="pushdown").to_dict()
    assert saved["version"] == 2
    assert sqlfeed.FeatureStats.from_dict(saved)["b"].vocabulary == [b"ab", b"cd"]
    old = {
        **saved,
        "version": 1,
        "columns": {"b": {**saved["columns"]["b"], "vocabulary": ["ab", "cd"]}},
    }
    assert sqlfeed.FeatureStats.from_dict(old)["b"].vocabulary == ["ab", "cd"]


@pytest.mark.parametrize("time_unit", ["us", "s"])
def test_time_columns_described_as_categories_look_up_their_fed_ticks(time_unit: str) -> None:
    """Dates, timestamps and times of day as categories: vocabularies of the int64 the feed
    gives (days; ticks of ``time_unit``), and a float column's lookup refused in one line."""
    connection = duckdb.connect()
    source = sqlfeed.connect(connection)
    for sql in DDL["duckdb"]:
        connection.execute(sql)
    names = ["day", "ts", "tstz", "tod", "tiny"]
    query = f"SELECT {', '.join(names)}, f8 FROM {TABLE}"
    kinds = dict.fromkeys([*names, "f8"], "categorical")
    stats = sqlfeed.compute_stats(query, source, spec=StatsSpec(kinds=kinds))
    batch = next(iter(sqlfeed.tf.dataset(query, source, batch_size=10 * ROWS, time_unit=time_unit)))
    layers = to_keras(stats, names, time_unit=time_unit)
    for name in names:
        out = flat(layers[name](batch[name]))
        assert (out > 0).all(), name
    with pytest.raises(InvalidArgumentError, match="'f8' is fed as a float number") as refused:
        to_keras(stats, ["f8"])
    assert "\n" not in str(refused.value)


CLOCKS = {
    "duckdb": """SELECT TIME '00:00:00' + to_microseconds(i * 7_919_000_017 % 86_400_000_000)
        AS clock FROM range(200) r(i)""",
    "postgres": """SELECT make_time(0, 0, 0) + make_interval(secs => (i * 7919.000017) % 86400)
        AS clock, make_interval(years => i % 3 - 1, months => i % 5 - 2, days => i - 100,
        secs => i * 0.25 - 20) AS span FROM generate_series(0, 199) i""",
    "mysql": """SELECT CAST(CONCAT(IF(seq % 4 = 0, '-', ''), seq * 3, ':', seq % 60, ':',
        seq % 60, '.', LPAD(seq * 37 % 1000000, 6, '0')) AS TIME(6)) AS span
        FROM seq_0_to_199""",
}
"""Times of day and durations (PostgreSQL intervals with years and months, negative and
fractional MariaDB TIMEs), whose moments are in the microseconds the feeds give."""


@pytest.mark.parametrize("method", METHODS)
def test_times_of_day_and_durations_have_moments_in_fed_microseconds(
    engine: Engine, method: str
) -> None:
    if engine.name not in CLOCKS:
        pytest.skip("not an engine gap: SQLite has no time types (its time() gives text)")
    source = engine.source()
    query = CLOCKS[engine.name]
    stats = statistics(source, query, method)
    batch = next(iter(sqlfeed.tf.dataset(query, source, batch_size=1000, time_unit="us")))
    for name, column in stats.columns.items():
        fed = np.asarray(batch[name]).tolist()
        exact_mean = sum(fed) / len(fed)  # as float: the ints are exact below 2**53
        variance = sum((v - exact_mean) ** 2 for v in fed) / len(fed)
        assert column.mean == pytest.approx(exact_mean, rel=1e-12), name
        assert column.variance == pytest.approx(variance, rel=1e-9), name
        for unit, scale in (("us", 1), ("ms", 1000)):
            layer = to_keras(stats, [name], time_unit=unit)[name]
            ticks = np.array([v // scale for v in fed], dtype=np.int64)
            out = np.asarray(layer(ticks[:, None])).reshape(-1)
            assert abs(float(out.mean())) < 1e-3, (name, unit)
            assert abs(float(out.std()) - 1) < 1e-3, (name, unit)
