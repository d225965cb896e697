"""The job-mode Feeder (:class:`sqlfeed.Feeder`): a Feeder that can pull its partitions from a job.

With ``job=...`` it creates the job in a lease queue (if it does not exist yet) and hands
the feed layer's :class:`~sqlfeed.feed.feeder.Feeder` a :class:`~sqlfeed.dispatch.worker.Worker`
of that job as its leased partitions; without, it is that Feeder reading its static share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dialects import InvalidArgumentError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.queue import JobSpec
from sqlfeed.dispatch.worker import Worker
from sqlfeed.feed import feeder
from sqlfeed.feed.feeder import Progress
from sqlfeed.io import DEFAULT_BATCH_ROWS, Source
from sqlfeed.plans.model import Plan

__all__ = ["Feeder"]


class Feeder(feeder.Feeder):
    """Batches of a query's rows, for training loops.

    Args:
        query: a SQL SELECT, or a :class:`Plan` made by :func:`sqlfeed.plan`.
        source: where the query runs (anything :func:`sqlfeed.connect` takes).
        format: ``arrow`` (``pyarrow.RecordBatch``), ``pandas`` (``DataFrame``) or
            ``numpy`` (a dict of column name to ``numpy.ndarray``; NULLs in integer
            columns make them float with NaN, as in pandas).
        batch_size: rows per batch (the last of an epoch may be smaller unless
            ``drop_remainder``); None: batches as the database delivers them.
        shuffle_buffer: rows mixed at random before batching (0: no record shuffle).
            The partition order is shuffled too whenever this is > 0 or ``shuffle``.
        shuffle: visit the partitions in a seeded random order (default: when
            shuffle_buffer > 0).
        shuffle_window: the partition order of a ``fragments`` plan instead: 0 storage
            order, -1 a seeded shuffle of all fragments, k > 0 files shuffled and then
            fragments shuffled within windows of k (see
            :func:`sqlfeed.plans.model.fragment_order`); seeded, different every epoch.
        seed: makes the partition order and the shuffle repeatable; each epoch differs.
        readers: partitions read ahead at once, each by its own thread and connection.
        rank, world_size: this worker's static share of the partitions.
        epochs: passes over the data when iterating the feeder.
        drop_remainder: drop each epoch's last, smaller batch.
        progress: called with a :class:`Progress` after each partition.
        job: pull partitions dynamically from this job of the lease ``queue`` (created
            from the plan, epochs, seed, lease_ttl and order if it does not exist yet;
            every worker may create it). Batches never span partitions then, and there
            is no record shuffle across partitions (the partition order is shuffled).
        queue: the lease queue's URL (``sqlite:///state.db``, PostgreSQL, MySQL,
            ``memory://``) or object; default ``memory://``.
        worker_id: this worker's unique name in the job (default: host, pid, random).
        lease_ttl: seconds a lease lives without a heartbeat.
        order: hand-out order within an epoch: ``shuffle`` (seeded), ``lpt`` (largest
            first) or ``index``.
        even_batches: with ``job``, every one of ``replicas`` workers delivers the same
            number of batches per epoch, rows // (replicas x batch_size), so synchronous
            replicas stay in lockstep; the rows left over are dropped (a batch may be
            short at the end of a partition).
        replicas: the number of synchronous replicas, for ``even_batches``.
        state: static mode: resume from what :meth:`state_dict` returned (the rows after
            the restore are exactly those the uninterrupted run would have delivered).
        **plan_options: for a SQL query, passed to :func:`sqlfeed.plan` (partitions,
            strategy, key, target_rows, workers, scratch, allow_unstable, strict).
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        format: str = "arrow",
        batch_size: int | None = None,
        shuffle_buffer: int = 0,
        shuffle: bool | None = None,
        seed: int = 0,
        readers: int = 2,
        rank: int = 0,
        world_size: int = 1,
        epochs: int = 1,
        drop_remainder: bool = False,
        read_batch_rows: int = DEFAULT_BATCH_ROWS,
        progress: Callable[[Progress], None] | None = None,
        job: str | None = None,
        queue: Any = None,
        worker_id: str | None = None,
        lease_ttl: float = 60.0,
        order: str = "shuffle",
        even_batches: bool = False,
        replicas: int | None = None,
        shuffle_window: int | None = None,
        state: Mapping[str, Any] | None = None,
        **plan_options: Any,
    ) -> None:
        job_options = None
        if job is not None:
            job_options = _JobOptions(
                job=job,
                queue=queue,
                worker_id=worker_id,
                lease_ttl=lease_ttl,
                order=order,
                even_batches=even_batches,
                replicas=replicas,
                epochs=epochs,
                seed=seed,
                batch_size=batch_size,
                shuffle_buffer=shuffle_buffer,
                rank=rank,
                world_size=world_size,
            )
        super().__init__(
            query,
            source,
            format=format,
            batch_size=batch_size,
            shuffle_buffer=shuffle_buffer,
            shuffle=shuffle,
            seed=seed,
            readers=readers,
            rank=rank,
            world_size=world_size,
            epochs=epochs,
            drop_remainder=drop_remainder,
            read_batch_rows=read_batch_rows,
            progress=progress,
            shuffle_window=shuffle_window,
            leased=None if job_options is None else job_options.join,
            state=state,
            **plan_options,
        )


@dataclass(frozen=True)
class _JobOptions:
    """A Feeder's ``job=...`` options, and the static ones a job cannot honour."""

    job: str
    queue: Any
    worker_id: str | None
    lease_ttl: float
    order: str
    even_batches: bool
    replicas: int | None
    epochs: int
    seed: int
    batch_size: int | None
    shuffle_buffer: int
    rank: int
    world_size: int

    def join(self, plan: Plan, source: Source) -> Worker:
        """Create the job from ``plan`` unless it exists, and return a Worker of it."""
        if self.shuffle_buffer:
            raise InvalidArgumentError(
                "shuffle_buffer mixes rows across partitions, which a job acknowledges one "
                "by one: with job=..., the partition order is shuffled instead"
            )
        if self.world_size != 1 or self.rank != 0:
            raise InvalidArgumentError("rank/world_size split statically; a job splits itself")
        lease_queue = open_queue(self.queue)
        rows = plan.rows
        if self.even_batches and rows is None:
            rows = source.count(plan.sql, columns=list(plan.columns))
        lease_queue.create_job(
            JobSpec(
                self.job,
                plan,
                epochs=self.epochs,
                seed=self.seed,
                lease_ttl=self.lease_ttl,
                order=self.order,
                even_batches=self.even_batches,
                replicas=self.replicas,
                batch_size=self.batch_size if self.even_batches else None,
                rows=rows if self.even_batches else None,
            )
        )
        return Worker(
            lease_queue, self.job, source, worker_id=self.worker_id, batch_size=self.batch_size
        )
