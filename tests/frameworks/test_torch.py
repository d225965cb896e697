"""sqlfeed.torch: exact rows on every engine, the type table, NULLs, splits and resuming."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pytest

torch = pytest.importorskip("torch")

import sqlfeed  # noqa: E402
import sqlfeed.torch as sqlfeed_torch  # noqa: E402
from sqlfeed import (  # noqa: E402
    InvalidArgumentError,
    MissingDependencyError,
    NotImplementedYetError,
    QueryError,
)
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine  # noqa: E402

EPOCH = dt.datetime(1970, 1, 1)
DTYPES = {
    "int64": torch.int64,
    "float32": torch.float32,
    "float64": torch.float64,
    "bool": torch.bool,
}


def engine_url(engine: Engine, tmp_path: Path, tables: tuple[str, ...]) -> str:
    """A URL DataLoader worker processes can open on ``engine``'s tables."""
    if engine.name == "duckdb":
        path = tmp_path / "copy.duckdb"
        engine.execute(f"ATTACH '{path}' AS copy")
        for table in tables:
            engine.execute(f"CREATE TABLE copy.{table} AS SELECT * FROM {table}")
        engine.execute("DETACH copy")
        return f"duckdb:///{path}"
    if engine.name == "sqlite":
        return f"sqlite:///{engine.path}"  # type: ignore[attr-defined]
    if engine.name == "postgres":
        return POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    netloc = urlparse(MYSQL_URL).netloc or "root@127.0.0.1:3306"
    return f"mysql+pymysql://{netloc}/{engine.schema}"


def expected_value(mapping: Any, value: Any) -> Any:
    """A database value as the table says it arrives (NULL: the kind's default)."""
    if value is None:
        return mapping.fill
    if mapping.kind in ("float", "decimal"):
        return float(value)
    if mapping.kind == "string":
        return str(value)
    if mapping.kind == "bool":
        return bool(value)
    if mapping.kind == "date" and isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    if mapping.kind == "timestamp" and isinstance(value, dt.datetime):
        naive = value.replace(tzinfo=None) - (value.utcoffset() or dt.timedelta())
        return (naive - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return int(value)


def batch_rows(batch: dict[str, Any], names: list[str]) -> list[tuple[Any, ...]]:
    columns = [batch[n] if isinstance(batch[n], list) else batch[n].tolist() for n in names]
    return list(zip(*columns, strict=True))


def check_types(batch: dict[str, Any], mappings: list[Any]) -> None:
    for m in mappings:
        if m.kind in ("string", "binary"):
            assert isinstance(batch[m.name], list), m.name
        else:
            assert batch[m.name].dtype == DTYPES[m.dtype], m.name
        if m.mask:
            assert batch[m.name + "_is_null"].dtype == torch.bool


def loader_rows(
    url: str, sql: str, *, workers: int, rank: int = 0, world_size: int = 1, **options: Any
) -> tuple[list[tuple[Any, ...]], list[int], Any]:
    """The rows (columns in order, then masks) a DataLoader yields, the batch sizes, the
    dataset."""
    dataset = sqlfeed_torch.SQLDataset(
        sql,
        url,
        batch_size=16,
        float_dtype="float64",
        masks=True,
        partitions=6,
        rank=rank,
        world_size=world_size,
        **options,
    )
    names = [m.name for m in dataset.mappings]
    rows, sizes = [], []
    for batch in sqlfeed_torch.dataloader(dataset, num_workers=workers, stateful=False):
        check_types(batch, dataset.mappings)
        rows += batch_rows(batch, names + [n + "_is_null" for n in names])
        sizes.append(len(batch[names[0]]))
    return rows, sizes, dataset


def expected_rows(engine: Engine, sql: str, mappings: list[Any]) -> Counter[tuple[Any, ...]]:
    out = []
    for row in engine.rows(sql):
        values = tuple(expected_value(m, v) for m, v in zip(mappings, row, strict=True))
        out.append(values + tuple(v is None for v in row))
    return Counter(out)


@pytest.mark.engine
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow, id="2-workers")])
def test_the_dataloader_yields_exactly_the_query_rows(
    engine: Engine, workers: int, tmp_path: Path
) -> None:
    url = engine_url(engine, tmp_path, ("people",))
    sql = f"SELECT * FROM {engine.qualify('people')}"
    rows, sizes, dataset = loader_rows(url, sql, workers=workers)
    assert Counter(rows) == expected_rows(engine, sql, dataset.mappings)
    assert all(0 < size <= 16 for size in sizes)


