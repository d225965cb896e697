"""``sqlfeed predict`` and ``sqlfeed.ml.predict`` on every engine: one output row per
input row, the model's own predictions, the output's identity, and the refusals that come
before anything is written."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.cli import predict as cli_predict
from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.errors import QueueBusyError
from sqlfeed.ml import load, predict, train
from sqlfeed.plans.materialize import list_scratch
from sqlfeed.sink import folder as sink_folder
from tests.helpers.cli import Run, run_cli
from tests.helpers.engines import Engine

ROWS = 600
COLUMNS = [("id", "bigint"), ("x1", "float"), ("x2", "int"), ("cat", "text")]


def _rows(count: int, seed: int = 0) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    return [
        (i, float(rng.normal()), int(rng.integers(0, 5)), ["a", "b", "c"][i % 3])
        for i in range(1, count + 1)
    ]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A linear binary classifier on x1, x2, cat (trained once, on DuckDB)."""
    folder = tmp_path_factory.mktemp("predict") / "model"
    rows = _rows(400, seed=1)
    labels = ["yes" if x1 + 0.3 * x2 > 0.5 else "no" for _, x1, x2, _ in rows]
    table = pa.table(
        {
            "id": [r[0] for r in rows],
            "x1": [r[1] for r in rows],
            "x2": pa.array([r[2] for r in rows], pa.int32()),
            "cat": [r[3] for r in rows],
            "label": labels,
        }
    )
    db = folder.parent / "train.duckdb"
    sqlfeed.write_table(table, f"duckdb:///{db}", "t")
    train(
        "SELECT id, x1, x2, cat, label FROM t",
        f"duckdb:///{db}",
        label="label",
        out=str(folder),
        family="linear",
        key="id",
        epochs=2,
    )
    return folder


@pytest.fixture
def inputs(engine: Engine) -> Iterator[tuple[Engine, str]]:
    name = f"pin_{uuid.uuid4().hex[:8]}"
    engine.create_table(name, COLUMNS, _rows(ROWS))
    if engine.name != "sqlite" and engine.name != "duckdb":
        engine.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)")
        engine.commit()
    yield engine, name
    engine.execute(f"DROP TABLE IF EXISTS {name}")
    engine.commit()


def _expected(model_dir: Path, source: Any, table: str) -> pa.Table:
    """The model's predictions for ``table``'s rows, by id, computed here."""
    model = load(model_dir)
    rows = source.arrow(f"SELECT id, x1, x2, cat FROM {table} ORDER BY id")
    scores = model.predict_batch(rows.combine_chunks().to_batches()[0])
    classes = pa.array(model.classes)
    chosen = classes.take(pa.array((scores > 0.5).astype(np.int64)))
    return pa.table({"id": rows["id"], "predicted_label": chosen, "prob": scores})


def _check_output(source: Any, table: str, expected: pa.Table) -> None:
    found = source.arrow(
        f"SELECT id, predicted_label, predicted_label_prob FROM {table} ORDER BY id"
    )
    assert found.num_rows == expected.num_rows
    assert found["id"].to_pylist() == [int(v) for v in expected["id"].to_pylist()]
    assert found["predicted_label"].to_pylist() == expected["predicted_label"].to_pylist()
    np.testing.assert_allclose(
        np.asarray(found["predicted_label_prob"].to_pylist(), dtype=float),
        expected["prob"].to_numpy(),
        rtol=0,
        atol=1e-6,  # float32 inference: sums differ by batch composition
    )


def _sink_tables(engine: Engine, source: Any) -> list[str]:
    schema = engine.schema if engine.name in ("postgres", "mysql") else "main"
    return [t.name for t in list_scratch(source, schema)]


