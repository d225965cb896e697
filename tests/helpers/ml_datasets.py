"""Data shipped inside PyPI packages as tables, and scikit-learn's baselines on their rows.

The accuracy tests of :mod:`sqlfeed.ml` (and ``benchmarks/accuracy.py``) train on data that
needs no network: scikit-learn's bundled ``breast_cancer``, ``iris``, ``wine``, ``digits``
and ``diabetes``, and ``palmerpenguins`` (string columns and NULLs). Each data set is a
DataFrame with an ``id`` integer column first (0..n-1 in the file's order), the features
under sanitized names (lowercase, ``[a-z0-9_]``) and the label column.

:data:`DATASETS` maps a name to ``(loader, label, task)``. :func:`load_table` writes a data
set into any engine of :mod:`tests.helpers.engines` under a unique table name
(:func:`loaded` drops them again); :func:`manifest_frames` reads back, with the engine's
own driver, exactly the rows of a trained model's two SQL texts; :func:`sklearn_baseline`
trains and scores scikit-learn on them, and :func:`parity` holds sqlfeed's metrics to
scikit-learn's (the goals of issue #26)::

    with loaded(engine, "iris") as tables:
        model = sqlfeed.ml.train(f"SELECT * FROM {tables['iris'].sql_name}", source, ...)
        train, val = manifest_frames(engine, model.manifest)
        sklearn_baseline(train, val, "target", "multiclass", "linear")  # {"accuracy": ...}
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from tests.helpers.engines import TYPES, DuckDBEngine, Engine

__all__ = [
    "ACCURACY_MARGIN",
    "ACCURACY_ROWS",
    "AUC_MARGIN",
    "BASELINE_OF",
    "DATASETS",
    "KINDS",
    "R2_MARGIN",
    "Parity",
    "Table",
    "column_types",
    "drop_table",
    "frame",
    "load_table",
    "loaded",
    "manifest_frames",
    "parity",
    "read_frame",
    "sanitize",
    "sklearn_baseline",
    "table_rows",
]

KINDS = ("linear", "hgb")
"""The baselines of :func:`sklearn_baseline`."""


def sanitize(name: str) -> str:
    """A column name as a portable SQL identifier: lowercase, runs of other characters
    than ``[a-z0-9]`` as one ``_``, no leading or trailing ``_``, never a leading digit.

    >>> sanitize("mean radius"), sanitize("od280/od315_of_diluted_wines")
    ('mean_radius', 'od280_od315_of_diluted_wines')
    >>> sanitize("sepal length (cm)")
    'sepal_length_cm'
    """
    clean = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return f"c_{clean}" if not clean or clean[0].isdigit() else clean


def _with_id(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with sanitized column names and an ``id`` column first (0..n-1 in order)."""
    data = data.rename(columns={c: sanitize(str(c)) for c in data.columns})
    data = data.reset_index(drop=True)
    data.insert(0, "id", np.arange(len(data), dtype=np.int64))
    return data


def _bundled(function: str) -> Callable[[], pd.DataFrame]:
    """A loader of scikit-learn's bundled data set ``sklearn.datasets.<function>``."""

    def load() -> pd.DataFrame:
        from sklearn import datasets  # type: ignore[import-untyped]

        bunch = getattr(datasets, function)(as_frame=True)
        return _with_id(bunch.frame)

    load.__name__ = function
    return load


def _penguins_raw() -> pd.DataFrame:
    import palmerpenguins  # type: ignore[import-untyped]

    data = palmerpenguins.load_penguins()
    for column in data.columns:  # pandas' string dtype as plain objects, NaN as None
        if not pd.api.types.is_numeric_dtype(data[column]):
            data[column] = data[column].astype(object).where(data[column].notna(), None)
    return data


def load_penguins() -> pd.DataFrame:
    """palmerpenguins' 344 rows: strings (species, island, sex) with NULLs in sex and in
    the numeric columns."""
    return _with_id(_penguins_raw())


