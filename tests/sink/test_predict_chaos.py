"""``sqlfeed predict`` under chaos (issue #27, "Must show"): workers SIGKILLed and replaced,
one SIGSTOPped past its lease TTL and resumed, then ``--finish`` (twice: idempotent); the
output must hold every input row exactly once with the predictions of a single-process run.
Also an atomic ``--mode replace`` (a reader sees the old or the new count only; a killed
replace leaves the old table) and forced zombies on the table sink itself.

Row counts: 1 M rows took ~55 s with 4 plain workers on the 2-core development machine
before any chaos with a Keras model (each worker process loads TensorFlow in ~8 s); the
tests use boosted trees (XGBoost loads in about a second), and to keep ``make test``
in its time the engines use 200,000 rows and 5 kills (the issue asks for 1 M:
``SQLFEED_CHAOS_ROWS=1000000`` runs it, as the #27 note reports).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
import sqlfeed.ml
from sqlfeed.dialects import EngineError
from sqlfeed.sink import TableSink
from tests.helpers import sweep
from tests.helpers.cli import run_cli
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

pytestmark = pytest.mark.slow

PG = POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1)
MY = MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1)
ROWS = int(os.environ.get("SQLFEED_CHAOS_ROWS", "200000"))
TTL = 3.0
ROOT = Path(__file__).resolve().parents[2]
SELECT = "SELECT id, x1, x2 FROM {table}"


def _source(url: str) -> Any:
    try:
        source = sqlfeed.connect(url)
        source.rows("SELECT 1")
    except Exception as err:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{url} unreachable: {err}")
    return source


def _make_input(source: Any, url: str, table: str, rows: int) -> None:
    """``table(id PRIMARY KEY, x1, x2, label)`` with ``rows`` rows, made in the engine."""
    label = "CASE WHEN x1 + (id % 7) / 7.0 > 1 THEN 'yes' ELSE 'no' END"
    if url.startswith("postgresql"):
        source.execute(
            f"CREATE TABLE {table} AS SELECT i AS id,"
            " (i::bigint * 7919 % 1000) / 1000.0::float8 AS x1,"
            f" (i % 7) AS x2 FROM generate_series(0, {rows - 1}) i"
        )
        source.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
    elif url.startswith("mysql"):
        source.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, x1 DOUBLE, x2 INT)")
        source.execute(
            f"INSERT INTO {table} WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM"
            " d WHERE i < 999) SELECT n, (n * 7919 % 1000) / 1000.0, n % 7 FROM (SELECT"
            f" a.i * 1000 + b.i AS n FROM d a, d b) s WHERE n < {rows}"
        )
    else:  # sqlite, duckdb
        source.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, x1 DOUBLE, x2 INTEGER)")
        source.execute(
            f"INSERT INTO {table} WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM"
            f" d WHERE i < {rows - 1}) SELECT i, (i * 7919 % 1000) / 1000.0, i % 7 FROM d"
        )
    source.execute(f"ALTER TABLE {table} ADD COLUMN label VARCHAR(3)")
    source.execute(f"UPDATE {table} SET label = {label} WHERE id < 5000")


def _train(url: str, table: str, out: Path) -> Path:
    sql = f"SELECT id, x1, x2, label FROM {table} WHERE id < 5000"
    # boosted trees: a worker process loads XGBoost in about a second, TensorFlow in ~8
    # (every kill starts one); Keras predictions are checked in test_predict.py
    sqlfeed.ml.train(
        sql, url, label="label", out=str(out), family="gbdt", key="id", trees=20, max_depth=3
    )
    return out


@pytest.fixture
def names() -> dict[str, str]:
    """Unique table names for one test (each test drops its own)."""
    tag = uuid.uuid4().hex[:8]
    return {k: f"chaos_{k}_{tag}" for k in ("input", "output", "single", "nokey", "single2")}


def _drop(source: Any, tables: Any) -> None:
    for table in tables:
        with contextlib.suppress(Exception):  # best-effort cleanup
            source.execute(f"DROP TABLE IF EXISTS {table}")


def _worker(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "sqlfeed", "predict", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )


def _complete(queue: str, job: str) -> bool:
    run = run_cli(["job", "status", "--queue", queue, "--job", job, "--format", "json"])
    return run.code == 0 and bool(json.loads(run.out).get("complete"))


def _chaos(args: list[str], queue: str, job: str, log: Path, kills: int = 5) -> dict[str, int]:
    """4 workers; a SIGKILL (the worker replaced) as soon as the job has begun, then every
    ~1.5 s (``kills`` times at most), one SIGSTOPped for 2 TTLs; returns what was done
    once the workers are gone."""
    procs = [_worker(args, log) for _ in range(4)]
    done = {"killed": 0, "stopped": 0}
    rng = random.Random(27)
    stopped: tuple[subprocess.Popen[bytes], float] | None = None
    start = last = time.monotonic()
    while not _complete(queue, job) and time.monotonic() - start < 400:
        time.sleep(0.3)
        if stopped and time.monotonic() - stopped[1] > 2 * TTL:
            stopped[0].send_signal(signal.SIGCONT)
            stopped = None
        live = [p for p in procs if p.poll() is None and (not stopped or p is not stopped[0])]
        if not live:
            procs.append(_worker(args, log))
            continue
        gap = 1.5 if done["stopped"] else 0.3  # the SIGSTOP right after the first kill
        if (done["killed"] and time.monotonic() - last < gap) or not _begun(queue, job):
            continue
        last = time.monotonic()
        if done["killed"] and not done["stopped"]:
            victim = rng.choice(live)
            victim.send_signal(signal.SIGSTOP)
            stopped, done["stopped"] = (victim, time.monotonic()), 1
        elif done["killed"] < kills:
            rng.choice(live).send_signal(signal.SIGKILL)
            done["killed"] += 1
            procs.append(_worker(args, log))
    if stopped:
        stopped[0].send_signal(signal.SIGCONT)
    codes = [p.wait(timeout=300) for p in procs]
    text = log.read_text()
    failed = [c for c in codes if c not in (0, -signal.SIGKILL)]
    assert not failed, (codes, text[-3000:])
    assert _complete(queue, job), log.read_text()[-3000:]
    return done


def _begun(queue: str, job: str) -> bool:
    """Whether a partition of the job is leased or done."""
    state = _status(queue, job)
    epochs = state.get("per_epoch") or [{}]
    return bool(epochs[0].get("leased") or epochs[0].get("done"))


def _finish(args: list[str]) -> None:
    for _ in range(2):  # idempotent
        run = run_cli(["predict", "--finish", *args, "--format", "json"])
        assert run.code == 0, run.err


def _check_keyed(source: Any, inp: str, out: str, single: str, rows: int) -> None:
    count = source.rows(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {out}")[0]
    assert tuple(count) == (rows, rows)
    assert source.rows(f"SELECT id FROM {inp} EXCEPT SELECT id FROM {out}") == []
    assert source.rows(f"SELECT id FROM {out} EXCEPT SELECT id FROM {inp}") == []
    _same_predictions(source.arrow(f"SELECT * FROM {out}"), source.arrow(f"SELECT * FROM {single}"))


def _same_predictions(got: pa.Table, want: pa.Table) -> None:
    """The class exactly and the probability to 1e-6, per id."""
    assert got.num_rows == want.num_rows
    expected = {r["id"]: r for r in want.to_pylist()}
    bad = 0
    for row in got.to_pylist():
        other = expected[row["id"]]
        same = row["predicted_label"] == other["predicted_label"]
        bad += not (
            same and abs(row["predicted_label_prob"] - other["predicted_label_prob"]) < 1e-6
        )
    assert bad == 0, f"{bad} rows predicted unlike the single run"


def _check_unkeyed(source: Any, inp: str, out: str, single: str, rows: int) -> None:
    identity = "_sqlfeed_partition, _sqlfeed_row"
    distinct = f"SELECT COUNT(*) FROM (SELECT DISTINCT {identity} FROM {out}) d"
    assert source.rows(f"SELECT COUNT(*) FROM {out}")[0][0] == rows
    assert source.rows(distinct)[0][0] == rows
    assert source.rows(f"SELECT COUNT(DISTINCT id) FROM {out}")[0][0] == rows
    pair = "SELECT id, predicted_label FROM {}"
    for a, b in ((out, single), (single, out)):
        assert source.rows(f"{pair.format(a)} EXCEPT {pair.format(b)}") == []
    assert source.rows(f"SELECT id FROM {inp} EXCEPT SELECT id FROM {out}") == []


def _run_chaos(url: str, tmp_path: Path, names: dict[str, str], rows: int, queue: str) -> None:
    """Kill chaos with --key (rows identified by the key), and without (by partition and
    row), each against a single-process run. A plain run takes one of the two, rotating
    with the sweep seed (tests/helpers/sweep.py); ``make test-full`` both."""
    source = _source(url)
    tables = list(names.values())
    every = {
        "key": (names["output"], names["single"], ["--key", "id"], _check_keyed),
        "identity": (names["nokey"], names["single2"], ["--keep", "id"], _check_unkeyed),
    }
    kinds = sweep.sample(list(every), f"predict-chaos {url.split(':')[0]}")
    kinds = kinds or [list(every)[sweep.seed() % 2]]  # a share of neither: one by parity
    variants = [(kind[0], *every[kind]) for kind in kinds]  # job p (key) or i (identity)
    try:
        _make_input(source, url, names["input"], rows)
        model = str(_train(url, names["input"], tmp_path / "model"))
        sql = SELECT.format(table=names["input"])
        common = ["--db", url, "--model", model, "--batch-size", "2000", "--format", "json"]
        for job, into, single, extra, check in variants:
            run = run_cli(["predict", *common, "--into", single, *extra, sql])
            assert run.code == 0, run.err
            args = [*common, "--into", into, *extra, "--queue", queue, "--job", job]
            args += ["--lease-ttl", str(TTL), "--partitions", "16", sql]
            done = _chaos(args, queue, job, tmp_path / f"{job}.log")
            assert done["killed"] > 0
            assert done["stopped"] == 1
            _finish(["--queue", queue, "--job", job, "--into", into, "--db", url])
            check(source, names["input"], into, single, rows)
    finally:
        _drop(source, tables)
        source.close()


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("url", [PG, MY], ids=["postgres", "mariadb"])
def test_kill_chaos_servers(url: str, tmp_path: Path, names: dict[str, str]) -> None:
    _run_chaos(url, tmp_path, names, ROWS, f"sqlite:///{tmp_path / 'queue.db'}")


def test_kill_chaos_sqlite(tmp_path: Path, names: dict[str, str]) -> None:
    sqlite3.connect(tmp_path / "data.db").close()  # sqlfeed reads but never creates one
    url = f"sqlite:///{tmp_path / 'data.db'}"
    _run_chaos(url, tmp_path, names, min(ROWS, 100_000), f"sqlite:///{tmp_path / 'queue.db'}")


# -- forced zombies on the table sink ------------------------------------------------------


def _server_or_file(engine: str, tmp_path: Path) -> str:
    url = {"postgres": PG, "mariadb": MY}.get(engine)
    if url is None:
        return f"{engine}:///{tmp_path / ('data.' + engine)}"
    _source(url).close()
    return url


def _batch(first: int, rows: int = 10) -> pa.RecordBatch:
    ids = list(range(first, first + rows))
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": pa.array([i / 3 for i in ids])})


def _staged(sink: TableSink) -> int:
    staging = sink.staging.sql(dialect=sink.dialect.sqlglot_dialect)
    return int(sink.source.rows(f"SELECT COUNT(*) FROM {staging}")[0][0])


ENGINES4 = ["postgres", "mariadb", "sqlite", "duckdb"]


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("unique_key", [True, False], ids=["key", "identity"])
@pytest.mark.parametrize("engine", ENGINES4)
def test_forced_zombie(engine: str, unique_key: bool, tmp_path: Path) -> None:
    """Worker A stalls holding (0, 0); B commits it; A's late commit is refused, and a
    batch cut at other boundaries clashes on the row identity: rows unchanged."""
    url = _server_or_file(engine, tmp_path)
    table = f"chaos_zombie_{uuid.uuid4().hex[:8]}"
    stalled = TableSink.create(url, table, _batch(0).schema, key=["id"], unique_key=unique_key)
    other = TableSink.attach(url, stalled.spec)
    try:
        assert other.commit(0, 0, _batch(0)) is True
        assert stalled.commit(0, 0, _batch(0)) is False
        assert (_staged(stalled), stalled.committed()) == (10, (1, 10))
        clash = _batch(5) if unique_key else _batch(0)  # same keys / same (part, row)
        try:
            clashed = stalled.commit(0, 5, clash)
        except EngineError:  # the key or identity enforced row by row (SQLite)
            clashed = False
        if clashed:  # the key or identity is built at finish: the duplicate fails there
            with pytest.raises(EngineError):
                stalled.finish()
            assert _staged(stalled) == 20  # kept for a look, nothing put in place
            with pytest.raises(EngineError):  # no output table
                stalled.source.rows(f"SELECT COUNT(*) FROM {table}")
            return
        assert (_staged(stalled), stalled.committed()) == (10, (1, 10))
        assert other.commit(0, 10, _batch(10)) is True  # the sink still works
        stalled.finish()
        assert int(stalled.source.rows(f"SELECT COUNT(*) FROM {table}")[0][0]) == 20
    finally:
        other.close()
        _drop(stalled.source, [table])
        stalled.abort()
        stalled.close()


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("engine", ENGINES4)
def test_simultaneous_commits(engine: str, tmp_path: Path) -> None:
    """Two workers commit the same batch at the same moment: exactly one wins."""
    url = _server_or_file(engine, tmp_path)
    table = f"chaos_race_{uuid.uuid4().hex[:8]}"
    first = TableSink.create(url, table, _batch(0).schema, key=["id"], unique_key=True)
    sinks = [first, TableSink.attach(url, first.spec)]
    for sink in sinks:  # open the write sessions before the race
        sink._writer()
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def commit(i: int) -> None:
        barrier.wait()
        try:
            results[i] = sinks[i].commit(3, 0, _batch(0, 1000))
        except Exception as err:  # recorded and asserted
            results[i] = err

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(results, key=str) == [False, True], results
        assert (_staged(first), first.committed()) == (1000, (1, 1000))
    finally:
        sinks[1].close()
        first.abort()
        first.close()


def test_a_stalled_attempt_writing_while_the_run_finishes_gives_its_partition_up(
    tmp_path: Path,
) -> None:
    """Worker A began partition 0 and stalled; B committed it, every partition is in, and a
    finisher has built the staging table's key (MariaDB: its first step, committed at once,
    before the rename; engines with transactional DDL add it after the rename, in one
    transaction). A wakes and writes its rows: they meet B's committed keys. A gives the
    partition up (False) without an error, and the finish completes: under chaos a worker
    exited 1 on "Duplicate entry '37500' for key 'PRIMARY'" at exactly this point."""
    url = _server_or_file("mariadb", tmp_path)
    table = f"chaos_late_{uuid.uuid4().hex[:8]}"
    stalled = TableSink.create(url, table, _batch(0).schema, key=["id"], unique_key=True)
    other = TableSink.attach(url, stalled.spec)
    try:
        assert not stalled.dialect.TRANSACTIONAL_DDL
        add_key = stalled.dialect.add_key_sql(stalled.staging, ["id"], False)
        assert add_key is not None
        stalled.open_partition(0)
        assert other.commit(0, 0, _batch(0)) is True
        other.source.execute(add_key)
        stalled.write_rows(0, _batch(0))
        assert stalled.commit_partition() is False
        assert (_staged(stalled), stalled.committed()) == (10, (1, 10))
        assert other.finish().rows == 10
        assert int(other.source.rows(f"SELECT COUNT(*) FROM {table}")[0][0]) == 10
    finally:
        other.close()
        stalled.close()
        _drop(stalled.source, [table])
        stalled.abort()


@pytest.mark.rotate  # a rotating share of its cases a run, never none (tests/helpers/sweep.py)
@pytest.mark.parametrize("engine", ["postgres", "sqlite"])
def test_concurrent_finishers_race(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finisher A sees the staging table, then B renames it before A counts its rows."""
    import sqlfeed.sink.finish as finish_module

    url = _server_or_file(engine, tmp_path)
    table = f"chaos_fin_{uuid.uuid4().hex[:8]}"
    a = TableSink.create(url, table, _batch(0).schema, key=["id"], unique_key=True)
    b = TableSink.attach(url, a.spec)
    original = finish_module._check_counts

    def rival_first(sink: Any) -> int:
        if sink is a:
            with monkeypatch.context() as inner:
                inner.setattr(finish_module, "_check_counts", original)
                b.finish()
        return int(original(sink))

    try:
        assert a.commit(0, 0, _batch(0)) is True
        monkeypatch.setattr(finish_module, "_check_counts", rival_first)
        assert a.finish().rows == 10  # "finished before", not an error
    finally:
        b.close()
        _drop(a.source, [table])
        a.abort()
        a.close()


