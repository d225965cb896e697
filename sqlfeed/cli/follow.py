"""Followed jobs on the command line: ``sqlfeed job create --follow`` and its workers.

A followed job ``J`` reads a growing table epoch after epoch: epoch ``k`` is the job
``J@k`` of the queue, planned when it begins over the table as it is then (a lakehouse
table's latest snapshot; with ``--new-only`` only the rows appended since the previous
epoch; with ``--watermark COLUMN`` the rows whose key is above the previous epoch's
maximum). ``job create --follow`` plans epoch 0; ``sqlfeed worker --job J`` finds that the
job is followed and reads the epochs in turn, the first worker to need an epoch planning
it (:mod:`sqlfeed.dispatch.follow`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from sqlfeed.cli.common import write_json
from sqlfeed.cli.parsers import add_follow_options as add_follow_options
from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dispatch import open_queue
from sqlfeed.dispatch.follow import JobFollower, epoch_jobs, followed_job
from sqlfeed.dispatch.queue import JobSpec, LeaseQueue
from sqlfeed.io import Source
from sqlfeed.sql import ParsedQuery

__all__ = [
    "add_follow_options",
    "check_follow_create",
    "create_followed",
    "delete_followed",
    "epoch_summary",
    "refuse_followed",
    "status_followed",
]

_NOT_WITH_FOLLOW = (
    ("snapshot", "--snapshot"),
    ("even_batches", "--even-batches"),
    ("scratch", "--scratch"),
    ("plan", "--plan"),
    ("as_of", "--as-of"),
)


def check_follow_create(args: argparse.Namespace) -> bool:
    """Whether ``job create`` makes a followed job; its options checked (before any I/O)."""
    if args.new_only or args.watermark is not None:
        args.follow = True
    if not args.follow:
        return False
    if args.new_only and args.watermark is not None:
        raise InvalidArgumentError(
            "--watermark already reads only the new rows: leave out --new-only"
        )
    for attribute, flag in _NOT_WITH_FOLLOW:
        if getattr(args, attribute, None) not in (None, False):
            raise InvalidArgumentError(
                f"--follow plans every epoch when it begins: it cannot take {flag}"
            )
    if args.strategy == "materialize":
        raise InvalidArgumentError(
            "--follow plans every epoch when it begins: --strategy materialize would leave "
            "a table per epoch; leave it out (auto) or pick hash, range or fragments"
        )
    return True


def create_followed(
    args: argparse.Namespace, parsed: ParsedQuery, source: Source, out: TextIO
) -> None:
    """Create the followed job ``args.job``: its record and epoch 0's job (idempotent)."""
    queue = open_queue(args.queue)
    if queue.find_job(args.job) is not None:
        raise InvalidArgumentError(
            f"job {args.job!r} exists and reads one plan: give the followed job another name"
        )
    follower = JobFollower(
        parsed.sql,
        source,
        job=args.job,
        queue=queue,
        epochs=args.epochs,
        new_only=args.new_only,
        watermark=args.watermark,
        plan_options=_plan_options(args),
        job_options={"seed": args.seed, "lease_ttl": args.lease_ttl, "order": args.order},
    )
    first = followed_job(queue, args.job)
    if first is not None:
        _check_same(args, first, parsed.sql)
    spec = follower.epoch_job(0)
    summary = epoch_summary(spec) | {"follow": args.job, "epochs": args.epochs}
    if args.format == "json":
        write_json(out, summary)
        return
    what = "new rows" if follower.new_only else "the whole table"
    out.write(
        f"job {args.job}: follows the table, {args.epochs} epoch(s) of {what}; epoch 0 = "
        f"job {spec.name}: {spec.plan.num_partitions} {spec.plan.strategy} partitions of "
        f"{summary['reads']}, plan {spec.plan.fingerprint}\n"
    )


