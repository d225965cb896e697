"""The gbdt family: XGBoost trees fed by the Feeder through the external-memory iterator.

On a DuckDB table of 2,000 rows (numbers with NULLs, a date, a string category with NULLs
and values out of the vocabulary, labels of each task) the booster is trained on the
training split read by the Feeder; the tests check that every pass XGBoost makes reads
every training row exactly once, the predictions of each task, the save/load round trip,
the categorical codes, the refusals, and accuracy parity with scikit-learn's
HistGradientBoostingClassifier on the breast cancer data.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import InvalidArgumentError, MissingDependencyError
from sqlfeed.ml import gbdt
from tests.helpers.sources import require_module

require_module("xgboost", "duckdb")

TABLE = "gbdt_rows"
ROWS = 2_000
TRAINING = f"SELECT * FROM {TABLE} WHERE id % 5 <> 0"
VALIDATION = f"SELECT * FROM {TABLE} WHERE id % 5 = 0"
CREATE = f"""
CREATE TABLE {TABLE} AS
SELECT *,
  CASE WHEN COALESCE(x, 5) + CASE WHEN c = 'red' THEN 4 ELSE 0 END > 7
       THEN 'yes' ELSE 'no' END AS yb,
  CASE WHEN c = 'red' THEN 'a' WHEN COALESCE(x, 0) > 5 THEN 'b' ELSE 'c' END AS ym,
  COALESCE(x, 3) * 2 + CASE WHEN c = 'blue' THEN 5 ELSE 0 END + z / 10 AS yr
FROM (
  SELECT range AS id,
    CASE WHEN range % 7 = 0 THEN NULL ELSE (range * 37 % 101) / 10.0 END::DOUBLE AS x,
    (range * 13 % 17)::DOUBLE AS z,
    CASE WHEN range % 11 = 0 THEN NULL
         ELSE ['red', 'green', 'blue', 'pink'][range % 4 + 1] END AS c,
    DATE '2024-01-01' + (range % 365)::INTEGER AS d
  FROM range({ROWS})
)
"""


@dataclass(frozen=True)
class Feature:
    """A feature as :class:`sqlfeed.ml.features.Feature` describes one."""

    name: str
    arrow_type: str
    family: str
    transform: dict[str, Any] = field(default_factory=dict)


FEATURES = [
    Feature("x", "double", "numeric", {"mean": 5.0}),
    Feature("z", "double", "numeric"),
    Feature(
        "c", "string", "categorical", {"vocabulary": ["red", "green", "blue"], "dtype": "string"}
    ),
    Feature("d", "date32[day]", "time", {"mean": 19_900.0}),
]


@pytest.fixture(scope="module")
def source() -> Iterator[Any]:
    """A sqlfeed source on an in-memory DuckDB of the test's own holding the table."""
    import duckdb

    conn = duckdb.connect()
    conn.execute(CREATE)
    opened = sqlfeed.connect(conn)
    yield opened
    opened.close()
    conn.close()


def train(source: Any, label: str, task: str, classes: list[Any] | None, **options: Any) -> Any:
    """``train_gbdt`` on the table's two splits (30 trees unless given)."""
    options.setdefault("trees", 30)
    return gbdt.train_gbdt(
        TRAINING,
        VALIDATION,
        source,
        label=label,
        task=task,
        classes=classes,
        features=FEATURES,
        **options,
    )


@pytest.fixture(scope="module")
def binary(source: Any) -> Any:
    """The binary model (label ``yb``: ``no``/``yes``)."""
    return train(source, "yb", "binary", ["no", "yes"])


def validation_rows(source: Any) -> pa.Table:
    return source.arrow(VALIDATION + " ORDER BY id")


# -- encoding -----------------------------------------------------------------------------


