"""Reshard: every row in exactly one shard, sizes, groups, seeds, sort order, tar, errors."""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import tarfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from sqlfeed.dialects import EngineError, InvalidArgumentError, QueryError, UnstableQueryError
from sqlfeed.shards.manifest import Manifest
from sqlfeed.shards.reader import read_shard
from sqlfeed.shards.reshard import TOLERANCE, parse_size, reshard
from sqlfeed.shards.validation import validate
from tests.helpers.cli import run_cli

ROWS = 20_000
EVENTS = f"""
SELECT i AS id,
       i % 1500 AS user_id,
       (i * 7919) % 1000 / 10.0 AS score,
       'name-' || (i * 31 % 997) AS name,
       DATE '2024-01-01' + CAST(i % 365 AS INTEGER) AS day
FROM range({ROWS}) AS r(i)
"""


@pytest.fixture(scope="module")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE events AS {EVENTS}")
    yield connection
    connection.close()


def shards(out: Path) -> tuple[Manifest, list[pa.Table]]:
    """The manifest and every shard, after checking the folder is a valid shardset."""
    report = validate(out, deep=True)
    assert report.ok, report.problems
    manifest = Manifest.read(out)
    assert manifest.name == out.name
    tables = []
    for entry in manifest.shards:
        path = out / entry.file
        assert path.stat().st_size == entry.bytes
        table = read_shard(path, manifest.format, schema=manifest.schema, key=manifest.uid)
        assert table.num_rows == entry.rows
        tables.append(table)
    names = sorted(os.listdir(out))
    assert names == sorted(["manifest.json", *(e.file for e in manifest.shards)])
    return manifest, tables


