"""Labels, features and model folders where a training could go silently wrong.

Each test is a case a review found: a label typed differently on another engine, a
SQLFlow classifier on an integer label of many values, a label value only in the
validation split, a label named like a SQL function, a text value spelled as Keras's OOV
token, an overwrite killed between its two renames, an integer amount unique by chance.
"""

from __future__ import annotations

import decimal
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.ml.artifact import load, recover, write_folder
from sqlfeed.ml.labels import class_indices
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.trainer import prepare
from tests.conftest import get_engine

ROWS = 400


@pytest.fixture
def duck(tmp_path: Path) -> Iterator[Any]:
    """A DuckDB file with table ``t``: an id, two numbers, a text column, several labels."""
    import duckdb

    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            f"""
            CREATE TABLE t AS SELECT
              range AS id,
              (range * 37 % 101) / 10.0 AS x,
              range * 7919 % 100003 AS cents,
              ['red', 'green', '[UNK]', 'blue'][range % 4 + 1] AS c,
              (range % 25)::INTEGER AS y25,
              CAST(range % 2 AS DOUBLE) AS yd,
              (range % 4) / 2.0 AS yfrac,
              (range % 3 = 0) AS yb
            FROM range({ROWS})
            """
        )
    source = sqlfeed.connect(f"duckdb:///{path}")
    yield source
    source.close()


def _train(query: str, source: Any, label: str, out: Path, **fields: Any) -> Any:
    """``sqlfeed.ml.train`` split by ``id``, without the HTML report."""
    return sqlfeed.ml.train(query, source, label=label, out=out, key="id", report=False, **fields)


def _prepare(source: Any, query: str, label: str, **fields: Any) -> Any:
    options = TrainOptions(**{"key": "id", "report": False, **fields})
    return prepare(query, source, label, options, lambda _line: None)


# -- labels ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "classes", "expected"),
    [
        (pa.array([1, 0, 1]), [False, True], [1, 0, 1]),  # SQLite/MariaDB's booleans
        (pa.array([True, False]), [0, 1], [1, 0]),  # a boolean where 0/1 were trained
        (pa.array([decimal.Decimal(2), decimal.Decimal(0)]), [0, 2], [1, 0]),  # numeric
        (pa.array([1.0, 0.0]), [0, 1], [1, 0]),  # a double of whole numbers
        (pa.array([-3, 7]), [-3, 7], [0, 1]),
        (pa.array(["b", "a"], pa.large_string()), ["a", "b"], [1, 0]),
    ],
)
def test_a_class_is_matched_by_its_value_whatever_the_engines_type(
    column: pa.Array, classes: list[Any], expected: list[int]
) -> None:
    assert class_indices(column, classes, "y").tolist() == expected


def test_a_label_value_outside_the_classes_is_named_as_the_engine_gave_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"holds 3, which is not one of"):
        class_indices(pa.array([1, 3]), [False, True], "y")
    with pytest.raises(InvalidArgumentError, match=r"is string here, and the model's classes"):
        class_indices(pa.array(["1"]), [0, 1], "y")


def test_a_classifier_on_an_integer_label_of_many_values_is_never_a_regression(
    duck: Any,
) -> None:
    data = _prepare(duck, "SELECT id, x, c, y25 FROM t", "y25", task="classification")
    assert data.task == "multiclass"
    assert data.classes == list(range(25))
    assert _prepare(duck, "SELECT id, x, c, y25 FROM t", "y25").task == "regression"  # auto


def test_a_double_label_of_whole_numbers_is_a_class_label_and_trains(
    duck: Any, tmp_path: Path
) -> None:
    pytest.importorskip("tensorflow")
    model = _train(
        "SELECT id, x, c, yd FROM t",
        duck,
        "yd",
        tmp_path / "m",
        task="binary",
        family="linear",
        epochs=2,
    )
    assert model.classes == [0, 1]
    assert model.manifest["metrics"]["validation"]["rows"] == model.manifest["rows"]["validation"]


def test_a_fractional_class_label_is_refused_before_training(duck: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"holds 0\.5: a class label is text"):
        _prepare(duck, "SELECT id, x, yfrac FROM t", "yfrac", task="multiclass")


def test_a_label_value_only_in_the_validation_split_is_refused_before_training(
    duck: Any,
) -> None:
    data = _prepare(duck, "SELECT id, x, c FROM t", "c")
    rare = next(i for i in range(ROWS) if data.split.bucket(i) < data.split.threshold)
    query = f"SELECT id, x, CASE WHEN id = {rare} THEN 'rare' ELSE c END AS c2 FROM t"
    with pytest.raises(InvalidArgumentError, match=r"is 'rare' in 1 validation rows and in no"):
        _prepare(duck, query, "c2")


@pytest.mark.parametrize("name", ["user", "Is Churned"])
def test_a_label_named_like_a_function_or_with_a_space_is_counted_as_itself(
    name: str,
) -> None:
    engine = get_engine("postgres")
    table = engine.qualify(f"ml_label_{abs(hash(name)) % 10**6}")
    engine.execute(f"DROP TABLE IF EXISTS {table}")
    engine.execute(
        f'CREATE TABLE {table} AS SELECT g AS id, g * 0.5 AS x, g % 2 = 0 AS "{name}" '
        "FROM generate_series(0, 99) AS g"
    )
    source = engine.source()
    try:
        data = _prepare(source, f"SELECT * FROM {table}", name)
        assert data.task == "binary"
        assert data.classes == [False, True]
        assert sum(data.class_counts.values()) == data.rows["training"]
    finally:
        source.close()
        engine.execute(f"DROP TABLE IF EXISTS {table}")


