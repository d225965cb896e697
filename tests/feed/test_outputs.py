"""What the outputs a user reads look like, on the real engines (#24 items 6, 7, 9, 17).

* ``SELECT *`` over a join repeats column names: every output keyed by name (export files,
  Feeder formats, sample, worker ``--out`` files) gets them unique as DuckDB does (``id``,
  ``id_1``), said in one warning line.
* Arrays, structs and maps export to CSV as JSON text; durations show as ISO 8601 text in
  CSV, JSONL and ``sample``; binary values as ``\\x`` hex.
* No output carries sqlfeed's reader hints; ``scratch list`` counts the rows.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.feed import PartitionFeeder as Feeder
from sqlfeed.feed.textout import iso_duration, iso_interval
from sqlfeed.io.arrow import READER_HINT
from tests.conftest import get_engine
from tests.helpers import engines
from tests.helpers.cli import run_cli
from tests.helpers.engines import Engine

JOIN_FORMATS = ("parquet", "csv", "jsonl")


def _url(engine: Engine) -> str:
    if engine.name == "postgres":
        return engines.POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    return engines.MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1)


@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    """A server engine with two small tables that share the column name ``id``."""
    engine = get_engine(request.param)
    left, right = f"l_{uuid.uuid4().hex[:8]}", f"r_{uuid.uuid4().hex[:8]}"
    engine.execute(f"CREATE TABLE {left} (id INT, x VARCHAR(20))")
    engine.execute(f"CREATE TABLE {right} (id INT, y VARCHAR(20))")
    engine.execute(f"INSERT INTO {left} VALUES " + ", ".join(f"({i}, 'x{i}')" for i in range(30)))
    engine.execute(f"INSERT INTO {right} VALUES " + ", ".join(f"({i}, 'y{i}')" for i in range(30)))
    engine.commit()
    engine.tables = (engine.qualify(left), engine.qualify(right))  # type: ignore[attr-defined]
    yield engine, _url(engine)
    engine.execute(f"DROP TABLE {left}")
    engine.execute(f"DROP TABLE {right}")


def _join(engine: Engine) -> str:
    left, right = engine.tables  # type: ignore[attr-defined]
    return f"SELECT * FROM {left} a JOIN {right} b ON a.id = b.id"


def _read(path: Path, fmt: str) -> pd.DataFrame:
    if fmt == "parquet":
        frame: pd.DataFrame = pq.read_table(path).to_pandas()
    elif fmt == "csv":
        frame = pd.read_csv(path)
    else:
        frame = pd.read_json(path, lines=True)
    return frame


# -- item 6: repeated column names ----------------------------------------------------------


@pytest.mark.engine
@pytest.mark.parametrize("fmt", JOIN_FORMATS)
def test_an_export_of_a_join_has_unique_names_and_says_so_once(
    server: tuple[Engine, str], fmt: str, tmp_path: Path
) -> None:
    engine, url = server
    out = tmp_path / f"j.{fmt}"
    ran = run_cli(["export", "--db", url, "-m", "3", "--out", str(out), _join(engine)])
    assert ran.code == 0, ran.err
    renamed = [line for line in ran.err.splitlines() if "repeated column names" in line]
    assert len(renamed) == 1, ran.err
    assert "id -> id_1" in renamed[0]
    frame = _read(out, fmt)  # pyarrow: "Multiple matches for FieldRef.Name(id)" before
    assert list(frame.columns) == ["id", "x", "id_1", "y"]
    got = Counter(tuple(r) for r in frame.itertuples(index=False))
    assert got == Counter(tuple(r) for r in engine.rows(_join(engine)))


@pytest.mark.engine
def test_a_folder_export_and_the_feeder_formats_key_by_unique_names(
    server: tuple[Engine, str], tmp_path: Path
) -> None:
    engine, url = server
    out = tmp_path / "parts"
    assert run_cli(["export", "--db", url, "-m", "3", "--out", str(out), _join(engine)]).code == 0
    names = {tuple(pq.read_schema(f).names) for f in out.glob("part-*.parquet")}
    assert names == {("id", "x", "id_1", "y")}
    for fmt in ("numpy", "pandas", "arrow"):
        feeder = Feeder(_join(engine), url, partitions=3, batch_size=100, format=fmt)
        batch = next(iter(feeder))
        keys = (
            list(batch.keys())
            if fmt == "numpy"
            else list(batch.columns)
            if fmt == "pandas"
            else batch.schema.names
        )
        assert keys == ["id", "x", "id_1", "y"], fmt
        assert feeder.schema.names == ["id", "x", "id_1", "y"]
    plan = sqlfeed.plan(_join(engine), url, partitions=2)
    assert "id -> id_1" in plan.reason
    assert plan.columns == ("id", "x", "id", "y")  # the SQL's own names, for its partitions


@pytest.mark.engine
def test_sample_and_worker_out_files_have_unique_names(
    server: tuple[Engine, str], tmp_path: Path
) -> None:
    engine, url = server
    for fmt in ("csv", "json", "table"):
        ran = run_cli(["sample", "--db", url, "--format", fmt, "--rows", "3", _join(engine)])
        assert ran.code == 0, ran.err
        assert ran.err.count("id -> id_1") == 1
    sampled = json.loads(run_cli(["sample", "--db", url, "--format", "json", _join(engine)]).out)
    assert sampled
    assert all(list(r) == ["id", "x", "id_1", "y"] for r in sampled)
    queue, out = f"sqlite:///{tmp_path / 'queue.db'}", tmp_path / "out"
    made = run_cli(
        ["job", "create", "--queue", queue, "--job", "j", "--db", url, "-m", "3", _join(engine)]
    )
    assert made.code == 0, made.err
    ran = run_cli(["worker", "--queue", queue, "--job", "j", "--db", url, "--out", str(out)])
    assert ran.code == 0, ran.err
    files = sorted(out.rglob("*.parquet"))
    assert files
    rows = Counter(tuple(r.values()) for f in files for r in pq.read_table(f).to_pylist())
    assert {tuple(pq.read_schema(f).names) for f in files} == {("id", "x", "id_1", "y")}
    assert rows == Counter(tuple(r) for r in engine.rows(_join(engine)))


@pytest.mark.engine
def test_tf_and_torch_features_of_a_join_keep_both_ids(server: tuple[Engine, str]) -> None:
    """A dict of features keyed by name had one ``id`` for two columns."""
    torch_data = pytest.importorskip("sqlfeed.torch")
    tf_feed = pytest.importorskip("sqlfeed.tf")
    engine, url = server
    expected = Counter((r[0], r[2]) for r in engine.rows(_join(engine)))
    loader = torch_data.SQLDataset(_join(engine), url, batch_size=7, partitions=2)
    seen: Counter[tuple[int, int]] = Counter()
    for batch in loader:
        assert list(batch) == ["id", "x", "id_1", "y"]
        seen.update(zip(batch["id"].tolist(), batch["id_1"].tolist(), strict=True))
    assert seen == expected
    data = tf_feed.dataset(_join(engine), url, batch_size=7, partitions=2)
    assert list(data.element_spec) == ["id", "x", "id_1", "y"]
    seen = Counter()
    for batch in data:
        seen.update(zip(batch["id"].numpy().tolist(), batch["id_1"].numpy().tolist(), strict=True))
    assert seen == expected


def test_duckdb_join_names_are_duckdbs_own(tmp_path: Path) -> None:
    """The names sqlfeed makes are those DuckDB gives a subquery's repeated names, and a
    name the query already has is never taken."""
    sql = "SELECT 1 AS id, 2 AS id, 3 AS id_1, 4 AS id"
    out = tmp_path / "d.parquet"
    ran = run_cli(["export", "--db", "duckdb://", "-m", "1", "--out", str(out), sql])
    assert ran.code == 0, ran.err
    assert pq.read_schema(out).names == ["id", "id_2", "id_1", "id_3"]
    relation = duckdb.sql("SELECT * FROM (SELECT 1 AS id, 2 AS id)")
    assert relation is not None
    assert relation.columns == ["id", "id_1"]


# -- items 7 and 9: arrays, structs, durations, binary in text outputs --------------------------

PG_VALUES = (
    "SELECT i AS id, ARRAY['t' || i, 'u'] AS tags, ARRAY[i, NULL] AS nums, "
    "make_interval(days => i, hours => i % 24, mins => 30, secs => i / 4.0) AS d, "
    "-make_interval(hours => i % 23 + 1, mins => 5) AS neg, "
    "decode('00ff', 'hex') || int4send(i) AS b "
    "FROM generate_series(1, 40) AS i"
)


def _pg_iso(engine: Engine) -> dict[int, tuple[str, str]]:
    """PostgreSQL's own ISO 8601 text of the intervals (intervalstyle iso_8601)."""
    engine.execute("SET intervalstyle = iso_8601")
    try:
        found = engine.rows(f"SELECT id, d::text, neg::text FROM ({PG_VALUES}) q")
    finally:
        engine.execute("SET intervalstyle = postgres")
    return {int(i): (str(d), str(n)) for i, d, n in found}