@pytest.mark.engine
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow, id="2-workers")])
def test_two_ddp_ranks_read_disjoint_shares_with_even_batches(
    engine: Engine, workers: int, tmp_path: Path
) -> None:
    url = engine_url(engine, tmp_path, ("orders",))
    sql = f"SELECT * FROM {engine.qualify('orders')}"
    shares = [
        loader_rows(url, sql, workers=workers, rank=r, world_size=2, even_batches=True)
        for r in range(2)
    ]
    (first, first_sizes, dataset), (second, second_sizes, _) = shares
    assert len(first_sizes) == len(second_sizes) > 0  # the same number of steps
    assert set(first_sizes) == set(second_sizes) == {16}  # full batches only
    everything = expected_rows(engine, sql, dataset.mappings)
    assert not Counter(first) + Counter(second) - everything  # nothing made up or twice
    shares_all = [loader_rows(url, sql, workers=workers, world_size=2, rank=r)[0] for r in (0, 1)]
    assert Counter(shares_all[0]) + Counter(shares_all[1]) == everything  # without: all rows
    # As many steps as the poorer rank has full batches (each worker drops its remainder).
    poorer = min(len(rows) for rows in shares_all)
    assert poorer - max(workers, 1) * 16 < len(first_sizes) * 16 <= poorer


# -- the type table, NULLs, lists, strings ---------------------------------------------------


@pytest.fixture
def memory() -> Any:
    return duckdb.connect()


def test_lists_are_padded_with_their_lengths(memory: Any) -> None:
    query = """
        SELECT id, CASE WHEN id = 1 THEN NULL ELSE [id, NULL, -id][1:id + 1] END AS li,
               CASE WHEN id = 2 THEN [[], [1.5, NULL]] ELSE [[0.5]] END::DOUBLE[][] AS nested,
               CASE WHEN id = 3 THEN NULL ELSE ['é', NULL] END AS words
        FROM (SELECT range AS id FROM range(4)) ORDER BY id
    """
    dataset = sqlfeed_torch.SQLDataset(query, memory, batch_size=4, partitions=1, masks=["li"])
    batch = next(iter(dataset))
    assert batch["li"].tolist() == [[0, 0, 0], [0, 0, 0], [2, 0, -2], [3, 0, -3]]
    assert batch["li_lengths"].tolist() == [1, 0, 3, 3]
    assert batch["li_is_null"].tolist() == [False, True, False, False]
    assert batch["nested"].dtype == torch.float32
    one = [[0.5, 0.0], [0.0, 0.0]]
    assert batch["nested"].tolist() == [one, one, [[0.0, 0.0], [1.5, 0.0]], one]
    assert batch["nested_lengths"].tolist() == [1, 1, 2, 1]
    assert batch["nested_lengths_1"].tolist() == [[1, 0], [1, 0], [0, 2], [1, 0]]
    assert batch["words"] == [["é", ""], ["é", ""], ["é", ""], []]


def test_nested_lists_become_jagged_tensors(memory: Any) -> None:
    query = "SELECT range AS id, [range, range + 1][1:range] AS li FROM range(3) ORDER BY id"
    dataset = sqlfeed_torch.SQLDataset(query, memory, batch_size=3, partitions=1, lists="nested")
    batch = next(iter(dataset))
    assert batch["li"].is_nested
    assert [t.tolist() for t in batch["li"].unbind()] == [[], [1], [2, 3]]
    with pytest.raises(InvalidArgumentError, match="lists='padded'"):
        sqlfeed_torch.SQLDataset("SELECT [[1]] AS l", memory, batch_size=1, lists="nested")


