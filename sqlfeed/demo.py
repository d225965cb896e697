"""The end-to-end demo on the embedded DuckDB (``make demo``, ``sqlfeed demo``).

For now it shows the rewriter on real data: it creates a tabular training table,
plans a training SELECT into hash partitions, counts it, runs every partition and checks
that the partitions add up to exactly the query's result.
"""

from __future__ import annotations

import time
from typing import TextIO

from sqlfeed import rewrite
from sqlfeed.sources import DuckDBSource, connect

TRAINING_QUERY = """
SELECT c.customer_id, c.segment, c.age, o.amount, o.channel,
       o.amount > 100 AND c.segment <> 'basic' AS label
FROM orders AS o
JOIN customers AS c ON c.customer_id = o.customer_id
WHERE o.amount IS NOT NULL OR c.age > 60
"""


def create_demo_tables(connection: object, rows: int) -> None:
    """Create ``customers`` and ``orders`` (with NULLs and skew) in a DuckDB connection."""
    customers = max(rows // 10, 1)
    connection.execute(  # type: ignore[attr-defined]
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
    """Run the demo and print what it does; raises if the partitions do not add up."""
    import sys

    stream = out or sys.stdout
    with connect("duckdb://") as source:
        assert isinstance(source, DuckDBSource)
        conn = source.connection
        started = time.perf_counter()
        create_demo_tables(conn, rows)
        stream.write(f"created demo tables: {rows} orders ({time.perf_counter() - started:.2f}s)\n")
        parsed = source.parse(TRAINING_QUERY)
        columns = source.output_columns(parsed)
        total = source.count(parsed, columns=columns)
        stream.write(f"training query returns {total} rows, columns: {', '.join(columns)}\n")
        stream.write(f"count query:  {rewrite.count_sql(parsed, columns=columns)}\n")
        stream.write(f"sample query: {rewrite.sample_sql(parsed, 1000, columns=columns)}\n")
        queries = rewrite.partition_sqls(parsed, partitions, columns=columns)
        stream.write(f"partition 0 of {partitions}: {queries[0]}\n")
        started = time.perf_counter()
        whole = conn.execute(parsed.sql).fetchall()
        parts: list[tuple[object, ...]] = []
        sizes = []
        for query in queries:
            batch = conn.execute(query).fetchall()
            sizes.append(len(batch))
            parts.extend(batch)
        elapsed = time.perf_counter() - started
        if sorted(map(repr, parts)) != sorted(map(repr, whole)):
            raise AssertionError("the partitions do not add up to the query's result")
        stream.write(
            f"ran {partitions} partitions: sizes {min(sizes)}..{max(sizes)} rows, "
            f"together exactly the query's {len(whole)} rows ({elapsed:.2f}s)\n"
        )
