"""The dispatch layer: an elastic pool of workers pulls a job's partitions from a lease queue.

:mod:`sqlfeed.dispatch.queue` defines jobs, leases and the :class:`LeaseQueue` interface;
:class:`MemoryQueue` (:mod:`sqlfeed.dispatch.memory`) and :class:`SQLQueue`
(:mod:`sqlfeed.dispatch.sqlqueue`) implement it, and :func:`open_queue`
(:mod:`sqlfeed.dispatch.backends`) opens one by URL. A :class:`Worker`
(:mod:`sqlfeed.dispatch.worker`) leases partitions, heartbeats and acknowledges its
batches; :class:`JobEpochs` (:mod:`sqlfeed.dispatch.epochs`) cuts its deliveries into
the epochs tf and torch iterate. :class:`Feeder` (:mod:`sqlfeed.dispatch.feeder`, public
as ``sqlfeed.Feeder``, the one public Feeder) reads a static share, or builds such a
Worker from the ``job=...`` options; :func:`create_job` is the one job creation (the
Feeder, torch and ``sqlfeed job create``).
"""

from __future__ import annotations

from sqlfeed.dispatch.backends import open_queue
from sqlfeed.dispatch.epochs import JobEpochs
from sqlfeed.dispatch.feeder import Feeder, create_job
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import (
    ORDERS,
    STATES,
    CorruptStateError,
    JobSpec,
    JobStatus,
    Lease,
    LeaseQueue,
    UnknownJobError,
    Wait,
)
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.worker import Delivery, Worker, default_worker_id

__all__ = [
    "ORDERS",
    "STATES",
    "CorruptStateError",
    "Delivery",
    "Feeder",
    "JobEpochs",
    "JobSpec",
    "JobStatus",
    "Lease",
    "LeaseQueue",
    "MemoryQueue",
    "SQLQueue",
    "UnknownJobError",
    "Wait",
    "Worker",
    "create_job",
    "default_worker_id",
    "open_queue",
]