def _plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """The planning options of every epoch (``--plan`` options of ``job create``)."""
    options = {
        "partitions": args.partitions,
        "target_rows": args.target_rows,
        "strategy": args.strategy,
        "key": args.key,
        "workers": args.workers,
        "allow_unstable": args.allow_unstable,
        "sample_rows": args.sample_rows,
        "strict": args.strict,
    }
    if options["target_rows"] is None:
        options["target_rows"] = 100_000
    return {k: v for k, v in options.items() if v is not None}


def _check_same(args: argparse.Namespace, first: JobSpec, query: str) -> None:
    """Creating a followed job again: it must be the same one."""
    record = first.follow or {}
    asked = {
        "query": query,
        "epochs": args.epochs,
        "new_only": bool(args.new_only or args.watermark),
        "watermark": args.watermark,
    }
    found = {k: record.get(k) for k in asked}
    if found != asked:
        differ = ", ".join(k for k in asked if found[k] != asked[k])
        raise InvalidArgumentError(
            f"job {args.job!r} follows the table with another {differ}: delete it first "
            "(sqlfeed job delete) or give another name"
        )


def epoch_summary(spec: JobSpec) -> dict[str, Any]:
    """One epoch's job: its name, what it reads and its plan, as JSON values."""
    entry = (spec.follow or {}).get("entry", {})
    if "snapshot" in entry:
        since = entry.get("since")
        reads = f"snapshot {entry['snapshot']}" + (f" since {since}" if since else "")
    else:
        low, high = entry.get("low"), entry.get("high")
        column = (spec.follow or {}).get("watermark")
        reads = f"{column} <= {json.dumps(high)}" + (
            f" and > {json.dumps(low)}" if low is not None else ""
        )
    return {
        "job": spec.name,
        "epoch": (spec.follow or {}).get("epoch", 0),
        "reads": reads,
        "strategy": spec.plan.strategy,
        "partitions": spec.plan.num_partitions,
        "fingerprint": spec.plan.fingerprint,
    }


def status_followed(queue: LeaseQueue, job: str, fmt: str, out: TextIO) -> bool:
    """``job status`` of a followed job (False: ``job`` is not one)."""
    specs = epoch_jobs(queue, job)
    if not specs:
        return False
    epochs = int((specs[0].follow or {})["epochs"])
    rows = []
    for spec in specs:
        status = queue.status(spec.name)
        done = sum(e["done"] for e in status.per_epoch)
        rows.append(epoch_summary(spec) | {"done": done, "complete": status.complete})
    complete = len(specs) == epochs and all(r["complete"] for r in rows)
    if fmt == "json":
        write_json(out, {"follow": job, "epochs": epochs, "complete": complete, "jobs": rows})
        return True
    out.write(
        f"job {job}: follows the table, {len(specs)} of {epochs} epoch(s) begun"
        f"{', complete' if complete else ''}\n"
    )
    for r in rows:
        out.write(
            f"  {r['job']}: {r['done']}/{r['partitions']} partitions done, reads {r['reads']}\n"
        )
    return True


def delete_followed(queue: LeaseQueue, job: str, out: TextIO) -> bool:
    """``job delete`` of a followed job: every epoch's job (False: ``job`` is not one)."""
    specs = epoch_jobs(queue, job)
    for spec in reversed(specs):  # epoch 0 last: it is the record of the others
        queue.delete(spec.name)
    if specs:
        out.write(f"job {job}: deleted with its {len(specs)} epoch job(s)\n")
    return bool(specs)


def refuse_followed(queue: LeaseQueue, job: str, action: str) -> None:
    """``job reset|rewind`` acts on one job: name the epoch's job of a followed one."""
    specs = [] if queue.find_job(job) is not None else epoch_jobs(queue, job)
    if specs:
        last = specs[-1].name
        raise InvalidArgumentError(
            f"job {job} follows the table, a job per epoch: {action} one of them "
            f"(--job {specs[0].name} ... --job {last})"
        )
