"""Step 5 of :func:`sqlfeed.ml.train`: fit the model from sqlfeed's feed.

A training split small enough to keep (:data:`CACHE_ROWS` rows) is read once, kept in
memory and reshuffled row by row every epoch; a larger one is read from the database every
epoch through :class:`sqlfeed.tf.Feed`, shuffled by partition order and a row buffer. With
``checkpoint_dir`` the feed is always read (never cached) and its position is saved with the
model's weights (:func:`sqlfeed.tf.FeedCheckpoint` before :func:`sqlfeed.tf.BackupAndRestore`): a
training killed and run again resumes in the same epoch, at the same batch, and every row is
seen once per epoch across the kill.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import sqlfeed.tf as sqlfeed_tf
from sqlfeed.dialects.optional import require
from sqlfeed.errors import SqlfeedError
from sqlfeed.feed.tensors import MASK_SUFFIX
from sqlfeed.ml.data import TrainingData, class_weights
from sqlfeed.ml.gbdt import train_gbdt
from sqlfeed.ml.keras_model import build_model
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.replicas import ReplicaInput, build_from_spec, job_lines, replica_input

__all__ = ["CACHE_ROWS", "Fitted", "auto_epochs", "fit_gbdt", "fit_keras"]

CACHE_ROWS = 200_000
"""Training splits of at most this many rows are read once and kept in memory."""
SHUFFLE_ROWS = 65_536
"""The row shuffle buffer of a training split read every epoch."""
TARGET_STEPS = 2_000
"""``epochs=None``: enough epochs for about this many steps (3 to 200 epochs)."""


STOP_SHARE = 0.2
"""Early stopping keeps this share of the training split out of fitting (a tenth: diabetes
``dnn`` R² 0.54 against Ridge's 0.61; a fifth: 0.57)."""
MIN_STOP_ROWS = 10
"""Fewer rows kept out than this, and there is no early stopping."""
PATIENCE_STEPS = 100
"""Early stopping waits about this many steps (5 to 20 epochs) for a better loss."""


def early_stopping(options: TrainOptions, training_rows: int) -> bool:
    """Whether a training stops early.

    ``epochs=None`` of a network (``dnn``, ``wide_deep``) on a training split kept in memory
    (:data:`CACHE_ROWS`), one pipeline, no checkpoints. A fifth of the training split (by
    the same hash) is then scored every epoch and the weights of the best epoch are kept:
    small tables trained for the many epochs they need otherwise overfit (a 64-32 network on
    355 rows of diabetes: R² 0.39 after 200 epochs with dropout, -0.10 without; 0.57 stopped
    early, Ridge 0.61). ``linear`` (convex) trains on the whole split.
    """
    return (
        options.epochs is None
        and options.family in ("dnn", "wide_deep")
        and options.checkpoint_dir is None
        and options.replicas == 1
        and training_rows <= CACHE_ROWS
    )


@dataclass
class Fitted:
    """A trained model and how its training went."""

    family: str
    model: Any
    """The Keras model, or the :class:`sqlfeed.ml.gbdt.GbdtModel`."""
    epochs: int
    seconds: float
    history: dict[str, list[float]] = field(default_factory=dict)
    rows_per_second: float = 0.0
    notes: list[str] = field(default_factory=list)
    job: dict[str, Any] | None = None
    """``replicas`` > 1: the job that fed the replicas (its queue, status and rows fed)."""
    early_stopping: dict[str, Any] | None = None
    """With early stopping: the slice scored, the epochs run and the epoch kept."""


def auto_epochs(rows: int, batch_size: int) -> int:
    """The epochs of ``epochs=None``: about :data:`TARGET_STEPS` steps, 3 to 200 epochs."""
    steps = max(1, math.ceil(rows / batch_size))
    return max(3, min(200, math.ceil(TARGET_STEPS / steps)))


def fit_keras(data: TrainingData, say: Callable[[str], None]) -> Fitted:
    """Build the Keras model of ``data`` and fit it; ``say`` gets a line per epoch."""
    _quiet_tensorflow()
    opts = data.options
    epochs = opts.epochs or auto_epochs(data.rows["training"], opts.batch_size)
    replicas = None
    if opts.replicas > 1:  # the devices first: the CPU splits only before TensorFlow starts
        replicas = replica_input(
            data,
            lambda tf: _prepare_fn(data, tf, weighted=True),
            _column_options(data),
            epochs=epochs,
        )
    tf = require("tensorflow", "sqlfeed.ml's Keras models")
    keras = require("keras", "sqlfeed.ml's Keras models")
    with replicas.strategy.scope() if replicas else contextlib.nullcontext():
        model = build_model(
            data.features,
            data.fed,
            task=data.task,
            classes=len(data.classes or []),
            label_scale=data.label_scale,
            options=opts,
        )
    validation: dict[str, Any] = {}
    if replicas is None:
        train, callbacks, how = _training_input(data, tf, keras)
        weights = class_weights(data)
        validation, stopping = _validation_input(data, tf, keras, epochs)
        callbacks += stopping
    else:  # class weights are sample weights of the replicas' input pipelines
        train, callbacks, how = (
            replicas.dataset,
            _replica_callbacks(data, replicas, keras),
            replicas.how,
        )
        weights = None
        build_from_spec(model, replicas)
        if not replicas.replicated:
            say(f"replicas: {how}")
    say(
        f"training {opts.family} ({model.count_params():,} weights) for {epochs} epochs of "
        f"{data.rows['training']:,} rows in batches of {opts.batch_size} ({how})"
    )
    printer = _printer(keras, say, epochs, data.rows["training"])
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():  # Keras on a dataset of unknown length
            warnings.filterwarnings("ignore", message=".*ran out of data.*")
            history = model.fit(
                train,
                epochs=epochs,
                verbose=0,
                callbacks=[*callbacks, printer],
                class_weight=weights,
                shuffle=False,  # the input pipeline shuffles
                **validation,
            )
        seconds = time.perf_counter() - started
        run = len(history.history.get("loss", [])) or epochs
        fitted = Fitted(opts.family, model, run, seconds)
        _stopped(data, callbacks, fitted, say)
        if replicas is not None:
            _job_summary(data, replicas, fitted, say)
    finally:
        if replicas is not None:
            replicas.close()
    rows = fitted.job["rows_fed"] if fitted.job else epochs * data.rows["training"]
    fitted.rows_per_second = rows / seconds if seconds else 0.0
    fitted.history = {k: [float(v) for v in vals] for k, vals in history.history.items()}
    return fitted


def _stopped(
    data: TrainingData, callbacks: list[Any], fitted: Fitted, say: Callable[[str], None]
) -> None:
    """Record (and say) where early stopping stopped and which epoch it kept."""
    stop = next((c for c in callbacks if hasattr(c, "restore_best_weights")), None)
    if stop is None:
        return
    best = int(getattr(stop, "best_epoch", 0)) + 1
    fitted.early_stopping = {
        "sql": data.stop_sql,
        "rows": data.stop_rows,
        "epochs_run": fitted.epochs,
        "best_epoch": best,
        "best_val_loss": float(stop.best),
    }
    say(f"early stopping: {fitted.epochs} epochs run, the weights of epoch {best} kept")


def _column_options(data: TrainingData) -> dict[str, Any]:
    """The feed's column options: the label, the features with masks, numbers as float64."""
    return {
        "label": data.label,
        "features": data.feature_names,
        "masks": True,
        "float_dtype": "float64",
        "time_unit": "us",
    }


def _replica_callbacks(data: TrainingData, replicas: ReplicaInput, keras: Any) -> list[Any]:
    """With ``checkpoint_dir``: every worker's deliveries saved with the model's weights."""
    if data.options.checkpoint_dir is None:
        return []
    folder = Path(data.options.checkpoint_dir)
    every = _save_every(data)
    return [
        sqlfeed_tf.FeedCheckpoint(replicas.feeds, folder, save_freq=every),
        sqlfeed_tf.BackupAndRestore(folder, save_freq=every),
    ]


def _job_summary(
    data: TrainingData, replicas: ReplicaInput, fitted: Fitted, say: Callable[[str], None]
) -> None:
    """The job after training: ``fitted.job``, a note of the manifest, progress lines.

    Raises:
        SqlfeedError: the job is not complete (a worker stopped before its share).
    """
    status, rows, share = replicas.status()
    if not status.complete:
        raise SqlfeedError(
            f"the training job in {replicas.queue_url} is not complete after training "
            f"({status.per_epoch}): run the training again"
        )
    fed = sum(int(worker["rows"]) for worker in status.workers)
    fitted.job = {
        "queue": replicas.queue_url,
        "replicas": len(status.workers),
        "replicated": replicas.replicated,
        "batches_per_worker": share,
        "rows_per_epoch": rows,
        "rows_fed": fed,
        "status": status.to_dict(),
    }
    data.notes.append(
        f"trained on {len(status.workers)} replicas ({replicas.how}); the job fed {fed:,} of "
        f"{fitted.epochs} x {rows:,} rows (even batches)"
    )
    for line in job_lines(status, rows, fitted.epochs):
        say(line)


def _training_input(data: TrainingData, tf: Any, keras: Any) -> tuple[Any, list[Any], str]:
    """The training dataset, its callbacks (checkpoints) and a phrase saying how it is fed."""

    opts = data.options
    common = _column_options(data)
    query: Any = data.plan or data.training_sql
    prepare = _prepare_fn(data, tf)
    rows = data.rows["training"]
    if opts.checkpoint_dir is None and rows <= CACHE_ROWS:
        fitted_rows = data.fit_sql or query  # early stopping: the rest of the training split
        read = sqlfeed_tf.dataset(fitted_rows, data.source, batch_size=8192, **common)
        train = (
            read.map(prepare)
            .unbatch()
            .cache()
            .shuffle(rows, seed=opts.seed, reshuffle_each_iteration=True)
            .batch(opts.batch_size)
            .prefetch(2)
        )
        how = "read once, kept in memory, reshuffled every epoch"
        if data.stop_sql:
            how += (
                f"; early stopping on {data.stop_rows:,} rows of the training split kept "
                "out (val_* below), the best epoch kept"
            )
        return train, [], how
    feed = sqlfeed_tf.Feed(
        query,
        data.source,
        batch_size=opts.batch_size,
        shuffle_buffer=min(rows, SHUFFLE_ROWS),
        seed=opts.seed,
        **common,
    )
    train = feed.dataset.map(prepare, num_parallel_calls=2).prefetch(2)
    if opts.checkpoint_dir is None:
        return train, [], "read from the database every epoch, shuffled"
    folder = Path(opts.checkpoint_dir)
    every = _save_every(data)
    callbacks = [
        sqlfeed_tf.FeedCheckpoint(feed, folder, save_freq=every),
        sqlfeed_tf.BackupAndRestore(folder, save_freq=every),
    ]
    return train, callbacks, f"checkpointed in {folder} every {every} steps"


def _validation_input(
    data: TrainingData, tf: Any, keras: Any, epochs: int
) -> tuple[dict[str, Any], list[Any]]:
    """``fit``'s validation keywords and callbacks.

    With early stopping, the slice of the training split kept out is scored every epoch
    (``val_*`` in the progress) and the best epoch's weights kept; else a training split
    kept in memory is scored on the validation split about ten times in all; a larger one
    only once trained (by :func:`sqlfeed.ml.evaluate`'s exact metrics).
    """
    if data.options.checkpoint_dir is not None or data.rows["training"] > CACHE_ROWS:
        return {}, []
    common = _column_options(data)
    sql = data.stop_sql or data.validation_sql
    read = sqlfeed_tf.dataset(sql, data.source, batch_size=8192, **common)
    validation = read.map(_prepare_fn(data, tf)).cache()
    if data.stop_sql is None:
        return {"validation_data": validation, "validation_freq": _shown_every(epochs)}, []
    steps = max(1, math.ceil(data.rows["training"] / data.options.batch_size))
    patience = max(5, min(20, math.ceil(PATIENCE_STEPS / steps)))
    stop = keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=patience, restore_best_weights=True
    )
    return {"validation_data": validation}, [stop]


