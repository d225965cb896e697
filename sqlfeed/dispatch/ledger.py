"""The job's ledger: what each worker delivered up to each checkpoint, and rewinding to one.

A training job checkpoints its model at step ``C``; each worker then records, with
:meth:`~sqlfeed.dispatch.worker.Worker.checkpoint`, the batches it handed to the model
since its previous checkpoint (:class:`DeliveryLog` tracks them): per task, the range of
batch offsets and whether the partition's end was reached. After a crash, every worker is
rolled back to the model's checkpoint ``C``: :func:`states_at` says where each task stood
at ``C`` (the furthest offset delivered by checkpoints <= ``C``; done if its end was
reached) and the queue's ``rewind(job, C)`` puts the tasks back in that state, so
everything delivered after ``C`` is handed out again and nothing before it is: exactly
once as the restored model sees it. Ledger rows of later checkpoints are dropped.

Owns :class:`LedgerEntry`, :class:`DeliveryLog`, :func:`states_at` and the ledger table of
a SQL queue (:class:`SQLLedger`, used by :class:`~sqlfeed.dispatch.sqlqueue.SQLQueue`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sqlfeed.dialects import EngineError, InvalidArgumentError, NotImplementedYetError
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.sessions import RETRY_SECONDS, retrying, transient
from sqlfeed.io import driver_message

__all__ = [
    "DeliveryLog",
    "LedgerEntry",
    "SQLLedger",
    "TaskState",
    "check_rewind",
    "even_batches_rewind",
    "rewind_summary",
    "states_at",
]


@dataclass(frozen=True)
class LedgerEntry:
    """Batches ``[start, stop)`` of task (``epoch``, ``partition``) a worker delivered."""

    epoch: int
    partition: int
    start: int
    stop: int
    rows: int
    done: bool
    """The partition's end was reached: it has no batch at or after ``stop``."""


@dataclass(frozen=True)
class TaskState:
    """Where a task stood at a checkpoint: batches delivered, rows, and whether it is done."""

    acked: int
    rows: int
    done: bool


class DeliveryLog:
    """A worker's deliveries since its last checkpoint, per task (see the module docstring)."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[int, int], list[int]] = {}
        """(epoch, partition) -> [start, stop, rows, done]."""

    def handed(self, epoch: int, partition: int, offset: int, rows: int) -> None:
        """Batch ``offset`` of a task was handed to the consumer."""
        entry = self._tasks.setdefault((epoch, partition), [offset, offset, 0, 0])
        entry[0] = min(entry[0], offset)
        entry[1] = max(entry[1], offset + 1)
        entry[2] += rows

    def forget(self, epoch: int, partition: int, offset: int, rows: int) -> None:
        """The consumer gave batch ``offset`` back untaken (the last one handed)."""
        entry = self._tasks.get((epoch, partition))
        if entry is not None and entry[1] == offset + 1:
            entry[1], entry[2] = offset, entry[2] - rows
            if entry[1] <= entry[0] and not entry[3]:
                del self._tasks[epoch, partition]

    def ended(self, epoch: int, partition: int, batches: int) -> None:
        """The task's partition has ``batches`` batches, all handed out."""
        entry = self._tasks.setdefault((epoch, partition), [batches, batches, 0, 0])
        entry[1], entry[3] = max(entry[1], batches), 1

    def drain(self, untaken: Iterable[tuple[int, int, int, int]] = ()) -> list[LedgerEntry]:
        """The entries to record, less the ``untaken`` batches; the log then restarts.

        ``untaken``: (epoch, partition, offset, rows) of batches handed out but not consumed
        (kept for the next checkpoint).
        """
        held = list(untaken)
        for epoch, partition, offset, rows in held:
            self.forget(epoch, partition, offset, rows)
        entries = [
            LedgerEntry(e, p, start, stop, rows, bool(done))
            for (e, p), (start, stop, rows, done) in sorted(self._tasks.items())
        ]
        self._tasks = {}
        for epoch, partition, offset, rows in held:
            self.handed(epoch, partition, offset, rows)
        return entries


