"""The ``sqlfeed demo`` command: the end-to-end demo on the embedded DuckDB (``make demo``).

It creates a tabular training set (customers and orders, with NULLs and skew), plans a
training SELECT over it, computes its feature statistics in the engine and turns them
into Keras preprocessing layers, creates a job in a lease queue (a SQLite file), and
trains a small Keras model with two synchronous replicas (``MirroredStrategy`` over two
logical CPUs), each fed by its own elastic worker pulling partitions from the job with
even batches. It prints the training progress, how the job's partitions were shared, the
validation metrics, the training and feed throughput, and checks that the feed delivers
every row of the query exactly once.

When TensorFlow was initialised before the demo could split the CPU (the demo run inside
a process that used TensorFlow already), the two workers' batches alternate into one
model instead of two replicas; everything else is the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import duckdb
import numpy as np

import sqlfeed.tf as sqlfeed_tf
from dialects.optional import require
from sqlfeed import Plan, compute_stats, connect, plan
from sqlfeed.cli.common import CommandParser, positive
from sqlfeed.cli.torch_demo import run_torch_demo
from sqlfeed.dispatch import open_queue
from sqlfeed.io import DuckDBSource
from sqlfeed.plans import drop_scratch
from stats.keras import to_keras
from stats.model import StatsSpec

_QUERY = """
SELECT o.order_id, c.segment, c.age, o.amount, o.channel,
       CAST((COALESCE(o.amount, 0) > 100 AND c.segment <> 'basic')
            OR (COALESCE(c.age, 0) > 70 AND o.channel = 'phone') AS INTEGER) AS label