def test_strings_are_lists_or_go_through_the_tokenizer(memory: Any) -> None:
    query = "SELECT range AS id, 'w' || range AS word, 'x' AS other FROM range(5) ORDER BY id"

    def lengths(texts: list[str]) -> Any:
        return torch.tensor([len(t) for t in texts])

    dataset = sqlfeed_torch.SQLDataset(
        query, memory, batch_size=5, partitions=1, tokenizer={"word": lengths}
    )
    batch = next(iter(dataset))
    assert batch["word"].tolist() == [2, 2, 2, 2, 2]
    assert batch["other"] == ["x"] * 5
    with pytest.raises(InvalidArgumentError, match="tokenizer names 'id'"):
        sqlfeed_torch.SQLDataset(query, memory, batch_size=5, tokenizer={"id": lengths})


def test_a_label_makes_pairs_and_may_not_be_null(memory: Any) -> None:
    memory.execute("CREATE TABLE l AS SELECT range AS a, range % 2 AS y FROM range(10)")
    dataset = sqlfeed_torch.SQLDataset("SELECT a, y FROM l", memory, batch_size=10, label="y")
    features, label = next(iter(dataset))
    assert list(features) == ["a"]
    assert sorted(label.tolist()) == [0] * 5 + [1] * 5
    nulls = "SELECT a, CASE WHEN a = 3 THEN NULL ELSE y END AS y FROM l"
    with pytest.raises(QueryError, match="label column 'y' has a NULL"):
        list(sqlfeed_torch.SQLDataset(nulls, memory, batch_size=10, label="y"))


def test_tensors_own_their_memory_and_pin(memory: Any) -> None:
    batch = next(
        iter(sqlfeed_torch.SQLDataset("SELECT range AS x FROM range(8)", memory, batch_size=8))
    )
    batch["x"] += 1  # writable: not a view of Arrow's read-only buffers
    assert sorted(batch["x"].tolist()) == list(range(1, 9))
    query = "SELECT range AS x, range * 0.5 AS y, range % 2 = 0 AS z FROM range(40)"
    batches = list(sqlfeed_torch.SQLDataset(query, memory, batch_size=8, masks=True))
    for batch in batches:
        batch["x"] += 1000  # in place: no other batch (nor column) changes
        batch["y_is_null"] |= True
    assert sorted(i for b in batches for i in b["x"].tolist()) == list(range(1000, 1040))
    assert sorted(v for b in batches for v in b["y"].tolist()) == [i * 0.5 for i in range(40)]
    assert sum(b["z"].sum().item() for b in batches) == 20
    assert all(b["y_is_null"].all() and not b["x_is_null"].any() for b in batches)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lists": "ragged"}, "lists must be one of"),
        ({"tokenizer": 3}, "tokenizer must be"),
        ({"batch_size": 0}, "batch_size"),
        ({"rank": 2, "world_size": 2}, "rank must be"),
        ({"rank": 1}, "give both rank and world_size"),
        ({"label": "nope"}, "unknown label column"),
    ],
)
def test_bad_options_are_refused_up_front(
    memory: Any, options: dict[str, Any], message: str
) -> None:
    kwargs = {"batch_size": 4, **options}
    with pytest.raises(InvalidArgumentError, match=message):
        sqlfeed_torch.SQLDataset("SELECT range AS x FROM range(8)", memory, **kwargs)


def test_worker_processes_need_a_url(memory: Any) -> None:
    dataset = sqlfeed_torch.SQLDataset("SELECT range AS x FROM range(8)", memory, batch_size=4)
    loader = sqlfeed_torch.dataloader(dataset, num_workers=2, stateful=False)
    with pytest.raises(InvalidArgumentError, match="give the source as a URL"):
        list(loader)
    with pytest.raises(InvalidArgumentError, match="batch_size must be None"):
        sqlfeed_torch.dataloader(dataset, batch_size=4)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_dataloader_that_batches_again_is_refused_not_stacked(
    tmp_path: Path, workers: int
) -> None:
    """A plain DataLoader (batch_size=1 by default) stacked whole batches: shape [4, 10]."""
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(40)")
    dataset = sqlfeed_torch.SQLDataset("SELECT id FROM t", f"duckdb:///{path}", batch_size=10)
    for options in ({"batch_size": 4}, {}):
        loader = torch.utils.data.DataLoader(dataset, num_workers=workers, **options)
        with pytest.raises(InvalidArgumentError, match="give the DataLoader batch_size=None"):
            next(iter(loader))
    plain = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    assert sorted(i for b in plain for i in b["id"].tolist()) == list(range(40))


