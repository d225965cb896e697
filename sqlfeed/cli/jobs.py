"""The job commands: ``sqlfeed job create|status|reset|delete`` and ``sqlfeed worker``."""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from dialects import InvalidArgumentError, dialect_for
from sqlfeed import connect
from sqlfeed.cli.common import (
    CommandParser,
    Handler,
    add_plan_options,
    add_sql,
    plan_on_db,
    positive,
    validated_query,
    write_json,
)
from sqlfeed.dispatch import ORDERS, Delivery, JobSpec, Worker, open_queue


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
        ("status", "per-epoch done/leased/pending and per-worker counts and throughput",
         _cmd_job_status),
        ("reset", "make every partition pending again, from the start", _cmd_job_reset),
        ("delete", "remove the job from the queue", _cmd_job_delete),
    )  # fmt: skip
    for action, helptext, handler in others:
        sub = actions.add_parser(action, help=helptext)
        _add_job_target(sub)
        if action == "status":
            sub.add_argument("--format", choices=("table", "json"), default="table")
        sub.set_defaults(handler=handler)

    worker = commands.add_parser(
        "worker",
        help="pull a job's partitions and read them (joins and leaves at any time)",
        description=(
            "Take leases on the job's partitions until every epoch is done, reading each "
            "partition; with --out, write every batch to DIR/epoch=E/part-P-B.parquet. "
            "SIGTERM gives the current lease back at once."
        ),
    )
    _add_job_target(worker)
    worker.add_argument("--db", metavar="URL", required=True, help="where the query runs")
    worker.add_argument("--out", metavar="DIR", help="write the batches here")
    worker.add_argument("--batch-size", type=int, metavar="N")
    worker.add_argument("--worker-id", metavar="ID", help="unique name (default host:pid:rand)")
    worker.add_argument("--format", choices=("text", "json"), default="text")
    worker.set_defaults(handler=_cmd_worker)


def _register_create(actions: argparse._SubParsersAction[CommandParser]) -> None:
    create = actions.add_parser(
        "create",
        help="plan a query and create the job (idempotent: the same job may be created again)",
    )
    _add_job_target(create)
    create.add_argument("--db", metavar="URL", required=True, help="where the query runs")
    add_plan_options(create)
    create.add_argument("--epochs", type=int, default=1)
    create.add_argument("--seed", type=int, default=0)
    create.add_argument("--lease-ttl", type=float, default=60.0, metavar="SECONDS")
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
    create.add_argument("--format", choices=("text", "json"), default="text")
    add_sql(create)
    create.set_defaults(handler=_cmd_job_create)


def _add_job_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        metavar="URL",
        default="sqlite:///sqlfeed-queue.db",
        help="the lease queue: sqlite:///file.db (default "
        "sqlite:///sqlfeed-queue.db), or a PostgreSQL or MySQL URL",
    )
    parser.add_argument("--job", "--name", dest="job", required=True, metavar="NAME")


def _cmd_job_create(args: argparse.Namespace, out: TextIO) -> None:
    positive(args.epochs, "--epochs")
    parsed = validated_query(args, dialect_for(args.db))
    queue = open_queue(args.queue)
    plan = plan_on_db(args, parsed)
    rows = None
    if args.even_batches is not None:
        positive(args.even_batches, "--even-batches")
        if args.batch_size is None:
            raise InvalidArgumentError("--even-batches needs --batch-size")
        rows = plan.rows
        if rows is None:
            rows = connect(args.db).count(parsed, columns=list(plan.columns))
    holder = None
    if args.snapshot:
        holder = connect(args.db).export_snapshot()
    spec = queue.create_job(
        JobSpec(args.job, plan, epochs=args.epochs, seed=args.seed, lease_ttl=args.lease_ttl,
                order=args.order, snapshot=holder.snapshot if holder else None,
                even_batches=args.even_batches is not None, replicas=args.even_batches,
                batch_size=args.batch_size if args.even_batches else None, rows=rows)
    )  # fmt: skip
    summary = {
        "job": spec.name,
        "fingerprint": spec.plan.fingerprint,
        "strategy": spec.plan.strategy,
        "partitions": spec.plan.num_partitions,
        "epochs": spec.epochs,
    }
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(
            f"job {spec.name}: {spec.plan.num_partitions} {spec.plan.strategy} partitions x "
            f"{spec.epochs} epoch(s), plan {spec.plan.fingerprint}\n"
        )
    if holder is not None:
        out.write(f"holding snapshot {holder.snapshot} until the job is complete\n")
        out.flush()
        with holder:
            while not queue.status(spec.name).complete:
                time.sleep(1.0)


def _cmd_job_status(args: argparse.Namespace, out: TextIO) -> None:
    status = open_queue(args.queue).status(args.job)
    if args.format == "json":
        write_json(out, status.to_dict(), indent=2)
        return
    out.write(f"job {status.name}: {status.partitions} partitions, {status.epochs} epoch(s)"
              f"{', complete' if status.complete else ''}\n")  # fmt: skip
    out.write("epoch      done    leased   pending   dropped\n")
    for e in status.per_epoch:
        out.write(
            f"{e['epoch']:>5} {e['done']:>9} {e['leased']:>9} {e['pending']:>9} {e['dropped']:>9}\n"
        )
    if status.workers:
        out.write("worker                              batches        rows     rows/s\n")
        for w in status.workers:
            out.write(f"{w['worker'][:34]:<34} {w['batches']:>9} {w['rows']:>11} "
                      f"{w['rows_per_second']:>10.0f}\n")  # fmt: skip


def _cmd_job_reset(args: argparse.Namespace, out: TextIO) -> None:
    open_queue(args.queue).reset(args.job)
    out.write(f"job {args.job}: every partition pending again\n")


def _cmd_job_delete(args: argparse.Namespace, out: TextIO) -> None:
    queue = open_queue(args.queue)
    queue.job(args.job)
    queue.delete(args.job)
    out.write(f"job {args.job}: deleted\n")


def _cmd_worker(args: argparse.Namespace, out: TextIO) -> None:
    if args.batch_size is not None:
        positive(args.batch_size, "--batch-size")
    target = Path(args.out) if args.out else None
    started = time.perf_counter()
    rows = batches = 0
    with Worker(args.queue, args.job, args.db, worker_id=args.worker_id,
                batch_size=args.batch_size) as worker:  # fmt: skip
        worker.release_on_sigterm()
        for delivery in worker.deliveries():
            if target is not None:
                _write_delivery(target, delivery)
            rows += delivery.batch.num_rows
            batches += 1
    elapsed = time.perf_counter() - started
    summary = {"worker": worker.worker_id, "batches": batches, "rows": rows,
               "seconds": round(elapsed, 3)}  # fmt: skip
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(f"worker {worker.worker_id}: {rows} rows in {batches} batches "
                  f"({elapsed:.1f}s)\n")  # fmt: skip


def _write_delivery(folder: Path, delivery: Delivery) -> None:
    """DIR/epoch=E/part-P-B.parquet, written aside and renamed (a redelivery overwrites)."""
    directory = folder / f"epoch={delivery.epoch}"
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"part-{delivery.partition:05d}-{delivery.offset:06d}.parquet"
    temporary = directory / f".{final.name}.{uuid.uuid4().hex[:8]}"
    pq.write_table(pa.Table.from_batches([delivery.batch]), temporary)
    os.replace(temporary, final)