def rows_of(tables: list[pa.Table], drop: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    result = []
    for table in tables:
        kept = table.drop_columns([c for c in drop if c in table.column_names])
        result.extend(tuple(row.values()) for row in kept.to_pylist())
    return result


def expected_rows(duck: duckdb.DuckDBPyConnection, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in duck.execute(sql).fetchall())


def leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


# -- every row once -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_every_row_lands_in_exactly_one_shard(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "shuffled"
    metrics = reshard("SELECT * FROM events", duck, out=out, shuffle=7, shard_rows=3000, format=fmt)
    manifest, tables = shards(out)
    assert manifest.uid == "uid"
    assert metrics.uid_generated
    assert manifest.schema.names == ["uid", "id", "user_id", "score", "name", "day"]
    uids = [u for t in tables for u in t.column("uid").to_pylist()]
    assert uids == list(range(ROWS))  # the generated uid numbers the output in order
    assert Counter(rows_of(tables, drop=("uid",))) == expected_rows(duck, "SELECT * FROM events")
    assert [t.num_rows for t in tables] == [3000] * 6 + [2000]
    assert metrics.rows == ROWS
    assert metrics.shards == 7
    assert metrics.bytes_out == sum(e.bytes for e in manifest.shards)
    assert manifest.properties["reshard"]["seed"] == 7
    assert leftovers(tmp_path) == []


def test_the_query_uid_column_is_the_default_uid(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    metrics = reshard(
        "SELECT id AS uid, name FROM events", duck, out=out, shuffle=1, shard_rows=5000
    )
    manifest, tables = shards(out)
    assert manifest.uid == "uid"
    assert not metrics.uid_generated
    assert manifest.schema.names == ["uid", "name"]
    assert sorted(u for t in tables for u in t.column("uid").to_pylist()) == list(range(ROWS))


def test_a_postgres_query_is_streamed_into_duckdb(tmp_path: Path) -> None:
    from tests.conftest import get_engine

    engine = get_engine("postgres")
    table = engine.qualify(f"reshard_{uuid.uuid4().hex[:8]}")
    engine.execute(
        f"CREATE TABLE {table} AS SELECT i AS id, i % 50 AS grp, 'v' || i AS label, "
        "(i * 0.25)::numeric(10,2) AS price FROM generate_series(1, 5000) AS g(i)"
    )
    try:
        source = engine.source()
        try:
            metrics = reshard(
                f"SELECT * FROM {table}",
                source,
                out=tmp_path / "pg",
                shuffle=3,
                shard_rows=1000,
                group_by="grp",
                uid="id",
            )
        finally:
            source.close()
        manifest, tables = shards(tmp_path / "pg")
        assert manifest.uid == "id"
        expected = Counter(tuple(row) for row in engine.rows(f"SELECT * FROM {table}"))
        assert Counter(rows_of(tables)) == expected
        assert metrics.bytes_in_from == "arrow"
        assert metrics.bytes_in > 0
        placed = {g: i for i, t in enumerate(tables) for g in t.column("grp").to_pylist()}
        for i, t in enumerate(tables):  # a group in one shard only
            assert all(placed[g] == i for g in t.column("grp").to_pylist())
        # The CLI, with the URL.
        url = os.environ.get(
            "SQLFEED_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ).replace("postgresql://", "postgresql+psycopg://", 1)
        run = run_cli(
            [
                "reshard",
                "--db",
                url,
                "--out",
                str(tmp_path / "cli"),
                "--sort",
                "id",
                "--shard-rows",
                "2000",
                "--format",
                "json",
                f"SELECT * FROM {table}",
            ]
        )
        assert run.code == 0, run.err
        assert json.loads(run.out)["rows"] == 5000
        _, tables = shards(tmp_path / "cli")
        assert [u for t in tables for u in t.column("id").to_pylist()] == list(range(1, 5001))
    finally:
        engine.execute(f"DROP TABLE IF EXISTS {table}")


# -- sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "size"), [("parquet", "60kB"), ("csv", "150kB"), ("jsonl", "250kB")]
)
def test_shards_are_within_ten_percent_of_the_byte_target(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path, fmt: str, size: str
) -> None:
    out = tmp_path / "sized"
    metrics = reshard("SELECT * FROM events", duck, out=out, shuffle=2, shard_size=size, format=fmt)
    manifest, tables = shards(out)
    target = parse_size(size)
    sizes = [(out / e.file).stat().st_size for e in manifest.shards]
    assert len(sizes) >= 4
    for actual in sizes[:-1]:
        assert abs(actual - target) <= TOLERANCE * target, (sizes, target)
    assert sizes[-1] <= (1 + TOLERANCE) * target
    assert sum(t.num_rows for t in tables) == ROWS
    assert metrics.deviation is not None
    assert metrics.deviation <= TOLERANCE
    assert metrics.shard_bytes["min"] == min(sizes)
    assert metrics.shard_bytes["max"] == max(sizes)


def test_a_sorted_shardset_is_also_cut_to_size(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    # Sorted by name, the rows' sizes drift along the output: every shard is measured.
    sql = "SELECT id, repeat(name, 1 + CAST(id % 400 / 40 AS INTEGER)) AS text FROM events"
    out = tmp_path / "sorted"
    reshard(sql, duck, out=out, sort="text", shard_size="60kB", format="parquet")
    manifest, _ = shards(out)
    sizes = [e.bytes for e in manifest.shards]
    assert len(sizes) >= 4
    assert all(abs(s - 60_000) <= TOLERANCE * 60_000 for s in sizes[:-1]), sizes


# -- groups -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        {"shuffle": 5, "shard_rows": 1000},
        {"shuffle": 5, "shard_size": "100kB"},
        {"sort": ["score desc", "id"], "shard_rows": 1000},
        {"shard_rows": 1000},
    ],
)
def test_rows_sharing_a_group_key_are_never_split(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path, how: dict[str, Any]
) -> None:
    out = tmp_path / "grouped"
    reshard("SELECT * FROM events", duck, out=out, group_by="user_id", uid="id", **how)
    _manifest, tables = shards(out)
    where: dict[int, int] = {}
    for index, table in enumerate(tables):
        for user in set(table.column("user_id").to_pylist()):
            assert user not in where, f"user {user} in shards {where[user]} and {index}"
            where[user] = index
    assert len(where) == 1500
    assert Counter(rows_of(tables)) == expected_rows(duck, "SELECT * FROM events")
    counts = [t.num_rows for t in tables]
    if "shard_rows" in how:  # groups of ~13 rows: the nearest group boundary
        assert all(abs(c - 1000) <= 0.1 * 1000 for c in counts[:-1]), counts
    rows = [r for t in tables for r in t.to_pylist()]
    # Each group's rows are next to each other, in the query's order inside the group.
    firsts: dict[int, int] = {}
    for position, row in enumerate(rows):
        firsts.setdefault(row["user_id"], position)
    for position, row in enumerate(rows):
        assert position - firsts[row["user_id"]] < 14
    if "sort" in how:  # groups ordered by their highest score; ties by user id
        tops = [max(r["score"] for r in rows if r["user_id"] == u) for u in firsts]
        assert tops == sorted(tops, reverse=True)
        by_user: dict[int, list[tuple[float, int]]] = {}
        for row in rows:
            by_user.setdefault(row["user_id"], []).append((-row["score"], row["id"]))
        assert all(keys == sorted(keys) for keys in by_user.values())


# -- seeds and order ----------------------------------------------------------------------


def test_the_same_seed_gives_byte_identical_shards_and_another_seed_another_order(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    def run(name: str, seed: int) -> tuple[list[bytes], list[int]]:
        out = tmp_path / name
        reshard("SELECT * FROM events", duck, out=out, shuffle=seed, shard_size="80kB", threads=2)
        manifest, tables = shards(out)
        files = [(out / e.file).read_bytes() for e in manifest.shards]
        return files, [i for t in tables for i in t.column("id").to_pylist()]

    first, order = run("a", 11)
    again, order_again = run("b", 11)
    _other, other_order = run("c", 12)
    assert first == again
    assert order == order_again
    assert other_order != order
    assert sorted(other_order) == sorted(order) == list(range(ROWS))
    # A shuffle, not a rotation or a sort: few neighbours stay neighbours.
    neighbours = sum(1 for a, b in itertools.pairwise(order) if abs(a - b) == 1)
    assert neighbours < ROWS // 100


def test_with_a_uid_the_shuffle_does_not_depend_on_the_input_order(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    orders = []
    for name, direction in (("up", "ASC"), ("down", "DESC")):
        sql = f"SELECT id, name FROM events ORDER BY id {direction}, name"
        reshard(sql, duck, out=tmp_path / name, shuffle=4, shard_rows=5000, uid="id")
        _, tables = shards(tmp_path / name)
        orders.append([i for t in tables for i in t.column("id").to_pylist()])
    assert orders[0] == orders[1]
    assert orders[0] != sorted(orders[0])


def test_the_sort_order_holds_across_shard_boundaries(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    out = tmp_path / "sorted"
    metrics = reshard(
        "SELECT * FROM events",
        duck,
        out=out,
        sort="day desc, name",
        shard_rows=1500,
        format="jsonl",
    )
    _, tables = shards(out)
    assert len(tables) == 14
    assert metrics.sort == ["day desc", "name"]
    rows = [r for t in tables for r in t.to_pylist()]
    keys = [(-r["day"].toordinal(), r["name"], r["id"]) for r in rows]
    assert keys == sorted(keys)  # ties (same day and name) keep the query's order: by id
    for left, right in itertools.pairwise(tables):  # explicitly at the cuts
        last, first = left.slice(left.num_rows - 1).to_pylist()[0], right.to_pylist()[0]
        assert (-last["day"].toordinal(), last["name"]) <= (
            -first["day"].toordinal(),
            first["name"],
        )


def test_without_shuffle_or_sort_the_query_order_is_kept(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    out = tmp_path / "resized"
    sql = "SELECT id, name FROM events ORDER BY id DESC, name LIMIT 7000"  # stable: all columns
    reshard(sql, duck, out=out, shard_rows=2000)
    _, tables = shards(out)
    assert [i for t in tables for i in t.column("id").to_pylist()] == list(
        range(ROWS - 1, ROWS - 7001, -1)
    )


def test_an_empty_result_is_one_empty_shard(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    out = tmp_path / "empty"
    metrics = reshard(
        "SELECT * FROM events WHERE id < 0", duck, out=out, shuffle=1, shard_size="1MB"
    )
    manifest, tables = shards(out)
    assert metrics.rows == 0
    assert len(manifest.shards) == 1
    assert tables[0].num_rows == 0


# -- input files and metrics ---------------------------------------------------------------


def test_parquet_files_in_and_the_metrics(tmp_path: Path) -> None:
    source_folder = tmp_path / "in"
    source_folder.mkdir()
    connection = duckdb.connect()
    for part in range(3):
        connection.execute(
            f"COPY (SELECT i + {part * 5000} AS id, md5(i::VARCHAR) AS h FROM range(5000) r(i)) "
            f"TO '{source_folder}/part-{part}.parquet' (FORMAT parquet)"
        )
    connection.close()
    events: list[tuple[str, int, int]] = []
    out = tmp_path / "out"
    metrics = reshard(
        f"SELECT * FROM read_parquet('{source_folder}/*.parquet')",
        out=out,
        shuffle=9,
        shard_size="100kB",
        memory_limit="256MB",
        threads=1,
        uid="id",
        progress=lambda phase, done, total: events.append((phase, done, total)),
    )
    assert metrics.bytes_in == sum(p.stat().st_size for p in source_folder.iterdir())
    assert metrics.bytes_in_from == "files"
    assert metrics.rows == 15_000
    assert metrics.bytes_out == sum(p.stat().st_size for p in out.glob("shard.*"))
    assert metrics.bytes_extracted == 0  # Parquet files are sorted as read: no copy
    assert metrics.bytes_spilled >= 0
    assert set(metrics.phase_seconds) == {"extract", "sort", "write"}
    assert metrics.memory_limit == "256000000B"
    assert metrics.threads == 1
    phases = [phase for phase, _, _ in events]
    assert phases == sorted(phases, key=["extract", "sort", "write"].index)
    assert ("write", 15_000, 15_000) in events
    document = Manifest.read(out).properties["reshard"]
    assert document["rows"] == 15_000
    assert document["order"] == "shuffle"
    json.dumps(metrics.to_dict())


# -- tar ----------------------------------------------------------------------------------


def make_tars(folder: Path, files: int = 3, records: int = 40) -> dict[tuple[str, str], bytes]:
    """WebDataset tar files with binary payloads; some records lack an extension."""
    folder.mkdir()
    rng = random.Random(4)
    members: dict[tuple[str, str], bytes] = {}
    for f in range(files):
        with tarfile.open(folder / f"in-{f}.tar", "w") as archive:
            for r in range(records):
                key = f"shard{f}/{r:05d}" if r % 7 == 0 else f"s{f}_{r:05d}"
                extensions = ["jpg", "json"] + (["seg.png"] if r % 3 == 0 else [])
                for extension in extensions:
                    if extension == "json":
                        data = json.dumps({"key": key, "label": r % 5}).encode()
                    else:
                        data = rng.randbytes(rng.randrange(0, 6000))
                    members[key, extension] = data
                    info = tarfile.TarInfo(f"{key}.{extension}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    return members


def tar_members(out: Path) -> dict[tuple[str, str], bytes]:
    found: dict[tuple[str, str], bytes] = {}
    manifest = Manifest.read(out)
    for entry in manifest.shards:
        with tarfile.open(out / entry.file) as archive:
            for member in archive:
                folder, _, base = member.name.rpartition("/")
                stem, _, extension = base.partition(".")
                key = f"{folder}/{stem}" if folder else stem
                assert (key, extension) not in found
                handle = archive.extractfile(member)
                assert handle is not None
                found[key, extension] = handle.read()
    return found


def test_tar_records_go_through_a_shuffle_byte_identical(tmp_path: Path) -> None:
    members = make_tars(tmp_path / "raw", files=3, records=80)
    out = tmp_path / "shuffled"
    metrics = reshard(
        "SELECT * FROM images",
        out=out,
        tar={"images": str(tmp_path / "raw/*.tar")},
        shuffle=7,
        shard_size="250kB",
        format="tar",
    )
    manifest, tables = shards(out)
    assert manifest.uid == "__key__"
    assert manifest.schema.names == ["__key__", "jpg", "json", "seg.png"]
    assert tar_members(out) == members  # every member once, byte for byte
    assert metrics.bytes_in == sum(p.stat().st_size for p in (tmp_path / "raw").iterdir())
    # Records are never split: each key's members sit in one shard, next to each other.
    for entry in manifest.shards:
        with tarfile.open(out / entry.file) as archive:
            keys = [m.name.rpartition(".")[0].split(".")[0] for m in archive]
        runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
        assert len(runs) == len(set(runs))
    sizes = [e.bytes for e in manifest.shards]
    assert len(sizes) >= 4
    assert all(abs(s - 250_000) <= TOLERANCE * 250_000 for s in sizes[:-1]), sizes
    order = [k for t in tables for k in t.column("__key__").to_pylist()]
    assert order != sorted(order)
    # Shuffled again into Parquet: one row per record, the payloads as binary columns.
    reshard(
        "SELECT * FROM images WHERE json IS NOT NULL",
        out=tmp_path / "pq",
        tar={"images": str(tmp_path / "raw/*.tar")},
        shuffle=1,
        shard_rows=50,
    )
    _, tables = shards(tmp_path / "pq")
    rows = [r for t in tables for r in t.to_pylist()]
    assert len(rows) == 240
    for row in rows:
        assert row["jpg"] == members[row["__key__"], "jpg"]
        assert row["seg.png"] == members.get((row["__key__"], "seg.png"))


def test_rows_become_tar_records_with_the_uid_as_key(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    out = tmp_path / "records"
    reshard(
        "SELECT id, name, score FROM events WHERE id < 500",
        duck,
        out=out,
        shuffle=1,
        shard_rows=100,
        format="tar",
    )
    manifest, tables = shards(out)
    assert manifest.uid == "uid"
    with tarfile.open(out / manifest.shards[0].file) as archive:
        names = archive.getnames()
    assert names[:4] == ["0.id", "0.name", "0.score", "1.id"]
    ids = sorted(int(i) for t in tables for i in t.column("id").to_pylist())
    assert ids == list(range(500))
    with pytest.raises(InvalidArgumentError, match=r"cannot name tar records.*'0\.5'"):
        reshard(
            "SELECT id + 0.5 AS k, name FROM events",
            duck,
            out=tmp_path / "bad",
            shuffle=1,
            shard_rows=100,
            format="tar",
            uid="k",
        )
    assert not (tmp_path / "bad").exists()
    assert leftovers(tmp_path) == []


def test_the_cli_reshards_tar_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = make_tars(tmp_path / "raw", files=2, records=30)
    monkeypatch.chdir(tmp_path)
    run = run_cli(
        [
            "reshard",
            "--tar",
            "images=raw/*.tar",
            "--shuffle",
            "7",
            "--shard-size",
            "64kB",
            "--format",
            "tar",
            "--out",
            "shuffled",
            "SELECT * FROM images",
        ]
    )
    assert run.code == 0, run.err
    assert "wrote 60 rows shuffled (seed 7) to shuffled" in run.out
    assert tar_members(tmp_path / "shuffled") == members
    run = run_cli(
        [
            "reshard",
            "--tar",
            "images=raw/*.tar",
            "--sort",
            "__key__",
            "--shard-rows",
            "25",
            "--format",
            "jsonl",
            "--format",
            "json",
            "--out",
            "sorted",
            "SELECT __key__, json FROM images",
        ]
    )
    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["rows"] == 60
    assert document["shards"] == 3
    assert document["format"] == "jsonl"
    assert document["uid"] == "__key__"
    assert document["order"] == "sort"


# -- uids ---------------------------------------------------------------------------------


def test_a_uid_column_must_be_unique_and_not_null(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        reshard(
            "SELECT * FROM events",
            duck,
            out=tmp_path / "o",
            shuffle=1,
            shard_rows=10,
            uid="user_id",
        )
    message = str(caught.value)
    assert "'user_id' is not unique: 1500 value(s) appear more than once" in message
    assert "e.g. 0 (14 times)" in message
    with pytest.raises(InvalidArgumentError, match=r"NULL in 1 row"):
        reshard(
            "SELECT NULLIF(id, 3) AS k FROM events",
            duck,
            out=tmp_path / "o",
            shuffle=1,
            shard_rows=10,
            uid="k",
        )
    assert os.listdir(tmp_path) == []


# -- bad input ----------------------------------------------------------------------------


BAD = [
    (["--shuffle", "1", "--sort", "id"], "not allowed with argument --shuffle"),
    (["--shard-size", "12XB"], "'12XB' is not a size"),
    (["--shard-rows", "0"], "--shard-rows must be >= 1, got 0"),
    (["--memory-limit", "lots"], "--memory-limit 'lots' is not a size"),
    (["--memory-limit", "150%"], "must be in (0%, 100%]"),
    (["--sort", "nope"], "sort column 'nope' is not in the query's columns (id, "),
    (["--group-by", "nope"], "group-by column 'nope' is not in the query's columns"),
    (["--uid", "nope"], "uid column 'nope' is not in the query's columns"),
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--temp-dir", "/no/such/folder"], "--temp-dir /no/such/folder does not exist"),
    (["--tar", "images"], "--tar takes NAME=GLOB"),
    (["--tar", "images=/no/such/*.tar"], "no file matches the pattern"),
    (["--format", "orc"], "invalid choice: 'orc'"),
    (
        ["--format", "csv", "--format", "tar"],
        "--format names two shard formats (csv, tar): give one",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line_before_anything_runs(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    size = [] if any(a.startswith("--shard") for a in extra) or not extra else ["--shard-rows", "5"]
    run = run_cli(
        [
            "reshard",
            "--out",
            str(tmp_path / "out"),
            *size,
            *extra,
            "SELECT i AS id, i % 3 AS g FROM range(10) r(i)",
        ]
    )
    assert run.code == 2, run
    assert len(run.err.strip().splitlines()) == 1, run.err
    assert message in run.err, run.err
    assert os.listdir(tmp_path) == []


def test_the_output_folder_rules(duck: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    args = ["reshard", "--out", str(out), "--shard-rows", "5", "SELECT 1 AS a"]
    run = run_cli(args)
    assert run.code == 2
    assert "exists; pass --overwrite" in run.err
    assert run_cli([*args, "--overwrite"]).code == 0
    assert sorted(os.listdir(out)) == ["manifest.json", "shard.00000.parquet"]
    run = run_cli(
        ["reshard", "--out", str(tmp_path / "no" / "out"), "--shard-rows", "5", "SELECT 1 AS a"]
    )
    assert run.code == 2
    assert "does not exist" in run.err
    with pytest.raises(InvalidArgumentError, match="shard format must be one of"):
        reshard("SELECT 1 AS a", out=tmp_path / "x", shard_rows=1, format="xml")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        ("DELETE FROM events", QueryError, "is not a query"),
        ("SELECT * FROM events; SELECT 1", QueryError, "exactly one statement"),
        ("SELECT id, random() AS r FROM events", UnstableQueryError, "a different value"),
        ("SELECT id, id AS id FROM events", InvalidArgumentError, "two columns named 'id'"),
        ("SELECT id AS _sqlfeed_x FROM events", InvalidArgumentError, "reshard's own"),
        ("SELECT blob 'x' AS b", InvalidArgumentError, "which CSV cannot hold"),
    ],
)
def test_queries_that_cannot_be_resharded_are_refused(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path, sql: str, error: type, message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        reshard(sql, duck, out=tmp_path / "out", shuffle=1, shard_rows=10, format="csv")
    assert os.listdir(tmp_path) == []


def test_an_unstable_query_is_allowed_on_request(tmp_path: Path) -> None:
    metrics = reshard(
        "SELECT i, random() AS r FROM range(100) t(i)",
        out=tmp_path / "out",
        shuffle=1,
        shard_rows=30,
        allow_unstable=True,
    )
    assert metrics.rows == 100
    assert metrics.shards == 4


def test_an_engine_failure_exits_1_and_leaves_nothing(tmp_path: Path) -> None:
    sql = (
        "SELECT CAST(CASE WHEN i = 7777 THEN 'x' ELSE '1' END AS INTEGER) AS v "
        "FROM range(9999) t(i)"
    )
    with pytest.raises(EngineError, match="duckdb failed running the query"):
        reshard(sql, out=tmp_path / "out", shuffle=1, shard_rows=10)
    run = run_cli(["reshard", "--out", str(tmp_path / "out"), "--shard-rows", "5", sql])
    assert run.code == 1
    assert run.err.startswith("sqlfeed: engine error: duckdb failed")
    assert os.listdir(tmp_path) == []


def test_a_stale_temporary_folder_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    import fcntl

    stale = tmp_path / ".out.tmp-deadbeef0000"
    stale.mkdir()
    (stale / ".lock").touch()
    (stale / "shard.00000.parquet").write_bytes(b"partial")
    live = tmp_path / ".out.tmp-livelivelive"
    live.mkdir()
    fd = os.open(live / ".lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        reshard("SELECT 1 AS a", out=tmp_path / "out", shard_rows=1)
        assert sorted(os.listdir(tmp_path)) == [".out.tmp-livelivelive", "out"]
    finally:
        os.close(fd)


def test_spills_and_work_files_go_to_the_temp_dir_and_are_removed(tmp_path: Path) -> None:
    temp = tmp_path / "scratch"
    temp.mkdir()
    metrics = reshard(
        "SELECT i, md5(i::VARCHAR) AS h FROM range(50000) t(i)",
        out=tmp_path / "out",
        shuffle=3,
        shard_size="500kB",
        temp_dir=temp,
        memory_limit="64MB",
    )
    assert metrics.rows == 50_000
    assert metrics.bytes_extracted > 0
    assert os.listdir(temp) == []
    shards(tmp_path / "out")


def test_parse_size() -> None:
    assert parse_size("256MB") == 256_000_000
    assert parse_size("1.5 GiB") == 3 * 2**29
    assert parse_size("10") == 10
    with pytest.raises(InvalidArgumentError, match="not a size"):
        parse_size("12XB")


def test_docstring_examples() -> None:
    import doctest
    import importlib

    # importlib: the package re-exports the function under the module's name.
    result = doctest.testmod(importlib.import_module("sqlfeed.shards.reshard.options"))
    assert result.attempted > 0
    assert result.failed == 0