@pytest.mark.engine
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_postgres_arrays_intervals_and_bytea_export_to_text(fmt: str, tmp_path: Path) -> None:
    engine = get_engine("postgres")
    out = tmp_path / f"v.{fmt}"
    ran = run_cli(["export", "--db", _url(engine), "-m", "3", "--out", str(out), PG_VALUES])
    assert ran.code == 0, ran.err  # CSV: "Unsupported Type: list<item: string>" before
    if fmt == "csv":
        rows = [
            {**r, "tags": json.loads(r["tags"]), "nums": json.loads(r["nums"])}
            for r in csv.DictReader(io.StringIO(out.read_text()))
        ]
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 40
    iso = _pg_iso(engine)
    for row in rows:
        i = int(row["id"])
        assert row["tags"] == [f"t{i}", "u"]
        assert row["nums"] == [i, None]
        assert (row["d"], row["neg"]) == _pg_form(iso[i])
        assert row["b"] == f"\\x00ff{i:08x}"


def _pg_form(pair: tuple[str, str]) -> tuple[str, str]:
    """PostgreSQL's ISO text in sqlfeed's form: one leading sign when every part is
    negative (PostgreSQL puts a sign on each part: PT-3H)."""
    d, neg = pair
    return d, "-" + neg.replace("-", "") if neg.count("-") else neg