# -- a Parquet folder finished into DuckDB -------------------------------------------------


def test_kill_chaos_folder_into_duckdb(tmp_path: Path, names: dict[str, str]) -> None:
    """Workers write a Parquet folder from PostgreSQL under chaos; --finish loads it into
    a DuckDB file (twice: idempotent); same checks there."""
    source = _source(PG)
    rows = ROWS // 2
    duck = f"duckdb:///{tmp_path / 'x.duckdb'}"
    queue = f"sqlite:///{tmp_path / 'queue.db'}"
    try:
        _make_input(source, PG, names["input"], rows)
        model = str(_train(PG, names["input"], tmp_path / "model"))
        sql = SELECT.format(table=names["input"])
        common = ["--db", PG, "--model", model, "--key", "id", "--batch-size", "2000"]
        run = run_cli(["predict", *common, "--into", names["single"], "--format", "json", sql])
        assert run.code == 0, run.err
        out = str(tmp_path / "out")
        args = [*common, "--out", out, "--queue", queue, "--job", "f"]
        chaos = [*args, "--lease-ttl", str(TTL), "--partitions", "16", sql]
        done = _chaos(chaos, queue, "f", tmp_path / "f.log")
        assert done["killed"] > 0
        _finish([*args, "--into", "preds", "--into-db", duck, sql])
        ids = source.arrow(f"SELECT id FROM {names['input']}")
        single = source.arrow(f"SELECT * FROM {names['single']}")
        target = sqlfeed.connect(duck)
        try:
            count = target.rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM preds")[0]
            assert tuple(count) == (rows, rows)
            got = target.arrow("SELECT * FROM preds")
        finally:
            target.close()
        assert set(got.column("id").to_pylist()) == set(ids.column("id").to_pylist())
        _same_predictions(got, single)
    finally:
        _drop(source, [names["input"], names["single"]])
        source.close()