def _shown_every(epochs: int) -> int:
    """Progress shows (and small trainings validate) every this many epochs."""
    return 1 if epochs <= 20 else max(1, epochs // 10)


def _save_every(data: TrainingData) -> int:
    """Checkpoints every this many steps: about four an epoch, at most 200 steps apart."""
    steps = max(1, math.ceil(data.rows["training"] / data.options.batch_size))
    return max(1, min(200, steps // 4))


def _prepare_fn(data: TrainingData, tf: Any, *, weighted: bool = False) -> Callable[..., Any]:
    """The input pipeline's map: numbers to float64, the label to its class index.

    With ``weighted`` and class weights, each row's class weight as a third element.
    """
    numeric = [f.name for f in data.features if f.family != "categorical"]
    table = None
    if data.classes is not None:
        label_dtype = _label_dtype(data)
        keys = [_label_key(c, label_dtype) for c in data.classes]
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys, dtype=label_dtype),
                tf.range(len(keys), dtype=tf.int64),
            ),
            default_value=-1,
        )

    weights = class_weights(data) if weighted else None
    by_index = None
    if weights is not None:
        by_index = tf.constant([weights[i] for i in range(len(weights))], dtype=tf.float32)

    def prepare(features: Any, label: Any) -> Any:
        ready = dict(features)
        for name in numeric:
            ready[name] = tf.cast(features[name], tf.float64)
        for name in data.feature_names:
            ready[name + MASK_SUFFIX] = features[name + MASK_SUFFIX]
        if table is None:
            return ready, tf.cast(label, tf.float32)
        if label.dtype == tf.bool:
            label = tf.cast(label, tf.int64)
        elif label.dtype.is_floating:  # whole numbers (checked): matched as integers
            label = tf.round(label)
        index = table.lookup(tf.cast(label, table.key_dtype))
        if by_index is None:
            return ready, index
        return ready, index, tf.gather(by_index, index)

    return prepare


