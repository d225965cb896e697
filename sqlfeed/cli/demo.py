"""The ``sqlfeed demo`` command: the end-to-end demo on the embedded DuckDB (``make demo``).

It creates a tabular training set (customers and orders, with NULLs and skew) and trains a
model from a SELECT over it with :func:`sqlfeed.ml.train`: a deterministic hash split by
``order_id``, exact feature statistics of the training split computed in the engine, a
Keras ``dnn`` with its preprocessing inside, and two synchronous replicas
(``MirroredStrategy`` over two logical CPUs), each fed by its own elastic worker of a job
in a lease queue (a SQLite file) with even batches. It prints the training progress, how
the job's partitions were shared, the validation metrics beside a trivial baseline, the
training and feed throughput, and checks that the feed delivers every row of the
training split exactly once.

When TensorFlow was initialised before the CPU could be split (the demo run inside a
process that used TensorFlow already), the two workers' batches alternate into one model
instead of two replicas; everything else is the same (see :mod:`sqlfeed.ml.replicas`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import duckdb
import numpy as np

import sqlfeed.tf as sqlfeed_tf
from sqlfeed import connect
from sqlfeed.cli.common import positive
from sqlfeed.cli.torch_demo import run_torch_demo
from sqlfeed.dialects.optional import require
from sqlfeed.io import DuckDBSource
from sqlfeed.ml.artifact import Model
from sqlfeed.ml.layers import layer_classes
from sqlfeed.ml.replicas import tensorflow_devices
from sqlfeed.ml.trainer import train

QUERY = """
SELECT o.order_id, c.segment, c.age, o.amount, o.channel,
       CAST((COALESCE(o.amount, 0) > 100 AND c.segment <> 'basic')
            OR (COALESCE(c.age, 0) > 70 AND o.channel = 'phone') AS INTEGER) AS label
FROM orders AS o
JOIN customers AS c ON c.customer_id = o.customer_id
WHERE (o.amount IS NOT NULL OR c.age > 60)
"""
"""The demo's SELECT: :func:`sqlfeed.ml.train` splits it by a hash of ``order_id``."""
TRAINING_QUERY = QUERY + "  AND o.order_id % 10 <> 0\n"
"""The torch demo's training SELECT: 90 % of the orders (``order_id % 10 <> 0``)."""
VALIDATION_QUERY = QUERY + "  AND o.order_id % 10 = 0\n"
"""The torch demo's held-out 10 %."""


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> None:
    positive(args.rows, "--rows")
    positive(args.partitions, "--partitions")
    if args.framework == "torch":
        run_torch(rows=args.rows, partitions=args.partitions, out=out)
        return
    run_demo(rows=args.rows, partitions=args.partitions, out=out)


