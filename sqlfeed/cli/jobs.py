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

from dialects import InvalidArgumentError, dialect_for
from sqlfeed import connect
from sqlfeed.cli.checks import (
    check_output_folder,
    db_url,
    missing_package,
    name_flags,
)
from sqlfeed.cli.common import (
    CommandParser,
    Handler,
    add_plan_options,
    add_sql,
    flush_warnings,
    plan_on_db,
    positive,
    validated_query,
    write_json,
)
from sqlfeed.cli.follow import (
    add_follow_options,
    check_follow_create,
    create_followed,
    delete_followed,
    refuse_followed,
    status_followed,
)
from sqlfeed.cli.saved import add_plan_file, load_plan
from sqlfeed.cli.worker import Checkpoints, WaitReporter
from sqlfeed.dispatch import ORDERS, Delivery, Lease, Worker, open_queue
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
DEFAULT_LEASE_TTL = 60.0
"""The default of ``sqlfeed job create --lease-ttl``."""
DEFAULT_CHECKPOINT_SECONDS = 60.0
"""The default of ``sqlfeed worker --checkpoint-every``."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``job`` command (create, status, reset, delete) and the ``worker`` command."""
    job = commands.add_parser(
        "job",
        help="create, inspect or reset a job: a plan handed out to elastic workers",
        description="A job is a plan, a number of epochs and a seed, in a lease queue.",
    )
    actions = job.add_subparsers(dest="job_command", metavar="ACTION", parser_class=CommandParser)
    actions.required = True
    _register_create(actions)
    others: tuple[tuple[str, str, Handler], ...] = (
        (
            "status",
            "per-epoch done/leased/pending and per-worker counts and throughput",
            _cmd_job_status,
        ),
        ("reset", "make every partition pending again, from the start", _cmd_job_reset),
        (
            "rewind",
            "hand out again everything delivered after a checkpoint of the ledger",
            _cmd_job_rewind,
        ),
        (
            "delete",
            "remove the job from the queue (and its scratch table, with --db)",
            _cmd_job_delete,
        ),
    )
    for action, helptext, handler in others:
        sub = actions.add_parser(action, help=helptext)
        _add_job_target(sub)
        if action == "status":
            sub.add_argument("--format", choices=("table", "json"), default="table")
        if action == "rewind":
            sub.description = (
                "After every worker is stopped and the model restored from checkpoint "
                "CHECKPOINT: make what was delivered after it (by the workers' ledger, "
                "Worker.checkpoint) pending again, so the restored model sees each row once."
            )
            sub.add_argument(
                "--to",
                type=int,
                required=True,
                metavar="CHECKPOINT",
                help="the checkpoint id the workers recorded",
            )
        if action == "delete":
            sub.description = (
                "Remove the job from the queue. A job of --strategy materialize reads a "
                "scratch table: pass --db URL to drop it too, or --keep-scratch."
            )
            sub.add_argument(
                "--db", metavar="URL", type=db_url, help="where the job's scratch table lives"
            )
            sub.add_argument(
                "--keep-scratch", action="store_true", help="leave the scratch table in place"
            )
        sub.set_defaults(handler=handler)
        name_flags(sub)

    _register_worker(commands)


def _register_worker(commands: argparse._SubParsersAction[CommandParser]) -> None:
    worker = commands.add_parser(
        "worker",
        help="pull a job's partitions and read them (joins and leaves at any time)",
        description=(
            "Take leases on the job's partitions until every epoch is done, reading each "
            "partition; with --out, write every batch to DIR/epoch=E/part-P-B.parquet and, "
            "once a partition is acknowledged, DIR/epoch=E/_manifest-P.json: the committed "
            "data is what the manifests list. SIGTERM: the leases are given back and the "
            "worker exits 143, within 5 s. A worker killed otherwise keeps its leases until "
            "they expire (the job's --lease-ttl, default 60 s): meanwhile the other workers "
            "wait for them, and say so once on stderr."
        ),
    )
    _add_job_target(worker)
    worker.add_argument(
        "--db", metavar="URL", type=db_url, required=True, help="where the query runs"
    )
    worker.add_argument(
        "--out", metavar="DIR", help="write the batches here (one folder per job; see the README)"
    )
    worker.add_argument("--batch-size", type=int, metavar="N")
    worker.add_argument("--worker-id", metavar="ID", help="unique name (default host:pid:rand)")
    worker.add_argument(
        "--checkpoint-every",
        type=float,
        default=DEFAULT_CHECKPOINT_SECONDS,
        metavar="SECONDS",
        help="record in the job's ledger what this worker delivered, every SECONDS and when "
        "it stops, under checkpoint id = the Unix time in seconds, for sqlfeed job rewind "
        f"--to ID (default {DEFAULT_CHECKPOINT_SECONDS:g}; 0: never; not for --even-batches "
        "jobs, which cannot be rewound)",
    )
    worker.add_argument("--format", choices=("text", "json"), default="text")
    add_plan_file(worker, job=True)
    worker.set_defaults(handler=_cmd_worker)
    name_flags(worker)


def _register_create(actions: argparse._SubParsersAction[CommandParser]) -> None:
    create = actions.add_parser(
        "create",
        help="plan a query and create the job (idempotent: the same job may be created again)",
    )
    _add_job_target(create)
    create.add_argument(
        "--db", metavar="URL", type=db_url, required=True, help="where the query runs"
    )
    add_plan_options(create)
    create.add_argument("--epochs", type=int, default=1)
    create.add_argument("--seed", type=int, default=0)
    create.add_argument(
        "--lease-ttl",
        type=float,
        default=DEFAULT_LEASE_TTL,
        metavar="SECONDS",
        help="a worker renews its leases while it reads; the partitions of one that stops "
        "renewing them (killed, frozen, cut off) go to another worker this many seconds "
        f"after its last renewal (default {DEFAULT_LEASE_TTL:g})",
    )
    create.add_argument(
        "--order",
        choices=ORDERS,
        default="shuffle",
        help="hand-out order within an epoch (default shuffle: seeded)",
    )
    create.add_argument(
        "--even-batches",
        metavar="REPLICAS",
        type=int,
        help="every one of REPLICAS synchronous workers delivers the same number of batches "
        "per epoch (needs --batch-size); the rows left over are dropped",
    )
    create.add_argument("--batch-size", type=int, metavar="N", help="rows per batch")
    create.add_argument(
        "--snapshot",
        action="store_true",
        help="PostgreSQL: every worker reads inside one snapshot taken now, so all partitions "
        "see the same data under concurrent writes; this command then stays running, holding "
        "the snapshot, until every epoch is done",
    )
    add_follow_options(create)
    create.add_argument("--format", choices=("text", "json"), default="text")
    add_sql(create)
    create.set_defaults(handler=_cmd_job_create)
    name_flags(create, replicas="--even-batches")


def _add_job_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        metavar="URL",
        default="sqlite:///sqlfeed-queue.db",
        help="the lease queue: sqlite:///file.db (default "
        "sqlite:///sqlfeed-queue.db), or a PostgreSQL or MySQL URL",
    )
    parser.add_argument("--job", "--name", dest="job", required=True, metavar="NAME")


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
    check_queue_url(args.queue, must_exist=True)
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
