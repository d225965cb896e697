"""``sqlfeed.ml.evaluate_table`` and ``sqlfeed evaluate --predictions``: the metrics of a
table of predictions, computed in each real engine, equal scikit-learn's on the same rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from sklearn import metrics as skm  # type: ignore[import-untyped]

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml import evaluate_table
from tests.helpers.cli import run_cli
from tests.helpers.engines import Engine

TOL = 1e-9


@pytest.fixture
def table(engine: Engine) -> Iterator[tuple[Engine, str]]:
    """A unique table name in the engine's schema, dropped after the test."""
    name = f"preds_{uuid.uuid4().hex[:8]}"
    yield engine, name
    engine.execute(f"DROP TABLE IF EXISTS {name}")
    engine.commit()


def _binary_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 300)
    # rounded: many ties between rows of both classes (AUC counts them half)
    p = np.clip(np.round(0.3 * y + 0.7 * rng.random(300), 2), 0, 1)
    p[:3] = [0.0, 1.0, 1.0]  # clipped in log loss
    y[:3] = [1, 0, 1]
    return y, (p > 0.5).astype(int), p


def test_binary_equals_sklearn(table: tuple[Engine, str]) -> None:
    engine, name = table
    y, pred, p = _binary_rows()
    engine.create_table(
        name,
        [("y", "bool"), ("pred", "int"), ("pred_prob", "float")],
        [(bool(a), int(b), float(c)) for a, b, c in zip(y, pred, p, strict=True)],
    )
    with engine.source() as source:
        got = evaluate_table(
            source, engine.qualify(name), label="y", predicted="pred", task="binary"
        )
    assert got["probability"] == "pred_prob"  # found by its default name
    assert got["rows"] == 300
    assert [int(c) for c in got["classes"]] == [0, 1]
    assert got["confusion_matrix"] == skm.confusion_matrix(y, pred).tolist()
    want = {
        "accuracy": skm.accuracy_score(y, pred),
        "precision": skm.precision_score(y, pred, zero_division=0),
        "recall": skm.recall_score(y, pred, zero_division=0),
        "f1": skm.f1_score(y, pred, zero_division=0),
        "log_loss": skm.log_loss(y, p),
        "roc_auc": skm.roc_auc_score(y, p),
        "pr_auc": skm.average_precision_score(y, p),
    }
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=TOL), key
    base = got["baseline"]
    assert base["accuracy"] == pytest.approx(max(np.mean(y), 1 - np.mean(y)), abs=TOL)
    assert base["log_loss"] == pytest.approx(skm.log_loss(y, np.full(300, np.mean(y))), abs=TOL)


def test_binary_without_probability(table: tuple[Engine, str]) -> None:
    engine, name = table
    y, pred, _ = _binary_rows()
    engine.create_table(
        name,
        [("y", "int"), ("guess", "int")],
        [(int(a), int(b)) for a, b in zip(y, pred, strict=True)],
    )
    with engine.source() as source:
        got = evaluate_table(
            source, engine.qualify(name), label="y", predicted="guess", task="binary"
        )
    assert got["probability"] is None
    assert got["log_loss"] is None
    assert got["roc_auc"] is None
    assert got["pr_auc"] is None
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=TOL)


def test_multiclass_equals_sklearn(table: tuple[Engine, str]) -> None:
    engine, name = table
    rng = np.random.default_rng(3)
    names = np.array(["ant", "bee", "cat", "dog"])
    y = names[rng.integers(0, 4, 250)]
    pred = np.where(rng.random(250) < 0.6, y, names[rng.integers(0, 3, 250)])  # no 'dog' guess
    engine.create_table(
        name,
        [("label", "text"), ("guess", "text")],
        list(zip(y.tolist(), pred.tolist(), strict=True)),
    )
    with engine.source() as source:
        got = evaluate_table(
            source, engine.qualify(name), label="label", predicted="guess", task="multiclass"
        )
    assert got["classes"] == names.tolist()
    assert got["confusion_matrix"] == skm.confusion_matrix(y, pred, labels=names).tolist()
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=TOL)
    assert got["macro_f1"] == pytest.approx(skm.f1_score(y, pred, average="macro"), abs=TOL)
    assert got["weighted_f1"] == pytest.approx(skm.f1_score(y, pred, average="weighted"), abs=TOL)
    assert got["log_loss"] is None