@pytest.mark.engine
def test_sample_shows_postgres_intervals_as_iso_text_in_every_format() -> None:
    engine = get_engine("postgres")
    sql = "SELECT interval '1 day' AS d, interval '1 hour 30 minutes' AS h, ARRAY[1, 2] AS a"
    table = run_cli(["sample", "--db", _url(engine), "--format", "table", sql])
    assert table.code == 0, table.err
    assert "P1D" in table.out
    assert "PT1H30M" in table.out
    text = run_cli(["sample", "--db", _url(engine), "--format", "csv", sql])
    assert text.code == 0, text.err  # an array column failed, a duration was 86400000000
    assert text.out.splitlines() == ['"d","h","a"', '"P1D","PT1H30M","[1, 2]"']
    rows = json.loads(run_cli(["sample", "--db", _url(engine), "--format", "json", sql]).out)
    assert rows == [{"d": "P1D", "h": "PT1H30M", "a": [1, 2]}]


@pytest.mark.engine
def test_mariadb_time_and_binary_export_to_csv(tmp_path: Path) -> None:
    engine = get_engine("mysql")
    table = f"t_{uuid.uuid4().hex[:8]}"
    engine.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, t TIME(6), b VARBINARY(8))")
    engine.execute(
        f"INSERT INTO {table} VALUES (1, '-01:30:00', X'00ff'), "
        "(2, '838:59:59', NULL), (3, '00:00:00.25', X'')"
    )
    engine.commit()
    try:
        out = tmp_path / "m.csv"
        sql = f"SELECT id, t, b FROM {engine.qualify(table)}"
        ran = run_cli(["export", "--db", _url(engine), "--out", str(out), sql])
        assert ran.code == 0, ran.err
        rows = sorted(list(csv.reader(io.StringIO(out.read_text())))[1:])
        assert rows == [
            ["1", "-PT1H30M", "\\x00ff"],
            ["2", "P34DT22H59M59S", ""],
            ["3", "PT0.25S", "\\x"],
        ]
    finally:
        engine.execute(f"DROP TABLE {table}")


def test_duckdb_lists_structs_maps_and_intervals_export_to_csv(tmp_path: Path) -> None:
    sql = (
        "SELECT range AS id, [range, NULL] AS l, {'a': range, 'b': 'x' || range} AS s, "
        "MAP {'k': range} AS m, INTERVAL 1 MONTH * range + INTERVAL 2 DAY AS i "
        "FROM range(5)"
    )
    out = tmp_path / "d.csv"
    ran = run_cli(["export", "--db", "duckdb://", "-m", "2", "--out", str(out), sql])
    assert ran.code == 0, ran.err
    rows = sorted(csv.DictReader(io.StringIO(out.read_text())), key=lambda r: int(r["id"]))
    for i, row in enumerate(rows):
        assert json.loads(row["l"]) == [i, None]
        assert json.loads(row["s"]) == {"a": i, "b": f"x{i}"}
        assert json.loads(row["m"]) == {"k": i}
        assert row["i"] == iso_interval(i, 2, 0)
    assert [r["i"] for r in rows[:2]] == ["P2D", "P1M2D"]