def states_at(
    entries: Iterable[tuple[int, LedgerEntry]], checkpoint: int
) -> dict[tuple[int, int], TaskState]:
    """Where each task recorded by checkpoints <= ``checkpoint`` stood then.

    Args:
        entries: ``(checkpoint, entry)`` pairs of every worker.
        checkpoint: the checkpoint rewound to.
    """
    states: dict[tuple[int, int], TaskState] = {}
    for at, entry in entries:
        if at > checkpoint:
            continue
        key = (entry.epoch, entry.partition)
        old = states.get(key, TaskState(0, 0, False))
        states[key] = TaskState(
            max(old.acked, entry.stop), old.rows + entry.rows, old.done or entry.done
        )
    return states


def rewind_summary(states: dict[tuple[int, int], TaskState]) -> dict[str, int]:
    """What a rewind restored: tasks ``done`` and ``resumed`` part-way at the checkpoint."""
    done = sum(1 for s in states.values() if s.done)
    return {"done": done, "resumed": sum(1 for s in states.values() if not s.done and s.acked)}


def even_batches_rewind(job: str) -> str:
    """Why an ``even_batches`` job cannot be rewound, and what to do instead (one line)."""
    return (
        f"job {job!r} has even batches, which cannot be rewound: each worker stops at its "
        "equal share of batches, a count kept in the worker's process and not in the ledger, "
        "so a rewound job could not give the ranks equal step counts again; create the job "
        "without even_batches (and even out the ranks' last steps in the training loop, e.g. "
        "with torch.distributed.algorithms.Join), or reset it (sqlfeed job reset) to start over"
    )


def check_rewind(spec: JobSpec, checkpoint: int, known: Sequence[int]) -> None:
    """Refuse a rewind the ledger cannot honour.

    Raises:
        InvalidArgumentError: ``checkpoint`` was never recorded in the job.
        NotImplementedYetError: an ``even_batches`` job (see :func:`even_batches_rewind`).
    """
    if spec.even_batches:
        raise NotImplementedYetError(even_batches_rewind(spec.name))
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, int) or checkpoint not in known:
        have = ", ".join(map(str, known[-10:])) or "none"
        raise InvalidArgumentError(
            f"job {spec.name!r} has no checkpoint {checkpoint!r} in its ledger (recorded: "
            f"{have}); workers record one with Worker.checkpoint(step)"
        )


