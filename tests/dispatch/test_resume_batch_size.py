"""A partition taken over resumes after the rows acknowledged, whatever the batch sizes.

Acknowledged offsets count batches of the holder's ``batch_size``; a worker with another
batch size (``sqlfeed worker --batch-size``, each worker chooses its own) that resumed by
skipping as many of *its* batches lost rows (a 7-row holder's 9 batches skipped 9 batches
of 1000 rows: 3,937 of 4,000 rows gone, exit 0) or read rows twice. The lease now carries
the rows acknowledged, and the new holder skips exactly those rows.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pytest

import sqlfeed
from sqlfeed.dispatch import Delivery, JobSpec, MemoryQueue, Worker, open_queue
from tests.conftest import get_engine
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

ROWS = 4000


def _queue_url(name: str, folder: Path) -> str:
    return {
        "sqlite": f"sqlite:///{folder}/q.db",
        "postgres": POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://", 1),
        "mysql": MYSQL_URL.replace("mysql://", "mysql+pymysql://", 1),
    }[name]


@pytest.mark.parametrize(
    "name",
    [
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.engine),
        pytest.param("mysql", marks=pytest.mark.engine),
    ],
)
@pytest.mark.parametrize(
    ("first", "second", "taken"), [(7, 1000, 10), (1000, 7, 2), (300, None, 3)]
)
def test_a_taken_over_partition_is_read_exactly_once_across_batch_sizes(
    name: str, first: int, second: int | None, taken: int, tmp_path: Path
) -> None:
    if name in ("postgres", "mysql"):
        get_engine(name)
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT range AS id FROM range({ROWS})")
    db = f"duckdb:///{tmp_path}/d.duckdb"
    queue = MemoryQueue() if name == "memory" else open_queue(_queue_url(name, tmp_path))
    job = f"resume_{uuid.uuid4().hex[:8]}"
    plan = sqlfeed.plan("SELECT id FROM t", db, partitions=1, strategy="hash")
    queue.create_job(JobSpec(job, plan, lease_ttl=30.0))
    try:
        seen: Counter[int] = Counter()  # A's acknowledged batches, then all of B's

        def acked(delivery: Delivery) -> None:
            seen.update(delivery.batch.column(0).to_pylist())

        with Worker(
            queue, job, db, batch_size=first, ack_interval=0, claim_ahead=False, on_ack=acked
        ) as a:
            deliveries = a.deliveries()
            for _ in range(taken):  # then it stops: what was taken is acknowledged
                next(deliveries)
            deliveries.close()
        assert 0 < sum(seen.values()) < ROWS
        with Worker(queue, job, db, batch_size=second) as b:
            for batch in b.batches():
                seen.update(batch.column(0).to_pylist())
        assert seen == Counter(range(ROWS))
        assert queue.status(job).complete
    finally:
        queue.delete(job)