def test_categorical_codes_are_vocabulary_index_plus_one_and_zero_for_oov_and_null() -> None:
    batch = pa.record_batch(
        {
            "c": pa.array(["blue", None, "pink", "red"]),
            "n": pa.array([3, 99, None, 7], pa.int32()),
            "e": pa.array(["b", "a", None, "zz"]).dictionary_encode(),
        }
    )
    features = [
        Feature(
            "c",
            "string",
            "categorical",
            {"vocabulary": ["red", "green", "blue"], "dtype": "string"},
        ),
        Feature("n", "int32", "categorical", {"vocabulary": [7, 3], "dtype": "int64"}),
        Feature("e", "dictionary", "categorical", {"vocabulary": ["a", "b"], "dtype": "string"}),
    ]
    codes = gbdt.encode(batch, features)
    assert codes.dtype == np.float32
    assert codes.shape == (4, 3)
    assert codes[:, 0].tolist() == [3, 0, 0, 1]
    assert codes[:, 1].tolist() == [2, 0, 0, 1]
    assert codes[:, 2].tolist() == [2, 1, 0, 0]
    assert (
        gbdt.encode(pa.Table.from_batches([batch, batch]), features)[4:].tolist() == codes.tolist()
    )


def test_numbers_and_times_are_floats_with_nan_for_null() -> None:
    batch = pa.record_batch(
        {
            "i": pa.array([1, None, 2**40], pa.int64()),
            "b": pa.array([True, False, None]),
            "d": pa.array([0, 1, None], pa.date32()),
            "t": pa.array([0, 2_000_000, None], pa.timestamp("us", "UTC")),
        }
    )
    features = [
        Feature("i", "int64", "numeric"),
        Feature("b", "bool", "numeric"),
        Feature("d", "date32[day]", "time", {"mean": 1.0}),
        Feature("t", "timestamp[us, tz=UTC]", "time", {"unit": "s"}),
    ]
    values = gbdt.encode(batch, features)
    expected = np.array([[1, 1, -1, 0], [np.nan, 0, 0, 2]], dtype=np.float32)
    np.testing.assert_array_equal(values[:2], expected)  # NaN where NULL, the rest exact
    assert values[2, 0] == np.float32(2**40)
    assert np.isnan(values[2, 1:]).all()


def test_a_missing_or_unreadable_feature_column_is_one_line_naming_it() -> None:
    batch = pa.record_batch({"x": ["a", "b"]})
    with pytest.raises(InvalidArgumentError, match="no column 'y'"):
        gbdt.encode(batch, [Feature("y", "double", "numeric")])
    with pytest.raises(InvalidArgumentError, match="column 'x' is string"):
        gbdt.encode(batch, [Feature("x", "double", "numeric")])


# -- training -----------------------------------------------------------------------------


