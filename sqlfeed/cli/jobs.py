"""The job commands: ``sqlfeed job create|status|reset|delete`` and ``sqlfeed worker``."""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TextIO

import sqlalchemy as sa

from sqlfeed import connect
from sqlfeed.cli.checks import (
    check_output_folder,
    missing_package,
)
from sqlfeed.cli.common import (
    flush_warnings,
    plan_on_db,
    positive,
    validated_query,
    write_json,
)
from sqlfeed.cli.follow import (
    check_follow_create,
    create_followed,
    delete_followed,
    refuse_followed,
    status_followed,
)
from sqlfeed.cli.saved import load_plan
from sqlfeed.cli.worker import Checkpoints, WaitReporter, reach_servers
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.dispatch import Delivery, Lease, Worker, open_queue
from sqlfeed.dispatch.feeder import create_job
from sqlfeed.dispatch.folder import BatchFolder
from sqlfeed.dispatch.follow import JobFollower, followed_job
from sqlfeed.dispatch.worker import default_worker_id
from sqlfeed.feed.options import JobOptions
from sqlfeed.io import Source, redact_url
from sqlfeed.plans.materialize import drop_scratch
from sqlfeed.plans.model import Plan
from sqlfeed.sql import ParsedQuery

MAX_BATCH_ROWS = 2**31 - 1
"""The most rows in one batch (an Arrow record batch is not meant to hold more)."""
MAX_JOB_TASKS = 1_000_000
"""The most tasks (partitions x epochs) ``sqlfeed job create`` puts in a queue."""


def _check_job_create(args: argparse.Namespace) -> None:
    """Every ``job create`` option, before anything connects."""
    positive(args.epochs, "--epochs", most=MAX_JOB_TASKS)
    _check_job_name(args.job)
    if not (math.isfinite(args.lease_ttl) and args.lease_ttl > 0):
        raise InvalidArgumentError(
            f"--lease-ttl must be a number of seconds > 0, got {args.lease_ttl}"
        )
    if args.even_batches is not None:
        positive(args.even_batches, "--even-batches")
        if args.batch_size is None:
            raise InvalidArgumentError(
                f"--even-batches {args.even_batches} needs --batch-size N: every replica then "
                "delivers the same number of N-row batches"
            )
    if args.batch_size is not None:
        positive(args.batch_size, "--batch-size", most=MAX_BATCH_ROWS)
        if args.even_batches is None:
            raise InvalidArgumentError(
                "--batch-size goes with --even-batches REPLICAS; otherwise each worker "
                "chooses its own (sqlfeed worker --batch-size N)"
            )
    if args.snapshot and dialect_for(args.db).name != "postgres":
        raise InvalidArgumentError(
            f"--snapshot needs PostgreSQL (the --db URL is {dialect_for(args.db).name}); "
            "elsewhere use --strategy materialize to freeze the rows"
        )
    check_queue_url(args.queue, must_exist=False)


def _cmd_job_create(args: argparse.Namespace, out: TextIO) -> None:
    follow = check_follow_create(args)
    _check_job_create(args)
    parsed = validated_query(args, dialect_for(args.db))
    with connect(args.db) as source:  # closed on return: a DuckDB file is free again
        if follow:
            create_followed(args, parsed, source, out)
        else:
            _create_job(args, parsed, source, out)


