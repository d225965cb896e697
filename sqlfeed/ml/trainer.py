"""``sqlfeed.ml.train``: a model from a SELECT, in one folder, or nothing at all.

The steps, each checked before the next one runs, nothing written before the training
is known to be possible:

1. the query is validated and its schema read; the label, the key and the output folder
   are checked;
2. the rows are split by a hash of the key (or of the row) into a training and a
   validation SELECT (:mod:`sqlfeed.ml.split`), the same on every engine;
3. one grouped query counts the label's values in each split: NULL labels, a label with
   one value, text labels for regression and an empty validation split are refused; the
   task is chosen (``auto``) and the classes are the training split's label values;
4. exact statistics of the training split only (:func:`sqlfeed.compute_stats`, pushdown)
   give the features and their transforms (:mod:`sqlfeed.ml.features`);
5. the model (:mod:`sqlfeed.ml.keras_model`, or :mod:`sqlfeed.ml.gbdt`) trains from
   sqlfeed's feed of the training SELECT (a small training split is read once and kept in
   memory; a large one is read every epoch); with ``checkpoint_dir`` a killed training
   resumes where it stopped (:func:`sqlfeed.tf.FeedCheckpoint` and Keras's
   ``BackupAndRestore``);
6. the validation metrics (:func:`sqlfeed.ml.evaluate`'s accumulators), then the folder
   (:mod:`sqlfeed.ml.artifact`), renamed into place.

The scratch tables the steps' plans make (PostgreSQL, MySQL/MariaDB) are the run's
(:class:`sqlfeed.ml.run.TrainingRun`): dropped when it ends, whatever the outcome; a
checkpointed run interrupted keeps its training split's, which its resumption reads.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.feed.statistics import compute_stats
from sqlfeed.io import Source, connect
from sqlfeed.ml.artifact import Model, check_target
from sqlfeed.ml.data import TrainingData, class_weights
from sqlfeed.ml.evaluation import evaluate_sql
from sqlfeed.ml.features import Feature, check_columns, choose_features
from sqlfeed.ml.labels import is_number_class, null_label_message
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.run import TrainingRun
from sqlfeed.ml.split import Split, band_sql, split_sql
from sqlfeed.ml.training import (
    MIN_STOP_ROWS,
    STOP_SHARE,
    early_stopping,
    fit_gbdt,
    fit_keras,
)
from sqlfeed.ml.write import write_model
from sqlfeed.plans.planner import plan
from sqlfeed.stats.model import StatsSpec

__all__ = ["prepare", "train"]

MAX_CLASSES = 1000
"""More distinct label values than this is not a classification: say regression."""
AUTO_CLASSES = 20
"""``task="auto"``: an integer label with at most this many values is a class label."""


def train(
    query: str,
    source: Any = None,
    *,
    label: str,
    out: str | os.PathLike[str],
    options: TrainOptions | None = None,
    progress: Callable[[str], None] | None = None,
    **fields: Any,
) -> Model:
    """Train a model on a SELECT's rows and write it to the folder ``out``.

    Args:
        query: the SELECT (any the engine runs; it is validated first).
        source: where it runs (a URL, a :class:`sqlfeed.Source`; default the embedded
            DuckDB).
        label: the label column.
        out: the model folder to write (it must not exist, unless ``overwrite``).
        options: a :class:`TrainOptions`.
        progress: called with a line per step and per epoch (rows/s, loss, metrics).
        **fields: replace fields of ``options`` (``family="gbdt"``, ``epochs=5``,
            ``key="id"``...).

    Returns:
        The written model, opened.

    Raises:
        InvalidArgumentError: bad input, each with one line (an unknown label, NULL labels,
            a label with one value, regression on text, an empty validation split, an
            existing ``out``, a column that cannot be a feature...), before anything is
            written.
    """
    opts = TrainOptions.from_kwargs(options, fields)
    target = Path(out)
    check_target(target, opts.overwrite)
    say = progress or (lambda _line: None)
    started = time.time()
    src = connect(source)
    try:
        run = TrainingRun(query, src, label, target, opts)
        with run.scope():
            data = prepare(query, src, label, opts, say, run)
            fitted = fit_gbdt(data, say) if opts.family == "gbdt" else fit_keras(data, say)
            return write_model(target, data, fitted, started, evaluate_sql, say)
    finally:
        if src is not source:  # opened here from a URL (or the default)
            src.close()


def prepare(
    query: str,
    src: Source,
    label: str,
    opts: TrainOptions,
    say: Callable[[str], None],
    run: TrainingRun | None = None,
) -> TrainingData:
    """Steps 1 to 4: everything but the model.

    ``run``: the training run whose plan of the training split is taken (a resumed run's
    is the interrupted one's); None: a new plan.
    """
    if not isinstance(label, str) or not label:
        raise InvalidArgumentError(f"label must be a column name, not {label!r}")
    parsed = src.parse(query)
    schema = src.schema(parsed)
    if label not in schema.names:
        raise InvalidArgumentError(
            f"unknown label column {label!r}: the query returns {', '.join(schema.names)}"
        )
    if opts.key == label:
        raise InvalidArgumentError("the split key cannot be the label")
    check_columns(schema, label=label, options=opts)  # before any query runs
    split = Split(opts.key, opts.validation)
    training_sql, validation_sql = split_sql(parsed, src, split)
    data = TrainingData(parsed.sql, src, label, opts, split, training_sql, validation_sql, schema)
    _label_counts(data)
    class_weights(data)  # a weight of an unknown label value: refused before training
    if early_stopping(opts, data.rows["training"]):
        _stopping_slice(data, parsed)
    say(
        f"split by {_split_text(split)}: {data.rows['training']:,} training rows, "
        f"{data.rows['validation']:,} validation rows; task {data.task}"
        + (f" ({len(data.classes)} classes)" if data.classes else "")
    )
    step = time.perf_counter()
    kinds = {c: "skip" for c in schema.names if c in {opts.key, *opts.skip}}
    if opts.features is not None:
        kinds |= {c: "skip" for c in schema.names if c not in opts.features and c != label}
    spec = StatsSpec(kinds=kinds, label=label, buckets=opts.buckets, top_k=opts.top_k)
    data.stats = compute_stats(training_sql, src, spec=spec)
    data.features = choose_features(schema, data.stats, label=label, options=opts)
    if data.task == "regression":
        column = data.stats[label]
        std = math.sqrt(column.variance) if column.variance else 1.0
        data.label_scale = (float(column.mean or 0.0), std or 1.0)
    data.fed = _fed_dtypes(data)
    if run is not None:
        data.plan = run.training_plan(training_sql, opts.partitions)
    else:
        data.plan = plan(training_sql, src, partitions=opts.partitions)
    say(
        f"exact statistics of the training split in {time.perf_counter() - step:.1f}s: "
        f"{len(data.features)} features ({_families(data.features)})"
    )
    return data


def _stopping_slice(data: TrainingData, parsed: Any) -> None:
    """The training split cut in two by the same hash.

    A fifth kept out for early stopping (the buckets just above the validation's), the rest
    fitted on; none when that tenth would hold fewer than :data:`MIN_STOP_ROWS` rows.
    """
    split, src = data.split, data.source
    low = split.threshold
    high = low + max(1, round(STOP_SHARE * (split.buckets - low)))
    stop_sql = band_sql(parsed, src, split, low, high)
    rows = src.arrow(f"SELECT COUNT(*) AS n FROM ({stop_sql}) AS q", what="row count")
    count = int(rows.column(0)[0].as_py())
    if count < MIN_STOP_ROWS or count >= data.rows["training"]:
        return
    data.stop_sql, data.stop_rows = stop_sql, count
    data.fit_sql = band_sql(parsed, src, split, high, split.buckets + 1)


def _split_text(split: Split) -> str:
    what = f"a hash of {split.key!r}" if split.key else "a hash of the whole row"
    return f"{what} ({split.fraction:.0%} validation)"


def _families(features: list[Feature]) -> str:
    counts: dict[str, int] = {}
    for f in features:
        counts[f.family] = counts.get(f.family, 0) + 1
    return ", ".join(f"{n} {family}" for family, n in counts.items())


def _label_counts(data: TrainingData) -> None:
    """Step 3: the label's values per split, the checks on them, the task and classes."""
    src, label = data.source, data.label
    quoted = exp.column(label, quoted=True).sql(dialect=src.dialect.sqlglot_dialect)
    counts: dict[str, list[tuple[Any, int]]] = {}
    for split, sql in (("training", data.training_sql), ("validation", data.validation_sql)):
        table = src.arrow(
            f"SELECT {quoted} AS v, COUNT(*) AS n FROM ({sql}) AS q GROUP BY {quoted}",
            what="label count",
        )
        counts[split] = list(
            zip(table.column("v").to_pylist(), table.column("n").to_pylist(), strict=True)
        )
    nulls = sum(n for split in counts.values() for v, n in split if v is None)
    if nulls:
        raise InvalidArgumentError(null_label_message(label, nulls, quoted))
    data.rows = {split: sum(n for _, n in pairs) for split, pairs in counts.items()}
    if not sum(data.rows.values()):
        raise InvalidArgumentError("the SELECT returns no rows: nothing to train on")
    if not data.rows["validation"]:
        raise InvalidArgumentError(
            f"the validation split is empty ({data.rows['training']:,} rows in all): give a "
            "larger validation share, or another key with more distinct values"
        )
    if not data.rows["training"]:
        raise InvalidArgumentError(
            "the training split is empty: give a smaller validation share, or another key "
            "with more distinct values"
        )
    training = counts["training"]
    label_type = data.schema.field(label).type
    data.task = _task(data.options.task, label, label_type, training)
    if data.task != "regression":
        values = sorted((v for v, _ in training), key=_order)
        data.classes = [_jsonable(v) for v in values]
        data.class_counts = {str(_jsonable(v)): n for v, n in training}
        _check_classes(data, counts["validation"])


def _check_classes(data: TrainingData, validation: list[tuple[Any, int]]) -> None:
    """Numeric classes are whole numbers, and every validation label is a training class.

    Numeric classes are matched by value on every engine; the model can only predict the
    training classes.
    """
    classes = data.classes or []
    numbers = [c for c in classes if is_number_class(c)]
    fractional = [c for c in numbers if not float(c).is_integer()]
    if fractional:
        raise InvalidArgumentError(
            f"the label {data.label!r} holds {fractional[0]!r}: a class label is text, a "
            "boolean or a whole number; cast it in the SELECT, or train a regression"
        )
    known = {(_jsonable(v) if not is_number_class(v) else float(v)) for v in classes}
    for value, rows in validation:
        key = float(value) if is_number_class(_jsonable(value)) else _jsonable(value)
        if key not in known:
            raise InvalidArgumentError(
                f"the label {data.label!r} is {value!r} in {rows:,} validation rows and in no "
                "training row: the model could not predict it; filter it out in the SELECT, "
                "or split by another key"
            )


def _task(task: str, label: str, label_type: pa.DataType, values: list[tuple[Any, int]]) -> str:
    distinct = len(values)
    text = pa.types.is_string(label_type) or pa.types.is_large_string(label_type)
    boolean = pa.types.is_boolean(label_type)
    integer = pa.types.is_integer(label_type)
    number = integer or pa.types.is_floating(label_type) or pa.types.is_decimal(label_type)
    if not (text or boolean or number):
        raise InvalidArgumentError(
            f"the label {label!r} is {label_type}: a label is a number, text or a boolean"
        )
    if distinct < 2:
        raise InvalidArgumentError(
            f"the label {label!r} has one value ({values[0][0]!r}) in the training split: "
            "nothing to learn; check the SELECT's WHERE"
        )
    if task == "classification" or (
        task == "auto" and (text or boolean or (integer and distinct <= AUTO_CLASSES))
    ):
        task = "binary" if distinct == 2 else "multiclass"
    elif task == "auto":
        task = "regression"
    if task == "regression" and not number:
        raise InvalidArgumentError(
            f"regression needs a numeric label, and {label!r} is {label_type}: use task "
            "binary/multiclass, or cast the label to a number in the SELECT"
        )
    if task == "binary" and distinct != 2:
        raise InvalidArgumentError(
            f"task binary needs a label with two values; {label!r} has {distinct}: use task "
            "multiclass"
        )
    if task == "multiclass" and distinct > MAX_CLASSES:
        raise InvalidArgumentError(
            f"the label {label!r} has {distinct:,} values, too many classes (at most "
            f"{MAX_CLASSES}): use task regression, or group the values in the SELECT"
        )
    return task


def _order(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, (int, float)):
        return (1, value)
    return (2, str(value))


def _jsonable(value: Any) -> Any:
    """A label value as JSON keeps it (a decimal as a float, an integral float as an int)."""
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    number = float(value)
    return int(number) if number.is_integer() else number


def _fed_dtypes(data: TrainingData) -> dict[str, str]:
    """What the model's inputs take: numbers and times as float64, lookups as fed."""
    fed = {}
    for feature in data.features:
        if feature.family == "categorical":
            fed[feature.name] = "string" if feature.transform["dtype"] == "string" else "int64"
        else:
            fed[feature.name] = "float64"
    return fed
