"""The end-to-end demo on the embedded DuckDB (``make demo``, ``sqlfeed demo``).

It creates a tabular training set (customers and orders, with NULLs and skew), plans a
training SELECT over it, computes its feature statistics in the engine and turns them
into Keras preprocessing layers, streams it through the Feeder with two readers and a
shuffle buffer, preprocesses the first batch, and checks that every row arrives exactly
once per epoch. Later issues extend it with the elastic dispatcher and Keras training.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from dialects import MissingDependencyError
from sqlfeed.feeder import Feeder
from sqlfeed.planner import plan
from sqlfeed.sources import DuckDBSource, connect
from sqlfeed.statistics import compute_stats
from stats.keras import to_keras
from stats.model import FeatureStats, StatsSpec

TRAINING_QUERY = """
SELECT o.order_id, c.segment, c.age, o.amount, o.channel,
       o.amount > 100 AND c.segment <> 'basic' AS label
FROM orders AS o
JOIN customers AS c ON c.customer_id = o.customer_id
WHERE o.amount IS NOT NULL OR c.age > 60
"""


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


def run_demo(rows: int = 200_000, partitions: int = 16, out: TextIO | None = None) -> None:
    """Run the demo and print what it does; raises if any row is lost or repeated."""
    stream = out or sys.stdout

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    with connect("duckdb://") as source:
        assert isinstance(source, DuckDBSource)
        started = time.perf_counter()
        create_demo_tables(source.connection, rows)
        say(f"1. created demo tables: {rows} orders ({time.perf_counter() - started:.2f}s)")

        training = plan(TRAINING_QUERY, source, partitions=partitions, scratch="main")
        say(f"2. planned {training.num_partitions} partitions: {training.strategy}")
        say(f"   why: {training.reason}")
        say(f"   columns: {', '.join(training.columns)}")
        say(f"   partition 0: {training.partitions[0].sql}")

        started = time.perf_counter()
        spec = StatsSpec(label="label", buckets=8, top_k=10)
        stats = compute_stats(TRAINING_QUERY, source, spec=spec)
        say(f"3. feature statistics in the engine ({time.perf_counter() - started:.2f}s):")
        for column in stats.columns.values():
            if column.kind == "numeric":
                head = column.boundaries[:3]
                say(f"   {column.name}: mean {column.mean:.2f}, std {column.stddev:.2f}, "
                    f"{column.null_rate:.1%} NULL, boundaries {head}...")  # fmt: skip
            else:
                say(f"   {column.name}: {column.distinct} values, top {column.vocabulary[:3]}")
        preprocess = _keras_layers(stats)

        expected = Counter(source.rows(TRAINING_QUERY))
        feeder = Feeder(
            training, source, batch_size=1024, shuffle_buffer=8192, readers=2, epochs=2, seed=7
        )
        for epoch in range(feeder.epochs):
            started = time.perf_counter()
            seen: Counter[tuple[Any, ...]] = Counter()
            batches = 0
            for batch in feeder.epoch(epoch):
                if batches == 0 and epoch == 0 and preprocess is not None:
                    _show_preprocessing(batch, preprocess, say)
                batches += 1
                seen.update(zip(*(c.to_pylist() for c in batch.columns), strict=True))
            elapsed = time.perf_counter() - started
            if seen != expected:
                raise AssertionError(f"epoch {epoch}: the feed does not match the query")
            total = sum(seen.values())
            say(
                f"5. epoch {epoch}: {total} rows in {batches} shuffled batches of 1024, every "
                f"row exactly once ({total / elapsed:,.0f} rows/s incl. the check)"
            )
        from sqlfeed.planner import drop_scratch

        drop_scratch(training, source)
    say("done: the partitions add up to exactly the training query's result")


def _keras_layers(stats: FeatureStats) -> dict[str, Any] | None:
    """Normalization and lookup layers from the statistics (None without TensorFlow)."""
    try:
        return to_keras(stats)
    except MissingDependencyError:
        return None


def _show_preprocessing(batch: Any, layers: dict[str, Any], say: Callable[[str], None]) -> None:
    import numpy as np

    amount = batch.column("amount").to_numpy(zero_copy_only=False)
    amount = np.nan_to_num(amount.astype("float64"), nan=0.0).reshape(-1, 1)
    normalized = np.asarray(layers["amount"](amount))
    channel = np.asarray(layers["channel"](np.array(batch.column("channel").to_pylist())))
    say(
        f"4. Keras preprocessing of the first batch: amount normalized to mean "
        f"{normalized.mean():+.2f}, std {normalized.std():.2f}; channel ids {channel[:6].tolist()}"
    )
