"""Every bad input of ``sqlfeed train``, ``evaluate`` and ``model show``: one stderr line,
exit code 2, checked before anything trains or writes, nothing left behind (no --out
folder, no hidden ``.partial`` folder, no table).

The train cases fail before the model is built: none imports TensorFlow. The one case that
needs a trained model (a SELECT that lacks one of its features) trains one, and is slow.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import Run, run_cli

SELECT = "SELECT id, a, c, y FROM t"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file: 300 rows, a number, a text with NULLs, a yes/no label, a label with
    NULLs, a constant column."""
    path = tmp_path_factory.mktemp("ml_bad") / "t.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE t AS SELECT i AS id, (i % 17) / 17.0 AS a, "
            "CASE WHEN i % 5 = 0 THEN NULL WHEN i % 3 = 0 THEN 'red' ELSE 'blue' END AS c, "
            "CASE WHEN i % 17 > 8 THEN 'yes' ELSE 'no' END AS y, "
            "CASE WHEN i % 7 = 0 THEN NULL ELSE i % 2 END AS ny "
            "FROM range(300) r(i)"
        )
    return path


def _tables(path: Path) -> list[str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return sorted(
            row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        )


def assert_refused(run: Run, expected: str) -> None:
    """Exit code 2, exactly one stderr line saying ``expected``, nothing on stdout."""
    assert run.code == 2, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("sqlfeed: error: "), run.err
    assert expected in lines[0], run.err
    assert "Traceback" not in run.err
    assert run.out == ""


def refused_train(db: Path, work: Path, flags: list[str], sql: str, expected: str) -> None:
    """``sqlfeed train`` into ``work/m`` is refused, and leaves ``work`` and the database
    as they were."""
    before, tables = sorted(p.name for p in work.iterdir()), _tables(db)
    out = work / "m"
    run = run_cli(["train", "--db", f"duckdb:///{db}", "--out", str(out), *flags, sql])
    assert_refused(run, expected)
    assert sorted(p.name for p in work.iterdir()) == before  # no --out, no .m.partial-*
    assert _tables(db) == tables


def test_unknown_label(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "zz"],
        SELECT,
        "unknown label column 'zz': the query returns id, a, c, y",
    )


def test_null_labels_are_counted_with_the_filter(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "ny"],
        "SELECT id, a, c, ny FROM t",
        "the label 'ny' is NULL in 43 rows: filter them in the SELECT (WHERE \"ny\" IS NOT NULL)",
    )


def test_a_label_with_one_value(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id"],
        "SELECT id, a, c, y FROM t WHERE y = 'no'",
        "the label 'y' has one value ('no') in the training split: nothing to learn",
    )


def test_regression_on_a_text_label(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--task", "regression"],
        SELECT,
        "regression needs a numeric label, and 'y' is string: use task binary/multiclass, or cast "
        "the label to a number in the SELECT",
    )


def test_an_empty_validation_split(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id", "--validation", "0.001"],
        "SELECT id, a, c, y FROM t WHERE id < 4",
        "the validation split is empty (4 rows in all): give a larger validation share",
    )


