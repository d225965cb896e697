"""Elastic epochs over a growing lakehouse table: one pinned job per epoch.

``sqlfeed.Feeder(query, "iceberg:...", job="J", queue=Q, follow=True[, new_only=True])``
in any number of processes reads epoch ``k`` as the job ``J@k`` of the lease queue: a
plan pinned to the table's snapshot when the epoch began (with ``new_only``: only the
rows appended since epoch ``k - 1``'s snapshot). The first worker to find epoch ``k``
missing plans it, once epoch ``k - 1`` is complete; a worker that lost the race to create
it (an append landed between the two plans) takes the one that exists. Each epoch's job is
exactly once like any job (leases, redelivery after a kill), so the epochs together read
every appended row exactly once with ``new_only``. The jobs are the ledger: ``J@k``'s plan
names its snapshot (``t__at_<id>``, ``t__from_<a>_at_<b>``), and a worker started later
(a resume) joins the first epoch not complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dialects import InvalidArgumentError, SqlfeedError
from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.queue import JobSpec, LeaseQueue
from sqlfeed.io import Source, connect
from sqlfeed.plans import plan as make_plan
from sqlfeed.plans.model import Plan

__all__ = ["JobFollower", "epoch_job_name", "snapshot_of"]

_AT = re.compile(r"__(?:from_(\d+)_)?at_(\d+)\b")


def epoch_job_name(job: str, epoch: int) -> str:
    """The lease-queue job that is epoch ``epoch`` of the followed job ``job``."""
    return f"{job}@{epoch}"


def snapshot_of(plan: Plan) -> int | None:
    """The lakehouse snapshot a plan's SQL is pinned to (None: not pinned)."""
    found = _AT.search(plan.sql)
    return int(found.group(2)) if found else None


class JobFollower:
    """The batches of every epoch of a followed job, read as jobs of a lease queue.

    Args:
        query: the SELECT.
        source: a lakehouse source (``iceberg:`` or ``delta:`` URL).
        job: the followed job's name (epoch ``k`` is the job ``job@k``).
        queue: the lease queue (URL or object).
        epochs: how many epochs.
        new_only: each epoch after the first reads only the rows appended since the
            previous epoch's snapshot.
        plan_options: :func:`sqlfeed.plan`'s keywords for every epoch's plan.
        feeder: makes the Feeder of one epoch's job: ``feeder(plan, source, job_name)``.
    """

    def __init__(
        self,
        query: str,
        source: Any,
        *,
        job: str,
        queue: Any,
        epochs: int,
        new_only: bool,
        plan_options: dict[str, Any],
        feeder: Any,
    ) -> None:
        self.source: Source = connect(source)
        if not callable(getattr(self.source, "refresh", None)):
            raise InvalidArgumentError(
                "follow=True with job=... needs a lakehouse table (iceberg:/delta: URL): its "
                "snapshots pin each epoch's job; a watermark feed runs in one process"
            )
        self.query, self.job, self.epochs, self.new_only = query, job, epochs, new_only
        self.queue: LeaseQueue = open_queue(queue)
        self.plan_options = plan_options
        self._feeder = feeder

    def __iter__(self) -> Iterator[Any]:
        for epoch in range(self.epochs):
            yield from self.epoch(epoch)

    def epoch(self, epoch: int) -> Iterator[Any]:
        """The batches this worker reads of epoch ``epoch`` (its job made if missing)."""
        spec = self.epoch_job(epoch)
        yield from self._feeder(spec.plan, self.source, spec.name)

    def epoch_job(self, epoch: int) -> JobSpec:
        """Epoch ``epoch``'s job: found, or planned over the table's latest snapshot."""
        name = epoch_job_name(self.job, epoch)
        found = self.queue.find_job(name)
        if found is not None:
            return found
        since = None
        if epoch > 0 and self.new_only:
            previous = self.queue.find_job(epoch_job_name(self.job, epoch - 1))
            if previous is None:
                raise InvalidArgumentError(
                    f"epoch {epoch} of job {self.job!r} cannot begin before epoch {epoch - 1}"
                )
            since = snapshot_of(previous.plan)
        self.source.refresh(since=since)  # type: ignore[attr-defined]
        plan = make_plan(self.query, self.source, **self.plan_options)
        try:
            return self.queue.create_job(JobSpec(name, plan, epochs=1))
        except SqlfeedError:
            existing = self.queue.find_job(name)  # another worker made it, from a later
            if existing is None:  # snapshot: everyone reads that one
                raise
            return existing