def load_penguins_mass() -> pd.DataFrame:
    """The penguins with a known ``body_mass_g`` (342 rows), to regress it on the others."""
    data = _penguins_raw()
    return _with_id(data[data["body_mass_g"].notna()])


def load_penguins_binary() -> pd.DataFrame:
    """The Adelie and Chinstrap penguins (220 rows): a binary ``species`` label (strings),
    features with strings and NULLs (sex; one Adelie row has no measurements)."""
    data = _penguins_raw()
    return _with_id(data[data["species"].isin(["Adelie", "Chinstrap"])])


DATASETS: dict[str, tuple[Callable[[], pd.DataFrame], str, str]] = {
    "breast_cancer": (_bundled("load_breast_cancer"), "target", "binary"),
    "iris": (_bundled("load_iris"), "target", "multiclass"),
    "wine": (_bundled("load_wine"), "target", "multiclass"),
    "digits": (_bundled("load_digits"), "target", "multiclass"),
    "diabetes": (_bundled("load_diabetes"), "target", "regression"),
    "penguins": (load_penguins, "species", "multiclass"),
    "penguins_mass": (load_penguins_mass, "body_mass_g", "regression"),
    "penguins_binary": (load_penguins_binary, "species", "binary"),
}
"""Data set name -> (loader of its DataFrame, label column, task)."""


def frame(name: str) -> pd.DataFrame:
    """The DataFrame of data set ``name`` (``id`` first, sanitized names, the label)."""
    return DATASETS[name][0]()


def column_types(data: pd.DataFrame) -> list[tuple[str, str]]:
    """(name, portable type of :data:`tests.helpers.engines.TYPES`) for each column:
    integers ``bigint``, other numbers ``float``, anything else ``text``."""
    types = []
    for column in data.columns:
        dtype = data[column].dtype
        if pd.api.types.is_integer_dtype(dtype):
            kind = "bigint"
        elif pd.api.types.is_numeric_dtype(dtype):
            kind = "float"
        else:
            kind = "text"
        types.append((str(column), kind))
    return types