def _create_job(args: argparse.Namespace, parsed: ParsedQuery, source: Source, out: TextIO) -> None:
    plan = plan_on_db(args, parsed, source)
    try:  # the queue is made once there is a plan: a query that fails leaves no queue file
        _check_tasks(args.epochs, plan.num_partitions)
        queue = open_queue(args.queue)
        job = JobOptions(
            job=args.job,
            lease_ttl=args.lease_ttl,
            order=args.order,
            even_batches=args.even_batches is not None,
            replicas=args.even_batches,
        )
        holder = source.export_snapshot() if args.snapshot else None
        spec = create_job(
            queue,
            job,
            plan,
            source,
            epochs=args.epochs,
            seed=args.seed,
            batch_size=args.batch_size,
            snapshot=holder.snapshot if holder else None,
        )
    except BaseException:
        with contextlib.suppress(Exception):  # the first error is the one to report
            drop_scratch(plan, source)  # no job reads it
        raise
    if plan.scratch_table is not None and spec.plan.scratch_table != plan.scratch_table:
        drop_scratch(plan, source)  # the job existed already, with its own table
    summary = {
        "job": spec.name,
        "fingerprint": spec.plan.fingerprint,
        "strategy": spec.plan.strategy,
        "partitions": spec.plan.num_partitions,
        "epochs": spec.epochs,
    }
    if queue.caveat is not None:  # what this queue cannot guarantee (SQLite)
        summary["caveat"] = queue.caveat
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(
            f"job {spec.name}: {spec.plan.num_partitions} {spec.plan.strategy} partitions x "
            f"{spec.epochs} epoch(s), plan {spec.plan.fingerprint}\n"
        )
        if queue.caveat is not None:
            out.write(f"note: {queue.caveat}\n")
    if holder is not None:
        flush_warnings()  # the command now waits for the workers
        out.write(f"holding snapshot {holder.snapshot} until the job is complete\n")
        out.flush()
        with holder:
            while not queue.status(spec.name).complete:
                time.sleep(1.0)


def _cmd_job_status(args: argparse.Namespace, out: TextIO) -> None:
    _check_job_name(args.job)
    check_queue_url(args.queue, must_exist=True)
    queue = open_queue(args.queue)
    if queue.find_job(args.job) is None and status_followed(queue, args.job, args.format, out):
        return
    status = queue.status(args.job)
    checkpoints = queue.checkpoints(args.job)  # for sqlfeed job rewind --to ID
    if args.format == "json":
        write_json(out, status.to_dict() | {"checkpoints": checkpoints}, indent=2)
        return
    out.write(
        f"job {status.name}: {status.partitions} partitions, {status.epochs} epoch(s)"
        f"{', complete' if status.complete else ''}\n"
    )
    out.write("epoch      done    leased   pending   dropped\n")
    for e in status.per_epoch:
        out.write(
            f"{e['epoch']:>5} {e['done']:>9} {e['leased']:>9} {e['pending']:>9} {e['dropped']:>9}\n"
        )
    if status.workers:
        out.write("worker                              batches        rows     rows/s\n")
        for w in status.workers:
            out.write(
                f"{w['worker'][:34]:<34} {w['batches']:>9} {w['rows']:>11} "
                f"{w['rows_per_second']:>10.0f}\n"
            )
    if checkpoints:
        shown = ", ".join(map(str, checkpoints[-5:]))
        more = f" (the last 5 of {len(checkpoints)})" if len(checkpoints) > 5 else ""
        out.write(f"checkpoints (sqlfeed job rewind --to ID): {shown}{more}\n")


def _cmd_job_reset(args: argparse.Namespace, out: TextIO) -> None:
    _check_job_name(args.job)
    check_queue_url(args.queue, must_exist=True)
    refuse_followed(open_queue(args.queue), args.job, "reset")
    open_queue(args.queue).reset(args.job)
    out.write(f"job {args.job}: every partition pending again\n")


def _cmd_job_rewind(args: argparse.Namespace, out: TextIO) -> None:
    _check_job_name(args.job)
    check_queue_url(args.queue, must_exist=True)
    refuse_followed(open_queue(args.queue), args.job, "rewind")
    summary = open_queue(args.queue).rewind(args.job, args.to)
    out.write(
        f"job {args.job}: rewound to checkpoint {args.to}: {summary['done']} partitions "
        f"done then, {summary['resumed']} resumed part-way, the rest pending\n"
    )


def _cmd_job_delete(args: argparse.Namespace, out: TextIO) -> None:
    _check_job_name(args.job)
    check_queue_url(args.queue, must_exist=True)
    if args.db is not None:
        dialect_for(args.db)
    queue = open_queue(args.queue)
    if queue.find_job(args.job) is None and delete_followed(queue, args.job, out):
        return
    plan = queue.job(args.job).plan
    table = None if args.keep_scratch else plan.scratch_table
    if table is not None:
        if args.db is None:
            raise InvalidArgumentError(
                f"job {args.job} reads the scratch table {table}: pass --db URL (where it "
                "lives) to drop it with the job, or --keep-scratch to leave it"
            )
        if dialect_for(args.db).name != plan.dialect:
            raise InvalidArgumentError(
                f"--db is a {dialect_for(args.db).name} URL, but job {args.job} reads "
                f"{plan.dialect}: pass the --db the job was created with"
            )
        with connect(args.db) as source:
            drop_scratch(plan, source)
    queue.delete(args.job)
    out.write(f"job {args.job}: deleted{f' with its scratch table {table}' if table else ''}\n")