def test_an_existing_out_is_kept(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    refused_train(
        db,
        tmp_path,
        ["--label", "y"],
        SELECT,
        f"{out} exists already: pass --overwrite to replace it, or another --out",
    )
    assert [p.name for p in out.iterdir()] == ["manifest.json"]
    assert (out / "manifest.json").read_text() == "{}"


def test_a_struct_column_as_a_feature(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id"],
        "SELECT id, a, {'q': id} AS s, y FROM t",
        "column 's' is a struct (struct<q: int64>), which is not a feature: select numbers, "
        "text, booleans, dates or timestamps from it, or skip it (--skip s)",
    )


def test_a_map_column_as_a_feature(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id"],
        "SELECT id, a, MAP {'q': id} AS s, y FROM t",
        "column 's' is a map (map<string, int64>), which is not a feature",
    )


def test_negative_epochs(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--epochs", "-1"],
        SELECT,
        "--epochs must be an integer > 0, not -1",
    )


def test_a_validation_share_above_one(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--validation", "1.5"],
        SELECT,
        "--validation must be a share between 0 and 1 (0.2: a fifth), not 1.5",
    )


def test_an_unknown_family(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--family", "forest"],
        SELECT,
        "argument --family: invalid choice: 'forest' (choose from ",  # quotes: Python's own
    )
    run = run_cli(
        ["train", "--db", "duckdb:///x", "--label", "y", "--out", "m", "--family", "x", SELECT]
    )
    assert all(family in run.err for family in ("linear", "dnn", "wide_deep", "gbdt"))


def test_bad_hidden_units(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--hidden-units", "64,x"],
        SELECT,
        "--hidden-units takes layer widths separated by commas (64,32), not '64,x'",
    )


def test_a_class_weight_that_is_not_json(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--class-weight", "{yes: 2}"],
        SELECT,
        "--class-weight takes 'balanced' or a JSON object of label value to a weight > 0",
    )


def test_a_class_weight_of_an_unknown_label_value(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id", "--class-weight", '{"maybe": 2}'],
        SELECT,
        "--class-weight names 'maybe', which is not a label value ('no', 'yes')",
    )


def test_an_unknown_skip_column(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y", "--key", "id", "--skip", "zz"],
        SELECT,
        "--skip names 'zz', which the query does not return (columns: id, a, c, y)",
    )


def test_an_unstable_select(db: Path, tmp_path: Path) -> None:
    refused_train(
        db,
        tmp_path,
        ["--label", "y"],
        "SELECT id, a, c, y, random() AS r FROM t",
        "different value",
    )


def _old_model(folder: Path) -> Path:
    """A model folder of another format version."""
    folder.mkdir()
    (folder / "manifest.json").write_text(
        json.dumps({"format": "sqlfeed.ml.model", "format_version": 99, "task": "binary"})
    )
    return folder


def test_evaluate_a_model_of_another_format_version(db: Path, tmp_path: Path) -> None:
    model = _old_model(tmp_path / "old")
    run = run_cli(["evaluate", "--db", f"duckdb:///{db}", "--model", str(model)])
    assert_refused(
        run,
        f"{model} is a model of format 'sqlfeed.ml.model' version 99; this sqlfeed reads "
        "'sqlfeed.ml.model' version 1: train it again with this version",
    )
    assert [p.name for p in tmp_path.iterdir()] == ["old"]


def test_show_a_model_of_another_format_version(tmp_path: Path) -> None:
    model = _old_model(tmp_path / "old")
    assert_refused(run_cli(["model", "show", str(model)]), "version 99; this sqlfeed reads")


def test_show_a_folder_that_is_no_model(tmp_path: Path) -> None:
    assert_refused(
        run_cli(["model", "show", str(tmp_path)]),
        f"{tmp_path} is not a sqlfeed model folder (no manifest.json)",
    )


@pytest.mark.slow
def test_evaluate_a_select_that_lacks_a_feature(db: Path, tmp_path: Path) -> None:
    model = tmp_path / "m"
    url = f"duckdb:///{db}"
    trained = run_cli(
        [
            "train",
            "--db",
            url,
            "--label",
            "y",
            "--key",
            "id",
            "--out",
            str(model),
            "--family",
            "linear",
            "--epochs",
            "1",
            "--no-report",
            SELECT,
        ]
    )
    assert trained.code == 0, trained.err
    try:
        run = run_cli(["evaluate", "--db", url, "--model", str(model), "SELECT id, a, y FROM t"])
        assert_refused(
            run, "the SELECT lacks the model's feature column 'c' (string): it must return a, c"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
        assert _tables(db) == ["t"]
    finally:
        shutil.rmtree(model)