def _python(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return None if np.isnan(value) else float(value)
    return value


def table_rows(data: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The rows of ``data`` as Python values for a DB-API driver (NaN as NULL)."""
    columns = [data[c].to_numpy(dtype=object) for c in data.columns]
    return [tuple(_python(v) for v in row) for row in zip(*columns, strict=True)]


@dataclass(frozen=True)
class Table:
    """A data set written into an engine.

    Attributes:
        dataset: Its name in :data:`DATASETS`.
        name: The table's name (unique per call of :func:`load_table`).
        sql_name: The name a query through a sqlfeed source of the engine uses (schema
            qualified on the servers).
        label: The label column.
        task: ``binary``, ``multiclass`` or ``regression``.
        engine: The engine holding it.
        rows: Its row count.
    """

    dataset: str
    name: str
    sql_name: str
    label: str
    task: str
    engine: Engine
    rows: int


def load_table(
    engine: Engine, dataset: str, *, data: pd.DataFrame | None = None, table: str | None = None
) -> Table:
    """Write data set ``dataset`` (or ``data``, its rows as loaded) into ``engine``.

    Args:
        engine: The engine (:func:`tests.conftest.get_engine`).
        dataset: A name of :data:`DATASETS`.
        data: The rows to write (default: the data set's loader's).
        table: The table name (default: ``ml_<dataset>_<random hex>``).

    Returns:
        The table; :func:`drop_table` (or :func:`loaded`) removes it.
    """
    _, label, task = DATASETS[dataset]
    data = frame(dataset) if data is None else data
    name = table or f"ml_{dataset}_{uuid.uuid4().hex[:8]}"
    if isinstance(engine, DuckDBEngine):
        _duckdb_table(engine, name, data)
    else:
        engine.create_table(name, column_types(data), table_rows(data))
    return Table(dataset, name, engine.qualify(name), label, task, engine, len(data))


def _duckdb_table(engine: DuckDBEngine, name: str, data: pd.DataFrame) -> None:
    """:meth:`Engine.create_table` for DuckDB through Arrow (its ``executemany`` takes a
    second per thousand rows): the same column types, NaN as NULL."""
    import pyarrow as pa

    types = TYPES[engine.name]
    ddl = ", ".join(f"{column} {types[kind]}" for column, kind in column_types(data))
    view = f"_load_{uuid.uuid4().hex[:8]}"
    engine.execute(f"DROP TABLE IF EXISTS {name}")
    engine.execute(f"CREATE TABLE {name} ({ddl})")
    engine.conn.register(view, pa.Table.from_pandas(data, preserve_index=False))
    try:
        engine.conn.execute(
            f"INSERT INTO {name} SELECT * FROM {view}"
        )  # not a cursor: views are per connection
    finally:
        engine.conn.unregister(view)


def drop_table(table: Table) -> None:
    """Drop ``table`` from its engine."""
    table.engine.execute(f"DROP TABLE IF EXISTS {table.name}")
    table.engine.commit()


@contextmanager
def loaded(engine: Engine, *datasets: str) -> Iterator[dict[str, Table]]:
    """The data sets ``datasets`` written into ``engine`` (by name), dropped at the end."""
    tables: dict[str, Table] = {}
    try:
        for dataset in datasets:
            tables[dataset] = load_table(engine, dataset)
        yield tables
    finally:
        for table in tables.values():
            drop_table(table)


def _column(values: list[Any]) -> pd.Series[Any]:
    """A driver's column: numbers (Decimal too) as float64 with NaN for NULL (int64 when
    there is no NULL), anything else as objects with NaN for NULL (as scikit-learn's
    imputers expect)."""
    present = [v for v in values if v is not None]
    if present and all(
        isinstance(v, int | float | Decimal | np.number) and not isinstance(v, bool)
        for v in present
    ):
        numbers = pd.Series([np.nan if v is None else float(v) for v in values], dtype="float64")
        if len(present) == len(values) and all(isinstance(v, int | np.integer) for v in present):
            return numbers.astype("int64")
        return numbers
    return pd.Series([np.nan if v is None else v for v in values], dtype=object)


def read_frame(engine: Engine, sql: str) -> pd.DataFrame:
    """The rows of ``SELECT * FROM (<sql>) q`` read with the engine's own driver.

    Args:
        engine: The engine to run it on (its own connection, not a sqlfeed source).
        sql: A query in the engine's dialect (a manifest's training or validation SQL).

    Returns:
        The rows, ordered by ``id`` when there is one (see :func:`_column` for the types).
    """
    cursor = engine.conn.cursor()
    try:
        cursor.execute(f"SELECT * FROM ({sql}) q")
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    finally:
        cursor.close()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    data = pd.DataFrame({n: _column(list(c)) for n, c in zip(names, columns, strict=True)})
    return data.sort_values("id", ignore_index=True) if "id" in data.columns else data


def manifest_frames(engine: Engine, manifest: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training and validation rows of a trained model (its manifest's two SQL texts),
    read from ``engine`` with its own driver."""
    return (
        read_frame(engine, manifest["training_sql"]),
        read_frame(engine, manifest["validation_sql"]),
    )