def test_regression_equals_sklearn(table: tuple[Engine, str]) -> None:
    engine, name = table
    rng = np.random.default_rng(5)
    y = np.round(1000 + rng.normal(0, 3, 200), 2)  # a large mean: SST by its two-level query
    pred = y + rng.normal(0, 1, 200)
    engine.create_table(
        name,
        [("amount", "decimal"), ("predicted_amount", "float")],
        [(Decimal(f"{a:.2f}"), float(b)) for a, b in zip(y, pred, strict=True)],
    )
    with engine.source() as source:
        got = evaluate_table(
            source,
            engine.qualify(name),
            label="amount",
            predicted="predicted_amount",
            task="regression",
        )
    assert got["rows"] == 200
    assert got["mae"] == pytest.approx(skm.mean_absolute_error(y, pred), abs=TOL)
    assert got["mse"] == pytest.approx(skm.mean_squared_error(y, pred), abs=TOL)
    assert got["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(y, pred)), abs=TOL)
    assert got["r2"] == pytest.approx(skm.r2_score(y, pred), abs=TOL)
    base = got["baseline"]
    assert base["prediction"] == pytest.approx(y.mean(), abs=TOL)
    assert base["mae"] == pytest.approx(np.mean(np.abs(y - y.mean())), abs=TOL)
    assert base["r2"] == 0.0


@pytest.mark.parametrize("column", ["y", "pred"])
def test_null_labels_and_predictions_refused(table: tuple[Engine, str], column: str) -> None:
    engine, name = table
    rows: list[tuple[Any, ...]] = [(i % 2, (i // 2) % 2) for i in range(10)]
    rows[4] = (None, 1) if column == "y" else (1, None)
    rows[7] = (None, 0) if column == "y" else (0, None)
    engine.create_table(name, [("y", "int"), ("pred", "int")], rows)
    with engine.source() as source, pytest.raises(InvalidArgumentError) as err:
        evaluate_table(source, engine.qualify(name), label="y", predicted="pred", task="binary")
    message = str(err.value)
    assert "2 of 10 rows" in message
    assert f"NULL {'label' if column == 'y' else 'predicted'}" in message
    assert "\n" not in message


def test_unknown_table_and_column(table: tuple[Engine, str]) -> None:
    engine, name = table
    engine.create_table(name, [("y", "int"), ("pred", "int")], [(0, 1), (1, 1)])
    with engine.source() as source:
        with pytest.raises(InvalidArgumentError, match="cannot read table"):
            evaluate_table(
                source, engine.qualify(name + "_x"), label="y", predicted="pred", task="binary"
            )
        with pytest.raises(InvalidArgumentError, match=r"no predicted column 'guess'.*y, pred"):
            evaluate_table(
                source, engine.qualify(name), label="y", predicted="guess", task="binary"
            )
        with pytest.raises(InvalidArgumentError, match="unknown task"):
            evaluate_table(source, engine.qualify(name), label="y", predicted="pred", task="x")


# -- the command line (DuckDB file) -------------------------------------------------------


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("table_metrics")) / "p.duckdb"
    y, pred, p = _binary_rows()
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE preds (y INTEGER, predicted_y INTEGER, predicted_y_prob DOUBLE)")
        con.executemany(
            "INSERT INTO preds VALUES (?, ?, ?)",
            [(int(a), int(b), float(c)) for a, b, c in zip(y, pred, p, strict=True)],
        )
    return f"duckdb:///{path}"


def _evaluate(db: str, *flags: str) -> Any:
    return run_cli(["evaluate", "--db", db, *flags])


def test_cli_json(db: str) -> None:
    y, _, p = _binary_rows()
    flags = ["--predictions", "preds", "--label", "y", "--predicted", "predicted_y"]
    run = _evaluate(db, *flags, "--task", "binary", "--format", "json")
    assert run.code == 0, run.err
    got = json.loads(run.out)
    assert got["task"] == "binary"
    assert got["probability"] == "predicted_y_prob"
    assert got["roc_auc"] == pytest.approx(skm.roc_auc_score(y, p), abs=TOL)
    text = _evaluate(db, *flags, "--task", "binary")
    assert text.code == 0, text.err
    assert "roc_auc" in text.out
    assert "labels' majority class" in text.out


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--task", "binary", "--model", "m"], "drop --model"),
        (["--task", "binary", "SELECT 1"], "drop a SQL argument"),
        (["--task", "nope"], "--task 'nope' is not a task"),
        ([], "needs --task"),
        (["--task", "binary", "--probability", "zz"], "no probability column 'zz'"),
    ],
)
def test_cli_bad_input(db: str, flags: list[str], says: str) -> None:
    base = ["--predictions", "preds", "--label", "y", "--predicted", "predicted_y"]
    run = _evaluate(db, *base, *flags)
    assert run.code == 2, run.err
    assert says in run.err, run.err
    assert run.err.count("\n") == 1, run.err


def test_cli_model_form_refuses_table_flags(db: str) -> None:
    run = _evaluate(db, "--model", "m", "--label", "y")
    assert run.code == 2
    assert "--label goes with --predictions" in run.err
    run = _evaluate(db, "SELECT 1")
    assert run.code == 2
    assert "--model DIR" in run.err


# -- multiclass with a probability column per class (issue 36 item 17) ------------------------


def _multiclass_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    names = np.array(["ant", "bee", "cat"])
    y = names[rng.integers(0, 3, 200)]
    proba = np.round(rng.dirichlet([1.0, 1.0, 1.0], 200), 3)
    proba[:, 2] = np.round(1 - proba[:, 0] - proba[:, 1], 3)
    proba = np.clip(proba, 0, 1)
    proba[0] = [0.0, 1.0, 0.0]  # a true class given 0: clipped as scikit-learn does
    y[0] = "ant"
    return names, y, names[np.argmax(proba, axis=1)], proba


def test_multiclass_log_loss_from_the_per_class_probability_columns(
    table: tuple[Engine, str],
) -> None:
    """Log loss was "-" though predict --proba writes a probability column per class."""
    engine, name = table
    names, y, pred, proba = _multiclass_rows()
    columns = [(f"predicted_y_prob_{c}", "float") for c in names]
    engine.create_table(
        name,
        [("y", "text"), ("predicted_y", "text"), *columns],
        [(a, b, *map(float, p)) for a, b, p in zip(y, pred, proba, strict=True)],
    )
    with engine.source() as source:
        got = evaluate_table(
            source, engine.qualify(name), label="y", predicted="predicted_y", task="multiclass"
        )
        named = evaluate_table(
            source,
            engine.qualify(name),
            label="y",
            predicted="predicted_y",
            task="multiclass",
            probability="predicted_y_prob_",
        )
    want = skm.log_loss(y, proba, labels=names)
    assert got["log_loss"] == pytest.approx(want, abs=TOL)
    assert named["log_loss"] == pytest.approx(want, abs=TOL)
    assert got["probability"] == "predicted_y_prob_<class>"
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=TOL)