def test_predict_writes_one_row_per_input_row_with_the_models_predictions(
    inputs: tuple[Engine, str], model_dir: Path
) -> None:
    engine, name = inputs
    source = engine.source()
    table = engine.qualify(name)
    out = engine.qualify(f"pout_{uuid.uuid4().hex[:8]}")
    report = predict(
        f"SELECT id, x1, x2, cat FROM {table}",
        source,
        model_dir,
        into=out,
        key=["id"],
        readers=2,
        partitions=5,
        batch_size=37,
    )
    assert report is not None
    assert report.rows == ROWS
    assert source.rows(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {out}") == [(ROWS, ROWS)]
    _check_output(source, out, _expected(model_dir, source, table))
    assert _sink_tables(engine, source) == []
    if engine.name in ("postgres", "mysql"):  # the key proven by the catalog: the primary key
        assert source.output_columns(f"SELECT * FROM {out}") == [
            "id",
            "predicted_label",
            "predicted_label_prob",
        ]
    source.execute(f"DROP TABLE {out}")


def test_without_a_key_every_row_has_its_partition_and_position(
    inputs: tuple[Engine, str], model_dir: Path
) -> None:
    engine, name = inputs
    source = engine.source()
    table = engine.qualify(name)
    out = engine.qualify(f"pout_{uuid.uuid4().hex[:8]}")
    predict(
        f"SELECT id, x1, x2, cat FROM {table}",
        source,
        model_dir,
        into=out,
        keep=["id"],
        partitions=3,
        batch_size=50,
    )
    counts = source.rows(
        "SELECT COUNT(*), COUNT(DISTINCT id) FROM "
        f"(SELECT DISTINCT _sqlfeed_partition, _sqlfeed_row, id FROM {out}) d"
    )
    assert counts == [(ROWS, ROWS)]
    _check_output(source, out, _expected(model_dir, source, table))
    # append: a second run's rows keep a unique identity (partitions after the first's)
    predict(
        f"SELECT id, x1, x2, cat FROM {table}",
        source,
        model_dir,
        into=out,
        keep=["id"],
        mode="append",
    )
    pairs = source.rows(
        f"SELECT COUNT(*) FROM (SELECT DISTINCT _sqlfeed_partition, _sqlfeed_row FROM {out}) d"
    )
    assert pairs == [(2 * ROWS,)]
    # replace: the table holds this run's rows only
    predict(
        f"SELECT id, x1, x2, cat FROM {table} WHERE id <= 100",
        source,
        model_dir,
        into=out,
        keep=["id"],
        mode="replace",
    )
    assert source.rows(f"SELECT COUNT(*) FROM {out}") == [(100,)]
    assert _sink_tables(engine, source) == []
    source.execute(f"DROP TABLE {out}")


# -- the refusals: one line, exit 2, nothing written ----------------------------------------


def _refused(run: Run, expected: str) -> None:
    assert run.code == 2, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("sqlfeed: error: "), run.err
    assert expected in lines[0], run.err


@pytest.fixture
def sqlite_input(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'in.db'}"
    rows = _rows(300)
    data = pa.table(
        {
            "id": [r[0] for r in rows],
            "x1": [r[1] for r in rows],
            "x2": [r[2] for r in rows],
            "cat": [r[3] for r in rows],
        }
    )
    sqlfeed.write_table(data, url, "src", key=["id"])
    return url


def _predict(
    url: str, model: Path, *extra: str, sql: str = "SELECT id, x1, x2, cat FROM src"
) -> Run:
    return run_cli(["predict", "--db", url, "--model", str(model), *extra, sql])


def test_bad_input_is_refused_before_anything_is_written(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    url = sqlite_input
    source = sqlfeed.connect(url)
    assert _predict(url, model_dir, "--into", "out", "--key", "id").code == 0
    before = source.rows("SELECT COUNT(*) FROM out")
    _refused(
        _predict(url, model_dir, "--into", "out"),
        "the output table out exists: give --mode replace",
    )
    _refused(
        _predict(url, model_dir, "--into", "other", sql="SELECT id, x1, cat FROM src"),
        "the SELECT lacks the model's feature column 'x2'",
    )
    _refused(
        _predict(url, model_dir, "--into", "other", "--keep", "nope"),
        "column 'nope' (--key/--keep) is not in the SELECT",
    )
    _refused(
        _predict(url, model_dir, "--into", "out", "--mode", "append", "--keep", "x1"),
        "append needs the same columns",
    )
    _refused(
        _predict(
            url,
            model_dir,
            "--into",
            "o",
            "--into-db",
            f"duckdb:///{tmp_path / 'o.duckdb'}",
            "--queue",
            f"sqlite:///{tmp_path / 'q.db'}",
            "--job",
            "p",
        ),
        "several processes cannot write one duckdb file: give the workers --out DIR",
    )
    _refused(_predict(url, model_dir, "--into", "o", "--finish"), "--finish finishes a job")
    _refused(_predict(url, tmp_path, "--into", "o"), "is not a model folder")
    assert source.rows("SELECT COUNT(*) FROM out") == before
    tables = {r[0] for r in source.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"src", "out"}


def test_a_job_refuses_a_worker_with_another_model(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    url = sqlite_input
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    job = ("--queue", queue, "--job", "p")
    first = _predict(url, model_dir, "--into", "out", "--key", "id", *job)
    assert first.code == 0, first.err
    other = tmp_path / "other"
    train(
        "SELECT id, x1, x2, cat, CASE WHEN x1 > 0 THEN 'yes' ELSE 'no' END AS label FROM src",
        url,
        label="label",
        out=str(other),
        family="linear",
        key="id",
        epochs=1,
    )
    _refused(
        _predict(url, other, "--into", "out", "--key", "id", *job),
        "the job 'p' predicts with model",
    )
    again = _predict(url, model_dir, "--into", "out", "--key", "id", *job)  # joins a done job
    assert again.code == 0, again.err
    finished = run_cli(
        ["predict", "--db", url, "--model", str(model_dir), "--into", "out", "--finish", *job]
    )
    assert finished.code == 0, finished.err
    assert sqlfeed.connect(url).rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM out") == [(300, 300)]


def test_a_parquet_folder_finished_into_duckdb(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    url = sqlite_input
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    folder = tmp_path / "preds"
    job = ("--queue", queue, "--job", "f")
    run = _predict(url, model_dir, "--out", str(folder), "--keep", "id", "--batch-size", "40", *job)
    assert run.code == 0, run.err
    target = f"duckdb:///{tmp_path / 'out.duckdb'}"
    finish = ("--finish", "--out", str(folder), "--into", "preds", "--into-db", target)
    for _ in range(2):  # the first loads the folder; the second finds it loaded
        loaded = _predict(url, model_dir, *finish, *job)
        assert loaded.code == 0, loaded.err
    out = sqlfeed.connect(target)
    assert out.rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM preds") == [(300, 300)]
    _check_output(out, "preds", _expected(model_dir, sqlfeed.connect(url), "src"))


def test_a_done_folder_job_whose_rows_differ_is_not_called_incomplete(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """Every partition done, the folder's rows differ from the SELECT's count (a manifest
    gone, one listed twice): the finish says so instead of "start workers until it is"
    (which could never help), loads nothing, and loads once the folder is whole again."""
    url, folder = sqlite_input, tmp_path / "preds"
    job = ("--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "f")
    run = _predict(url, model_dir, "--out", str(folder), "--keep", "id", "--batch-size", "40", *job)
    assert run.code == 0, run.err
    target = f"duckdb:///{tmp_path / 'out.duckdb'}"
    finish = ("--finish", "--out", str(folder), "--into", "preds", "--into-db", target)
    manifest = sorted(folder.glob("_manifest-*.json"))[0]
    saved = manifest.read_bytes()
    twice = folder / "_manifest-zz-listed-twice.json"
    for change, undo in (
        (manifest.unlink, lambda: manifest.write_bytes(saved)),
        (lambda: twice.write_bytes(saved), twice.unlink),
    ):
        change()
        failed = _predict(url, model_dir, *finish, *job)
        assert failed.code != 0
        assert "every partition of the job is done" in failed.err, failed.err
        assert "start workers" not in failed.err
        assert len(failed.err.strip().splitlines()) == 1, failed.err
        undo()
    assert not (tmp_path / "out.duckdb").exists() or sqlfeed.connect(target).rows(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'preds'"
    ) == [(0,)]
    loaded = _predict(url, model_dir, *finish, *job)
    assert loaded.code == 0, loaded.err
    assert sqlfeed.connect(target).rows("SELECT COUNT(*) FROM preds") == [(300,)]


# -- --out folders: sqlfeed writes and removes only its own files (issue 36 item 3) ---------

SPARK_FILES = (
    "part-00000-1b9c1a3e-7f6d-4a2b-9f7e-2d3c4b5a6f70-c000.snappy.parquet",
    ".part-00000-1b9c1a3e-7f6d-4a2b-9f7e-2d3c4b5a6f70-c000.snappy.parquet.crc",
)
"""A Spark output's file and its checksum: named like sqlfeed's own batch files."""


def _add_spark_files(folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in SPARK_FILES:
        (folder / name).write_bytes(f"Spark's {name}".encode())
    return _files(folder)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_predict_out_refuses_a_folder_of_files_it_did_not_write(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """Directly and through a symbolic link: refused before anything is written or removed."""
    url = sqlite_input
    spark = tmp_path / "spark"
    before = _add_spark_files(spark)
    link = tmp_path / "link"
    link.symlink_to(spark, target_is_directory=True)
    for folder in (spark, link):
        _refused(
            _predict(url, model_dir, "--out", str(folder), "--keep", "id"),
            f"--out {folder} holds files sqlfeed did not write (.part-00000-",
        )
        with pytest.raises(InvalidArgumentError, match="holds files sqlfeed did not write"):
            predict("SELECT id, x1, x2, cat FROM src", url, model_dir, out=str(folder))
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    job = ("--queue", queue, "--job", "f")
    ours = tmp_path / "ours"
    assert _predict(url, model_dir, "--out", str(ours), *job).code == 0
    target = f"duckdb:///{tmp_path / 'out.duckdb'}"
    for folder in (spark, link):  # --finish loads only the job's own folder
        _refused(
            _predict(url, model_dir, "--finish", "--out", str(folder), "--into", "p", *job),
            f"--out {folder} holds files sqlfeed did not write",
        )
    _refused(
        _predict(url, model_dir, "--finish", "--out", str(tmp_path / "none"), "--into", "p", *job),
        "holds no output of job 'f'",
    )
    assert _files(spark) == before
    assert not Path(target.removeprefix("duckdb:///")).exists()


def test_a_folder_job_removes_only_files_it_wrote(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """The sweep of a complete job keeps what a user put in its folder; --out may be a link."""
    url = sqlite_input
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    job = ("--queue", queue, "--job", "f")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "preds"
    link.symlink_to(elsewhere, target_is_directory=True)
    first = _predict(url, model_dir, "--out", str(link), "--keep", "id", *job)
    assert first.code == 0, first.err
    written = _files(elsewhere)
    added = _add_spark_files(elsewhere)
    lost = elsewhere / "part-00003-0123456789ab-000000.parquet"  # a lost attempt's file
    lost.write_bytes(b"garbage")
    again = _predict(url, model_dir, "--out", str(link), "--keep", "id", *job)  # sweeps
    assert again.code == 0, again.err
    assert _files(elsewhere) == {**written, **added}
    target = f"duckdb:///{tmp_path / 'out.duckdb'}"
    finish = ("--finish", "--out", str(link), "--into", "preds", "--into-db", target)
    loaded = _predict(url, model_dir, *finish, *job)
    assert loaded.code == 0, loaded.err
    assert sqlfeed.connect(target).rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM preds") == [
        (300, 300)
    ]


# -- what a run shows: progress with its total, and one true summary (issue 36 item 16) --------


def test_progress_knows_the_total_first_and_counts_every_scored_batch(
    inputs: tuple[Engine, str], model_dir: Path, tmp_path: Path
) -> None:
    """The bar had no total until a whole partition committed, then jumped: no rate, no ETA."""
    engine, name = inputs
    source = engine.source()
    sql = f"SELECT id, x1, x2, cat FROM {engine.qualify(name)}"
    table = engine.qualify(f"pprog_{uuid.uuid4().hex[:8]}")
    for into, out in ((table, None), (None, str(tmp_path / "folder"))):
        calls: list[tuple[int, int | None]] = []

        def record(rows: int, expected: int | None, calls: list[Any] = calls) -> None:
            calls.append((rows, expected))

        predict(
            sql,
            source,
            model_dir,
            into=into,
            out=out,
            key=["id"],
            readers=2,
            partitions=3,
            batch_size=50,
            progress=record,
        )
        assert calls[0] == (0, ROWS), into
        assert calls[-1] == (ROWS, ROWS), into
        assert len({rows for rows, _ in calls}) >= ROWS // 50, into  # batch by batch
        assert [rows for rows, _ in calls] == sorted(rows for rows, _ in calls), into
    source.execute(f"DROP TABLE {table}")


def test_the_summary_says_who_put_the_table_in_place(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """It said "finished by before" for a table another process had put in place."""
    url = sqlite_input
    job = ("--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "p")
    first = _predict(url, model_dir, "--into", "scores", "--key", "id", *job)
    assert first.out.startswith("300 rows in "), first.out  # out, as the engine names it
    assert first.out.endswith(" (create, put in place by this process)\n"), first.out
    again = _predict(url, model_dir, "--into", "scores", "--key", "id", *job)
    assert again.out.startswith("300 rows in "), again.out
    assert again.out.endswith(
        " (create, already in place: put there by another process or an earlier finish)\n"
    ), again.out
    finished = _predict(url, model_dir, "--into", "scores", "--finish", *job)
    assert finished.out == again.out, finished.err


def test_folder_workers_each_say_what_they_wrote_and_whether_the_job_is_complete(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """Two --out workers both said "finished by this process"; a folder is finished by a load."""
    url = sqlite_input
    folder = tmp_path / "preds"
    job = ("--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "f")
    first = _predict(url, model_dir, "--out", str(folder), "--keep", "id", *job)
    assert first.code == 0, first.err
    assert first.out == (
        f"300 rows written into {folder} by this process; all 300 rows of the job are there "
        f"(predict --finish --out {folder} --into TABLE loads them)\n"
    )
    second = _predict(url, model_dir, "--out", str(folder), "--keep", "id", *job)
    assert second.out.startswith(f"0 rows written into {folder} by this process; all 300 rows")
    third = _predict(url, model_dir, "--out", str(folder), "--keep", "id", "--format", "json", *job)
    assert third.code == 0, third.err
    report = json.loads(third.out)
    assert (report["rows"], report["complete"], report["job_rows"]) == (0, True, 300)
    assert "finished_by" not in report
    checked = _predict(url, model_dir, "--finish", "--out", str(folder), *job)
    assert checked.out == f"{folder} holds all 300 rows of the job f\n"
    alone = _predict(url, model_dir, "--out", str(tmp_path / "alone"), "--keep", "id")
    assert alone.out == f"300 rows in {tmp_path / 'alone'} (Parquet files)\n"


def test_a_folder_worker_leaving_an_incomplete_job_says_so(
    sqlite_input: str, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_input
    folder = tmp_path / "preds"
    queue = f"sqlite:///{tmp_path / 'q.db'}"
    job = ("--queue", queue, "--job", "f")
    assert _predict(url, model_dir, "--out", str(folder), "--keep", "id", *job).code == 0
    # As if partition 0 were still leased by another worker, its manifest not written yet.
    (folder / "_manifest-00000.json").unlink()
    real_open = sink_folder.open_queue

    def one_still_leased(url: str) -> Any:
        opened = real_open(url)
        status = opened.status

        def leased(name: str) -> Any:
            got = status(name)
            first = got.per_epoch[0] | {"done": got.per_epoch[0]["done"] - 1, "leased": 1}
            return dataclasses.replace(got, per_epoch=[first, *got.per_epoch[1:]])

        opened.status = leased
        return opened

    monkeypatch.setattr(sink_folder, "open_queue", one_still_leased)
    run = _predict(url, model_dir, "--out", str(folder), "--keep", "id", *job)
    assert run.out == (
        f"0 rows written into {folder} by this process; the job is not complete (its other "
        "workers write the rest)\n"
    )


def test_a_folder_worker_that_cannot_check_the_job_says_it_is_unknown(
    sqlite_input: str, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its rows are written; a queue that fails the completeness check is not "the job is not
    complete" (it was read as that): the report says it is unknown, and why."""
    folder = tmp_path / "preds"
    job = ("--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "f")

    def busy(*args: Any, **kwargs: Any) -> None:
        raise QueueBusyError("queue sqlite:///q.db kept failing: database is locked")

    monkeypatch.setattr(cli_predict, "finish", busy)
    run = _predict(sqlite_input, model_dir, "--out", str(folder), "--keep", "id", *job)
    assert run.code == 0, run.err
    assert run.out == (
        f"300 rows written into {folder} by this process; whether the job is complete is "
        "unknown (queue sqlite:///q.db kept failing: database is locked): predict --finish "
        f"--out {folder} tells\n"
    )
    again = _predict(
        sqlite_input, model_dir, "--out", str(folder), "--keep", "id", "--format", "json", *job
    )
    report = json.loads(again.out)
    assert (report["complete"], report["job_rows"]) == (None, None)
    assert report["unknown_because"].endswith("database is locked")


def test_two_folder_runs_of_one_process_are_two_jobs(
    sqlite_input: str, model_dir: Path, tmp_path: Path
) -> None:
    """Both ran as the job 'folder' of the process's memory queue: the second, finding it
    done, wrote no row into its own folder and reported 0 rows, without an error."""
    url = sqlite_input
    first = predict("SELECT id, x1, x2, cat FROM src", url, model_dir, out=str(tmp_path / "a"))
    second = predict(
        "SELECT id, x1, x2, cat FROM src WHERE id <= 100", url, model_dir, out=str(tmp_path / "b")
    )
    assert (first.rows, second.rows) == (300, 100)  # type: ignore[union-attr]
    assert pq.read_table(tmp_path / "b", columns=["predicted_label"]).num_rows == 100


def test_folder_workers_share_a_duckdb_input(model_dir: Path, tmp_path: Path) -> None:
    """--out workers only read the DuckDB file: they were refused as if they wrote it (the
    advice that refusal gives for a DuckDB output)."""
    url = f"duckdb:///{tmp_path / 'in.duckdb'}"
    rows = _rows(120)
    names = ["id", "x1", "x2", "cat"]
    data = pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})
    sqlfeed.write_table(data, url, "src")
    folder = tmp_path / "preds"
    job = ("--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "f")
    run = _predict(url, model_dir, "--out", str(folder), "--keep", "id", *job)
    assert run.code == 0, run.err
    assert pq.read_table(folder, columns=["id"]).num_rows == 120
