"""Elastic epochs over a growing table: one pinned job per epoch.

``sqlfeed.Feeder(query, source, job="J", queue=Q, follow=True[, new_only=True |
watermark=COLUMN])`` in any number of processes, or ``sqlfeed job create --follow`` and
``sqlfeed worker``, reads epoch ``k`` as the job ``J@k`` of the lease queue: a plan of
the table as it was when the epoch began. Over a lakehouse table (``iceberg:``/``delta:``)
the plan is pinned to the snapshot current then (with ``new_only``: only the rows appended
since epoch ``k - 1``'s snapshot); over any table with a monotone key (``watermark``), it
reads the rows whose key is above epoch ``k - 1``'s maximum and at most the maximum when
epoch ``k`` began (:func:`sqlfeed.feed.follow.next_entry`).

The first worker to need epoch ``k`` plans it, once epoch ``k - 1`` is complete (a worker
leaves an epoch's job only when every partition is done); a worker that lost the race to
create it (the table grew between the two plans) takes the one that exists. Each epoch's
job is exactly once like any job (leases, redelivery after a kill), so with ``new_only``
the epochs together read every appended row exactly once. The jobs are the ledger:
``J@k``'s spec records what it read (:attr:`~sqlfeed.dispatch.queue.JobSpec.follow`) and
how every later epoch is planned, so a worker started later (a resume, or ``sqlfeed
worker`` given only the queue and the name) joins the first epoch not complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sqlfeed.dialects import InvalidArgumentError, SqlfeedError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.queue import JobSpec, LeaseQueue
from sqlfeed.feed.follow import check_follow, epoch_query, next_entry
from sqlfeed.io import Source, connect
from sqlfeed.plans import plan as make_plan
from sqlfeed.plans.materialize import drop_scratch
from sqlfeed.plans.model import Plan

__all__ = ["JobFollower", "epoch_job_name", "epoch_jobs", "followed_job", "snapshot_of"]

_AT = re.compile(r"__(?:from_(\d+)_)?at_(\d+)\b")
_SEED_STEP = 1_000_003
"""Epoch ``k``'s job is seeded ``seed + k * _SEED_STEP`` (each epoch its own order)."""
_JOB_KEYS = ("seed", "lease_ttl", "order")
"""The job options every epoch's job is made with."""


def epoch_job_name(job: str, epoch: int) -> str:
    """The lease-queue job that is epoch ``epoch`` of the followed job ``job``."""
    return f"{job}@{epoch}"


def snapshot_of(plan: Plan) -> int | None:
    """The lakehouse snapshot a plan's SQL is pinned to (None: not pinned)."""
    found = _AT.search(plan.sql)
    return int(found.group(2)) if found else None


def followed_job(queue: LeaseQueue, job: str) -> JobSpec | None:
    """Epoch 0's job when ``job`` names a followed job, else None."""
    first = queue.find_job(epoch_job_name(job, 0))
    return first if first is not None and first.follow is not None else None


def epoch_jobs(queue: LeaseQueue, job: str) -> list[JobSpec]:
    """A followed job's epoch jobs made so far, in order (empty: ``job`` is not followed)."""
    first = followed_job(queue, job)
    if first is None or first.follow is None:
        return []
    found = [first]
    for epoch in range(1, int(first.follow["epochs"])):
        spec = queue.find_job(epoch_job_name(job, epoch))
        if spec is None:
            break
        found.append(spec)
    return found


