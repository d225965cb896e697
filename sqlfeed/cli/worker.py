"""What ``sqlfeed worker`` does beside reading.

It says what it waits for, and records checkpoints for ``sqlfeed job rewind``.

A worker with nothing to take waits for the leases other workers hold: until they are
completed, or, for a worker that was killed, until they expire (the job's lease TTL,
``sqlfeed job create --lease-ttl``, 60 s by default) and are handed out again. Without a
word that wait looks like a hang; :class:`WaitReporter` watches the queue while the worker
delivers nothing and prints one line per new set of holders::

    sqlfeed: waiting for 2 leases held by worker h:41:ab12cd (they expire in 41 s unless
    it renews them: lease TTL 60 s)

:class:`Checkpoints` records in the job's ledger what the worker delivered, as the
Python feeds do when the model is checkpointed (``Worker.checkpoint``).

A worker is often started beside its servers (a scheduler launching the database, the
queue's database and the workers at once): :func:`reach_servers` waits for the queue's
and the database's servers to answer, with a growing pause and one line per try, for at
most ``--start-wait`` seconds, as a running worker waits after a lost connection.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from urllib.parse import urlsplit

from sqlfeed import connect
from sqlfeed.dialects import EngineError
from sqlfeed.dispatch import LeaseQueue, Worker, open_queue
from sqlfeed.io import driver_message, redact_url
from sqlfeed.io.faults import Reconnect, connection_lost

__all__ = ["Checkpoints", "WaitReporter", "reach_servers", "waiting_line"]


def reach_servers(
    queue: str, job: str, db: str, wait: float, say: Callable[[str], None] | None = None
) -> None:
    """Return once the servers of ``queue`` (holding ``job``) and ``db`` answer.

    Waits for them at most ``wait`` seconds in all.

    Only a server that cannot be reached (refused, unreachable, starting up or shutting
    down: :func:`~sqlfeed.io.faults.connection_lost`) is waited for, with a pause that grows
    from 0.5 to 5 s and one line per try. Any other error (a wrong password, no such
    database) is raised at once; a local file (SQLite, DuckDB) is not looked at here.

    Raises:
        EngineError: a server still did not answer after ``wait`` seconds (one line, the
            URL's password hidden).
    """
    say = say or _stderr
    deadline = time.monotonic() + wait
    policy = Reconnect(tries=1_000_000, seconds=wait, first_pause=0.5, max_pause=5.0)
    reaches: tuple[tuple[str, str, Callable[[], None]], ...] = (
        ("queue", queue, partial(_reach_queue, queue, job)),
        ("database", db, partial(_reach_db, db)),
    )
    for what, url, reach in reaches:
        if not urlsplit(url).hostname:
            continue
        tries = 0
        while True:
            try:
                reach()
                break
            except Exception as err:
                if not connection_lost(err):
                    raise
                why = driver_message(err.__context__ or err)
                tries += 1
                pause = policy.pause(tries)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EngineError(
                        f"the {what} server at {redact_url(url)} did not answer within "
                        f"--start-wait {wait:g} s ({tries} tries): {why}"
                    ) from None
                pause = min(pause, left)
                say(
                    f"waiting for the {what} server at {redact_url(url)} ({why}): trying "
                    f"again in {pause:.1f} s, for {left:.0f} s more (--start-wait)"
                )
                time.sleep(pause)


def _reach_queue(url: str, job: str) -> None:
    queue = open_queue(url)
    try:
        queue.find_job(job)
    finally:
        queue.close()


def _reach_db(url: str) -> None:
    with connect(url) as source:
        source.rows("SELECT 1")


def waiting_line(leases: list[tuple[str, int, float]], me: str, ttl: float) -> str | None:
    """The line for ``leases`` (see :meth:`LeaseQueue.leases`) seen by worker ``me``.

    None when it is not waiting on others (it holds a lease itself, or nobody does).
    """
    if not leases or any(worker == me for worker, _, _ in leases):
        return None
    held = Counter(worker for worker, _, _ in leases)
    soonest = max(0.0, min(seconds for _, _, seconds in leases))
    count = f"{len(leases)} lease{'s' if len(leases) > 1 else ''}"
    if len(held) == 1:
        (worker,) = held
        who, them = f"worker {worker}", "it renews them" if len(leases) > 1 else "it renews it"
    else:
        who = "workers " + ", ".join(f"{w} ({n})" for w, n in sorted(held.items()))
        them = "their workers renew them"
    expire = "they expire" if len(leases) > 1 else "it expires"
    return (
        f"waiting for {count} held by {who} ({expire} in {soonest:.0f} s unless {them}: "
        f"lease TTL {ttl:g} s)"
    )


class WaitReporter:
    """Watch the queue while a worker delivers nothing; say once what it waits for.

    Args:
        queue: the job's queue (its own connection: the worker's is busy claiming).
        job: the job's name.
        worker: this worker's id.
        ttl: the job's lease TTL in seconds.
        say: where a line goes (default: ``sqlfeed: LINE`` on stderr).
        idle: seconds without a delivery before the queue is asked (then every second,
            every 5 s once a line was said).
    """

    def __init__(
        self,
        queue: LeaseQueue,
        job: str,
        worker: str,
        ttl: float,
        say: Callable[[str], None] | None = None,
        idle: float = 2.0,
    ) -> None:
        self.queue, self.job, self.worker, self.ttl = queue, job, worker, ttl
        self.say = say or _stderr
        self.idle = idle
        self.said: set[frozenset[str]] = set()
        """The sets of holders already reported (each once)."""
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="sqlfeed-waits")

    def __enter__(self) -> WaitReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def delivered(self) -> None:
        """The worker handed out a batch: it is not waiting."""
        self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(5.0 if self.said else 1.0):
            if time.monotonic() - self._last < self.idle:
                continue
            try:
                leases = self.queue.leases(self.job)
            except Exception:  # the worker itself reports what fails in the queue
                continue
            holders = frozenset(w for w, _, _ in leases)
            line = waiting_line(leases, self.worker, self.ttl)
            if line is not None and holders not in self.said and not self._stop.is_set():
                self.said.add(holders)
                self.say(line)


def _stderr(line: str) -> None:
    print(f"sqlfeed: {line}", file=sys.stderr, flush=True)


class Checkpoints:
    """``sqlfeed worker``'s checkpoints in the job's ledger, for ``sqlfeed job rewind``.

    Every ``every`` seconds (between two batches) and when the worker stops, it records
    what it handed out since its previous checkpoint (:meth:`Worker.checkpoint`), under
    the id of the Unix time in seconds (ids grow, and mean the same across workers). A
    job with even batches cannot be rewound: nothing is recorded for it.

    Args:
        worker: the worker (its deliveries are consumed in the thread that calls this).
        every: seconds between checkpoints; 0: none.
    """

    def __init__(self, worker: Worker, every: float) -> None:
        self.worker = worker
        self.every = every if not worker.spec.even_batches else 0.0
        self.last = 0
        """The id of the last checkpoint recorded (0: none yet)."""
        self._since = time.monotonic()
        self._pending = False

    def due(self) -> None:
        """A batch was handed out: record a checkpoint if one is due."""
        self._pending = True
        if self.every and time.monotonic() - self._since >= self.every:
            self.record()

    def record(self) -> None:
        """Record a checkpoint now, if anything was handed out since the last one."""
        if not (self.every and self._pending):
            return
        self.last = max(self.last, int(time.time()))
        self.worker.checkpoint(self.last)
        self._since, self._pending = time.monotonic(), False
