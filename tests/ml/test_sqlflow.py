"""SQLFlow's statements: the split with sqlglot's tokenizer, the clause grammar, the mapping
onto TrainOptions, and one-line errors that say where."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.cli.main import COMMANDS
from sqlfeed.errors import InvalidArgumentError, ParseError, UnsupportedError
from sqlfeed.ml import train
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.sqlflow import FAMILIES, Statement, parse_statement
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import ENGINES, MYSQL_URL, POSTGRES_URL

IRIS = (
    "SELECT * FROM iris TO TRAIN DNNClassifier "
    "WITH model.hidden_units=[10, 10], train.epoch=10 "
    "COLUMN sepal_length, petal_length LABEL class INTO my_model"
)


def test_the_language_guides_train_statement() -> None:
    statement = parse_statement(IRIS)
    assert statement.kind == "train"
    assert statement.select == "SELECT * FROM iris"
    assert (statement.family, statement.task) == ("dnn", "classification")
    assert statement.classifier
    assert statement.label == "class"
    assert statement.model_path == "my_model"
    assert statement.options == {
        "hidden_units": (10, 10),
        "epochs": 10,
        "features": ("sepal_length", "petal_length"),
    }


def test_train_options_are_trainoptions_with_the_with_values() -> None:
    text = (
        "SELECT a, b, y FROM t TO TRAIN wide_deep WITH model.hidden_units=[64, 32], "
        "train.epoch=5, train.batch_size=128, optimizer.learning_rate=0.01, train.seed=7, "
        "validation.fraction=0.25, validation.key=id, model.top_k=20, model.buckets=8 "
        "LABEL y INTO 'models/m'"
    )
    statement = parse_statement(text)
    options = statement.train_options(overwrite=True, checkpoint_dir="ck")
    assert options == TrainOptions(
        family="wide_deep",
        task="auto",
        hidden_units=(64, 32),
        epochs=5,
        batch_size=128,
        learning_rate=0.01,
        seed=7,
        validation=0.25,
        key="id",
        top_k=20,
        buckets=8,
        overwrite=True,
        checkpoint_dir="ck",
    )
    assert statement.model_path == "models/m"


def test_gbdt_keys_and_xgboost_names() -> None:
    statement = parse_statement(
        'SELECT * FROM t TO TRAIN xgboost.gbtree WITH objective="multi:softprob", '
        "train.num_boost_round=30, eta=0.4, max_depth=4 LABEL y INTO m"
    )
    assert (statement.family, statement.task) == ("gbdt", "multiclass")
    assert statement.options == {"trees": 30, "learning_rate": 0.4, "max_depth": 4}
    statement = parse_statement(
        "SELECT * FROM t TO TRAIN BoostedTreesRegressor WITH model.n_estimators=50, "
        "model.max_depth=3 LABEL y INTO m"
    )
    assert (statement.family, statement.task) == ("gbdt", "regression")
    assert statement.train_options().trees == 50


@pytest.mark.parametrize(
    ("name", "family", "task", "classifier"),
    [
        ("dnn", "dnn", "auto", False),
        ("LINEAR", "linear", "auto", False),
        ("Wide_Deep", "wide_deep", "auto", False),
        ("gbdt", "gbdt", "auto", False),
        ("DNNClassifier", "dnn", "classification", True),
        ("dnnregressor", "dnn", "regression", False),
        ("LinearClassifier", "linear", "classification", True),
        ("LinearRegressor", "linear", "regression", False),
        ("DNNLinearCombinedClassifier", "wide_deep", "classification", True),
        ("DNNLinearCombinedRegressor", "wide_deep", "regression", False),
        ("BoostedTreesClassifier", "gbdt", "classification", True),
        ("BoostedTreesRegressor", "gbdt", "regression", False),
        ("XGBoost.GBTree", "gbdt", "auto", False),
    ],
)
def test_model_names_map_onto_families(name: str, family: str, task: str, classifier: bool) -> None:
    statement = parse_statement(f"SELECT * FROM t TO TRAIN {name} LABEL y INTO m")
    assert (statement.family, statement.task, statement.classifier) == (family, task, classifier)
    assert statement.train_options().family == family


def test_every_family_name_is_tested() -> None:
    assert len(FAMILIES) == 13


@pytest.mark.parametrize(("n", "task"), [(2, "binary"), (3, "multiclass"), (10, "multiclass")])
def test_n_classes_makes_a_classifier_binary_or_multiclass(n: int, task: str) -> None:
    statement = parse_statement(
        f"SELECT * FROM t TO TRAIN DNNClassifier WITH model.n_classes={n} LABEL y INTO m"
    )
    assert (statement.task, statement.n_classes) == (task, n)
    assert "n_classes" not in statement.options
    assert statement.train_options().task == task


def test_a_classifier_refuses_a_float_label_and_takes_others() -> None:
    classifier = parse_statement("SELECT * FROM t TO TRAIN LinearClassifier LABEL y INTO m")
    with pytest.raises(InvalidArgumentError, match=r"LABEL y is double: use a \.\.\.Regressor"):
        classifier.check_label_type(pa.float64())
    for fine in (pa.int64(), pa.string(), pa.bool_()):
        classifier.check_label_type(fine)
    parse_statement("SELECT * FROM t TO TRAIN dnn LABEL y INTO m").check_label_type(pa.float64())


def test_the_split_ignores_to_train_in_strings_names_comments_and_parentheses() -> None:
    select = (
        "SELECT a, \"TO TRAIN dnn\" AS b, 'x TO TRAIN dnn' AS c -- TO TRAIN dnn\n"
        "FROM t /* TO TRAIN dnn LABEL y INTO m */\n"
        "WHERE a IN (SELECT to FROM u WHERE s = 'TO PREDICT')"
    )
    statement = parse_statement(f"{select}\n  TO TRAIN dnn LABEL y INTO m")
    assert statement.select == select
    assert statement.kind == "train"


def test_lowercase_keywords_newlines_and_a_trailing_semicolon() -> None:
    statement = parse_statement("select y, x from t\nto train linear\nlabel y\ninto m;")
    assert (statement.select, statement.family, statement.model_path) == (
        "select y, x from t",
        "linear",
        "m",
    )


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite", "duckdb"])
def test_the_split_uses_the_engines_tokenizer(dialect: str) -> None:
    quote = "`" if dialect == "mysql" else '"'
    select = f"SELECT {quote}TO TRAIN{quote} AS x, y FROM t"
    statement = parse_statement(
        f"{select} TO TRAIN dnn WITH model.hidden_units=[8, 4] LABEL y INTO m", dialect
    )
    assert statement.select == select
    assert statement.options == {"hidden_units": (8, 4)}


def test_evaluate_statement() -> None:
    statement = parse_statement(
        'SELECT * FROM iris TO EVALUATE my_model WITH validation.metrics="Accuracy,AUC" '
        "LABEL class INTO iris_metrics"
    )
    assert statement == Statement(
        kind="evaluate",
        select="SELECT * FROM iris",
        label="class",
        model_path="my_model",
        into="iris_metrics",
        metrics=("Accuracy", "AUC"),
    )
    plain = parse_statement("SELECT * FROM t TO EVALUATE 'models/m' LABEL y")
    assert (plain.model_path, plain.label, plain.into, plain.metrics) == (
        "models/m",
        "y",
        None,
        None,
    )


def test_predict_statement() -> None:
    statement = parse_statement("SELECT * FROM iris TO PREDICT iris_out.class USING my_model")
    assert (statement.kind, statement.predict_column, statement.model_path) == (
        "predict",
        "iris_out.class",
        "my_model",
    )
    bare = parse_statement("SELECT * FROM t TO PREDICT class USING 'models/m'")
    assert (bare.predict_column, bare.model_path) == ("class", "models/m")
    with pytest.raises(InvalidArgumentError, match="trains nothing"):
        bare.train_options()


BAD = {
    "plain_select": ("SELECT a FROM t", ParseError, "no TO TRAIN, TO EVALUATE or TO PREDICT"),
    "empty_select": ("TO TRAIN dnn LABEL y INTO m", ParseError, "nothing before TO"),
    "comment_only_select": ("/* x */ TO TRAIN dnn LABEL y INTO m", ParseError, "nothing before"),
    "explain": (
        "SELECT * FROM t\nTO EXPLAIN m USING TreeExplainer",
        UnsupportedError,
        "TO EXPLAIN is not supported.* at line 2, column 4",
    ),
    "unknown_model": (
        "SELECT * FROM t TO TRAIN DNNClasifier LABEL y INTO m",
        InvalidArgumentError,
        "unknown model 'DNNClasifier': did you mean DNNClassifier.* at line 1, column 26",
    ),
    "unknown_key": (
        "SELECT * FROM t TO TRAIN dnn WITH train.epochs=3 LABEL y INTO m",
        InvalidArgumentError,
        r"unknown WITH key 'train.epochs': did you mean train.epoch\? \(known: "
        r"model.hidden_units, train.epoch, .*\) at line 1, column 35",
    ),
    "missing_label": (
        "SELECT * FROM t TO TRAIN dnn INTO m",
        ParseError,
        "TO TRAIN needs LABEL <column>: found 'INTO' at line 1, column 30",
    ),
    "missing_into": (
        "SELECT * FROM t TO TRAIN dnn LABEL y",
        ParseError,
        "expected INTO <model path> after LABEL y, found the end of the statement",
    ),
    "evaluate_without_label": (
        "SELECT * FROM t TO EVALUATE m",
        ParseError,
        "TO EVALUATE needs LABEL <column>",
    ),
    "predict_without_using": (
        "SELECT * FROM t TO PREDICT t.y",
        ParseError,
        "expected USING <model path> after TO PREDICT t.y",
    ),
    "float_epochs": (
        "SELECT * FROM t TO TRAIN dnn WITH train.epoch=1.5 LABEL y INTO m",
        InvalidArgumentError,
        "train.epoch takes an integer, not 1.5 at line 1, column 47",
    ),
    "units_not_a_list": (
        "SELECT * FROM t TO TRAIN dnn WITH model.hidden_units=64 LABEL y INTO m",
        InvalidArgumentError,
        r"model.hidden_units takes a list of integers like \[64, 32\], not 64",
    ),
    "unclosed_list": (
        "SELECT * FROM t TO TRAIN dnn WITH model.hidden_units=[64, 32 LABEL y INTO m",
        ParseError,
        "expected ',' or ']' in a list, found 'LABEL'",
    ),
    "key_twice": (
        "SELECT * FROM t TO TRAIN dnn WITH model.learning_rate=0.1, "
        "optimizer.learning_rate=0.2 LABEL y INTO m",
        InvalidArgumentError,
        "WITH sets learning_rate twice",
    ),
    "feature_column_function": (
        "SELECT * FROM t TO TRAIN dnn COLUMN NUMERIC(a, 1) LABEL y INTO m",
        InvalidArgumentError,
        r"COLUMN takes column names, not NUMERIC\(\.\.\.\)",
    ),
    "trailing_words": (
        "SELECT * FROM t TO TRAIN dnn LABEL y INTO m USING x",
        ParseError,
        "unexpected 'USING' after the end of the statement",
    ),
    "semicolon_before_to": (
        "SELECT * FROM t; TO TRAIN dnn LABEL y INTO m",
        ParseError,
        "the SELECT ends at ';' before its TO clause",
    ),
    "second_statement": (
        "SELECT * FROM t TO TRAIN dnn LABEL y INTO m; DROP TABLE t",
        ParseError,
        "the statement ends at ';' with more after it",
    ),
    "n_classes_on_a_regressor": (
        "SELECT * FROM t TO TRAIN DNNRegressor WITH model.n_classes=3 LABEL y INTO m",
        InvalidArgumentError,
        "n_classes is for a classifier, not a regression",
    ),
    "one_class": (
        "SELECT * FROM t TO TRAIN dnn WITH model.n_classes=1 LABEL y INTO m",
        InvalidArgumentError,
        "n_classes must be at least 2",
    ),
    "objective_contradicts": (
        'SELECT * FROM t TO TRAIN BoostedTreesRegressor WITH objective="binary:logistic" '
        "LABEL y INTO m",
        InvalidArgumentError,
        "objective 'binary:logistic' contradicts the model name",
    ),
    "empty_path": ("SELECT * FROM t TO TRAIN dnn LABEL y INTO ''", ParseError, "empty model path"),
    "predict_with_key": (
        "SELECT * FROM t TO PREDICT t.y USING m WITH predict.batch=1",
        InvalidArgumentError,
        r"unknown WITH key 'predict.batch': \(known: none\)",
    ),
    "unterminated_string": (
        "SELECT * FROM t TO TRAIN dnn LABEL y INTO 'm",
        ParseError,
        "cannot split the statement",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_statements_are_one_line_errors_that_say_where(case: str) -> None:
    text, error, message = BAD[case]
    with pytest.raises(error, match=message) as raised:
        parse_statement(text)
    assert "\n" not in str(raised.value)


def test_trainoptions_refuses_what_with_gave() -> None:
    statement = parse_statement("SELECT * FROM t TO TRAIN dnn WITH train.epoch=0 LABEL y INTO m")
    assert statement.options == {"epochs": 0}
    with pytest.raises(InvalidArgumentError, match="epochs must be an integer > 0"):
        statement.train_options()


# -- TO PREDICT on every engine ----------------------------------------------------------


def _churn_rows(count: int) -> pa.Table:
    rng = np.random.default_rng(3)
    x = rng.normal(size=count)
    return pa.table(
        {
            "id": pa.array(range(1, count + 1), pa.int64()),
            "x": x,
            "churned": ["yes" if v > 0.2 else "no" for v in x],
        }
    )


@pytest.fixture(scope="module")
def churn_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A linear classifier of ``churned`` from ``x`` (trained once, on DuckDB)."""
    folder = tmp_path_factory.mktemp("sqlflow") / "churn"
    db = f"duckdb:///{folder.parent / 'train.duckdb'}"
    sqlfeed.write_table(_churn_rows(200), db, "t")
    train("SELECT id, x, churned FROM t", db, label="churned", out=str(folder), key="id", epochs=1)
    return folder


