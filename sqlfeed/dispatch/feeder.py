"""The one public Feeder (:class:`sqlfeed.Feeder`): static share or job, and job creation.

Without ``job=...`` it is the feed layer's
:class:`~sqlfeed.feed.feeder.PartitionFeeder` reading its static share of the plan; with
it, it creates the job in a lease queue (if it does not exist yet, :func:`create_job`,
shared with :mod:`sqlfeed.torch` and ``sqlfeed job create``) and hands that Feeder a
:class:`~sqlfeed.dispatch.worker.Worker` of the job as its leased partitions.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Unpack

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.follow import JobFollower
from sqlfeed.dispatch.queue import JobSpec, LeaseQueue
from sqlfeed.dispatch.worker import Worker
from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.feed.follow import FollowFeeder
from sqlfeed.feed.options import (
    JobFeederKeywords,
    JobOptions,
    PlanOptions,
    ReadOptions,
    plan_options_of,
    read_options,
)
from sqlfeed.io import Source
from sqlfeed.plans.model import Plan

__all__ = ["Feeder", "create_job"]


class Feeder(PartitionFeeder):
    """Batches of a query's rows, for training loops: a static share, or a job's partitions.

    >>> import sqlfeed
    >>> feeder = sqlfeed.Feeder("SELECT range AS x FROM range(10)", batch_size=4, partitions=2)
    >>> [len(batch) for batch in feeder]
    [4, 4, 2]

    Args:
        query: a SQL SELECT, or a :class:`Plan` made by :func:`sqlfeed.plan`.
        source: where the query runs (anything :func:`sqlfeed.connect` takes).
        format: ``arrow`` (``pyarrow.RecordBatch``), ``pandas`` (``DataFrame``) or
            ``numpy`` (a dict of column name to ``numpy.ndarray``; NULLs in integer
            columns make them float with NaN, as in pandas).
        batch_size: rows per batch (the last of an epoch may be smaller unless
            ``drop_remainder``); None: batches as the database delivers them.
        rank: this worker's index among the ``world_size`` workers (its static share of
            the partitions).
        world_size: how many workers share the partitions statically.
        state: static mode: resume from what :meth:`state_dict` returned (the rows after
            the restore are exactly those the uninterrupted run would have delivered).
        **options: the keywords of the option groups every facade shares
            (:mod:`sqlfeed.feed.options`, one default each):

            * read (:class:`~sqlfeed.feed.options.ReadOptions`): ``shuffle_buffer`` (rows
              mixed at random before batching, in seeded windows; 0: none),
              ``shuffle`` (a seeded partition order; default: when shuffle_buffer > 0),
              ``shuffle_window`` (a ``fragments`` plan's order), ``seed``, ``readers``
              (partitions read ahead at once, default 2), ``read_batch_rows``,
              ``epochs``, ``drop_remainder``, ``merge_reads`` (adjacent partitions that
              cut one sequence read by one query), ``snapshot`` (every epoch inside one
              snapshot of the data; see :mod:`sqlfeed.feed.snapshots`), ``progress``
              (called with a :class:`~sqlfeed.feed.feeder.Progress` after each query);
            * job (:class:`~sqlfeed.feed.options.JobOptions`): ``job`` (pull partitions
              dynamically from this job of the lease ``queue``, created from the plan,
              epochs, seed, lease_ttl and order if it does not exist yet; batches never
              span partitions then, and there is no record shuffle), ``queue`` (URL or
              object; default ``memory://``), ``worker_id``, ``lease_ttl``, ``order``
              (``shuffle``, ``lpt`` or ``index``), ``even_batches`` and ``replicas``
              (every one of ``replicas`` workers delivers rows // (replicas x
              batch_size) batches per epoch, so synchronous replicas stay in lockstep);
            * for a SQL query, the :class:`~sqlfeed.feed.options.PlanOptions` of
              :func:`sqlfeed.plan` (``partitions``, ``strategy``, ``key``,
              ``target_rows``, ``workers``, ``scratch``, ``allow_unstable``,
              ``sample_rows``, ``strict``);
            * ``follow=True`` (a lakehouse table), ``new_only``, ``watermark=COLUMN``:
              every epoch planned over the table as it has grown since the previous one
              (returns a :class:`~sqlfeed.feed.follow.FollowFeeder`).

    Raises:
        InvalidArgumentError: a bad or unknown option (the closest known name is named),
            or static options a job cannot honour (``shuffle_buffer``, ``rank``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A :class:`~sqlfeed.feed.follow.FollowFeeder` when following a table, else a Feeder.

        Following is ``follow=True``, ``new_only`` or ``watermark=COLUMN``: each epoch
        planned over the table as it has grown.
        """
        follow = kwargs.pop("follow", False)
        if follow or kwargs.get("watermark") is not None or kwargs.get("new_only"):
            if kwargs.get("job") is not None:
                return _follow_job(*args, **kwargs)
            return FollowFeeder(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        format: str = "arrow",
        batch_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        state: Mapping[str, Any] | None = None,
        follow: bool = False,
        **options: Unpack[JobFeederKeywords],
    ) -> None:
        plan_options_of(options, [ReadOptions, JobOptions], own=_OWN)  # unknown: refused
        job = JobOptions.from_kwargs(options)
        read = read_options(None, batch_size, options)
        if job.dynamic:
            _check_static(read, rank, world_size)
        rest = {k: v for k, v in options.items() if k not in JobOptions.names()}
        super().__init__(
            query,
            source,
            format=format,
            batch_size=batch_size,
            rank=rank,
            world_size=world_size,
            leased=None if not job.dynamic else lambda plan, src: _join(job, read, plan, src),
            state=state,
            **rest,  # type: ignore[arg-type]
        )


# __new__ takes (*args, **kwargs): the class's signature (help(), IDEs, inspect) is __init__'s
Feeder.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    list(inspect.signature(Feeder.__init__).parameters.values())[1:]
)


def _follow_job(
    query: str,
    source: Any = None,
    *,
    job: str,
    queue: Any = None,
    epochs: int = 1,
    new_only: bool = False,
    watermark: str | None = None,
    **options: Any,
) -> JobFollower:
    """``Feeder(..., job=J, follow=True)``: each epoch a job of its own.

    Each planned over the table as it was when the epoch began
    (:mod:`sqlfeed.dispatch.follow`).
    """
    if not isinstance(query, str):
        raise InvalidArgumentError("follow=True plans every epoch: give the SQL, not a Plan")
    planning = {k: options.pop(k) for k in list(options) if k in PlanOptions.__annotations__}
    job_options: dict[str, Any] = {
        k: options.pop(k) for k in ("seed", "lease_ttl", "order") if k in options
    }
    shared = open_queue(queue if queue is not None else "memory://")

    def feeder(spec: JobSpec, src: Source) -> Feeder:
        own: dict[str, Any] = {"seed": spec.seed, "lease_ttl": spec.lease_ttl, "order": spec.order}
        return Feeder(spec.plan, src, job=spec.name, queue=shared, **own, **options)

    return JobFollower(
        query,
        source,
        job=job,
        queue=shared,
        epochs=epochs,
        new_only=new_only,
        watermark=watermark,
        plan_options=planning,
        job_options=job_options,
        feeder=feeder,
    )


_OWN = ("format", "batch_size", "rank", "world_size", "state", "follow")
"""The Feeder's own keywords (for the "did you mean" hint of an unknown one)."""


def _check_static(read: ReadOptions, rank: int, world_size: int) -> None:
    """Refuse the static options a job cannot honour."""
    if read.shuffle_buffer:
        raise InvalidArgumentError(
            "shuffle_buffer mixes rows across partitions, which a job acknowledges one "
            "by one: with job=..., the partition order is shuffled instead"
        )
    if world_size != 1 or rank != 0:
        raise InvalidArgumentError("rank/world_size split statically; a job splits itself")


def _join(job: JobOptions, read: ReadOptions, plan: Plan, source: Source) -> Worker:
    """Create the job from ``plan`` unless it exists, and return a Worker of it."""
    queue = open_queue(job.queue)
    create_job(
        queue, job, plan, source, epochs=read.epochs, seed=read.seed, batch_size=read.batch_size
    )
    return Worker(queue, job.job or "", source, worker_id=job.worker_id, batch_size=read.batch_size)


def create_job(
    queue: LeaseQueue,
    job: JobOptions,
    plan: Plan,
    source: Source,
    *,
    epochs: int,
    seed: int,
    batch_size: int | None,
    snapshot: str | None = None,
) -> JobSpec:
    """Create ``job.job`` from ``plan`` in ``queue`` unless it exists (every worker may).

    The one job creation of the Feeder, :class:`sqlfeed.torch.SQLDataset` and ``sqlfeed
    job create``. With ``even_batches`` the plan's rows are counted on ``source`` when
    the plan does not know them (every replica's quota is rows // (replicas x
    batch_size)).

    Args:
        queue: the lease queue (open).
        job: the job's options (``job`` is its name).
        plan: the plan the job hands out.
        source: where ``plan`` runs (for the count).
        epochs: the job's epochs.
        seed: the seed of the job's hand-out order.
        batch_size: the rows per batch of ``even_batches`` (ignored without).
        snapshot: a PostgreSQL snapshot id every worker reads inside.

    Returns:
        The job's spec: this one, or the one that existed already.
    """
    rows = None
    if job.even_batches:
        rows = plan.rows
        if rows is None:
            rows = source.count(plan.sql, columns=list(plan.columns))
    return queue.create_job(
        JobSpec(
            job.job or "",
            plan,
            epochs=epochs,
            seed=seed,
            lease_ttl=job.lease_ttl,
            order=job.order,
            snapshot=snapshot,
            even_batches=job.even_batches,
            replicas=job.replicas,
            batch_size=batch_size if job.even_batches else None,
            rows=rows,
        )
    )