# -- atomic replace ------------------------------------------------------------------------


def _reader(table: str, stop: threading.Event, seen: list[Any]) -> None:
    """Counts ``table``'s rows again and again, each in a transaction of its own.

    By the driver itself (autocommit): the replace's atomicity is the database's, and a
    reader through sqlfeed spends a core validating the same statement thousands of times,
    starving the worker it watches.
    """
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        while not stop.is_set():
            try:
                seen.append(int(connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]))
            except Exception as err:  # recorded and asserted
                seen.append(err)


def _status(queue: str, job: str) -> dict[str, Any]:
    run = run_cli(["job", "status", "--queue", queue, "--job", job, "--format", "json"])
    return dict(json.loads(run.out)) if run.code == 0 else {}


def test_atomic_replace(tmp_path: Path, names: dict[str, str]) -> None:
    """A reader sees 1000 or 20,000 rows, never 0 or an error; a killed replace leaves the
    old table, and a new worker then completes the job."""
    source = _source(PG)
    old, rows = names["output"], 20_000
    try:
        _make_input(source, PG, names["input"], rows)
        model = str(_train(PG, names["input"], tmp_path / "model"))
        sql = SELECT.format(table=names["input"])
        source.execute(f"CREATE TABLE {old} AS SELECT id FROM {names['input']} WHERE id < 1000")
        args = ["--db", PG, "--model", model, "--into", old, "--key", "id", "--mode", "replace"]
        stop, seen = threading.Event(), list[Any]()
        reader = threading.Thread(target=_reader, args=(old, stop, seen))
        reader.start()
        log = tmp_path / "replace.log"
        code = _worker([*args, sql], log).wait(timeout=300)
        time.sleep(0.5)
        stop.set()
        reader.join(60)
        assert code == 0, log.read_text()[-3000:]
        assert set(seen) <= {1000, rows}, [s for s in seen if s not in (1000, rows)][:5]
        assert seen[0] == 1000
        assert seen[-1] == rows
        # killed mid-run: the old table stays
        source.execute(f"DROP TABLE {old}")
        source.execute(f"CREATE TABLE {old} AS SELECT id FROM {names['input']} WHERE id < 1000")
        queue = f"sqlite:///{tmp_path / 'queue.db'}"
        job = [*args, "--queue", queue, "--job", "r", "--batch-size", "500"]
        job += ["--partitions", "64", "--lease-ttl", str(TTL), sql]  # the kill's lease expires soon
        worker = _worker(job, log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = _status(queue, "r")
            if state and state["per_epoch"][0]["done"] >= 1:
                worker.send_signal(signal.SIGSTOP)  # frozen mid-run, however fast it writes
                state = _status(queue, "r")
                break
            time.sleep(0.02)
        assert not state.get("complete"), "the worker finished before it could be stopped"
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert source.rows(f"SELECT COUNT(*) FROM {old}")[0][0] == 1000
        assert _worker(job, log).wait(timeout=300) == 0, log.read_text()[-3000:]
        assert source.rows(f"SELECT COUNT(*) FROM {old}")[0][0] == rows
    finally:
        _drop(source, [names["input"], old])
        source.close()