def test_a_column_parquet_cannot_hold_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "i.parquet"
    ran = run_cli(
        ["export", "--db", "duckdb://", "--out", str(out), "SELECT INTERVAL 1 MONTH AS i, 1 AS n"]
    )
    assert ran.code == 2, ran.err
    assert "column 'i'" in ran.err
    assert "csv or jsonl" in ran.err
    assert not out.exists()


@pytest.mark.parametrize(
    ("ticks", "unit", "text"),
    [
        (86_400_000_000, "us", "P1D"),
        (5_400, "s", "PT1H30M"),
        (0, "us", "PT0S"),
        (-500, "ms", "-PT0.5S"),
        (90_061_000_001, "us", "P1DT1H1M1.000001S"),
        (1, "ns", "PT0.000000001S"),
    ],
)
def test_iso_durations(ticks: int, unit: str, text: str) -> None:
    assert iso_duration(ticks, unit) == text
    assert pd.Timedelta(text).value == ticks * {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]


def test_iso_intervals_carry_mixed_signs_per_part() -> None:
    assert iso_interval(14, 3, 4 * 3_600 * 10**9) == "P1Y2M3DT4H"
    assert iso_interval(1, -2, 0) == "P1M-2D"
    assert iso_interval(-1, -2, -3 * 10**9) == "-P1M2DT3S"
    assert iso_interval(0, 0, 0) == "PT0S"


# -- item 17: reader hints and scratch rows ----------------------------------------------------


def _hinted(schema: Any) -> list[str]:
    return [f.name for f in schema if any(k.startswith(READER_HINT) for k in f.metadata or {})]


@pytest.mark.engine
def test_no_output_carries_reader_hints(tmp_path: Path) -> None:
    engine = get_engine("mysql")
    url, sql = _url(engine), f"SELECT * FROM {engine.qualify('people')}"
    plan = sqlfeed.plan(sql, url, partitions=2)
    assert _hinted(plan.arrow_schema())  # the plan keeps them for its readers
    for fmt in ("parquet", "csv"):
        out = tmp_path / f"p.{fmt}"
        assert run_cli(["export", "--db", url, "--out", str(out), sql]).code == 0
    assert _hinted(pq.read_schema(tmp_path / "p.parquet")) == []
    assert b"sqlfeed.reader" not in (tmp_path / "p.parquet").read_bytes()
    folder = tmp_path / "parts"
    assert run_cli(["export", "--db", url, "-m", "2", "--out", str(folder), sql]).code == 0
    assert all(_hinted(pq.read_schema(f)) == [] for f in folder.glob("*.parquet"))
    feeder = Feeder(plan, url, batch_size=50, format="arrow")
    assert _hinted(feeder.schema) == []
    assert all(_hinted(b.schema) == [] for b in feeder)
    assert sum(1 for _ in Feeder(plan, url, batch_size=50)) > 0


@pytest.mark.engine
def test_scratch_list_counts_the_rows_of_a_table_not_yet_analyzed() -> None:
    engine = get_engine("postgres")
    url, schema = _url(engine), engine.scratch
    sql = "SELECT g, md5(g::text) AS s FROM generate_series(1, 5000) AS g"
    made = run_cli(["plan", "--db", url, "--strategy", "materialize", "--scratch", schema, sql])
    assert made.code == 0, made.err
    table = json.loads(made.out)["scratch_table"].rpartition(".")[2]
    try:
        listed = json.loads(
            run_cli(["scratch", "list", "--db", url, "--schema", schema, "--format", "json"]).out
        )
        assert [t["rows"] for t in listed if t["table"] == table] == [5000]  # 0 before
        text = run_cli(["scratch", "list", "--db", url, "--schema", schema]).out
        assert any(table in line and " 5000 " in line for line in text.splitlines())
    finally:
        run_cli(["scratch", "drop", "--db", url, "--schema", schema, table])
