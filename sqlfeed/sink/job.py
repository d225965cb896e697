"""A query's result written into a table by an elastic job: ``export --into``, ``predict``.

The SELECT is planned into partitions and made a job of the lease queue, whose spec
carries the sink's (:class:`~sqlfeed.sink.TableSink`): the first process creates the job
and the staging table, every other process started with the same queue URL and job name
joins as a worker (threads of this process with ``readers``). Each worker leases a
partition, turns each batch into output rows (``transform``: the identity for an export,
the model's predictions for ``predict``) and commits it under the sink's protocol: a
batch redelivered after a kill, or finished late by a worker that stalled past its lease,
finds its commit record and is skipped. The process that sees the job complete finishes
the sink (checks the counts, puts the table in place); ``finish_job`` does it by hand.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dispatch import JobSpec, Worker, open_queue
from sqlfeed.dispatch.queue import Lease, LeaseQueue
from sqlfeed.io import Source, connect
from sqlfeed.plans import plan as make_plan
from sqlfeed.plans.materialize import drop_scratch
from sqlfeed.sink.keys import distinct_keys, key_is_unique
from sqlfeed.sink.report import WriteReport
from sqlfeed.sink.table import PartitionLost, TableSink
from sqlfeed.sql.names import table_name

__all__ = ["Transform", "copy_into", "finish_job", "job_sink"]

Progress = Callable[[int, int | None], None]
"""Called with the rows committed so far by this process and the rows expected."""


class Transform(Protocol):
    """What a job does to each batch before it is written (``predict``: the model)."""

    what: dict[str, Any] | None
    """What identifies the transform in the job (a worker with another one is refused)."""

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """The output schema for the SELECT's ``schema`` (checks it first)."""

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The output rows of ``batch``, in its order."""


def copy_into(
    query: str,
    source: Any,
    url: Any,
    table: str,
    *,
    mode: str = "create",
    key: Sequence[str] | None = None,
    queue: str | LeaseQueue | None = None,
    job: str | None = None,
    readers: int | None = None,
    partitions: int | None = None,
    batch_size: int | None = None,
    lease_ttl: float = 60.0,
    finish: bool = True,
    progress: Progress | None = None,
    transform: Transform | None = None,
) -> WriteReport | None:
    """Write ``query``'s result (``transform``-ed) into ``table`` of ``url``, exactly once.

    Args:
        query: the SELECT (validated before anything runs).
        source: where it runs (URL or source).
        url: the output database (URL or source; None: ``source``).
        table: ``name`` or ``schema.name``.
        mode: ``create``, ``replace`` or ``append`` (see :class:`TableSink`).
        key: columns identifying a row (the output's primary key when the catalog proves
            them unique; else checked by their distinct count when finishing).
        queue: a lease queue URL shared by every process writing (None: an in-memory queue
            of this process).
        job: a job name shared by every process writing.
        readers: worker threads in this process (default 1; 4 without a queue).
        partitions: the number of partitions (default: the planner's).
        batch_size: rows per committed batch (every worker batches alike).
        lease_ttl: seconds a lease lives without heartbeat.
        finish: finish the sink once the job is complete.
        progress: called with rows committed by this process and rows expected.
        transform: what becomes of each batch (None: written as read).

    Returns:
        The finish's report; None when ``finish`` is False.

    Raises:
        InvalidArgumentError: bad input (before anything is written).
        EngineError: an engine failed.
    """
    src = connect(source)
    try:
        return _copy(
            src,
            query,
            url,
            table,
            mode,
            key,
            queue,
            job,
            readers,
            partitions,
            batch_size,
            lease_ttl,
            finish,
            progress,
            transform,
        )
    finally:
        if src is not source:
            src.close()


def _copy(
    src: Source,
    query: str,
    url: Any,
    table: str,
    mode: str,
    key: Sequence[str] | None,
    queue: str | LeaseQueue | None,
    job: str | None,
    readers: int | None,
    partitions: int | None,
    batch_size: int | None,
    lease_ttl: float,
    finish: bool,
    progress: Progress | None,
    transform: Transform | None,
) -> WriteReport | None:
    lease_queue = open_queue(queue if queue is not None else "memory://")
    name = job or f"into-{uuid.uuid4().hex[:12]}"
    spec, sink = job_sink(
        lease_queue,
        name,
        query,
        src,
        url if url is not None else src,
        table,
        mode=mode,
        key=key,
        partitions=partitions,
        batch_size=batch_size,
        lease_ttl=lease_ttl,
        transform=transform,
    )
    src.reading_beside(sink.source)
    try:
        threads = readers or (1 if queue is not None else 4)
        try:
            run_workers(lease_queue, spec, src, sink, threads, transform, progress)
        except BaseException:
            if queue is None:  # no other process can resume this run: nothing left behind
                sink.abort()
            raise
        if not finish:
            return None
        report = sink.finish(keep=queue is not None)
        if report.finished_by == "this process" and spec.plan.scratch_table is not None:
            drop_scratch(spec.plan, src)  # a materialize plan's copy of the SELECT
        return report
    finally:
        sink.close()


def job_sink(
    lease_queue: LeaseQueue,
    name: str,
    query: str,
    src: Source,
    url: Any,
    table: str,
    *,
    mode: str,
    key: Sequence[str] | None,
    partitions: int | None,
    batch_size: int | None,
    lease_ttl: float,
    transform: Transform | None,
) -> tuple[JobSpec, TableSink]:
    """The job ``name`` and its sink.

    Joined when it exists (checked to be the same output), else created with a new staging
    table.

    Raises:
        InvalidArgumentError: the job writes elsewhere or with another transform.
    """
    parsed = src.parse(query)
    schema = src.schema(parsed)
    out = transform.schema(schema) if transform is not None else schema
    what = transform.what if transform is not None else None
    existing = lease_queue.find_job(name)
    if existing is not None:
        _check_same(existing, name, table, mode, key, what)
        return existing, TableSink.attach(url, existing.sink or {})
    missing = [k for k in key or [] if k not in out.names]
    if missing:
        raise InvalidArgumentError(
            f"key column {missing[0]!r} is not among the output's columns {out.names}: "
            "select it (or --keep it)"
        )
    unique = bool(key) and key_is_unique(src, parsed, key or [])
    expected = src.count(parsed)
    keys = distinct_keys(src, parsed, key) if key and not unique else None
    if keys is not None and keys != expected:
        raise InvalidArgumentError(
            f"--key {','.join(key or [])} is not unique in the SELECT ({expected:,} rows, "
            f"{keys:,} distinct keys): give a unique key, or none (the output then gets "
            "_sqlfeed_partition, _sqlfeed_row)"
        )
    sink = TableSink.create(
        url,
        table,
        out,
        mode=mode,
        key=key,
        unique_key=unique,
        expected_rows=expected,
        expected_keys=expected if unique else keys,
        what=what,
    )
    plan = make_plan(parsed, src, partitions=partitions)
    size = batch_size or 8_192
    spec = JobSpec(name, plan, lease_ttl=lease_ttl, order="lpt", batch_size=size, sink=sink.spec)
    try:
        made = lease_queue.create_job(spec)
    except BaseException:
        sink.abort()
        sink.close()
        raise
    if (made.sink or {}).get("staging") != sink.spec["staging"]:  # another process won
        sink.abort()
        sink.close()
        _check_same(made, name, table, mode, key, what)
        return made, TableSink.attach(url, made.sink or {})
    return made, sink


def _check_same(
    spec: JobSpec,
    name: str,
    table: str,
    mode: str,
    key: Sequence[str] | None,
    what: dict[str, Any] | None,
) -> None:
    sink = spec.sink
    if sink is None:
        raise InvalidArgumentError(
            f"the job {name!r} writes no table (it is a training job): give another --job name"
        )
    identity = sink["identity"]
    theirs = (identity.get("what") or {}).get("model")
    ours = (what or {}).get("model")
    if theirs != ours:
        raise InvalidArgumentError(
            f"the job {name!r} predicts with model {theirs}, not {ours}: give the job's "
            "--model, or another --job name"
        )
    for label, mine, stored in (
        ("mode", mode, identity["mode"]),
        ("key", list(key or []) or None, identity["key"]),
    ):
        if mine != stored:
            raise InvalidArgumentError(
                f"the job {name!r} writes with {label} {stored!r}, not {mine!r}: give the "
                "job's options, or another --job name"
            )
    if (identity.get("what") or {}) != (what or {}):
        raise InvalidArgumentError(
            f"the job {name!r} writes other output columns ({identity['columns']}): give "
            "the job's options, or another --job name"
        )


def run_workers(
    lease_queue: LeaseQueue,
    spec: JobSpec,
    src: Source,
    sink: TableSink,
    threads: int,
    transform: Transform | None,
    progress: Progress | None,
) -> None:
    """``threads`` workers of the job until it is done, each committing whole partitions.

    A partition's rows stream into the staging table in one transaction of the output
    database, committed with the partition's record once every row was written; a partition
    taken again (its worker died, stalled or gave it back) is read again from its first row,
    and only one attempt's record commits. No resumed read can thus repeat or skip rows,
    whatever order a partition's rows come back in. A partition whose output connection was
    lost (:class:`~sqlfeed.sink.table.PartitionLost`) is given back and taken again the same
    way, once the sink has waited its reconnect pause.

    Raises:
        The first error of a worker (the others stop and give their leases back).
    """
    errors: list[BaseException] = []
    workers = [
        Worker(lease_queue, spec.name, src, batch_size=spec.batch_size, whole_partitions=True)
        for _ in range(threads)
    ]
    counter = _Counter(progress, (spec.sink or {}).get("expected_rows"))
    counter.add(0)  # the rows expected, known before the first partition commits

    def work(worker: Worker) -> None:
        own = TableSink.attach(sink.source, sink.spec)
        written = [0]

        def on_lease(lease: Lease) -> None:
            own.open_partition(lease.partition)
            written[0] = 0

        def on_partition(lease: Lease, batches: int) -> None:
            if own.commit_partition():
                counter.add(written[0])

        worker.on_lease, worker.on_partition = on_lease, on_partition
        try:
            while not _deliver(worker, own, transform, errors, written):
                pass  # a commit's connection was lost: its lease was given back, take again
        except BaseException as err:
            errors.append(err)
            for other in workers:
                other.request_stop()
        finally:
            own.rollback_partition()
            worker.close()
            own.close()

    pool = [threading.Thread(target=work, args=(w,), daemon=True) for w in workers[1:]]
    for thread in pool:
        thread.start()
    work(workers[0])
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]


def _deliver(
    worker: Worker,
    sink: TableSink,
    transform: Transform | None,
    errors: list[BaseException],
    written: list[int],
) -> bool:
    """Write what ``worker`` delivers until the job is done (True) or a commit is lost (False).

    A partition whose connection was lost while its rows were written is refused (its lease
    given back, to be read again from its first row); one lost at its commit leaves the
    worker's stream (which gives its leases back), to be started again.
    """
    try:
        for delivery in worker.deliveries():
            if errors:
                break
            out = transform(delivery.batch) if transform is not None else delivery.batch
            try:
                sink.write_rows(delivery.row, out)
            except PartitionLost:
                worker.refuse(delivery)
                continue
            written[0] += out.num_rows
    except PartitionLost:
        return False
    return True


class _Counter:
    def __init__(self, progress: Progress | None, total: int | None) -> None:
        self.progress = progress
        self.total = total
        self.rows = 0
        self.lock = threading.Lock()

    def add(self, rows: int) -> None:
        with self.lock:
            self.rows += rows
            if self.progress is not None:
                self.progress(self.rows, self.total)


def finish_job(
    queue: str | LeaseQueue, job: str, url: Any, table: str | None = None
) -> WriteReport:
    """Finish the output of ``job`` by hand (``--finish``): idempotent.

    ``table``: the output table the caller means (checked against the job's).

    Raises:
        InvalidArgumentError: no such job, a job that writes no table, or another table.
        EngineError: the job is not complete (the counts differ), or the output failed.
    """
    lease_queue = open_queue(queue)
    spec = lease_queue.job(job)
    if spec.sink is None:
        raise InvalidArgumentError(
            f"the job {job!r} writes no table (it is a training job): nothing to finish"
        )
    with TableSink.attach(url, spec.sink) as sink:
        if table is not None:
            named = table_name(table, sink.dialect, "table")
            if named.sql(dialect=sink.dialect.sqlglot_dialect) != spec.sink["table"]:
                raise InvalidArgumentError(
                    f"the job {job!r} writes {spec.sink['table']}, not {table}: give its table"
                )
        return sink.finish()