def _cmd_worker(args: argparse.Namespace, out: TextIO) -> None:
    _check_job_name(args.job)
    if args.batch_size is not None:
        positive(args.batch_size, "--batch-size", most=MAX_BATCH_ROWS)
    if args.worker_id is not None and not args.worker_id.strip():
        raise InvalidArgumentError("--worker-id needs a name (or leave it out: host:pid:random)")
    if not (math.isfinite(args.checkpoint_every) and args.checkpoint_every >= 0):
        raise InvalidArgumentError(
            f"--checkpoint-every must be a number of seconds >= 0, got {args.checkpoint_every}"
        )
    target = check_output_folder(args.out, "--out") if args.out is not None else None
    saved = None if args.plan is None else load_plan(args.plan, dialect_for(args.db))
    if not (math.isfinite(args.start_wait) and args.start_wait >= 0):
        raise InvalidArgumentError(
            f"--start-wait must be a number of seconds >= 0, got {args.start_wait}"
        )
    check_queue_url(args.queue, must_exist=True)
    reach_servers(args.queue, args.job, args.db, args.start_wait)
    started = time.perf_counter()
    acked = {"batches": 0, "rows": 0}  # what the queue stored as acknowledged

    def acknowledged(delivery: Delivery) -> None:
        acked["batches"] += 1
        acked["rows"] += delivery.batch.num_rows

    stopped: SystemExit | None = None
    fresh = target is not None and not target.exists()
    args.worker_id = args.worker_id or default_worker_id()  # one name in every epoch's job
    try:
        for name in _worker_jobs(args, saved):
            stopped = _work_job(args, name, target, saved, acknowledged)
            if stopped is not None:
                break
    except BaseException:
        if fresh and target is not None:
            _remove_if_unused(target)
        raise
    elapsed = time.perf_counter() - started
    rows, batches = acked["rows"], acked["batches"]
    summary = {
        "worker": args.worker_id,
        "batches": batches,
        "rows": rows,
        "seconds": round(elapsed, 3),
    }
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(
            f"worker {args.worker_id}: {rows} rows in {batches} batches "
            f"acknowledged ({elapsed:.1f}s)\n"
        )
    if stopped is not None:
        raise stopped


def _worker_jobs(args: argparse.Namespace, saved: Plan | None) -> Iterator[str]:
    """The jobs a worker reads: ``--job``, or each epoch's job of a followed job in turn.

    A followed job's next epoch is found (or planned over the table as it is now) only
    once the previous epoch is done.
    """
    queue = open_queue(args.queue)
    if queue.find_job(args.job) is not None or followed_job(queue, args.job) is None:
        yield args.job  # a plain job (or none: the Worker says so)
        return
    if saved is not None:
        raise InvalidArgumentError(
            f"job {args.job} follows the table (a plan per epoch): leave out --plan"
        )
    follower = JobFollower.resume(queue, args.job, args.db)
    for epoch in range(follower.epochs):
        yield follower.epoch_job(epoch).name


def _work_job(
    args: argparse.Namespace,
    job: str,
    target: Path | None,
    saved: Plan | None,
    acknowledged: Callable[[Delivery], None],
) -> SystemExit | None:
    """Read job ``job`` until it is done; the SIGTERM that stopped it, if one did."""
    with Worker(
        args.queue,
        job,
        args.db,
        worker_id=args.worker_id,
        batch_size=args.batch_size,
        on_ack=acknowledged,
    ) as worker:
        if saved is not None and worker.spec.plan.fingerprint != saved.fingerprint:
            raise InvalidArgumentError(
                f"job {job} reads plan {worker.spec.plan.fingerprint}, not --plan "
                f"{args.plan} ({saved.fingerprint}): give the job made from it"
            )
        ledger = Checkpoints(worker, args.checkpoint_every)
        waits = WaitReporter(open_queue(args.queue), job, worker.worker_id, worker.spec.lease_ttl)
        stopped = None
        try:
            with waits:
                _work(worker, target, ledger, waits)
        except SystemExit as exit_:  # SIGTERM: the leases are back; say what was done
            stopped = exit_
        finally:
            waits.queue.close()
        ledger.record()  # what was delivered since the last one (done, or stopped)
    return stopped