def test_every_pass_reads_every_training_row_exactly_once(
    source: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    encode = gbdt.encode

    def recording(batch: pa.RecordBatch, features: Any) -> np.ndarray:
        seen.extend(batch.column("id").to_pylist())
        return encode(batch, features)

    monkeypatch.setattr(gbdt, "encode", recording)
    progress: list[str] = []
    model = gbdt.train_gbdt(
        TRAINING,
        None,
        source,
        label="yb",
        task="binary",
        classes=["no", "yes"],
        features=FEATURES,
        trees=5,
        progress=progress.append,
    )
    rows = source.scalar(f"SELECT COUNT(*) FROM ({TRAINING}) t")
    ids = sorted(row[0] for row in source.rows(f"SELECT id FROM ({TRAINING}) t"))
    assert rows == 1_600
    assert model.training_passes
    assert set(model.training_passes) == {rows}
    assert len(seen) == rows * len(model.training_passes)
    for start in range(0, len(seen), rows):  # each pass: every row once
        assert sorted(seen[start : start + rows]) == ids
    assert model.validation_passes == []
    assert model.matrix == "QuantileDMatrix"  # 1,600 rows: held in memory, quantized
    assert any(f"{rows:,} rows read" in line for line in progress)
    assert progress[-1].startswith("gbdt: 5/5 trees")


def test_a_matrix_too_large_for_memory_goes_to_external_memory_where_xgboost_has_it(
    source: Any, binary: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xgboost

    assert binary.matrix == "QuantileDMatrix"
    assert set(binary.validation_passes) == {400}
    monkeypatch.setattr(gbdt, "IN_MEMORY_CELLS", 0)  # every matrix is "too large"
    model = train(source, "yb", "binary", ["no", "yes"])
    have = hasattr(xgboost, "ExtMemQuantileDMatrix")
    assert model.matrix == ("ExtMemQuantileDMatrix" if have else "QuantileDMatrix")
    rows = validation_rows(source)
    assert np.allclose(model.predict_batch(rows), binary.predict_batch(rows), atol=0.05)


def test_binary_predicts_the_positive_class_probability(source: Any, binary: Any) -> None:
    rows = validation_rows(source)
    predicted = binary.predict_batch(rows)
    assert predicted.shape == (rows.num_rows,)
    assert ((predicted >= 0) & (predicted <= 1)).all()
    truth = np.array(rows.column("yb").to_pylist()) == "yes"
    assert ((predicted > 0.5) == truth).mean() > 0.9
    assert binary.history["logloss"][-1] < binary.history["logloss"][0]


def test_reader_threads_sharing_a_booster_predict_at_once(source: Any, binary: Any) -> None:
    """Batches of sizes that change XGBoost's nthread, scored from four threads at once
    (a worker's readers share the model): the predictions of one thread at a time, no
    XGBoost error (it refused a prediction while another thread reconfigured the booster)."""
    rows = validation_rows(source)
    small = rows.slice(0, 100)
    large = pa.concat_tables([rows] * (2 * gbdt.THREAD_ROWS // rows.num_rows + 1))
    want = {id(t): binary.predict_batch(t) for t in (small, large)}
    errors: list[BaseException] = []

    def score(first: pa.Table, second: pa.Table) -> None:
        try:
            for _ in range(15):
                for table in (first, second):
                    assert np.array_equal(binary.predict_batch(table), want[id(table)])
        except BaseException as err:
            errors.append(err)

    workers = [
        threading.Thread(target=score, args=(small, large) if n % 2 else (large, small))
        for n in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []


def test_multiclass_predicts_one_probability_per_class(source: Any) -> None:
    model = train(source, "ym", "multiclass", ["a", "b", "c"])
    rows = validation_rows(source)
    predicted = model.predict_batch(rows)
    assert predicted.shape == (rows.num_rows, 3)
    assert np.allclose(predicted.sum(axis=1), 1, atol=1e-5)
    truth = np.array(rows.column("ym").to_pylist())
    assert (np.array(["a", "b", "c"])[predicted.argmax(axis=1)] == truth).mean() > 0.95


def test_regression_predicts_values(source: Any) -> None:
    model = train(source, "yr", "regression", None, trees=60)
    rows = validation_rows(source)
    predicted = model.predict_batch(rows.to_batches()[0])
    truth = np.array(rows.column("yr").to_pylist())
    assert predicted.shape == (rows.num_rows,)
    r2 = 1 - ((predicted - truth) ** 2).sum() / ((truth - truth.mean()) ** 2).sum()
    assert r2 > 0.9
    assert model.predict_batch(rows.slice(0, 0)).shape == (0,)


def test_save_and_load_give_the_same_predictions(source: Any, binary: Any, tmp_path: Path) -> None:
    import xgboost

    extras = binary.save(tmp_path)
    assert extras == {
        "file": "model.json",
        "xgboost": xgboost.__version__,
        "matrix": binary.matrix,
    }
    assert "learner" in json.loads((tmp_path / "model.json").read_text())
    loaded = gbdt.GbdtModel.load(tmp_path, FEATURES, "binary", ["no", "yes"])
    rows = validation_rows(source)
    assert np.array_equal(loaded.predict_batch(rows), binary.predict_batch(rows))
    assert loaded.matrix == binary.matrix
    with pytest.raises(InvalidArgumentError, match="reads 4 features, the manifest lists 3"):
        gbdt.GbdtModel.load(tmp_path, FEATURES[:3], "binary", ["no", "yes"])
    with pytest.raises(InvalidArgumentError, match="not a gbdt model"):
        gbdt.GbdtModel.load(tmp_path / "nothing", FEATURES, "binary", ["no", "yes"])


def test_class_weight_raises_the_weighted_class(source: Any, binary: Any) -> None:
    weighted = train(source, "yb", "binary", ["no", "yes"], class_weight={"yes": 20.0})
    rows = validation_rows(source)
    assert weighted.predict_batch(rows).mean() > binary.predict_batch(rows).mean() + 0.01
    with pytest.raises(InvalidArgumentError, match="class_weight names 'maybe'"):
        train(source, "yb", "binary", ["no", "yes"], class_weight={"maybe": 2.0})


def test_a_label_value_outside_the_classes_is_an_error_naming_it(source: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="holds 'c', which is not one of the model's"):
        train(source, "ym", "multiclass", ["a", "b", "z"], trees=1)
    with pytest.raises(InvalidArgumentError, match="'x' is NULL in 228 rows"):
        gbdt.train_gbdt(
            TRAINING,
            None,
            source,
            label="x",
            task="regression",
            classes=None,
            features=FEATURES[1:],
            trees=1,
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"task": "binary", "classes": ["a", "b", "c"]}, "binary task needs 2 classes"),
        ({"task": "ranking"}, "task must be one of"),
        ({"trees": 0}, "trees must be an integer >= 1"),
        ({"learning_rate": 0.0}, "learning_rate must be a number"),
    ],
)
def test_bad_options_are_refused_before_reading(
    source: Any, options: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {"task": "binary", "classes": ["no", "yes"], **options}
    with pytest.raises(InvalidArgumentError, match=message):
        gbdt.train_gbdt(
            "SELECT * FROM no_such_table",
            None,
            source,
            label="yb",
            features=FEATURES,
            **arguments,
        )


def test_without_xgboost_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(
        MissingDependencyError, match=r"the gbdt family needs xgboost: pip install 'sqlfeed\[ml\]'"
    ):
        gbdt.xgboost_module()


# -- accuracy parity ----------------------------------------------------------------------


def test_accuracy_within_two_points_of_histgradientboosting_on_breast_cancer() -> None:
    require_module("sklearn")
    import duckdb
    from sklearn.datasets import load_breast_cancer  # type: ignore[import-untyped]
    from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]

    data = load_breast_cancer()
    names = [name.replace(" ", "_") for name in data.feature_names]
    table = pa.table(
        {
            "id": np.arange(len(data.target)),
            **dict(zip(names, data.data.T, strict=True)),
            "target": data.target,
        }
    )
    conn = duckdb.connect()
    conn.register("bc_rows", table)
    conn.execute("CREATE TABLE bc AS SELECT * FROM bc_rows")
    source = sqlfeed.connect(conn)
    try:
        training, validation = (
            "SELECT * FROM bc WHERE id % 5 <> 0",
            "SELECT * FROM bc WHERE id % 5 = 0",
        )
        features = [Feature(name, "double", "numeric") for name in names]
        model = gbdt.train_gbdt(
            training,
            validation,
            source,
            label="target",
            task="binary",
            classes=[0, 1],
            features=features,
            trees=100,
            seed=0,
        )
        train_rows, val_rows = source.arrow(training), source.arrow(validation)
    finally:
        source.close()
        conn.close()
    truth = val_rows.column("target").to_numpy()
    ours = ((model.predict_batch(val_rows) > 0.5) == truth).mean()

    def matrix(rows: pa.Table) -> np.ndarray:
        return np.column_stack([rows.column(name).to_numpy() for name in names])

    sklearn = HistGradientBoostingClassifier(random_state=0)
    sklearn.fit(matrix(train_rows), train_rows.column("target").to_numpy())
    theirs = sklearn.score(matrix(val_rows), truth)
    assert model.training_rows == train_rows.num_rows == 455
    assert abs(ours - theirs) <= 0.02, (ours, theirs)
