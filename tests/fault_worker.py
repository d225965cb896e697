"""A worker process for the fault test: logs every delivery and every acknowledgement.

Usage: python -m tests.fault_worker QUEUE_URL JOB SOURCE_URL LOG_PATH WORKER_ID

Log lines (flushed at once, so a SIGKILL loses at most the line being written):
``D <time> <epoch> <partition> <offset> <ids...>`` when a batch is handed to the
consumer, ``A <time> <epoch> <partition> <offset>`` once its acknowledgement is stored.
"""

from __future__ import annotations

import sys
import time

from sqlfeed.dispatch.worker import Delivery, Worker


def main() -> None:
    queue_url, job, source_url, log_path, worker_id = sys.argv[1:6]
    with open(log_path, "a", encoding="utf-8") as log:

        def acknowledged(delivery: Delivery) -> None:
            log.write(f"A {time.time():.6f} {delivery.epoch} {delivery.partition} "
                      f"{delivery.offset}\n")  # fmt: skip
            log.flush()

        worker = Worker(queue_url, job, source_url, worker_id=worker_id, batch_size=25,
                        poll=0.05, on_ack=acknowledged)  # fmt: skip
        worker.release_on_sigterm()
        for delivery in worker.deliveries():
            ids = " ".join(map(str, delivery.batch.column("id").to_pylist()))
            log.write(f"D {time.time():.6f} {delivery.epoch} {delivery.partition} "
                      f"{delivery.offset} {ids}\n")  # fmt: skip
            log.flush()
            time.sleep(0.002)  # a consumer doing some work


if __name__ == "__main__":
    main()
