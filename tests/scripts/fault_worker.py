"""A worker process for the fault tests: logs every delivery and every acknowledgement.

Usage: python -m tests.scripts.fault_worker QUEUE_URL JOB SOURCE_URL LOG_PATH WORKER_ID [options]

Log lines (flushed at once, so a SIGKILL loses at most the line being written):
``R <time> <pid>`` once SIGTERM is handled (the worker is ready), ``D <time> <epoch>
<partition> <offset> <ids...>`` when a batch is handed to the consumer, ``A <time> <epoch>
<partition> <offset>`` once its acknowledgement is stored, ``T <time> <pid>`` when a
queue transaction of the main thread starts its test pause (``--tx-sleep``), ``E <time>``
when the job is done.

``--tx-sleep S --tx-at N [--tx-every K]``: the main thread's N-th write transaction (and
every K-th after it) sleeps S seconds before it commits, holding its locks: the window in
which the tests deliver SIGTERM or SIGSTOP inside a queue transaction.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery, Worker


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("queue", "job", "source", "log", "worker_id"):
        parser.add_argument(name)
    parser.add_argument("--tx-sleep", type=float, default=0.0)
    parser.add_argument("--tx-at", type=int, default=0)
    parser.add_argument("--tx-every", type=int, default=0)
    parser.add_argument("--ack-interval", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--consume", type=float, default=0.002, help="seconds per batch")
    return parser.parse_args(argv)


def _slow_transactions(log: TextIO, seconds: float, at: int, every: int) -> None:
    """Make the main thread's ``at``-th write transaction (then every ``every``-th) pause."""
    original = SQLQueue._tx
    count = 0

    @contextmanager
    def paused(self: SQLQueue, read_only: bool = False) -> Iterator[Any]:
        nonlocal count
        with original(self, read_only) as connection:
            yield connection
            if read_only or threading.current_thread() is not threading.main_thread():
                return
            count += 1
            if count == at or (every and count > at and (count - at) % every == 0):
                log.write(f"T {time.time():.6f} {os.getpid()}\n")
                log.flush()
                time.sleep(seconds)

    SQLQueue._tx = paused  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> None:
    """Run one worker of the fault tests until the job is done (or a signal ends it)."""
    args = _parse(argv)
    with open(args.log, "a", encoding="utf-8") as log:

        def acknowledged(delivery: Delivery) -> None:
            log.write(
                f"A {time.time():.6f} {delivery.epoch} {delivery.partition} {delivery.offset}\n"
            )
            log.flush()

        if args.tx_sleep:
            _slow_transactions(log, args.tx_sleep, args.tx_at, args.tx_every)
        worker = Worker(
            args.queue,
            args.job,
            args.source,
            worker_id=args.worker_id,
            batch_size=args.batch_size,
            poll=0.05,
            on_ack=acknowledged,
            ack_interval=args.ack_interval,
        )
        worker.release_on_sigterm()
        log.write(f"R {time.time():.6f} {os.getpid()}\n")
        log.flush()
        for delivery in worker.deliveries():
            ids = " ".join(map(str, delivery.batch.column("id").to_pylist()))
            log.write(
                f"D {time.time():.6f} {delivery.epoch} {delivery.partition} "
                f"{delivery.offset} {ids}\n"
            )
            log.flush()
            time.sleep(args.consume)  # a consumer doing some work
        log.write(f"E {time.time():.6f}\n")


if __name__ == "__main__":
    main()
