"""The ``gbdt`` family: XGBoost boosted trees fed by the Feeder, never a whole DataFrame.

XGBoost reads the rows through its iterator interface: a :class:`xgboost.DataIter` whose
``next`` pulls the next Arrow record batch of a SELECT from the static feeder
(:class:`~sqlfeed.feed.feeder.PartitionFeeder`, partitions read ahead by its reader threads)
and hands XGBoost one float32 matrix (NaN for NULL), the labels and the class weights;
``reset`` starts the read again. The matrix is a :class:`xgboost.QuantileDMatrix` built from
the iterator (only the quantized matrix is held, about a byte per value, never the raw
rows), or, beyond :data:`IN_MEMORY_CELLS` values and with XGBoost >= 3.0, an
:class:`xgboost.ExtMemQuantileDMatrix` (external memory: the quantized pages are cached in
a temporary folder, deleted after training); the result records which
(:attr:`GbdtModel.matrix`). Every pass XGBoost makes over the iterator reads
every row of the SELECT exactly once (:attr:`GbdtModel.training_passes` counts them).

Features are encoded by :func:`encode`, the same way at training and at prediction:

* numeric: the value as a float, NaN for NULL (XGBoost learns where missing values go);
* time: dates as days since 1970-01-01, timestamps in the transform's ``unit`` (default
  microseconds, as :mod:`sqlfeed.ml.features` describes them) since 1970-01-01 UTC, times
  and durations in that unit, minus the transform's ``mean`` when it has one (a shift, so
  float32 keeps the resolution near the data; trees do not care where zero is);
* categorical: an XGBoost categorical feature (``feature_types`` ``"c"``) whose code is the
  value's index in the transform's ``vocabulary`` plus 1; 0 is a value out of the
  vocabulary or NULL.

Objectives: ``binary:logistic`` (predictions are P(second class)), ``multi:softprob``
(one probability per class) and ``reg:squarederror``. The defaults follow scikit-learn's
HistGradientBoosting on small tabular data: learning rate 0.1, ``hist`` trees. XGBoost runs
one thread per :data:`THREAD_ROWS` rows, up to one per core this process may use (OpenMP
threads on a few thousand rows only wait for each other, and on cores other processes
share they run ten times slower than one thread). XGBoost is imported only when a model
is trained or loaded (``pip install 'sqlfeed[ml]'``).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects import InvalidArgumentError, UnsupportedError
from sqlfeed.dialects.optional import require
from sqlfeed.feed.feeder import PartitionFeeder, Progress
from sqlfeed.feed.options import check_int
from sqlfeed.io import connect
from sqlfeed.ml.labels import class_indices
from sqlfeed.plans.model import Plan

if TYPE_CHECKING:
    import xgboost

__all__ = [
    "DEFAULT_LEARNING_RATE",
    "MODEL_FILE",
    "OBJECTIVES",
    "PAGE_ROWS",
    "THREAD_ROWS",
    "FeatureLike",
    "GbdtModel",
    "encode",
    "threads",
    "train_gbdt",
]

OBJECTIVES = {
    "binary": "binary:logistic",
    "multiclass": "multi:softprob",
    "regression": "reg:squarederror",
}
"""The XGBoost objective of each task."""

DEFAULT_LEARNING_RATE = 0.1
"""The learning rate when none is given (scikit-learn's HistGradientBoosting default)."""

PAGE_ROWS = 65_536
"""The fewest rows handed to XGBoost at a time: each ``next`` becomes one page of the
external-memory cache, and XGBoost is slow on many small pages (a larger ``batch_size``
is used as it is)."""

THREAD_ROWS = 20_000
"""Rows per XGBoost thread (see :func:`threads`)."""

MODEL_FILE = "model.json"
"""The booster's file in a model folder (XGBoost's JSON model format)."""

_MATRIX_ATTR = "sqlfeed_matrix"
"""The booster attribute (saved in ``model.json``) naming the matrix it was trained on."""

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class FeatureLike(Protocol):
    """What :func:`encode` reads of a feature (:class:`sqlfeed.ml.features.Feature`)."""

    @property
    def name(self) -> str:
        """The column's name."""
        ...

    @property
    def arrow_type(self) -> str:
        """``str`` of the column's Arrow type at training."""
        ...

    @property
    def family(self) -> str:
        """``numeric``, ``categorical`` or ``time``."""
        ...

    @property
    def transform(self) -> Mapping[str, Any]:
        """Categorical: ``vocabulary`` and ``dtype``; numeric and time: ``mean``, ``unit``..."""
        ...


def xgboost_module() -> ModuleType:
    """The ``xgboost`` module, or the one line saying how to install it.

    Raises:
        MissingDependencyError: XGBoost is not installed (``pip install 'sqlfeed[ml]'``).
    """
    return require("xgboost", "the gbdt family")


def threads(rows: int | None) -> int:
    """XGBoost's ``nthread`` for ``rows`` rows.

    One per :data:`THREAD_ROWS` rows, at least one, at most the cores this process may use
    (all of them when ``rows`` is unknown).
    """
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return cores if rows is None else max(1, min(cores, rows // THREAD_ROWS))


# -- encoding -----------------------------------------------------------------------------


def encode(batch: pa.RecordBatch | pa.Table, features: Sequence[FeatureLike]) -> np.ndarray:
    """The ``(rows, len(features))`` float32 matrix XGBoost reads for ``batch``.

    >>> from types import SimpleNamespace as F
    >>> batch = pa.record_batch({"x": [1.5, None], "c": ["b", "z"]})
    >>> encode(batch, [F(name="x", arrow_type="double", family="numeric", transform={}),
    ...     F(name="c", arrow_type="string", family="categorical",
    ...       transform={"vocabulary": ["a", "b"], "dtype": "string"})]).tolist()
    [[1.5, 2.0], [nan, 0.0]]

    Args:
        batch: rows holding every feature's column (other columns are ignored).
        features: the model's features, in the model's order.

    Returns:
        One column per feature: numbers with NaN for NULL, categorical codes (vocabulary
        index + 1, 0 for a value out of the vocabulary or NULL); see the module docstring.

    Raises:
        InvalidArgumentError: a feature's column is missing, or of a type its family cannot
            read (a text column where the model has a number).
    """
    out = np.empty((batch.num_rows, len(features)), dtype=np.float32)
    for j, feature in enumerate(features):
        column = _column(batch, feature.name)
        try:
            if feature.family == "categorical":
                out[:, j] = _codes(column, feature.transform)
            elif feature.family == "time":
                out[:, j] = _times(column, feature.transform)
            elif feature.family == "numeric":
                out[:, j] = _numbers(column)
            else:
                raise InvalidArgumentError(
                    f"feature {feature.name!r} has the unknown family {feature.family!r} "
                    "(numeric, categorical or time)"
                )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise InvalidArgumentError(
                f"column {feature.name!r} is {column.type}, which the model's "
                f"{feature.family} feature ({feature.arrow_type}) cannot read: {err}"
            ) from None
    return out


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array | pa.ChunkedArray:
    """``batch``'s column ``name``, dictionaries decoded, or the error naming it."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise InvalidArgumentError(
            f"the rows have no column {name!r}, a feature of the model: select it"
        )
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column


def _numbers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Floats, NaN for NULL (integers beyond 2**53 rounded, as float32 does anyway)."""
    return np.asarray(column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False))


def _times(column: pa.Array | pa.ChunkedArray, transform: Mapping[str, Any]) -> np.ndarray:
    """Dates in days, timestamps/times/durations in ``unit`` (default us), minus ``mean``."""
    kind = column.type
    unit = transform.get("unit")
    unit = unit if unit in _PER_SECOND else "us"
    if pa.types.is_date(kind):
        values = _numbers(column.cast(pa.date32()).cast(pa.int32()))
    elif pa.types.is_timestamp(kind) or pa.types.is_time(kind) or pa.types.is_duration(kind):
        ticks = _numbers(column.cast(pa.int64()))
        values = ticks * (_PER_SECOND[unit] / _PER_SECOND[kind.unit])
    else:
        values = _numbers(column)
    shift = transform.get("mean")
    if isinstance(shift, int | float) and not isinstance(shift, bool) and np.isfinite(shift):
        values = values - float(shift)
    return values


def _codes(column: pa.Array | pa.ChunkedArray, transform: Mapping[str, Any]) -> np.ndarray:
    """Vocabulary index + 1; 0 for a value out of the vocabulary or NULL."""
    value_type = pa.int64() if transform.get("dtype") == "int64" else pa.string()
    vocabulary = pa.array(list(transform.get("vocabulary", ())), type=value_type)
    index = pc.index_in(column.cast(value_type), value_set=vocabulary)
    return np.asarray(pc.fill_null(index, -1).to_numpy(zero_copy_only=False)) + 1


def feature_types(features: Sequence[FeatureLike]) -> list[str]:
    """XGBoost's ``feature_types``: ``c`` for a categorical feature, ``q`` otherwise."""
    return ["c" if f.family == "categorical" else "q" for f in features]


def feature_names(features: Sequence[FeatureLike]) -> list[str] | None:
    """The names XGBoost records, or None when one has a character it refuses (``[]<``)."""
    names = [f.name for f in features]
    if any(ch in name for name in names for ch in "[]<,") or len(set(names)) < len(names):
        return None
    return names


# -- labels -------------------------------------------------------------------------------


@dataclass
class _Targets:
    """Turns a batch's label column into XGBoost's labels and weights."""

    label: str
    task: str
    classes: list[Any] | None
    class_weight: Mapping[Any, float] | None = None
    _weights: np.ndarray | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.class_weight is None:
            return
        if self.classes is None:
            raise InvalidArgumentError(
                "class_weight needs a classification task, not regression: leave it out"
            )
        weights = np.ones(len(self.classes), dtype=np.float32)
        for key, weight in self.class_weight.items():
            position = _class_position(self.classes, key)
            if position is None:
                raise InvalidArgumentError(
                    f"class_weight names {key!r}, not a class of {self.label!r} "
                    f"({', '.join(map(repr, self.classes))}): use those values"
                )
            weights[position] = float(weight)
        self._weights = weights

    def __call__(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """The labels (class indices or floats) and the row weights (None: all 1)."""
        column = _column(batch, self.label)
        if column.null_count:
            raise InvalidArgumentError(
                f"the label {self.label!r} is NULL in {column.null_count} rows: filter them "
                f"out (WHERE {self.label} IS NOT NULL)"
            )
        if self.classes is None:
            try:
                return _numbers(column), None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise InvalidArgumentError(
                    f"the label {self.label!r} is {column.type}: regression needs numbers ({err})"
                ) from None
        index = self._class_index(column)
        weights = None if self._weights is None else self._weights[index]
        return index.astype(np.float32), weights

    def _class_index(self, column: pa.Array | pa.ChunkedArray) -> np.ndarray:
        assert self.classes is not None
        return class_indices(column, self.classes, self.label)


def _class_position(classes: Sequence[Any], key: Any) -> int | None:
    """Where ``key`` is in ``classes`` (a JSON key ``"1"`` finds the class 1), or None."""
    for position, value in enumerate(classes):
        if type(value) is type(key) and value == key:
            return position
    for position, value in enumerate(classes):
        if str(value) == str(key) or (isinstance(key, str) and str(value).lower() == key.lower()):
            return position
    return None


# -- the iterator -------------------------------------------------------------------------


class _Reader:
    """One SELECT's rows as XGBoost's inputs, pass after pass (what the DataIter calls).

    Args:
        feeder: the feeder of the SELECT (each pass reads its epoch 0 again).
        features: the model's features.
        targets: the label and weight of a batch.
        rows: the rows handed to XGBoost at a time (whole read batches are joined).
    """

    def __init__(
        self,
        feeder: PartitionFeeder,
        features: Sequence[FeatureLike],
        targets: _Targets,
        rows: int,
    ) -> None:
        self.feeder, self.features, self.targets, self.rows = feeder, features, targets, rows
        self.types = feature_types(features)
        self.names = feature_names(features)
        self.passes: list[int] = []
        """Rows delivered in each complete pass."""
        self.delivered = 0
        """Rows delivered so far in the pass being read."""
        self._batches: Iterator[pa.RecordBatch] | None = None

    @property
    def expected_rows(self) -> int | None:
        """The rows of a pass: counted, else the plan's estimate, else None."""
        plan = self.feeder.plan
        return plan.rows if plan.rows is not None else plan.estimated_rows

    def next(self) -> dict[str, Any] | None:
        """The next chunk's arguments of XGBoost's ``input_data``; None at a pass's end."""
        if self._batches is None:
            self._batches, self.delivered = iter(self.feeder.epoch(0)), 0
        try:
            batch = next(self._batches, None)
            if batch is None:
                self.passes.append(self.delivered)
                self.reset()
                return None
            self.delivered += batch.num_rows
            label, weight = self.targets(batch)
            data = encode(batch, self.features)
        except BaseException:
            self.reset()  # the read-ahead threads stop now, not when XGBoost lets go
            raise
        chunk: dict[str, Any] = {
            "data": data,
            "label": label,
            "feature_types": self.types,
        }
        if self.names is not None:
            chunk["feature_names"] = self.names
        if weight is not None:
            chunk["weight"] = weight
        return chunk

    def reset(self) -> None:
        """Stop the pass being read (its read-ahead threads stop); the next one restarts."""
        batches, self._batches = self._batches, None
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _data_iter(reader: _Reader, cache_prefix: str | None) -> xgboost.DataIter:
    """The :class:`xgboost.DataIter` over ``reader`` (external memory with a cache prefix)."""
    import xgboost

    class FeedIter(xgboost.DataIter):
        """Hands XGBoost the feeder's batches, one ``next`` at a time."""

        def next(self, input_data: Callable[..., None]) -> bool:
            chunk = reader.next()
            if chunk is None:
                return False
            input_data(**chunk)
            return True

        def reset(self) -> None:
            reader.reset()

    return FeedIter(cache_prefix=cache_prefix, release_data=True)


IN_MEMORY_CELLS = 2_000_000_000
"""A quantized matrix of at most this many cells (rows x features, about a byte each) is
held in memory (``QuantileDMatrix``); a larger one goes to XGBoost's external memory."""


def matrix_kind(rows: int | None = None, features: int = 1) -> str:
    """``QuantileDMatrix`` for a matrix small enough, else ``ExtMemQuantileDMatrix``.

    ``QuantileDMatrix`` for a matrix of at most :data:`IN_MEMORY_CELLS` quantized cells (the
    raw rows are never held either way; in memory it trains 15-20 % faster, lineitem SF 1:
    61.6 s against 73.5 s from DuckDB), else ``ExtMemQuantileDMatrix`` when the installed
    XGBoost has it (its pages cached in a temporary folder).
    """
    xgb = xgboost_module()
    if rows is not None and rows * max(features, 1) <= IN_MEMORY_CELLS:
        return "QuantileDMatrix"
    return "ExtMemQuantileDMatrix" if hasattr(xgb, "ExtMemQuantileDMatrix") else "QuantileDMatrix"


def _matrix(reader: _Reader, kind: str, cache: str, ref: xgboost.DMatrix | None) -> xgboost.DMatrix:
    """The quantized matrix of ``reader``'s rows (quantile cuts of ``ref`` when given)."""
    import xgboost

    nthread = threads(reader.expected_rows)
    if kind == "ExtMemQuantileDMatrix":
        prefix = os.path.join(cache, "validation" if ref is not None else "training")
        return xgboost.ExtMemQuantileDMatrix(
            _data_iter(reader, prefix), ref=ref, nthread=nthread, enable_categorical=True
        )
    return xgboost.QuantileDMatrix(
        _data_iter(reader, None), ref=ref, nthread=nthread, enable_categorical=True
    )


# -- training -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """How the SELECTs are read: the source, rows per chunk, where progress goes."""

    source: Any
    rows: int
    progress: Callable[[str], None] | None

    def reader(
        self, sql: str | Plan, what: str, features: Sequence[FeatureLike], targets: _Targets
    ) -> _Reader:
        """A reader of ``sql`` (``what``: training or validation) reporting its rows read."""
        holder: list[_Reader] = []

        def report(step: Progress) -> None:
            if self.progress is not None and holder:
                self.progress(
                    f"gbdt: {what} pass {len(holder[0].passes) + 1}: {step.rows:,} rows read "
                    f"({step.partitions_done}/{step.partitions_total} partitions)"
                )

        feeder = PartitionFeeder(sql, self.source, batch_size=self.rows, progress=report)
        holder.append(_Reader(feeder, features, targets, self.rows))
        return holder[0]


def _params(
    task: str,
    classes: list[Any] | None,
    max_depth: int,
    learning_rate: float | None,
    seed: int,
    min_child_weight: float | None = None,
) -> dict[str, Any]:
    """XGBoost's training parameters (checked)."""
    if task not in OBJECTIVES:
        raise InvalidArgumentError(f"task must be one of {', '.join(OBJECTIVES)}, not {task!r}")
    rate = DEFAULT_LEARNING_RATE if learning_rate is None else learning_rate
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
        raise InvalidArgumentError(f"learning_rate must be a number in (0, 1], got {rate!r}")
    params: dict[str, Any] = {
        "objective": OBJECTIVES[task],
        "tree_method": "hist",
        "max_depth": check_int(max_depth, "max_depth", 1),
        "learning_rate": float(rate),
        "seed": check_int(seed, "seed", 0),
    }
    if min_child_weight is not None:
        params["min_child_weight"] = float(min_child_weight)
    if task == "regression":
        if classes is not None:
            raise InvalidArgumentError("regression has no classes: pass classes=None")
        return params
    want = "2" if task == "binary" else "at least 3"
    if classes is None or (len(classes) != 2 if task == "binary" else len(classes) < 3):
        raise InvalidArgumentError(f"a {task} task needs {want} classes, got {classes!r}")
    if task == "multiclass":
        params["num_class"] = len(classes)
    return params


def train_gbdt(
    training_sql: str | Plan,
    validation_sql: str | None,
    source: Any,
    *,
    label: str,
    task: str,
    classes: list[Any] | None,
    features: Sequence[FeatureLike],
    trees: int = 100,
    max_depth: int = 6,
    learning_rate: float | None = None,
    seed: int = 0,
    class_weight: Mapping[Any, float] | None = None,
    batch_size: int = PAGE_ROWS,
    progress: Callable[[str], None] | None = None,
    min_child_weight: float | None = None,
) -> GbdtModel:
    """Train boosted trees on the rows of ``training_sql``, read by the Feeder.

    Args:
        training_sql: the training split's SELECT (every feature and the label), or its
            :class:`~sqlfeed.plans.model.Plan`.
        validation_sql: the validation split's SELECT, evaluated after every tree (its
            metric goes to ``progress`` and :attr:`GbdtModel.history`); None: none.
        source: where both run (anything :func:`sqlfeed.connect` takes; one opened here
            is closed after training).
        label: the label column.
        task: ``binary``, ``multiclass`` or ``regression``.
        classes: the label values of a classification, in class-index order (binary: the
            second is the positive class); None for regression.
        features: the model's features (numeric, time, categorical).
        trees: boosting rounds.
        max_depth: the deepest a tree grows.
        learning_rate: the shrinkage of each tree (None: :data:`DEFAULT_LEARNING_RATE`).
        seed: XGBoost's random seed.
        min_child_weight: XGBoost's least hessian sum in a leaf (None: XGBoost's 1).
        class_weight: the weight of each class's rows (label value -> weight; classes not
            named weigh 1).
        batch_size: rows handed to XGBoost at a time (at least :data:`PAGE_ROWS`).
        progress: called with a line of text after each partition read and every tenth
            of the trees.

    Returns:
        The trained :class:`GbdtModel` (its rows per pass, matrix kind and history too).

    Raises:
        InvalidArgumentError: bad options, no training rows, a label value not in
            ``classes``, a NULL label, or a feature column the rows lack.
        MissingDependencyError: XGBoost is not installed.
    """
    xgb = xgboost_module()
    params = _params(task, classes, max_depth, learning_rate, seed, min_child_weight)
    rounds = check_int(trees, "trees", 1)
    if not features:
        raise InvalidArgumentError("the gbdt family needs at least one feature")
    targets = _Targets(label, task, None if task == "regression" else classes, class_weight)
    opened = connect(source)
    try:
        read = _Read(opened, max(check_int(batch_size, "batch_size", 1), PAGE_ROWS), progress)
        training = read.reader(training_sql, "training", features, targets)
        validation = (
            None
            if validation_sql is None
            else read.reader(validation_sql, "validation", features, targets)
        )
        kind = matrix_kind(training.expected_rows, len(features))
        history: dict[str, dict[str, list[float]]] = {}
        with tempfile.TemporaryDirectory(prefix="sqlfeed-gbdt-") as cache:
            dtrain = _matrix(training, kind, cache, None)
            if not training.passes or training.passes[-1] == 0:
                raise InvalidArgumentError(
                    "the training SELECT returned no rows: check its WHERE and the split"
                )
            params["nthread"] = threads(training.passes[-1])
            evals = (
                []
                if validation is None
                else [(_matrix(validation, kind, cache, dtrain), "validation")]
            )
            booster = xgb.train(
                params,
                dtrain,
                num_boost_round=rounds,
                evals=evals,
                evals_result=history,
                verbose_eval=False,
                callbacks=[] if progress is None else [_reporter(progress, rounds)],
            )
            del dtrain, evals  # the cache files go with the folder
    finally:
        if opened is not source:
            opened.close()
    booster.set_attr(**{_MATRIX_ATTR: kind})
    return GbdtModel(
        booster,
        features,
        task,
        classes,
        training_passes=training.passes,
        validation_passes=[] if validation is None else validation.passes,
        history=history.get("validation", {}),
    )


def _reporter(progress: Callable[[str], None], rounds: int) -> xgboost.callback.TrainingCallback:
    """A training callback reporting every tenth of the trees with the validation metric."""
    import xgboost

    every = max(1, rounds // 10)

    class Report(xgboost.callback.TrainingCallback):
        def after_iteration(
            self, model: Any, epoch: int, evals_log: xgboost.callback.TrainingCallback.EvalsLog
        ) -> bool:
            done = epoch + 1
            if done % every == 0 or done == rounds:
                metrics = "".join(
                    f", {data} {name} {values[-1]:.4f}"
                    for data, logged in evals_log.items()
                    for name, values in logged.items()
                    if values and isinstance(values[-1], float)
                )
                progress(f"gbdt: {done}/{rounds} trees{metrics}")
            return False

    return Report()


# -- the model ----------------------------------------------------------------------------


class GbdtModel:
    """A trained XGBoost booster with the features it reads (the gbdt family's model).

    Args:
        booster: the trained :class:`xgboost.Booster`.
        features: its features, in its column order.
        task: ``binary``, ``multiclass`` or ``regression``.
        classes: the label values of a classification (None for regression).
        training_passes: rows read in each pass over the training SELECT.
        validation_passes: rows read in each pass over the validation SELECT.
        history: the validation metric of every tree (metric name -> values).
    """

    def __init__(
        self,
        booster: xgboost.Booster,
        features: Sequence[FeatureLike],
        task: str,
        classes: list[Any] | None,
        *,
        training_passes: Sequence[int] = (),
        validation_passes: Sequence[int] = (),
        history: Mapping[str, list[float]] | None = None,
    ) -> None:
        if task not in OBJECTIVES:
            raise InvalidArgumentError(f"task must be one of {', '.join(OBJECTIVES)}, not {task!r}")
        self.booster = booster
        self.features = list(features)
        self.task = task
        self.classes = classes
        self.training_passes = list(training_passes)
        self.validation_passes = list(validation_passes)
        self.history = dict(history or {})
        self._types = feature_types(self.features)
        self._names = feature_names(self.features)
        self._nthread: int | None = None
        self._lock = threading.Lock()
        """One prediction at a time: a worker's reader threads share the booster, and
        XGBoost refuses a prediction while another thread's ``set_param`` reconfigures it."""

    @property
    def matrix(self) -> str | None:
        """The matrix it was trained on (``ExtMemQuantileDMatrix`` or ``QuantileDMatrix``)."""
        return self.booster.attr(_MATRIX_ATTR)

    @property
    def training_rows(self) -> int:
        """Rows of the training SELECT (the last pass's count)."""
        return self.training_passes[-1] if self.training_passes else 0

    def __repr__(self) -> str:
        return (
            f"GbdtModel({self.task}, {len(self.features)} features, "
            f"{self.booster.num_boosted_rounds()} rounds, {self.matrix})"
        )

    def save(self, folder: Path) -> dict[str, Any]:
        """Write :data:`MODEL_FILE` (XGBoost's JSON format) into ``folder``.

        Returns:
            What the manifest records of it: ``file``, ``xgboost`` (version) and
            ``matrix``.
        """
        xgb = xgboost_module()
        self.booster.save_model(os.fspath(Path(folder) / MODEL_FILE))
        return {"file": MODEL_FILE, "xgboost": xgb.__version__, "matrix": self.matrix}

    @classmethod
    def load(
        cls,
        folder: Path,
        features: Sequence[FeatureLike],
        task: str,
        classes: list[Any] | None,
    ) -> GbdtModel:
        """The model :meth:`save` wrote into ``folder``.

        Raises:
            InvalidArgumentError: the folder has no :data:`MODEL_FILE`, or its booster
                reads another number of features.
            MissingDependencyError: XGBoost is not installed.
        """
        xgb = xgboost_module()
        path = Path(folder) / MODEL_FILE
        if not path.is_file():
            raise InvalidArgumentError(f"{path} does not exist: the folder is not a gbdt model")
        booster = xgb.Booster()
        booster.load_model(os.fspath(path))
        if booster.num_features() != len(features):
            raise InvalidArgumentError(
                f"{path} reads {booster.num_features()} features, the manifest lists "
                f"{len(features)}: the folder was changed by hand"
            )
        return cls(booster, features, task, classes)

    def predict_batch(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """Predictions for ``batch``'s rows.

        Returns:
            binary: P(second class), shape ``(n,)``; multiclass: ``(n, classes)``
            probabilities; regression: ``(n,)`` values.

        Raises:
            InvalidArgumentError: a feature column is missing or of an unreadable type.
        """
        xgb = xgboost_module()
        data = encode(batch, self.features)
        if not len(data):
            width = (len(self.classes or ()),) if self.task == "multiclass" else ()
            return np.zeros((0, *width), dtype=np.float32)
        nthread = threads(len(data))
        matrix = xgb.DMatrix(
            data,
            feature_types=self._types,
            feature_names=self._names,
            enable_categorical=True,
            nthread=nthread,
        )
        with self._lock:
            if nthread != self._nthread:
                self.booster.set_param({"nthread": nthread})
                self._nthread = nthread
            predicted = np.asarray(self.booster.predict(matrix))
        if self.task == "multiclass":
            return predicted.reshape(len(data), -1)
        if predicted.ndim != 1:
            raise UnsupportedError(
                f"the booster predicts shape {predicted.shape} for a {self.task} task"
            )
        return predicted
