"""The torch ``IterableDataset`` of a SELECT: :class:`SQLDataset` and :func:`dataloader`.

Owns the split of a plan across DDP ranks and DataLoader workers, the epoch count, the
job mode's per-worker :class:`~sqlfeed.dispatch.worker.Worker`, and the dataset's state
(the ``state_dict``/``load_state_dict`` protocol ``torchdata``'s ``StatefulDataLoader``
uses). Imports torch: :mod:`sqlfeed.torch` imports this module when first used.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Unpack

import pyarrow as pa
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data._utils.fetch import _IterableDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from sqlfeed.dialects import InvalidArgumentError, NotImplementedYetError
from sqlfeed.dispatch import Delivery, LeaseQueue, Worker, default_worker_id, open_queue
from sqlfeed.dispatch.epochs import JobEpochs
from sqlfeed.dispatch.feeder import create_job
from sqlfeed.dispatch.ledger import DeliveryLog, even_batches_rewind
from sqlfeed.feed.feeder import PartitionFeeder, UnequalSharesWarning, unequal_shares
from sqlfeed.feed.options import (
    ColumnOptions,
    JobOptions,
    ReadOptions,
    TensorKeywords,
    check_int,
    resolve_plan,
    split_options,
)
from sqlfeed.io import Source, connect
from sqlfeed.plans import Plan
from sqlfeed.torch.convert import BatchConverter
from sqlfeed.torch.loader import dataloader
from sqlfeed.torch.split import even_quotas, shard_of
from sqlfeed.torch.types import check_torch_options

__all__ = ["STATE_VERSION", "SQLDataset", "Tagged", "dataloader"]

STATE_VERSION = 1
"""The version of :meth:`SQLDataset.state_dict`'s layout."""

_OWN = ("batch_size", "lists", "tokenizer", "rank", "world_size", "state")
"""The dataset's own keywords, for the "did you mean" hint of an unknown one."""

CHUNK_ROWS = 65_536
"""Static mode converts consecutive batches together, about this many rows at a time, and
hands them out as views of the result."""


