"""The parsers of ``sqlfeed job create|status|reset|rewind|delete`` and ``sqlfeed worker``.

Their handlers are in :mod:`sqlfeed.cli.jobs`.
"""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import (
    ORDERS,
    Later,
    add_db,
    add_follow_options,
    add_plan_file,
    add_plan_options,
    add_sql,
    db_url,
    later,
    name_flags,
)
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

DEFAULT_LEASE_TTL = 60.0
"""The default of ``sqlfeed job create --lease-ttl``."""

DEFAULT_CHECKPOINT_SECONDS = 60.0
"""The default of ``sqlfeed worker --checkpoint-every``."""

START_WAIT = 120.0
"""The default of ``sqlfeed worker --start-wait``: seconds a starting worker waits for its
servers to answer."""


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
    others: tuple[tuple[str, str, Later], ...] = (
        (
            "status",
            "per-epoch done/leased/pending and per-worker counts and throughput",
            later("jobs:_cmd_job_status"),
        ),
        (
            "reset",
            "make every partition pending again, from the start",
            later("jobs:_cmd_job_reset"),
        ),
        (
            "rewind",
            "hand out again everything delivered after a checkpoint of the ledger",
            later("jobs:_cmd_job_rewind"),
        ),
        (
            "delete",
            "remove the job from the queue (and its scratch table, with --db)",
            later("jobs:_cmd_job_delete"),
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
            add_db(sub, help="where the job's scratch table lives", required=False)
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
    add_db(worker, help="where the query runs")
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
    worker.add_argument(
        "--start-wait",
        type=float,
        default=START_WAIT,
        metavar="SECONDS",
        help="a queue or database server that does not answer yet (refused, starting up) is "
        "waited for, trying again with a growing pause, for at most SECONDS before the "
        f"worker gives up (default {START_WAIT:g}; 0: give up at once)",
    )
    worker.add_argument("--format", choices=("text", "json"), default="text")
    add_plan_file(worker, job=True)
    worker.set_defaults(handler=later("jobs:_cmd_worker"))
    name_flags(worker)


def _register_create(actions: argparse._SubParsersAction[CommandParser]) -> None:
    create = actions.add_parser(
        "create",
        help="plan a query and create the job (idempotent: the same job may be created again)",
    )
    _add_job_target(create)
    add_db(create, help="where the query runs")
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
    create.set_defaults(handler=later("jobs:_cmd_job_create"), precheck="stable_unless_allowed")
    name_flags(create, replicas="--even-batches")


def _add_job_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        metavar="URL",
        type=db_url,
        default="sqlite:///sqlfeed-queue.db",
        help="the lease queue: sqlite:///file.db (default "
        "sqlite:///sqlfeed-queue.db), or a PostgreSQL or MySQL URL",
    )
    parser.add_argument("--job", "--name", dest="job", required=True, metavar="NAME")