def _split_columns(
    data: pd.DataFrame, label: str, drop: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(numeric, categorical) feature columns of ``data``."""
    features = [c for c in data.columns if c != label and c not in drop]
    numeric = [c for c in features if pd.api.types.is_numeric_dtype(data[c].dtype)]
    return numeric, [c for c in features if c not in numeric]


def _pipeline(task: str, kind: str, numeric: list[str], categorical: list[str], seed: int) -> Any:
    """scikit-learn's model of ``kind`` for ``task`` (see :func:`sklearn_baseline`)."""
    from sklearn import compose, ensemble, impute, linear_model, pipeline, preprocessing

    if kind == "linear":
        prepare = compose.ColumnTransformer(
            [
                (
                    "numeric",
                    pipeline.make_pipeline(
                        impute.SimpleImputer(strategy="mean"), preprocessing.StandardScaler()
                    ),
                    numeric,
                ),
                (
                    "categorical",
                    pipeline.make_pipeline(
                        impute.SimpleImputer(strategy="constant", fill_value="(null)"),
                        preprocessing.OneHotEncoder(handle_unknown="ignore"),
                    ),
                    categorical,
                ),
            ]
        )
        estimator: Any = (
            linear_model.Ridge()
            if task == "regression"
            else linear_model.LogisticRegression(max_iter=5000)
        )
        return pipeline.make_pipeline(prepare, estimator)
    if kind == "hgb":
        encode = preprocessing.OrdinalEncoder(
            handle_unknown="use_encoded_value", unknown_value=np.nan, encoded_missing_value=np.nan
        )
        prepare = compose.ColumnTransformer(
            [("categorical", encode, categorical), ("numeric", "passthrough", numeric)]
        )
        is_categorical = [True] * len(categorical) + [False] * len(numeric)
        boosted = (
            ensemble.HistGradientBoostingRegressor
            if task == "regression"
            else ensemble.HistGradientBoostingClassifier
        )
        return pipeline.make_pipeline(
            prepare, boosted(categorical_features=is_categorical, random_state=seed)
        )
    raise ValueError(f"unknown baseline kind {kind!r}; use one of {', '.join(KINDS)}")


def sklearn_baseline(
    rows_train: pd.DataFrame,
    rows_val: pd.DataFrame,
    label: str,
    task: str,
    kind: str,
    *,
    drop: Sequence[str] = ("id",),
    seed: int = 0,
) -> dict[str, float]:
    """scikit-learn trained on ``rows_train`` and scored on ``rows_val``.

    Args:
        rows_train: The training rows (:func:`manifest_frames`).
        rows_val: The validation rows.
        label: The label column.
        task: ``binary``, ``multiclass`` or ``regression``.
        kind: ``linear``: mean imputation and standard scaling of the numeric columns, NULL
            as a category and one-hot encoding (unknown values ignored) of the others, in a
            ``ColumnTransformer``, then ``LogisticRegression(max_iter=5000)`` or ``Ridge``;
            ``hgb``: ``HistGradientBoostingClassifier``/``Regressor`` with the non-numeric
            columns as categorical features (NULL as missing).
        drop: Columns that are not features (the split key).
        seed: The boosted trees' ``random_state``.

    Returns:
        ``{"rows": validation rows}`` plus ``accuracy`` (classification), ``roc_auc``
        (binary, of ``predict_proba``) or ``r2`` (regression): the names of
        :mod:`sqlfeed.ml.metrics`.

    Raises:
        ValueError: An unknown ``kind``.
    """
    from sklearn import metrics

    numeric, categorical = _split_columns(rows_train, label, drop)
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    model = _pipeline(task, kind, numeric, categorical, seed)
    features = numeric + categorical
    # One OpenMP thread: on a loaded machine the boosted trees' threads thrash (digits'
    # fit takes 76 s instead of 3); the results are the same.
    with threadpool_limits(1):
        model.fit(rows_train[features], rows_train[label])
        predicted = model.predict(rows_val[features])
        probabilities = model.predict_proba(rows_val[features]) if task == "binary" else None
    result: dict[str, float] = {"rows": float(len(rows_val))}
    truth = rows_val[label]
    if task == "regression":
        result["r2"] = float(metrics.r2_score(truth, predicted))
        return result
    result["accuracy"] = float(metrics.accuracy_score(truth, predicted))
    if probabilities is not None:
        positive = model.classes_[1]
        result["roc_auc"] = float(metrics.roc_auc_score(truth == positive, probabilities[:, 1]))
    return result


ACCURACY_ROWS = 2
"""Accuracy goal: at most this many validation rows worse than scikit-learn..."""
ACCURACY_MARGIN = 0.02
"""... or this fraction, whichever is larger."""
AUC_MARGIN = 0.01
"""Binary ROC AUC goal: at most this much below scikit-learn's."""
R2_MARGIN = 0.05
"""Regression R² goal: at most this much below scikit-learn's."""
BASELINE_OF = {"linear": "linear", "dnn": "linear", "wide_deep": "linear", "gbdt": "hgb"}
"""The scikit-learn baseline (:func:`sklearn_baseline`'s kind) a sqlfeed family is held to."""


@dataclass(frozen=True)
class Parity:
    """One metric of sqlfeed beside scikit-learn's, each the mean over seeds.

    Attributes:
        metric: ``accuracy``, ``roc_auc`` or ``r2``.
        ours: sqlfeed's mean.
        theirs: scikit-learn's mean (on exactly the same rows).
        margin: How far below ``theirs`` ``ours`` may be.
        rows: The validation rows.
        low: sqlfeed's lowest over the seeds.
        high: sqlfeed's highest over the seeds.
    """

    metric: str
    ours: float
    theirs: float
    margin: float
    rows: int
    low: float
    high: float

    @property
    def met(self) -> bool:
        """sqlfeed is at most :attr:`margin` below scikit-learn (better is fine)."""
        return self.ours >= self.theirs - self.margin - 1e-12

    @property
    def rows_behind(self) -> float | None:
        """For accuracy: how many validation rows fewer sqlfeed gets right (mean)."""
        return (self.theirs - self.ours) * self.rows if self.metric == "accuracy" else None

    def line(self) -> str:
        """``met: accuracy 0.9643 vs sklearn 0.9732 (0.9 rows behind; goal >= ...)``."""
        behind = self.rows_behind
        rows = f", {behind:+.1f} rows behind" if behind is not None else ""
        return (
            f"{'met' if self.met else 'MISSED'}: {self.metric} {self.ours:.4f} "
            f"[{self.low:.4f}..{self.high:.4f}] vs sklearn {self.theirs:.4f} "
            f"(difference {self.ours - self.theirs:+.4f}{rows}; goal >= "
            f"{self.theirs - self.margin:.4f})"
        )


def parity(
    task: str, ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, float]]
) -> list[Parity]:
    """sqlfeed's metrics held to scikit-learn's, each side's mean over the seeds.

    Args:
        task: ``binary``, ``multiclass`` or ``regression``.
        ours: One ``sqlfeed.ml.evaluate`` result per seed.
        theirs: One :func:`sklearn_baseline` result per seed, on the same rows.

    Returns:
        One :class:`Parity` per metric of the task: accuracy (within max(2 rows, 0.02))
        and ROC AUC (within 0.01, binary), or R² (within 0.05).

    Raises:
        ValueError: No seeds, or the two sides scored different row counts.
    """
    if not ours or len(ours) != len(theirs):
        raise ValueError(f"{len(ours)} sqlfeed results for {len(theirs)} sklearn results")
    rows = {int(r["rows"]) for r in ours} | {int(r["rows"]) for r in theirs}
    if len(rows) != 1:
        raise ValueError(f"sqlfeed and sklearn scored different row counts: {sorted(rows)}")
    count = rows.pop()
    if task == "regression":
        margins = {"r2": R2_MARGIN}
    else:
        margins = {"accuracy": max(ACCURACY_ROWS / count, ACCURACY_MARGIN)}
        if task == "binary":
            margins["roc_auc"] = AUC_MARGIN
    result = []
    for metric, margin in margins.items():
        values = [float(r[metric]) for r in ours]
        mean = sum(values) / len(values)
        baseline = sum(float(r[metric]) for r in theirs) / len(theirs)
        result.append(Parity(metric, mean, baseline, margin, count, min(values), max(values)))
    return result