@pytest.fixture
def churn_input(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(URL, input table, output table) on the engine ``request.param``; dropped after."""
    name = request.param
    if name in ("postgres", "mysql"):
        get_engine(name)  # skips (or fails under CI=true) when the server is down
    url = {
        "duckdb": f"duckdb:///{tmp_path / 'p.duckdb'}",
        "sqlite": f"sqlite:///{tmp_path / 'p.db'}",
        "postgres": POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1),
        "mysql": MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1),
    }[name]
    suffix = uuid.uuid4().hex[:8]
    table, out = f"sfp_in_{suffix}", f"sfp_out_{suffix}"
    sqlfeed.write_table(_churn_rows(60), url, table)
    yield url, table, out
    with sqlfeed.connect(url) as source:
        for name in (table, out):
            source.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.parametrize("churn_input", ENGINES, indirect=True)
def test_to_predict_keeps_a_selected_column_of_the_predicted_name(
    churn_input: tuple[str, str, str], churn_model: Path
) -> None:
    """Issue 36 item 4: ``TO PREDICT out.churned`` over a SELECT of ``churned`` wrote the
    prediction into ``churned``: the true labels were gone, without a word."""
    url, table, out = churn_input
    statement = f"SELECT id, x, churned FROM {table} TO PREDICT {out}.churned USING '{churn_model}'"
    run = run_cli(["sql", "--db", url, statement])
    assert run.code == 0, run.err
    assert run.out == f"60 predictions in {out}.predicted_churned\n"
    assert run.err == (
        f"sqlfeed: warning: TO PREDICT {out}.churned: the SELECT has a column churned, kept as "
        "it is; the prediction is predicted_churned\n"
    )
    with sqlfeed.connect(url) as source:
        found = source.arrow(f"SELECT * FROM {out}").sort_by("id")
    assert [n for n in found.column_names if not n.startswith("_sqlfeed")] == [
        "id",
        "x",
        "churned",
        "predicted_churned",
        "predicted_churned_prob",
    ]
    assert found["churned"].to_pylist() == _churn_rows(60)["churned"].to_pylist()
    assert set(found["predicted_churned"].to_pylist()) <= {"yes", "no"}


def test_to_predict_matches_the_selected_column_case_aside(
    churn_model: Path, tmp_path: Path
) -> None:
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    sqlfeed.write_table(_churn_rows(30), url, "t")
    statement = f"SELECT id, x, churned FROM t TO PREDICT o.CHURNED USING '{churn_model}'"
    run = run_cli(["sql", "--db", url, "--format", "json", statement])
    assert run.code == 0, run.err
    assert json.loads(run.out)["column"] == "predicted_CHURNED"
    with sqlfeed.connect(url) as source:
        found = source.arrow("SELECT churned, predicted_CHURNED FROM o ORDER BY id")
    assert found["churned"].to_pylist() == _churn_rows(30)["churned"].to_pylist()


def test_to_predict_names_the_prediction_as_written_when_nothing_is_selected_so(
    churn_model: Path, tmp_path: Path
) -> None:
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    sqlfeed.write_table(_churn_rows(30), url, "t")
    statement = f"SELECT id, x FROM t TO PREDICT o.churned USING '{churn_model}'"
    run = run_cli(["sql", "--db", url, statement])
    assert run.code == 0, run.err
    assert run.err == ""
    with sqlfeed.connect(url) as source:
        columns = source.output_columns("SELECT * FROM o")
    assert columns[:4] == ["id", "x", "churned", "churned_prob"]


def test_a_plain_select_is_pointed_to_commands_that_exist() -> None:
    """Issue 36 item 14: ``sqlfeed sql 'SELECT 1'`` named a ``sqlfeed query`` command."""
    run = run_cli(["sql", "--db", "duckdb:///x.duckdb", "SELECT 1"])
    assert run.code == 2
    named = re.findall(r"sqlfeed (\w+)", run.err.removeprefix("sqlfeed: error: "))
    assert named
    commands = {name for _, names in COMMANDS for name, _ in names}
    assert set(named) <= commands, run.err