def test_importing_sqlfeed_does_not_import_torch() -> None:
    code = (
        "import sys, sqlfeed, sqlfeed.torch, sqlfeed.cli.main; "
        "print(sorted(m for m in ('torch', 'torchdata') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_without_torch_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; import sqlfeed.torch\n"
        "try:\n    sqlfeed.torch.SQLDataset\nexcept sqlfeed.MissingDependencyError as e:\n"
        "    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'sqlfeed[torch]'" in done.stdout
    assert issubclass(MissingDependencyError, ImportError)


# -- resuming --------------------------------------------------------------------------------


def test_a_stateful_dataloader_resumes_with_the_same_batches(memory: Any) -> None:
    pytest.importorskip("torchdata")
    memory.execute("CREATE TABLE r AS SELECT range AS id FROM range(2000)")
    options = {"batch_size": 64, "shuffle_buffer": 300, "seed": 4, "partitions": 6}

    def ids(batches: Any) -> list[list[int]]:
        return [b["id"].tolist() for b in batches]

    full = ids(
        sqlfeed_torch.dataloader(sqlfeed_torch.SQLDataset("SELECT id FROM r", memory, **options))
    )
    loader = sqlfeed_torch.dataloader(
        sqlfeed_torch.SQLDataset("SELECT id FROM r", memory, **options)
    )
    batches = iter(loader)
    before = [next(batches)["id"].tolist() for _ in range(9)]
    state = loader.state_dict()
    again = sqlfeed_torch.dataloader(
        sqlfeed_torch.SQLDataset("SELECT id FROM r", memory, **options)
    )
    again.load_state_dict(state)
    assert before + ids(again) == full


def test_each_iteration_is_the_next_epoch_and_set_epoch_picks_one(memory: Any) -> None:
    memory.execute("CREATE TABLE e AS SELECT range AS id FROM range(500)")
    dataset = sqlfeed_torch.SQLDataset(
        "SELECT id FROM e", memory, batch_size=500, shuffle_buffer=500, seed=1, partitions=3
    )
    first, second = (next(iter(dataset))["id"].tolist() for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(500))
    assert first != second
    dataset.set_epoch(1)
    assert next(iter(dataset))["id"].tolist() == second


@pytest.mark.slow
def test_two_workers_in_a_job_cover_each_partition_once(tmp_path: Path) -> None:
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(3000)")
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    dataset = sqlfeed_torch.SQLDataset(
        "SELECT id FROM t",
        f"duckdb:///{path}",
        batch_size=100,
        partitions=8,
        job="j",
        queue=queue,
        epochs=2,
        worker_id="w",
    )
    loader = sqlfeed_torch.dataloader(dataset, num_workers=2, stateful=False)
    epochs = [[i for b in loader for i in b["id"].tolist()] for _ in range(2)]
    assert [Counter(e) for e in epochs] == [Counter(range(3000))] * 2
    status = sqlfeed.dispatch.open_queue(queue).status("j")
    assert status.complete
    assert sorted(w["worker"] for w in status.workers) == ["w/0/0", "w/0/1"]
    assert os.path.exists(path)


def test_a_job_dataset_rewound_to_its_checkpoint_delivers_each_row_once(tmp_path: Path) -> None:
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(2000)")
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    options: dict[str, Any] = {
        "batch_size": 64,
        "partitions": 6,
        "job": "j",
        "queue": queue,
        "worker_id": "w",
        "epochs": 2,
    }
    dataset = sqlfeed_torch.SQLDataset("SELECT id FROM t", f"duckdb:///{path}", **options)
    loader = sqlfeed_torch.dataloader(dataset, stateful=False)
    first = [b["id"].tolist() for b in loader]  # epoch 0, whole
    batches = iter(loader)
    second = [next(batches)["id"].tolist() for _ in range(7)]
    dataset.checkpoint(7)
    for _ in range(3):
        next(batches)  # trained on, then lost with the crash
    # the crash: its worker stops heartbeating (a live one, claiming ahead, could take a
    # lease the rewind handed back and hold it while the restarted one waits)
    dataset.close()
    assert sqlfeed.dispatch.open_queue(queue).rewind("j", 7) == {"done": 7, "resumed": 1}
    again = sqlfeed_torch.SQLDataset("SELECT id FROM t", f"duckdb:///{path}", **options)
    rest = [b["id"].tolist() for b in sqlfeed_torch.dataloader(again, stateful=False)]
    again.close()
    assert Counter(i for batch in first for i in batch) == Counter(range(2000))
    assert Counter(i for batch in second + rest for i in batch) == Counter(range(2000))


@pytest.mark.slow
def test_the_torch_demo_trains_with_two_dataloader_workers() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sqlfeed",
            "demo",
            "--framework",
            "torch",
            "--rows",
            "20000",
            "-m",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 DataLoader worker processes" in done.stdout
    assert done.stdout.count("(each once)") == 2
    accuracy = float(done.stdout.split("validation accuracy ")[1].split(";")[0])
    assert accuracy > 0.8, done.stdout


@pytest.mark.slow
def test_a_job_with_two_dataloader_workers_checkpoints_what_the_loop_took(tmp_path: Path) -> None:
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(2000)")
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    options: dict[str, Any] = {
        "batch_size": 64,
        "partitions": 6,
        "job": "j",
        "queue": queue,
        "worker_id": "w",
    }
    dataset = sqlfeed_torch.SQLDataset("SELECT id FROM t", f"duckdb:///{path}", **options)
    loader = sqlfeed_torch.dataloader(dataset, num_workers=2, stateful=False)
    batches = iter(loader)
    before = [next(batches)["id"].tolist() for _ in range(9)]  # the workers read further ahead
    dataset.checkpoint(9)
    for _ in range(3):
        next(batches)  # trained on, then lost with the crash
    del batches  # the worker processes stop
    lease_queue = sqlfeed.dispatch.open_queue(queue)
    assert lease_queue.checkpoints("j") == [9]
    recorded = lease_queue.ledger.entries("j")  # type: ignore[attr-defined]
    assert sum(entry.rows for _, entry in recorded) == sum(len(b) for b in before)
    lease_queue.rewind("j", 9)
    again = sqlfeed_torch.SQLDataset("SELECT id FROM t", f"duckdb:///{path}", **options)
    rest = [b["id"].tolist() for b in sqlfeed_torch.dataloader(again, num_workers=2)]
    assert Counter(i for batch in before + rest for i in batch) == Counter(range(2000))
    assert lease_queue.status("j").complete


def test_a_checkpoint_needs_a_job_and_an_even_batches_job_says_why_it_cannot(
    memory: Any, tmp_path: Path
) -> None:
    static = sqlfeed_torch.SQLDataset("SELECT range AS x FROM range(8)", memory, batch_size=4)
    with pytest.raises(InvalidArgumentError, match="needs job="):
        static.checkpoint(1)
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(200)")
    even = sqlfeed_torch.SQLDataset(
        "SELECT id FROM t",
        f"duckdb:///{path}",
        batch_size=16,
        partitions=4,
        job="even",
        queue=f"sqlite:///{tmp_path / 'queue.db'}",
        even_batches=True,
        worker_id="w",
    )
    next(iter(sqlfeed_torch.dataloader(even, stateful=False)))
    with pytest.raises(NotImplementedYetError, match="even batches, which cannot be rewound"):
        even.checkpoint(1)
    even.close()