class SQLDataset(IterableDataset[Any]):
    """A query's rows as batches of tensors, for ``DataLoader(dataset, batch_size=None)``.

    Each item is a whole batch, ``{column: tensor}`` (or ``(features, label)`` with
    ``label``), built in Arrow and NumPy: the DataLoader must not batch again
    (``batch_size=None``; :func:`dataloader` sets it). Columns follow the tf.data type
    table (see :mod:`sqlfeed.torch`).

    The plan's partitions are split across DDP ranks (``rank``/``world_size``, default
    ``torch.distributed``'s when initialised) and, within a rank, across the DataLoader's
    worker processes, which open their own connections (give ``source`` as a URL then).
    Each iteration is the next epoch (``set_epoch(e)`` sets it, as with a
    ``DistributedSampler``); with ``job=...`` the workers pull partitions from a lease
    queue instead, each iteration being the job's next epoch.

    Args:
        query: a SQL SELECT or a :class:`~sqlfeed.Plan`.
        source: a URL (needed with worker processes) or anything :func:`sqlfeed.connect`
            takes.
        batch_size: rows per batch (per rank).
        lists: ``padded`` (a dense tensor padded with the fill, and ``<col>_lengths``) or
            ``nested`` (a ``torch.nested`` jagged tensor; one level of numbers).
        tokenizer: turns a string column's list of ``str`` into tensors: one callable for
            every string column, or a dict of column name to callable.
        rank: this process's DDP rank.
        world_size: the number of DDP ranks.
        state: resume from what :meth:`state_dict` returned (see :meth:`load_state_dict`).
        **options: the option groups every facade shares (:mod:`sqlfeed.feed.options`,
            one default each):

            * columns (:class:`~sqlfeed.feed.options.ColumnOptions`): ``label``,
              ``features``, ``fill``, ``fill_nulls``, ``masks``, ``float_dtype``,
              ``time_unit``, as for :func:`sqlfeed.tf.dataset` (the same type table and
              NULL rules);
            * read (:class:`~sqlfeed.feed.options.ReadOptions`): ``shuffle_buffer``,
              ``shuffle``, ``shuffle_window``, ``seed``, ``readers`` (default 2, per
              DataLoader worker), ``read_batch_rows``, ``drop_remainder``,
              ``merge_reads``, ``snapshot``, ``progress`` (called in the process that
              reads), as for :class:`~sqlfeed.Feeder` (per worker: a worker shuffles its
              own share); ``epochs``: a job's epochs;
            * job (:class:`~sqlfeed.feed.options.JobOptions`): ``even_batches`` (every
              rank delivers the same number of batches per epoch: each partition's rows
              are counted once, here; the rows past the quota are dropped); ``job``,
              ``queue``, ``worker_id``, ``lease_ttl``, ``order``: pull partitions from a
              lease queue (:class:`~sqlfeed.Feeder`'s job mode), each DataLoader worker
              being the job worker ``<worker_id>/<rank>/<worker>``; ``replicas``: with a
              job and ``even_batches``, the job workers that deliver the same number of
              batches each, ``world_size x num_workers`` (default ``world_size``: one
              worker per rank, ``num_workers=0``);
            * for a SQL query, the :class:`~sqlfeed.feed.options.PlanOptions` of
              :func:`sqlfeed.plan`.
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        batch_size: int,
        lists: str = "padded",
        tokenizer: Any = None,
        rank: int | None = None,
        world_size: int | None = None,
        state: Mapping[str, Any] | None = None,
        **options: Unpack[TensorKeywords],
    ) -> None:
        super().__init__()
        (read, job, columns), plan_options = split_options(
            options, ReadOptions, JobOptions, ColumnOptions, own=_OWN
        )
        self.read: ReadOptions = read.replace(batch_size=batch_size)
        """The read options (each worker's Feeder reads with them)."""
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.target = source
        opened = connect(source)
        self._kept: Source | None = None if isinstance(source, str) else opened
        """The source of a connection object (a URL is opened by each iteration)."""
        try:
            self.plan = resolve_plan(
                query,
                opened,
                owner=self,  # a plan made here: its auto-materialized table goes with self
                drop_via=source if isinstance(source, str) else opened,
                default_workers=self.world_size,
                **plan_options,
            )
            self.mappings = columns.mappings(
                self.plan.arrow_schema() or opened.schema(self.plan.sql)
            )
            check_torch_options(lists, tokenizer, self.mappings)
            self.counts = None
            if job.even_batches and not job.dynamic:
                self.counts = {p.index: opened.count(p.sql) for p in self.plan.partitions}
            if job.dynamic:
                self._create_job(job, opened)
        finally:
            if self._kept is None:
                opened.close()  # worker processes (and iterations) open their own
        if not job.dynamic and not job.even_batches and self.plan.num_partitions % self.world_size:
            message = unequal_shares(self.plan.num_partitions, self.world_size)
            warnings.warn(message + " (even_batches=True)", UnequalSharesWarning, stacklevel=2)
        self.labels = [m.name for m in self.mappings if m.label]
        self._single_label = columns.single_label
        self.batch_size = batch_size
        self.converter = BatchConverter(self.mappings, columns.time_unit, lists, tokenizer)
        self.job, self.queue, self.even_batches = job.job, job.queue, job.even_batches
        self.worker_id = job.worker_id or default_worker_id()
        self.epoch, self._iterations = 0, 0
        self._state: dict[str, Any] | None = None
        self._resume: dict[str, Any] | None = None
        self._feeder: PartitionFeeder | None = None
        self._rows: int | None = None  # the feed's rows through the last batch handed out
        self._epochs: JobEpochs | None = None  # in-process job mode: kept across epochs
        self._tagged, self._consumed = 0, dict[str, DeliveryLog]()  # see note() and checkpoint()
        if state is not None:
            self.load_state_dict(state)

    @property
    def options(self) -> dict[str, Any]:
        """The read options as the dict this attribute was before :attr:`read`."""
        names = ("shuffle_buffer", "seed", "readers", "read_batch_rows", "drop_remainder")
        return {name: getattr(self.read, name) for name in names}

    def _create_job(self, job: JobOptions, source: Source) -> None:
        """Create the job (idempotent: every rank may) in the lease queue."""
        replicas = (job.replicas or self.world_size) if job.even_batches else None
        queue = open_queue(job.queue)
        try:
            create_job(
                queue,
                job.replace(replicas=replicas),
                self.plan,
                source,
                epochs=self.read.epochs,
                seed=self.read.seed,
                batch_size=self.read.batch_size,
            )
        finally:  # no queue connection left open for DataLoader worker processes to inherit
            if not isinstance(job.queue, LeaseQueue):
                queue.close()

    def __repr__(self) -> str:
        return (
            f"SQLDataset({self.plan.strategy}, {self.plan.num_partitions} partitions, "
            f"rank {self.rank}/{self.world_size}, batch_size={self.batch_size})"
        )

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (later ones count on from it)."""
        check_int(epoch, "epoch", 0)
        self.epoch, self._iterations = epoch, 0

    def __iter__(self) -> Iterator[Any]:
        _refuse_collation(self, inspect.currentframe())
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (int(info.id), int(info.num_workers))
        resume, self._resume = self._resume, None
        if resume is not None:
            self.set_epoch(int(resume["epoch"]))
        epoch = self.epoch + self._iterations
        self._iterations += 1
        if self.job is not None:
            return self._job_batches(worker, workers, epoch)
        return self._static_batches(worker, workers, self._begin(worker, workers, epoch, resume))

    def _source(self) -> Source:
        if get_worker_info() is None and self._kept is not None:
            return self._kept
        if get_worker_info() is not None:
            if not isinstance(self.target, str):
                raise InvalidArgumentError(
                    "DataLoader worker processes open connections of their own: give the "
                    "source as a URL (not a connection object), or use num_workers=0"
                )
            if self.target.strip().lower() in ("duckdb://", "duckdb:///:memory:"):
                raise InvalidArgumentError(
                    "an in-memory DuckDB cannot be shared with DataLoader worker processes: "
                    "use a DuckDB file (duckdb:///path.duckdb) or num_workers=0"
                )
        return connect(self.target)

    def _element(self, batch: Any) -> Any:
        return self._pair(self.converter.convert(batch))

    def _pair(self, converted: dict[str, Any]) -> Any:
        """The element: the batch's dict, or ``(features, label)``."""
        if not self.labels:
            return converted
        labels = {name: converted.pop(name) for name in self.labels}
        return converted, labels[self.labels[0]] if self._single_label else labels

    def _begin(
        self, worker: int, workers: int, epoch: int, resume: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The state this worker's iteration of ``epoch`` starts from (checked), set now.

        A ``state_dict()`` taken before its first batch resumes the same point.
        """
        shard, shards = shard_of(self.rank, self.world_size, worker, workers)
        start: dict[str, Any] = {
            "epoch": epoch,
            "shard": shard,
            "shards": shards,
            "batches": 0,
            "done": False,
            "feeder": None,
        }
        if resume is not None and _consumed(resume):
            if (resume.get("shard"), resume.get("shards")) != (shard, shards):
                raise InvalidArgumentError(
                    f"the dataset state is of share {resume.get('shard')}/{resume.get('shards')}"
                    f", this is {shard}/{shards}: restore it with the same world size and "
                    "number of DataLoader workers"
                )
            start.update(
                batches=int(resume["batches"]),
                done=bool(resume.get("done")),
                feeder=resume.get("feeder"),
            )
        self._state, self._feeder, self._rows = start, None, None
        return start

    def _static_batches(self, worker: int, workers: int, start: dict[str, Any]) -> Iterator[Any]:
        epoch, taken = start["epoch"], start["batches"]
        quota = None
        if self.counts is not None:
            quotas = even_quotas(self.plan, self.counts, self.world_size, workers, self.batch_size)
            quota = quotas[self.rank, worker]
        if start["done"] or (quota is not None and taken >= quota):
            start.update(done=True, feeder=None)  # this share of the epoch was delivered
            return
        source = self._source()
        with warnings.catch_warnings():  # the ranks' shares were checked in the constructor
            warnings.simplefilter("ignore", UnequalSharesWarning)
            feeder = PartitionFeeder(
                self.plan,
                source,
                rank=start["shard"],
                world_size=start["shards"],
                state=start["feeder"],
                read=self.read.replace(epochs=epoch + 1),
            )
        self._feeder = feeder
        try:
            for element, rows in self._converted(feeder, feeder.epoch(epoch)):
                taken += 1
                start["batches"] = taken
                self._rows = rows
                yield element
                if quota is not None and taken >= quota:
                    break
            # Done, not "the next epoch at its start": a DataLoader worker whose share ended
            # early is restored to deliver nothing more in this epoch.
            start.update(done=True, feeder=None)
            self._feeder = None
        finally:
            if source is not self._kept:
                source.close()

    def _converted(
        self, feeder: PartitionFeeder, batches: Iterator[Any]
    ) -> Iterator[tuple[Any, int]]:
        """Each batch as an element, and the feed's rows in the epoch through it.

        Consecutive batches of about :data:`CHUNK_ROWS` rows are converted together and
        handed out as views (one conversion, and one shared-memory segment when a
        DataLoader worker process hands them over), unless the element's parts cannot be
        cut by rows (list columns, a tokenizer).
        """
        per_chunk = max(1, CHUNK_ROWS // self.batch_size) if self.converter.sliceable else 1
        group: list[pa.RecordBatch] = []
        marks: list[int] = []
        for batch in batches:
            group.append(batch)
            marks.append(feeder.reading[1] if feeder.reading is not None else 0)
            if len(group) >= per_chunk:
                yield from self._split(group, marks)
                group, marks = [], []
        yield from self._split(group, marks)

    def _split(self, group: list[pa.RecordBatch], marks: list[int]) -> Iterator[tuple[Any, int]]:
        """The elements of ``group``'s batches, converted at once when it can be."""
        if len(group) < 2 or any(b.schema != group[0].schema for b in group):
            for batch, rows in zip(group, marks, strict=True):
                yield self._element(batch), rows
            return
        converted = self.converter.convert(pa.concat_batches(group))
        start = 0
        for batch, rows in zip(group, marks, strict=True):
            stop = start + batch.num_rows
            yield self._pair({key: part[start:stop] for key, part in converted.items()}), rows
            start = stop

    def _job_batches(self, worker: int, workers: int, epoch: int) -> Iterator[Any]:
        queue = self.queue
        if workers > 1 and (queue is None or str(queue).startswith("memory://")):
            raise InvalidArgumentError(
                "DataLoader worker processes cannot share a memory:// queue: give the job a "
                "SQLite, PostgreSQL or MySQL queue URL, or use num_workers=0"
            )
        in_process = get_worker_info() is None
        epochs = self._epochs
        if not in_process or epochs is None:
            job_worker = Worker(
                queue,
                self.job or "",
                self._source(),
                batch_size=self.batch_size,
                worker_id=f"{self.worker_id}/{self.rank}/{worker}",
            )
            epochs = JobEpochs(job_worker, redeliver=False)
            if in_process:  # kept across epochs: checkpoint() records its deliveries
                self._epochs = epochs
        job_worker = epochs.worker
        self._state = {"epoch": epoch, "job": self.job, "worker": job_worker.worker_id}
        try:
            for delivery in epochs.epoch_deliveries():
                element = self._element(delivery.batch)
                if self._tagged and not in_process:
                    element = Tagged.of(element, job_worker.worker_id, delivery)
                yield element
        finally:
            if not in_process:  # the process may end with the epoch: give the lease back
                job_worker.close()
                job_worker.source.close()

    def close(self) -> None:
        """Give back the lease of this process's job worker, and close its connection."""
        epochs, self._epochs = self._epochs, None
        if epochs is not None:
            worker = epochs.worker
            worker.close()
            if worker.source is not self._kept:
                worker.source.close()

    def checkpoint(self, step: int) -> None:
        """Job mode: record checkpoint ``step`` in the job's ledger (call it in every rank).

        Every batch this dataset handed to the training loop so far is recorded: with
        ``num_workers=0``, by this process's job worker (a batch read ahead to find an
        epoch's end is not); with DataLoader worker processes, by the main process, from
        the batches the loader of :func:`dataloader` handed out (what the workers read
        ahead is not). ``queue.rewind(job, step)`` (or ``sqlfeed job rewind``) then hands
        out again what came after, for a training restored from that checkpoint (see
        :mod:`sqlfeed.dispatch.ledger`).

        Raises:
            InvalidArgumentError: not a job's dataset, its worker processes are those of a
                DataLoader not made by :func:`dataloader`, or ``step`` is not an integer >= 0.
            NotImplementedYetError: the job has ``even_batches`` (it cannot be rewound).
        """
        if self.job is None or (self._epochs is None and not self._tagged):
            raise InvalidArgumentError(
                "checkpoint() records what a job's dataset delivered: it needs job=... and "
                "the training loop iterating it (with DataLoader worker processes: the loader "
                "of sqlfeed.torch.dataloader, which notes what they deliver)"
            )
        if self.even_batches:
            raise NotImplementedYetError(even_batches_rewind(self.job))
        if self._epochs is not None:
            self._epochs.worker.checkpoint(step, self._epochs.untaken())
            return
        check_int(step, "a checkpoint id", 0)
        queue = open_queue(self.queue)
        try:
            for w in range(self._tagged):  # each one, so the checkpoint counts as recorded
                self._consumed.setdefault(f"{self.worker_id}/{self.rank}/{w}", DeliveryLog())
            for name, log in self._consumed.items():
                queue.record(self.job, step, name, log.drain())
        finally:
            if not isinstance(self.queue, LeaseQueue):
                queue.close()

    def note(self, item: Any) -> Any:
        """The batch of ``item`` (a :class:`Tagged` one, from a worker process).

        Its delivery is noted for :meth:`checkpoint`: the loader of :func:`dataloader` calls
        it.
        """
        if not isinstance(item, Tagged):
            return item
        log = self._consumed.setdefault(item.worker, DeliveryLog())
        log.handed(item.epoch, item.partition, item.offset, item.rows)
        return item.element

    # -- the StatefulDataLoader protocol ---------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this dataset (this worker's copy of it) stands: a small JSON-able dict.

        ``torchdata``'s ``StatefulDataLoader`` calls it in each worker after each batch
        and keeps the state of the last batch the training loop took; its own
        ``state_dict()`` holds them all. Static mode: the epoch, the worker's share, the
        batches it delivered in the epoch, whether that share is ``done`` (a worker whose
        share ended before the others' is restored to deliver nothing more in the epoch)
        and the :class:`~sqlfeed.Feeder` state of its position.
        """
        state: dict[str, Any] = {"version": STATE_VERSION}
        if self._state is None:  # no iteration begun: the next one starts its epoch
            epoch = self.epoch + self._iterations
            return state | {"epoch": epoch, "batches": 0, "done": False, "feeder": None}
        state |= self._state
        if self._feeder is not None and self._rows is not None:
            state["feeder"] = self._feeder.state_at(self._rows, state["epoch"])
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume the next iteration where ``state`` (from :meth:`state_dict`) stood.

        Raises:
            InvalidArgumentError: not a dataset state (the share and the Feeder state are
                checked when the iteration starts, where the worker is known).
        """
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise InvalidArgumentError(
                f"not a sqlfeed.torch dataset state: got {str(state)[:80]!r}"
            )
        if self.job is not None:
            self.set_epoch(int(state.get("epoch", 0)))
            return
        self._resume = dict(state)
        self.set_epoch(int(state["epoch"]))


@dataclasses.dataclass(frozen=True)
class Tagged:
    """A job's batch from a DataLoader worker process, with the delivery it is.

    The loader of :func:`dataloader` hands the training loop the element and notes the rest.
    """

    element: Any
    worker: str
    """The job worker (``<worker_id>/<rank>/<DataLoader worker>``)."""
    epoch: int
    partition: int
    offset: int
    rows: int

    @classmethod
    def of(cls, element: Any, worker: str, delivery: Delivery) -> Tagged:
        """``element``, the batch of ``delivery`` by job worker ``worker``, tagged."""
        return cls(
            element,
            worker,
            delivery.epoch,
            delivery.partition,
            delivery.offset,
            delivery.batch.num_rows,
        )

    def pin_memory(self) -> Tagged:
        """The same, its tensors in pinned memory (the DataLoader's ``pin_memory=True``)."""
        return dataclasses.replace(self, element=pin_memory(self.element))  # type: ignore[no-untyped-call]


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if (rank is None) != (world_size is None):
        raise InvalidArgumentError("give both rank and world_size, or neither")
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
        return 0, 1
    check_int(world_size, "world_size", 1)
    check_int(rank, "rank", 0)
    if rank >= world_size:
        raise InvalidArgumentError(f"rank must be in [0, world_size), got {rank}/{world_size}")
    return rank, world_size


def _refuse_collation(dataset: SQLDataset, frame: Any) -> None:
    """Refuse a DataLoader that would batch the items again (``batch_size`` not None).

    It would stack whole batches (e.g. shape ``[4, 1024]``) without a word.
    ``iter(dataset)`` is called by the loader's fetcher, which says whether it collates.
    """
    caller = frame.f_back if frame is not None else None
    fetcher = caller.f_locals.get("self") if caller is not None else None
    del frame, caller
    if (
        isinstance(fetcher, _IterableDatasetFetcher)
        and fetcher.dataset is dataset
        and fetcher.auto_collation
    ):
        raise InvalidArgumentError(
            "the DataLoader batches the dataset's items again, but each item is a whole "
            "batch already: give the DataLoader batch_size=None, or use "
            "sqlfeed.torch.dataloader(dataset, ...)"
        )


def _consumed(state: Mapping[str, Any]) -> bool:
    """Whether a dataset state is past its epoch's start (so it holds a share's position)."""
    return bool(state.get("batches") or state.get("feeder") is not None or state.get("done"))