class JobFollower:
    """The batches of every epoch of a followed job, read as jobs of a lease queue.

    Args:
        query: the SELECT.
        source: a lakehouse source (``iceberg:`` or ``delta:`` URL), or with
            ``watermark`` any source.
        job: the followed job's name (epoch ``k`` is the job ``job@k``).
        queue: the lease queue (URL or object).
        epochs: how many epochs.
        new_only: each epoch after the first reads only the rows appended since the
            previous epoch's snapshot (implied by ``watermark``).
        watermark: a monotone output column: each epoch reads the rows above the previous
            epoch's maximum.
        plan_options: :func:`sqlfeed.plan`'s keywords for every epoch's plan (JSON values).
        job_options: ``seed``, ``lease_ttl`` and ``order`` of every epoch's job.
        feeder: makes the Feeder of one epoch's job: ``feeder(spec, source)`` (only
            :meth:`epoch` and iterating need it).
    """

    def __init__(
        self,
        query: str,
        source: Any,
        *,
        job: str,
        queue: Any,
        epochs: int,
        new_only: bool = False,
        watermark: str | None = None,
        plan_options: Mapping[str, Any] | None = None,
        job_options: Mapping[str, Any] | None = None,
        feeder: Callable[[JobSpec, Source], Any] | None = None,
    ) -> None:
        self.source: Source = connect(source)
        check_follow(self.source, query, watermark)
        if any(k in (plan_options or {}) for k in ("scratch",)):
            raise InvalidArgumentError(
                "a followed job plans every epoch when it begins: leave out scratch (a "
                "materialized epoch would need a table per epoch that nobody drops)"
            )
        self.query, self.job, self.epochs = query, job, epochs
        self.new_only = new_only or watermark is not None
        self.watermark = watermark
        self.queue: LeaseQueue = open_queue(queue)
        self.plan_options = dict(plan_options or {})
        if watermark is not None and self.plan_options.get("strategy") in (None, "auto"):
            self.plan_options["strategy"] = "hash"  # the epoch's SQL alone: no moving bounds
        self.job_options = {k: v for k, v in (job_options or {}).items() if k in _JOB_KEYS}
        self._feeder = feeder

    @classmethod
    def resume(
        cls, queue: Any, job: str, source: Any, feeder: Callable[..., Any] | None = None
    ) -> JobFollower:
        """The follower of the followed job ``job`` as its first epoch recorded it.

        Raises:
            InvalidArgumentError: ``job`` is not a followed job of ``queue``.
        """
        opened = open_queue(queue)
        first = followed_job(opened, job)
        if first is None or first.follow is None:
            raise InvalidArgumentError(
                f"job {job!r} is not a followed job (made by sqlfeed job create --follow)"
            )
        record = first.follow
        return cls(
            record["query"],
            source,
            job=job,
            queue=opened,
            epochs=record["epochs"],
            new_only=record["new_only"],
            watermark=record["watermark"],
            plan_options=record["plan_options"],
            job_options={
                "seed": record["seed"],
                "lease_ttl": first.lease_ttl,
                "order": first.order,
            },
            feeder=feeder,
        )

    def __iter__(self) -> Iterator[Any]:
        for epoch in range(self.epochs):
            yield from self.epoch(epoch)

    def epoch(self, epoch: int) -> Iterator[Any]:
        """The batches this worker reads of epoch ``epoch`` (its job made if missing)."""
        if self._feeder is None:
            raise InvalidArgumentError("this follower was made without a feeder: it only plans")
        spec = self.epoch_job(epoch)
        yield from self._feeder(spec, self.source)

    def epoch_job(self, epoch: int) -> JobSpec:
        """Epoch ``epoch``'s job: found, or planned over the table as it is now."""
        name = epoch_job_name(self.job, epoch)
        found = self.queue.find_job(name)
        if found is not None:
            return found
        previous = None
        if epoch > 0:
            before = self.queue.find_job(epoch_job_name(self.job, epoch - 1))
            if before is None:
                raise InvalidArgumentError(
                    f"epoch {epoch} of job {self.job!r} cannot begin before epoch {epoch - 1}"
                )
            previous = _entry_of(before)
        entry = next_entry(
            self.source, self.query, previous, new_only=self.new_only, watermark=self.watermark
        )
        sql = epoch_query(self.source, self.query, entry, self.watermark)
        plan = make_plan(sql, self.source, **self.plan_options)
        if plan.scratch_table is not None:
            drop_scratch(plan, self.source)
            raise InvalidArgumentError(
                "a followed job plans every epoch when it begins: pick a --strategy other "
                "than materialize (a table per epoch that nobody drops)"
            )
        seed = int(self.job_options.get("seed", 0))
        record = {
            "job": self.job,
            "epoch": epoch,
            "epochs": self.epochs,
            "query": self.query,
            "new_only": self.new_only,
            "watermark": self.watermark,
            "plan_options": self.plan_options,
            "seed": seed,
            "entry": entry,
        }
        options = {k: v for k, v in self.job_options.items() if k != "seed"}
        spec = JobSpec(
            name, plan, epochs=1, seed=seed + epoch * _SEED_STEP, follow=record, **options
        )
        try:
            return self.queue.create_job(spec)
        except SqlfeedError:
            existing = self.queue.find_job(name)  # another worker made it, from a later
            if existing is None:  # state of the table: everyone reads that one
                raise
            return existing


def _entry_of(spec: JobSpec) -> dict[str, Any]:
    """What an epoch's job read (a job made before the record existed: its pinned SQL)."""
    if spec.follow is not None:
        return dict(spec.follow["entry"])
    return {"snapshot": snapshot_of(spec.plan), "since": None}