def _remove_if_unused(folder: Path) -> None:
    """Remove the ``--out`` folder a failed worker made, if it holds no batch file."""
    if folder.is_dir() and not any(
        p.is_file() and p.suffix == ".parquet" for p in folder.rglob("*")
    ):
        shutil.rmtree(folder, ignore_errors=True)


def _check_tasks(epochs: int, partitions: int) -> None:
    """A job's queue holds a task per partition and epoch, all made when it is created."""
    if epochs * partitions > MAX_JOB_TASKS:
        raise InvalidArgumentError(
            f"--epochs {epochs} x {partitions} partitions is {epochs * partitions} tasks; a "
            f"job holds at most {MAX_JOB_TASKS} (one per partition and epoch): give fewer "
            "epochs or partitions (a job may be reset and run again)"
        )


def _check_job_name(name: str) -> None:
    if not name.strip():
        raise InvalidArgumentError("--job needs a name")


def check_queue_url(url: str, *, must_exist: bool) -> None:
    """``--queue``, checked without connecting.

    A URL SQLAlchemy reads, of a backend a queue lives in, whose driver is installed; a
    SQLite queue's folder exists, and with ``must_exist`` its file too (reading a queue
    never creates one).

    Raises:
        InvalidArgumentError: it is not such a URL.
        MissingDependencyError: its driver is not installed.
    """
    if url.startswith("memory://"):
        return
    shown = redact_url(url)
    try:
        with missing_package(f"--queue {shown}"):
            parsed = sa.engine.make_url(url)
            dialect = parsed.get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as err:
        raise InvalidArgumentError(
            f"--queue {shown!r} is not a queue URL ({' '.join(str(err).split())}): use "
            "sqlite:///file.db, postgresql+psycopg://... or mysql+pymysql://..."
        ) from None
    if dialect.name not in ("sqlite", "postgresql", "mysql", "mariadb"):
        raise InvalidArgumentError(
            f"--queue: a queue lives in SQLite, PostgreSQL or MySQL/MariaDB, not {dialect.name}"
        )
    with missing_package(f"--queue {shown}"):
        dialect.import_dbapi()
    path = parsed.database if dialect.name == "sqlite" else None
    if path and path != ":memory:" and not path.startswith("file:"):
        if must_exist and not Path(path).is_file():
            raise InvalidArgumentError(
                f"--queue {shown}: no queue file {path} (sqlfeed job create makes it)"
            )
        if not Path(path).parent.is_dir():
            raise InvalidArgumentError(
                f"--queue {shown}: the folder {Path(path).parent} does not exist; create it first"
            )


def _work(worker: Worker, target: Path | None, ledger: Checkpoints, waits: WaitReporter) -> None:
    """Read the job's partitions until it is done.

    With ``--out``, write every batch into a :class:`~sqlfeed.dispatch.folder.BatchFolder`
    (a batch the worker no longer holds the lease of is refused, so it is neither written
    nor acknowledged). Record checkpoints in the job's ledger as they fall due.
    """
    folder = None if target is None else _batch_folder(target, worker)
    worker.release_on_sigterm()
    for delivery in worker.deliveries():
        waits.delivered()
        ledger.due()
        if folder is None:
            continue
        try:
            written = folder.write(delivery, partial(worker.still_holds, *_where(delivery)))
        except OSError as err:
            raise InvalidArgumentError(
                f"--out {target}: cannot write {err.filename or ''}: {err.strerror or err}"
            ) from None
        if not written:
            worker.refuse(delivery)
    if folder is not None and worker.done:
        folder.finish()


def _where(delivery: Delivery) -> tuple[int, int]:
    return delivery.epoch, delivery.partition


def _batch_folder(target: Path, worker: Worker) -> BatchFolder:
    """The ``--out`` folder, wired to the worker's leases (checked before any lease)."""
    folder = BatchFolder(target, worker.spec)

    def on_lease(lease: Lease) -> None:
        folder.on_lease(lease, lambda: worker.still_holds(lease.epoch, lease.partition))

    worker.on_lease = on_lease
    worker.on_partition = folder.on_partition
    return folder