def test_multiclass_probability_columns_are_checked(table: tuple[Engine, str]) -> None:
    engine, name = table
    names, y, pred, proba = _multiclass_rows()
    proba[5, 1] = None
    engine.create_table(
        name,
        [("y", "text"), ("p", "text"), *((f"p_prob_{c}", "float") for c in names)],
        [
            (a, b, *(None if np.isnan(v) else float(v) for v in q))
            for a, b, q in zip(y, pred, proba, strict=True)
        ],
    )
    with engine.source() as source:
        with pytest.raises(InvalidArgumentError, match=r"1 of 200 rows .* NULL probability"):
            evaluate_table(
                source, engine.qualify(name), label="y", predicted="p", task="multiclass"
            )
        with pytest.raises(InvalidArgumentError, match="no column named q_<class>"):
            evaluate_table(
                source,
                engine.qualify(name),
                label="y",
                predicted="p",
                task="multiclass",
                probability="q_",
            )


def test_cli_multiclass_prints_the_log_loss(tmp_path: Path) -> None:
    names, y, pred, proba = _multiclass_rows()
    path = tmp_path / "m.duckdb"
    with duckdb.connect(str(path)) as con:
        probs = ", ".join(f'"predicted_y_prob_{c}" DOUBLE' for c in names)
        con.execute(f"CREATE TABLE preds (y TEXT, predicted_y TEXT, {probs})")
        con.executemany(
            "INSERT INTO preds VALUES (?, ?, ?, ?, ?)",
            [(a, b, *map(float, p)) for a, b, p in zip(y, pred, proba, strict=True)],
        )
    flags = ["--predictions", "preds", "--label", "y", "--predicted", "predicted_y"]
    run = _evaluate(f"duckdb:///{path}", *flags, "--task", "multiclass")
    assert run.code == 0, run.err
    (line,) = [line for line in run.out.splitlines() if line.startswith("log_loss")]
    assert line.split()[1] == f"{skm.log_loss(y, proba, labels=names):.4f}", run.out