class SQLLedger:
    """The ledger table of a SQL lease queue, made with the queue's other tables.

    Args:
        engine: the queue's SQLAlchemy engine.
        label: the queue's URL without its password, for error messages.
        table: the ledger's table (:data:`~sqlfeed.dispatch.sqlschema.LEDGER` of
            :func:`~sqlfeed.dispatch.sqlschema.queue_tables`).
        retry_seconds: how long a transaction is run again after transient failures (a
            lock held by another worker, a lost connection), as every queue call is
            (:func:`~sqlfeed.dispatch.sessions.retrying`).
    """

    def __init__(
        self, engine: Any, label: str, table: sa.Table, retry_seconds: float = RETRY_SECONDS
    ) -> None:
        self.engine = engine
        self.label = label
        self.table = table
        self.retry_seconds = retry_seconds

    def _run(self, action: Any) -> Any:
        return retrying(self._once, (action,), self.retry_seconds)

    def _once(self, action: Any) -> Any:
        try:
            with self.engine.begin() as connection:
                return action(connection)
        except sa.exc.DBAPIError as err:
            error = EngineError(f"queue {self.label}: {driver_message(err)}")
            error.transient = transient(err)  # type: ignore[attr-defined]
            raise error from None

    def record(
        self, job: str, checkpoint: int, worker: str, entries: Sequence[LedgerEntry]
    ) -> None:
        """Add ``worker``'s entries of ``checkpoint`` (merged with any recorded before).

        What was recorded before is read once, and the write puts the merged rows in its
        place: a write tried again after a lost connection whose commit did go through
        writes the same rows again, never the entries added twice.
        """
        t = self.table
        mine = (t.c.job == job) & (t.c.checkpoint == checkpoint) & (t.c.worker == worker)
        before = self._run(lambda c: c.execute(sa.select(t).where(mine)).all())
        merged = {(e.epoch, e.partition): e for e in entries}
        for row in before:
            old = LedgerEntry(row.epoch, row.part, row.start, row.stop, row.rows, bool(row.done))
            new = merged.get((old.epoch, old.partition), old)
            merged[old.epoch, old.partition] = LedgerEntry(
                old.epoch,
                old.partition,
                min(old.start, new.start),
                max(old.stop, new.stop),
                old.rows + (new.rows if new is not old else 0),
                old.done or new.done,
            )
        nothing = {"epoch": -1, "part": -1, "start": 0, "stop": 0, "rows": 0, "done": 0}
        rows = [
            {
                "epoch": e.epoch,
                "part": e.partition,
                "start": e.start,
                "stop": e.stop,
                "rows": e.rows,
                "done": int(e.done),
            }
            for e in merged.values()
        ] or [nothing]  # a checkpoint with nothing delivered still counts as recorded
        keys = {"job": job, "checkpoint": checkpoint, "worker": worker}

        def write(c: Any) -> None:
            c.execute(sa.delete(t).where(mine))
            c.execute(sa.insert(t), [{**keys, **row} for row in rows])

        self._run(write)

    def checkpoints(self, job: str) -> list[int]:
        """The checkpoint ids recorded in ``job``, in order."""
        t = self.table
        query = sa.select(t.c.checkpoint).where(t.c.job == job).distinct()
        return sorted(int(v) for v in self._run(lambda c: c.execute(query).scalars().all()))

    def entries(self, job: str) -> list[tuple[int, LedgerEntry]]:
        """Every ``(checkpoint, entry)`` of ``job``."""
        t = self.table
        rows = self._run(lambda c: c.execute(sa.select(t).where(t.c.job == job)).all())
        return [
            (int(r.checkpoint), LedgerEntry(r.epoch, r.part, r.start, r.stop, r.rows, bool(r.done)))
            for r in rows
            if r.epoch >= 0
        ]

    def rewind(self, job: str, checkpoint: int, tasks: str) -> dict[tuple[int, int], TaskState]:
        """Put ``job``'s rows of the ``tasks`` table back as they stood at ``checkpoint``.

        Every task becomes pending from offset 0 with no holder (a holder's token no longer
        matches), except those the ledger shows delivered by then; later ledger rows go.

        Returns:
            The state of each task the ledger knew at ``checkpoint``.
        """
        states = states_at(self.entries(job), checkpoint)
        t = self.table

        def write(c: Any) -> None:
            c.execute(
                sa.text(
                    f"UPDATE {tasks} SET state = 'pending', worker = NULL, token = NULL, "
                    "expires = 0, acked = 0, rows_acked = 0, completions = 0 WHERE job = :j"
                ),
                {"j": job},
            )
            for (epoch, part), state in states.items():
                c.execute(
                    sa.text(
                        f"UPDATE {tasks} SET state = :s, acked = :a, rows_acked = :r, "
                        "completions = CASE WHEN :s = 'done' THEN 1 ELSE 0 END "
                        "WHERE job = :j AND epoch = :e AND part = :p"
                    ),
                    {
                        "s": "done" if state.done else "pending",
                        "a": state.acked,
                        "r": state.rows,
                        "j": job,
                        "e": epoch,
                        "p": part,
                    },
                )
            c.execute(sa.delete(t).where((t.c.job == job) & (t.c.checkpoint > checkpoint)))

        self._run(write)
        return states

    def delete(self, job: str) -> None:
        """Forget ``job``'s ledger."""
        t = self.table
        self._run(lambda c: c.execute(sa.delete(t).where(t.c.job == job)))