def run_torch(rows: int = 200_000, partitions: int = 16, out: TextIO | None = None) -> None:
    """``sqlfeed demo --framework torch``: the demo tables in a DuckDB file, then the demo.

    :func:`sqlfeed.cli.torch_demo.run_torch_demo` runs it (DataLoader worker processes open
    the file).
    """
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
        partitions: partitions of the training split.
        out: where to print (default: stdout).
        epochs: training epochs (each one epoch of the job).
        batch_size: the global batch size (split between the two replicas).

    Returns:
        The final metrics: ``accuracy`` and ``auc`` (ROC AUC) on the validation split, the
        rows per second fed to training (``train_rows_per_second``) and read by the feed
        alone (``feed_rows_per_second``).

    Raises:
        MissingDependencyError: TensorFlow is not installed.
        AssertionError: the feed lost or repeated a row.
        SqlfeedError: the training job did not complete.
    """
    stream = out or sys.stdout

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    started = time.perf_counter()
    _tensorflow_with_two_cpus()  # checked first; sqlfeed.ml.train finds the devices set
    with connect("duckdb://") as source, tempfile.TemporaryDirectory(prefix="sqlfeed-demo-") as tmp:
        assert isinstance(source, DuckDBSource)
        step = time.perf_counter()
        create_demo_tables(source.connection, rows)
        say(f"1. created demo tables: {rows} orders ({time.perf_counter() - step:.2f}s)")
        say(
            "2. sqlfeed.ml.train(QUERY, label='label', key='order_id', family='dnn', "
            f"replicas=2, validation=0.1, epochs={epochs}, batch_size={batch_size}):"
        )
        model = train(
            QUERY,
            source,
            label="label",
            out=Path(tmp) / "model",
            family="dnn",
            replicas=2,
            key="order_id",
            validation=0.1,
            epochs=epochs,
            batch_size=batch_size,
            partitions=partitions,
            report=False,
            progress=lambda line: say("   " + line),
        )
        _show_preprocessing(model, source, say)
        metrics = _show_metrics(model, say)
        train_rate = float(model.manifest["training"]["rows_per_second"])
        say(f"   training fed {train_rate:,.0f} rows/s (with the model's work, two replicas)")
        feed_rate = _check_feed(model, source, batch_size, say)
    say(
        f"done in {time.perf_counter() - started:.0f}s: the partitions add up to exactly the "
        "training split's rows"
    )
    return {
        "accuracy": float(metrics["accuracy"]),
        "auc": float(metrics["roc_auc"]),
        "train_rows_per_second": train_rate,
        "feed_rows_per_second": feed_rate,
    }


def _tensorflow_with_two_cpus() -> tuple[Any, list[str]]:
    """TensorFlow with the CPU split into two logical devices if it is not running yet.

    See :func:`sqlfeed.ml.replicas.tensorflow_devices`; its absence names the demo.
    """
    tf, devices, _kind = tensorflow_devices(2, "the demo's Keras model")
    return tf, devices


def _show_preprocessing(model: Model, source: DuckDBSource, say: Callable[[str], None]) -> None:
    """Step 3: the first batch of the training split through the saved model's own layers."""
    keras = require("keras", "the demo's model")
    layer_classes()  # registered before the model is read
    network = keras.models.load_model(model.path / "model.keras", compile=False)
    inner = keras.Model(
        network.inputs,
        [network.get_layer("amount_scaled").output, network.get_layer("channel_index").output],
    )
    batch = source.arrow(f"SELECT * FROM ({model.manifest['training_sql']}) q LIMIT 1024")
    scaled, channel = (np.asarray(x) for x in inner(model.inputs(batch), training=False))
    nulls = batch.column("amount").null_count
    say(
        f"3. Keras preprocessing of the first batch, inside the saved model (from exact "
        f"statistics): amount scaled to mean {scaled.mean():+.2f}, std {scaled.std():.2f} "
        f"({nulls} NULLs filled and masked); channel ids {channel.reshape(-1)[:6].tolist()}"
    )


def _show_metrics(model: Model, say: Callable[[str], None]) -> dict[str, Any]:
    """Step 4: the validation metrics in the model's manifest, beside the baseline's."""
    metrics: dict[str, Any] = model.manifest["metrics"]["validation"]
    base = metrics.get("baseline") or {}
    say(
        f"4. validation on the held-out orders (10% by a hash of order_id, "
        f"{metrics['rows']:,} rows): accuracy {metrics['accuracy']:.3f} (baseline "
        f"{base.get('accuracy', float('nan')):.3f}), AUC {metrics['roc_auc']:.3f} (baseline "
        f"{base.get('roc_auc', float('nan')):.3f}), log loss {metrics['log_loss']:.3f}"
    )
    return metrics


def _check_feed(
    model: Model, source: DuckDBSource, batch_size: int, say: Callable[[str], None]
) -> float:
    """Step 5: the training split through a tf.data feed alone; every row exactly once."""
    training = str(model.manifest["training_sql"])
    started = time.perf_counter()
    ids = []
    rows = 0
    for features in sqlfeed_tf.dataset(training, source, batch_size=batch_size, partitions=8):
        ids.append(features["order_id"].numpy())
        rows += len(ids[-1])
    rate = rows / (time.perf_counter() - started)
    fed = np.sort(np.concatenate(ids))
    expected = np.array([r[0] for r in source.rows(f"SELECT order_id FROM ({training}) q")])
    if not np.array_equal(fed, np.sort(expected)):
        raise AssertionError("the tf.data feed does not match the training split")
    say(
        f"5. feed alone: the training split's {rows:,} rows through tf.data in batches of "
        f"{batch_size} at {rate:,.0f} rows/s, every row of the query exactly once"
    )
    return rate