def _label_dtype(data: TrainingData) -> Any:
    tf = require("tensorflow", "sqlfeed.ml's Keras models")
    label_type = data.schema.field(data.label).type
    if pa.types.is_string(label_type) or pa.types.is_large_string(label_type):
        return tf.string
    return tf.int64  # booleans as 0/1; doubles and decimals hold whole numbers (checked)


def _label_key(value: Any, dtype: Any) -> Any:
    if dtype.name == "string":
        return str(value)
    return int(value)


def _printer(keras: Any, say: Callable[[str], None], epochs: int, rows: int) -> Any:
    """A Keras callback printing one line per epoch: rows/s, loss and metrics."""

    class Printer(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            seconds = time.perf_counter() - self.started
            shown = "  ".join(f"{k} {float(v):.4f}" for k, v in (logs or {}).items())
            if (epoch + 1) % _shown_every(epochs) == 0 or epoch + 1 == epochs:
                say(
                    f"epoch {epoch + 1}/{epochs} done in {seconds:.1f}s, "
                    f"{rows / max(seconds, 1e-9):,.0f} rows/s  {shown}"
                )

    return Printer()


def fit_gbdt(data: TrainingData, say: Callable[[str], None]) -> Fitted:
    """Train the ``gbdt`` family (:func:`sqlfeed.ml.gbdt.train_gbdt`)."""

    opts = data.options
    started = time.perf_counter()
    weights = class_weights(data)
    classes = data.classes or []
    model = train_gbdt(
        data.plan or data.training_sql,  # the plan made once (a materialized split read)
        data.validation_sql,
        data.source,
        label=data.label,
        task=data.task,
        classes=data.classes,
        features=data.features,
        trees=opts.trees,
        max_depth=opts.max_depth,
        learning_rate=opts.learning_rate,
        seed=opts.seed,
        class_weight=None if weights is None else {classes[i]: w for i, w in weights.items()},
        progress=say,
        min_child_weight=_min_child_weight(data),
    )
    seconds = time.perf_counter() - started
    passes = sum(model.training_passes)
    fitted = Fitted("gbdt", model, opts.trees, seconds, dict(model.history))
    fitted.rows_per_second = passes / seconds if seconds else 0.0
    return fitted


LEAF_ROWS = 20
"""``gbdt``: about this many rows in a leaf at least, as scikit-learn's
HistGradientBoosting's ``min_samples_leaf`` (which the accuracy parity is measured against)."""


def _min_child_weight(data: TrainingData) -> float | None:
    """XGBoost's ``min_child_weight`` (a hessian sum) worth :data:`LEAF_ROWS` rows.

    Each row weighs 1 in a regression and q(1 - q) in a binary task (q the training share of
    the second class); a multiclass task keeps XGBoost's default (its per-class hessians are
    small, and a row count made of them overconstrains the trees).
    """
    if data.task == "regression":
        return float(LEAF_ROWS)
    if data.task == "binary" and data.classes:
        counts = [data.class_counts[str(c)] for c in data.classes]
        q = counts[1] / sum(counts)
        return LEAF_ROWS * q * (1 - q)
    return None


def _quiet_tensorflow() -> None:
    """TensorFlow's C++ start-up lines off, unless the user asked for them."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