FROM orders AS o
JOIN customers AS c ON c.customer_id = o.customer_id
WHERE (o.amount IS NOT NULL OR c.age > 60) AND o.order_id % 10 {split} 0
"""
TRAINING_QUERY = _QUERY.format(split="<>")
"""The training SELECT: 90 % of the orders (``order_id % 10 <> 0``)."""
VALIDATION_QUERY = _QUERY.format(split="=")
"""The held-out 10 %."""

NUMERIC = ("age", "amount")
CATEGORICAL = ("segment", "channel")
FEATURES = NUMERIC + CATEGORICAL
JOB = "demo"


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``demo`` command."""
    parser = commands.add_parser(
        "demo",
        help="run the main job end to end on an embedded DuckDB",
        description=(
            "Create demo tables in an in-memory DuckDB, compute feature statistics and Keras "
            "preprocessing layers, plan the training SELECT, start a job with two elastic "
            "workers and train a Keras model from it (two synchronous replicas), then print "
            "the validation metric and the feed throughput."
        ),
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the demo table")
    parser.add_argument("--partitions", "-m", type=int, default=16, metavar="M")
    parser.add_argument(
        "--framework",
        choices=("tf", "torch"),
        default="tf",
        help="tf (default): the Keras job above; torch: train a PyTorch model from a "
        "DuckDB file through a DataLoader with two worker processes",
    )
    parser.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> None:
    positive(args.rows, "--rows")
    positive(args.partitions, "--partitions")
    if args.framework == "torch":
        run_torch(rows=args.rows, partitions=args.partitions, out=out)
        return
    run_demo(rows=args.rows, partitions=args.partitions, out=out)


def run_torch(rows: int = 200_000, partitions: int = 16, out: TextIO | None = None) -> None:
    """``sqlfeed demo --framework torch``: the demo tables in a DuckDB file, then
    :func:`sqlfeed.cli.torch_demo.run_torch_demo` (DataLoader worker processes open it)."""
    stream = out or sys.stdout

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    with tempfile.TemporaryDirectory(prefix="sqlfeed-demo-") as tmp:
        path = Path(tmp) / "demo.duckdb"
        with duckdb.connect(str(path)) as connection:
            create_demo_tables(connection, rows)
        say(f"0. created demo tables in {path.name}: {rows} orders")
        run_torch_demo(
            f"duckdb:///{path}", TRAINING_QUERY, VALIDATION_QUERY, say, partitions=partitions
        )


def create_demo_tables(connection: Any, rows: int) -> None:
    """Create ``customers`` and ``orders`` (with NULLs and skew) in a DuckDB connection."""
    customers = max(rows // 10, 1)
    connection.execute(
        f"""
        CREATE OR REPLACE TABLE customers AS
        SELECT i AS customer_id,
               (['basic', 'plus', 'pro'])[1 + (hash(i) % 3)::INT] AS segment,
               CASE WHEN i % 17 = 0 THEN NULL ELSE 18 + (hash(i, 'age') % 70)::INT END AS age
        FROM range({customers}) AS t(i);
        CREATE OR REPLACE TABLE orders AS
        SELECT i AS order_id,
               (hash(i, 'c') % {customers})::BIGINT AS customer_id,
               CASE WHEN i % 23 = 0 THEN NULL
                    ELSE round((hash(i, 'a') % 100000) / 317.0, 2) END AS amount,
               (['web', 'store', 'phone', 'partner'])[1 + (hash(i, 'ch') % 4)::INT] AS channel
        FROM range({rows}) AS t(i);
        """
    )


def run_demo(
    rows: int = 200_000,
    partitions: int = 16,
    out: TextIO | None = None,
    *,
    epochs: int = 2,
    batch_size: int = 1024,
) -> dict[str, float]:
    """Run the demo and print what it does.

    Args:
        rows: orders in the demo table.
        partitions: partitions of the training query.
        out: where to print (default: stdout).
        epochs: training epochs (each one epoch of the job).
        batch_size: the global batch size (split between the two replicas).

    Returns:
        The final metrics: ``accuracy`` and ``auc`` on the validation query, the rows per
        second fed to training (``train_rows_per_second``) and read by the feed alone
        (``feed_rows_per_second``).

    Raises:
        MissingDependencyError: TensorFlow is not installed.
        AssertionError: the feed lost or repeated a row, or the job did not complete.
    """
    stream = out or sys.stdout

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    started = time.perf_counter()
    tf, devices = _tensorflow_with_two_cpus()
    import keras

    with connect("duckdb://") as source, tempfile.TemporaryDirectory(prefix="sqlfeed-demo-") as tmp:
        assert isinstance(source, DuckDBSource)
        training, layers = _prepare_data(source, rows, partitions, say)
        demo = _Demo(say, tf, devices, source, training, layers, epochs, batch_size)
        _show_preprocessing(demo)
        model, fed, trained = _train(demo, keras, f"sqlite:///{Path(tmp) / 'queue.db'}")
        metrics = _validate(demo, model)
        train_rate = fed / trained
        say(
            f"   training consumed {fed:,} rows in {trained:.1f}s "
            f"({train_rate:,.0f} rows/s with the model's work)"
        )
        feed_rate = _check_feed(demo)
        drop_scratch(training, source)
    say(
        f"done in {time.perf_counter() - started:.0f}s: the partitions add up to exactly the "
        "training query's result"
    )
    return {
        "accuracy": float(metrics["accuracy"]),
        "auc": float(metrics["auc"]),
        "train_rows_per_second": train_rate,
        "feed_rows_per_second": feed_rate,
    }


@dataclass
class _Demo:
    """What the demo's steps share."""

    say: Callable[[str], None]
    tf: Any
    devices: list[str]
    """Two logical CPUs for two synchronous replicas, or none (TensorFlow ran already)."""
    source: DuckDBSource
    training: Plan
    layers: dict[str, Any]
    """The Keras preprocessing layers of the features, from the statistics."""
    epochs: int
    batch_size: int

    def prepare_fn(self) -> Callable[[Any, Any], Any]:
        """The input pipeline's map: vocabulary lookups, and masks as floats."""
        tf, layers = self.tf, self.layers

        def prepare(features: Any, label: Any) -> Any:
            """Vocabulary lookups in the input pipeline; masks as floats."""
            ready = {name: features[name] for name in NUMERIC}
            for name in NUMERIC:
                mask = name + sqlfeed_tf.MASK_SUFFIX
                ready[mask] = tf.cast(features[mask], tf.float32)
            for name in CATEGORICAL:
                ready[name] = layers[name](features[name])
            return ready, label

        return prepare


def _feed_options() -> dict[str, Any]:
    """The label, the features and the masked (nullable) numeric features."""
    return {"label": "label", "features": list(FEATURES), "masks": list(NUMERIC)}


def _prepare_data(
    source: DuckDBSource, rows: int, partitions: int, say: Callable[[str], None]
) -> tuple[Plan, dict[str, Any]]:
    """Steps 1 to 3: the demo tables, the training plan, and the Keras layers of its stats."""
    step = time.perf_counter()
    create_demo_tables(source.connection, rows)
    say(f"1. created demo tables: {rows} orders ({time.perf_counter() - step:.2f}s)")

    training = plan(TRAINING_QUERY, source, partitions=partitions, scratch="main")
    say(f"2. planned {training.num_partitions} partitions: {training.strategy}")
    say(f"   why: {training.reason}")
    say(f"   columns: {', '.join(training.columns)}")

    step = time.perf_counter()
    spec = StatsSpec(label="label", buckets=8, top_k=10, kinds={"order_id": "skip"})
    stats = compute_stats(TRAINING_QUERY, source, spec=spec)
    say(f"3. feature statistics in the engine ({time.perf_counter() - step:.2f}s):")
    for column in stats.columns.values():
        if column.kind == "numeric":
            head = column.boundaries[:3]
            say(
                f"   {column.name}: mean {column.mean:.2f}, std {column.stddev:.2f}, "
                f"{column.null_rate:.1%} NULL, boundaries {head}..."
            )
        elif column.kind == "categorical":
            say(f"   {column.name}: {column.distinct} values, top {column.vocabulary[:3]}")
    return training, to_keras(stats, list(FEATURES))


def _training_input(demo: _Demo, queue_url: str) -> tuple[Any, Any, str]:
    """The distribution strategy, the training dataset from the job, and how it is fed."""
    tf, devices, prepare = demo.tf, demo.devices, demo.prepare_fn()
    job_options = {
        **_feed_options(),
        "job": JOB,
        "queue": queue_url,
        "epochs": demo.epochs,
        "even_batches": True,
        "seed": 7,
        "worker_id": "worker",
    }
    if not devices:
        # One thread takes from both workers in turn, so each prefetches in a thread of
        # its own: a worker's epoch ends only once the other one has its share too.
        job_options["prefetch"] = 2
    make = sqlfeed_tf.input_fn(
        demo.training, demo.source, batch_size=demo.batch_size, **job_options
    )
    if devices:
        strategy = tf.distribute.MirroredStrategy(devices)
        train = strategy.distribute_datasets_from_function(
            lambda context: make(context).map(prepare),
            options=tf.distribute.InputOptions(
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
                experimental_fetch_to_device=False,
            ),
        )
        how = f"MirroredStrategy over {len(devices)} logical CPUs, one worker per replica"
    else:
        strategy = tf.distribute.get_strategy()
        pipelines = [make(tf.distribute.InputContext(2, i, 2)).map(prepare) for i in range(2)]
        train = tf.data.Dataset.choose_from_datasets(
            pipelines, tf.data.Dataset.range(2).repeat(), stop_on_empty_dataset=False
        )
        how = (
            "TensorFlow was initialised before the CPU could be split: the two workers' "
            "batches alternate into one model"
        )
    return strategy, train, how


def _train(demo: _Demo, keras: Any, queue_url: str) -> tuple[Any, int, float]:
    """Steps 5 to 7: train from the job; the model, the rows fed and the seconds taken."""
    say, epochs = demo.say, demo.epochs
    strategy, train, how = _training_input(demo, queue_url)
    queue = open_queue(queue_url)
    job = queue.job(JOB)
    share = job.share or 0
    say(
        f"5. job {JOB!r} in {queue_url}: {epochs} epochs x {demo.training.num_partitions} "
        f"partitions, {job.rows} rows, 2 elastic workers with even batches of "
        f"{job.batch_size} rows: {share} batches per worker per epoch"
    )
    say(f"6. training a Keras model ({how}):")
    with strategy.scope():
        model = _model(keras, demo.layers)
    steps = share if demo.devices else 2 * share
    progress = _progress_printer(keras, say, steps, epochs)
    step = time.perf_counter()
    with warnings.catch_warnings():  # Keras on a dataset of unknown length
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        model.fit(train, epochs=epochs, verbose=0, callbacks=[progress], shuffle=False)
    trained = time.perf_counter() - step
    status = queue.status(JOB)
    queue.close()
    if not status.complete:
        raise AssertionError(f"the job is not complete after training: {status.per_epoch}")
    fed = sum(int(worker["rows"]) for worker in status.workers)
    say(
        "7. the job: "
        + "; ".join(
            f"epoch {e['epoch'] + 1}: {e['done']} partitions done, {e['dropped']} cut short"
            for e in status.per_epoch
        )
        + " (once both workers had their share)"
    )
    for worker in sorted(status.workers, key=lambda w: str(w["worker"])):
        say(f"   {worker['worker']}: {worker['batches']} batches, {worker['rows']:,} rows")
    say(
        f"   {fed:,} of {epochs} x {job.rows:,} rows fed: even batches leave "
        f"{1 - fed / (epochs * (job.rows or 1)):.1%} over"
    )
    return model, fed, trained


def _validate(demo: _Demo, model: Any) -> dict[str, Any]:
    """Step 8: the model's metrics on the held-out validation query."""
    validation = sqlfeed_tf.dataset(
        VALIDATION_QUERY,
        demo.source,
        batch_size=demo.batch_size,
        partitions=4,
        **_feed_options(),
    ).map(demo.prepare_fn())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        metrics: dict[str, Any] = model.evaluate(validation, verbose=0, return_dict=True)
    demo.say(
        f"8. validation on the held-out orders (order_id % 10 = 0): accuracy "
        f"{metrics['accuracy']:.3f}, AUC {metrics['auc']:.3f}"
    )
    return metrics


def _tensorflow_with_two_cpus() -> tuple[Any, list[str]]:
    """TensorFlow, with the CPU split into two logical devices if it is not running yet."""
    if "tensorflow" in sys.modules:
        tf = require("tensorflow", "the demo's Keras model")
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with _quiet_stderr():  # TensorFlow's C++ start-up lines ignore the log level
            tf = require("tensorflow", "the demo's Keras model")
    cpus = tf.config.list_physical_devices("CPU")
    with contextlib.suppress(RuntimeError):  # initialised already: its devices are fixed
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
        )
    logical = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf, logical[:2] if len(logical) >= 2 else []


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration (C++ writes there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _model(keras: Any, layers: dict[str, Any]) -> Any:
    """Normalization and one-hot inputs from the statistics, then a small MLP."""
    inputs = {}
    parts = []
    for name in NUMERIC:
        inputs[name] = keras.Input(shape=(1,), name=name, dtype="float32")
        mask = name + "_is_null"
        inputs[mask] = keras.Input(shape=(1,), name=mask, dtype="float32")
        parts += [layers[name](inputs[name]), inputs[mask]]
    for name in CATEGORICAL:
        inputs[name] = keras.Input(shape=(1,), name=name, dtype="int64")
        encode = keras.layers.CategoryEncoding(layers[name].vocabulary_size(), "one_hot")
        parts.append(encode(inputs[name]))
    hidden = keras.layers.Concatenate()(parts)
    hidden = keras.layers.Dense(32, activation="relu")(hidden)
    hidden = keras.layers.Dense(16, activation="relu")(hidden)
    output = keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = keras.Model(inputs, output)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="binary_crossentropy",
        metrics=["accuracy", keras.metrics.AUC(name="auc")],
    )
    return model


def _progress_printer(keras: Any, say: Callable[[str], None], steps: int, epochs: int) -> Any:
    """A Keras callback printing a few lines per epoch of ``steps`` steps."""

    class Printer(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch, self.started = epoch, time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            done = batch + 1
            if steps >= 8 and done % max(steps // 4, 1) == 0 and done < steps:
                say(f"   epoch {self.epoch + 1}/{epochs}  step {done:>4}/{steps}  {_metrics(logs)}")

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            seconds = time.perf_counter() - self.started
            say(f"   epoch {epoch + 1}/{epochs} done in {seconds:.1f}s  {_metrics(logs)}")

    return Printer()


def _metrics(logs: Any) -> str:
    logs = logs or {}
    return "  ".join(f"{k} {float(logs[k]):.4f}" for k in ("loss", "accuracy", "auc") if k in logs)


def _show_preprocessing(demo: _Demo) -> None:
    """Step 4: run the first batch of a plain tf.data feed through the Keras layers."""
    feed = sqlfeed_tf.dataset(demo.training, demo.source, batch_size=1024, **_feed_options())
    features, _label = next(iter(feed))
    normalized = np.asarray(demo.layers["amount"](features["amount"][:, None]))
    channel = np.asarray(demo.layers["channel"](features["channel"]))
    demo.say(
        f"4. Keras preprocessing of the first batch: amount normalized to mean "
        f"{normalized.mean():+.2f}, std {normalized.std():.2f} "
        f"({int(features['amount_is_null'].numpy().sum())} NULLs filled with 0 and masked); "
        f"channel ids {channel[:6].tolist()}"
    )


def _check_feed(demo: _Demo) -> float:
    """Step 9: read the whole training query through a tf.data feed; every row exactly once."""
    started = time.perf_counter()
    ids = []
    rows = 0
    for features in sqlfeed_tf.dataset(demo.training, demo.source, batch_size=demo.batch_size):
        ids.append(features["order_id"].numpy())
        rows += len(ids[-1])
    rate = rows / (time.perf_counter() - started)
    fed = np.sort(np.concatenate(ids))
    query = f"SELECT order_id FROM ({TRAINING_QUERY}) q"
    expected = np.array([r[0] for r in demo.source.rows(query)])
    if not np.array_equal(fed, np.sort(expected)):
        raise AssertionError("the tf.data feed does not match the training query")
    demo.say(
        f"9. feed alone: {rows:,} rows through tf.data in batches of {demo.batch_size} at "
        f"{rate:,.0f} rows/s, every row of the query exactly once"
    )
    return rate
