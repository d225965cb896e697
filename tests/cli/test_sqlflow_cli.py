"""``sqlfeed sql``: SQLFlow's statements on the command line.

The bad-input tests point --db at a port nothing listens on: exit code 2 with the
statement's own error proves it was refused before any connection was made.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from sqlfeed.cli import main as cli_main
from sqlfeed.cli import sqlflow as cli_sqlflow
from sqlfeed.dialects import InvalidArgumentError
from tests.helpers.cli import Run, run_cli

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:9/test"


@pytest.fixture(autouse=True)
def _sql_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``sql`` command in the command table (until sqlfeed.cli.main lists it)."""
    if not any(module == "sqlflow" for module, _ in cli_main.COMMANDS):
        entry = ("sqlflow", (("sql", cli_sqlflow.HELP),))
        monkeypatch.setattr(cli_main, "COMMANDS", (*cli_main.COMMANDS, entry))


def assert_refused(run: Run, expected: str) -> None:
    assert run.code == 2, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("sqlfeed: error: "), run.err
    assert expected in lines[0], run.err
    assert run.out == ""


BAD = {
    "plain_select": ("SELECT a FROM t", "no TO TRAIN, TO EVALUATE or TO PREDICT clause"),
    "empty_select": ("TO TRAIN dnn LABEL y INTO m", "nothing before TO"),
    "missing_label": ("SELECT a FROM t TO TRAIN dnn INTO m", "TO TRAIN needs LABEL <column>"),
    "missing_into": ("SELECT a, y FROM t TO TRAIN dnn LABEL y", "expected INTO <model path>"),
    "unknown_key": (
        "SELECT a, y FROM t TO TRAIN dnn WITH train.epochs=2 LABEL y INTO m",
        "unknown WITH key 'train.epochs': did you mean train.epoch?",
    ),
    "unknown_model": (
        "SELECT a, y FROM t TO TRAIN linearregresor LABEL y INTO m",
        "did you mean LinearRegressor?",
    ),
    "explain": ("SELECT a FROM t TO EXPLAIN m USING TreeExplainer", "TO EXPLAIN is not supported"),
    "select_not_a_query": ("DELETE FROM t TO TRAIN dnn LABEL y INTO m", "not a query"),
    "select_syntax": ("SELECT a FORM t TO TRAIN dnn LABEL y INTO m", "did you mean FROM?"),
    "select_unstable": (
        "SELECT a, random() AS y FROM t TO TRAIN dnn LABEL y INTO m",
        "different value",
    ),
    "bad_option_value": (
        "SELECT a, y FROM t TO TRAIN dnn WITH validation.fraction=1.5 LABEL y INTO m",
        "validation must be a share between 0 and 1",
    ),
    "predict_needs_a_model_folder": (
        "SELECT * FROM t TO PREDICT t.y USING m",
        "USING m is not a model folder (no manifest.json)",
    ),
    "predict_needs_a_table": (
        "SELECT * FROM t TO PREDICT y USING m",
        "TO PREDICT y: name the result table and column, TO PREDICT table.col",
    ),
    "predict_checks_the_rest_first": (
        "SELECT * FROM t TO PREDICT t.y USING m WITH x=1",
        "unknown WITH key 'x'",
    ),
    "predict_checks_the_select_first": (
        "SELECT * FROM t; DROP TABLE t TO PREDICT t.y USING m",
        "the SELECT ends at ';'",
    ),
    "evaluate_into_a_table": (
        "SELECT * FROM t TO EVALUATE m LABEL y INTO metrics",
        "writes no table; drop INTO",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_statements_are_one_line_before_connecting(case: str) -> None:
    statement, expected = BAD[case]
    assert_refused(run_cli(["sql", "--db", UNREACHABLE, statement]), expected)


def test_evaluate_refuses_training_flags() -> None:
    run = run_cli(
        ["sql", "--db", UNREACHABLE, "--overwrite", "SELECT * FROM t TO EVALUATE m LABEL y"]
    )
    assert_refused(run, "--overwrite is for TO TRAIN; TO EVALUATE writes nothing")


def test_an_existing_model_folder_needs_overwrite(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "keep").write_text("old model")
    statement = f"SELECT a, y FROM t TO TRAIN linear LABEL y INTO '{folder}'"
    assert_refused(run_cli(["sql", "--db", UNREACHABLE, statement]), "exists; pass --overwrite")
    assert (folder / "keep").read_text() == "old model"


def test_statement_from_a_file_and_stdin(tmp_path: Path) -> None:
    path = tmp_path / "s.sql"
    path.write_text("SELECT * FROM t\nTO PREDICT t.y USING m;\n")
    assert_refused(run_cli(["sql", "--db", UNREACHABLE, f"@{path}"]), "not a model folder")
    run = run_cli(["sql", "--db", UNREACHABLE, "-"], stdin="SELECT a FROM t TO TRAIN dnn")
    assert_refused(run, "found the end of the statement")


def test_help_lists_the_command() -> None:
    run = run_cli(["--help"])
    assert run.code == 0
    assert "sql" in run.out
    assert cli_sqlflow.HELP[:40] in " ".join(run.out.split())


def test_validation_metrics_keep_the_named_ones() -> None:
    result = {
        "task": "binary",
        "accuracy": 0.9,
        "roc_auc": 0.95,
        "f1": 0.8,
        "rows": 10,
        "confusion_matrix": [[5, 0], [1, 4]],
        "baseline": {"accuracy": 0.6, "roc_auc": 0.5, "f1": 0.0, "prediction": "no"},
    }
    keep = cli_sqlflow.metric_names(("Accuracy", "AUC"), "binary")
    assert keep == ["accuracy", "roc_auc"]
    assert cli_sqlflow.chosen_metrics(result, keep) == {
        "task": "binary",
        "accuracy": 0.9,
        "roc_auc": 0.95,
        "rows": 10,
        "confusion_matrix": [[5, 0], [1, 4]],
        "baseline": {"accuracy": 0.6, "roc_auc": 0.5, "prediction": "no"},
    }
    with pytest.raises(
        InvalidArgumentError,
        match=r"names 'AUC', which a regression model has not \(metrics: mae, rmse, r2\)",
    ):
        cli_sqlflow.metric_names(("AUC",), "regression")


@pytest.fixture
def tiny_db(tmp_path: Path) -> str:
    """A DuckDB file with 300 rows whose label follows its features."""
    path = tmp_path / "tiny.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE tiny AS SELECT i AS id, (i % 17) / 17.0 AS a, "
            "CASE WHEN i % 3 = 0 THEN 'red' ELSE 'blue' END AS c, "
            "CASE WHEN i % 17 > 8 THEN 'yes' ELSE 'no' END AS y FROM range(300) r(i)"
        )
    return f"duckdb:///{path}"


@pytest.mark.slow
def test_train_then_evaluate_end_to_end(tiny_db: str, tmp_path: Path) -> None:
    model = tmp_path / "m"
    train = (
        "SELECT id, a, c, y FROM tiny TO TRAIN LinearClassifier "
        "WITH train.epoch=2, train.batch_size=32, validation.key=id, train.seed=1 "
        f"COLUMN a, c LABEL y INTO '{model}'"
    )
    run = run_cli(["sql", "--db", tiny_db, "--format", "json", train])
    assert run.code == 0, run.err
    summary = json.loads(run.out)
    assert (summary["task"], summary["family"], summary["label"]) == ("binary", "linear", "y")
    assert (model / "manifest.json").is_file() or any(model.iterdir())

    again = run_cli(["sql", "--db", tiny_db, train])
    assert_refused(again, "exists; pass --overwrite")

    evaluate = f"SELECT a, c, y FROM tiny TO EVALUATE '{model}' LABEL y"
    run = run_cli(["sql", "--db", tiny_db, "--format", "json", evaluate])
    assert run.code == 0, run.err
    metrics = json.loads(run.out)
    assert metrics["rows"] == 300
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert "baseline" in metrics

    chosen_statement = (
        f"SELECT a, c, y FROM tiny TO EVALUATE '{model}' WITH validation.metrics=\"AUC\" LABEL y"
    )
    chosen = run_cli(
        [
            "sql",
            "--db",
            tiny_db,
            "--format",
            "json",
            chosen_statement,
        ]
    )
    assert chosen.code == 0, chosen.err
    shown = json.loads(chosen.out)
    assert "roc_auc" in shown
    assert not {"accuracy", "f1", "log_loss"} & (set(shown) | set(shown["baseline"]))
    text = run_cli(["sql", "--db", tiny_db, chosen_statement])
    assert text.code == 0, text.err
    assert "roc_auc" in text.out
    assert "precision" not in text.out

    wrong = run_cli(
        ["sql", "--db", tiny_db, f"SELECT a, c FROM tiny TO EVALUATE '{model}' LABEL c"]
    )
    assert_refused(wrong, "was trained on LABEL y")