# -- features -------------------------------------------------------------------------


def test_an_integer_amount_unique_by_chance_is_a_feature_a_row_number_is_not(
    duck: Any,
) -> None:
    data = _prepare(duck, "SELECT id, x, cents, yb FROM t", "yb")
    assert "cents" in data.feature_names
    with pytest.raises(InvalidArgumentError, match=r"column 'rownum' holds another value"):
        _prepare(duck, "SELECT id, id + 1000 AS rownum, x, yb FROM t", "yb")


def test_a_text_value_spelled_as_kerass_oov_token_keeps_its_own_index(
    duck: Any, tmp_path: Path
) -> None:
    pytest.importorskip("tensorflow")
    model = _train("SELECT id, c, yb FROM t", duck, "yb", tmp_path / "m", family="linear", epochs=3)
    vocabulary = model.features[0].transform["vocabulary"]
    assert "[UNK]" in vocabulary
    rows = pa.table({"c": ["[UNK]", "never seen", "red"], "yb": [True, False, True]})
    unk, unseen, red = model.predict_batch(rows)
    assert unk != unseen  # "[UNK]" is a value of its own, not the out-of-vocabulary index
    assert red != unseen


def test_gbdts_manifest_says_nulls_are_missing_and_values_unscaled(
    duck: Any, tmp_path: Path
) -> None:
    pytest.importorskip("xgboost")
    model = _train("SELECT id, x, c, yb FROM t", duck, "yb", tmp_path / "m", family="gbdt", trees=5)
    x = next(f for f in model.features if f.name == "x")
    assert "fill" not in x.transform
    assert "mask" not in x.transform
    assert "missing" in x.transform["null"]


# -- model folders --------------------------------------------------------------------


def _fake_model(folder: Path, marker: str) -> None:
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"marker": marker}))


def test_an_overwrite_killed_between_its_renames_gets_the_old_model_back(tmp_path: Path) -> None:
    out = tmp_path / "m"
    _fake_model(out, "old")
    aside = tmp_path / ".m.old-12345678"
    out.rename(aside)  # killed here: out missing, the old model aside
    recover(out)
    assert json.loads((out / "manifest.json").read_text())["marker"] == "old"
    assert not aside.exists()


def test_an_overwrite_replaces_the_model_whole_and_leaves_nothing_beside_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "m"
    _fake_model(out, "old")
    stale = tmp_path / ".m.old-deadbeef"
    _fake_model(stale, "older")

    def write(folder: Path) -> None:
        (folder / "manifest.json").write_text(json.dumps({"marker": "new"}))

    write_folder(out, True, write)
    assert json.loads((out / "manifest.json").read_text())["marker"] == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_load_puts_back_a_model_an_overwrite_left_aside(tmp_path: Path) -> None:
    out = tmp_path / "m"
    _fake_model(tmp_path / ".m.old-12345678", "old")
    with pytest.raises(InvalidArgumentError, match="model of format"):
        load(out)  # recovered first: then refused as the fake it is, not as missing
    assert (out / "manifest.json").exists()
    shutil.rmtree(out)


def test_dropout_is_a_share() -> None:
    assert TrainOptions(dropout=0).dropout == 0
    with pytest.raises(InvalidArgumentError, match=r"dropout must be a share in \[0, 1\)"):
        TrainOptions(dropout=1.0)
    assert np.isclose(TrainOptions().dropout, 0.2)


def test_a_small_network_stops_early_on_a_fifth_of_the_training_split(
    duck: Any, tmp_path: Path
) -> None:
    pytest.importorskip("tensorflow")
    data = _prepare(duck, "SELECT id, x, c, yb FROM t", "yb", family="dnn")
    assert data.stop_sql is not None
    assert data.fit_sql is not None
    fit = {r[0] for r in duck.rows(f"SELECT id FROM ({data.fit_sql}) q")}
    stop = {r[0] for r in duck.rows(f"SELECT id FROM ({data.stop_sql}) q")}
    training = {r[0] for r in duck.rows(f"SELECT id FROM ({data.training_sql}) q")}
    assert not fit & stop
    assert fit | stop == training  # the validation split is never looked at
    assert len(stop) == data.stop_rows
    assert 0.1 < len(stop) / len(training) < 0.3
    model = _train("SELECT id, x, c, yb FROM t", duck, "yb", tmp_path / "m", family="dnn")
    stopped = model.manifest["training"]["early_stopping"]
    assert stopped["rows"] == len(stop)
    assert 1 <= stopped["best_epoch"] <= stopped["epochs_run"] <= 200
    assert _prepare(duck, "SELECT id, x, c, yb FROM t", "yb", family="linear").stop_sql is None
    assert _prepare(duck, "SELECT id, x, c, yb FROM t", "yb", epochs=5).stop_sql is None
